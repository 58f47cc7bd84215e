"""HTTP from inside a network namespace: what the node (probes, Prometheus'
API) sees of the pods. Python 3.11 cannot enter a namespace itself, so this
is `ip netns exec NS curl`."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass


@dataclass
class Reply:
    """An HTTP reply; `status` 0 when no reply came (refused, timed out)."""

    status: int
    body: str


def http_get(netns: str, url: str, timeout: float) -> Reply:
    """GET `url` from inside `netns`, giving up after `timeout` seconds."""
    out = subprocess.run(["ip", "netns", "exec", netns, "curl", "-s", "-m", str(timeout),
                          "-w", "\n%{http_code}", url], capture_output=True, text=True, check=False)
    body, _, code = out.stdout.rpartition("\n")
    return Reply(int(code) if code.isdigit() else 0, body)
