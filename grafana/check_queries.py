#!/usr/bin/env python3
"""Checks grafana/dashboards/*.json against a running Prometheus.

Every dashboard must parse as JSON; every PromQL expression in it (panel
targets, and the selectors of label_values() variable queries), with the
Grafana variables replaced by concrete values, must parse in Prometheus
(sent to /api/v1/query: a parse error comes back as bad_data) and use every
one of the $job, $namespace and $pod variables the dashboard has; every tlc_*
and process_* metric it names must be one tlcd exports (the tables in
docs/OPERATING.md, "Metrics"). With --targets, also checks the
relabelling of grafana/prometheus/prometheus.yml on the fake pods that
check.sh gives it.

Usage: check_queries.py PROMETHEUS_URL DASHBOARD... [--targets]
Exits 1 on any failure, naming the dashboard and panel.
"""

import json
import re
import sys
import time
import urllib.request
from pathlib import Path

from dashlib import Prometheus, expressions, substitute

ROOT = Path(__file__).resolve().parent.parent

# What each Grafana variable becomes before Prometheus sees the expression.
VALUES = {
    "__rate_interval": "1m",
    "__interval": "1m",
    "__range": "1h",
    "DS_PROMETHEUS": "prometheus",
    "job": "tlc",
    "namespace": ".*",
    "pod": "ps",
    "instance": ".*",
}
SUFFIXES = ("_bucket", "_sum", "_count")


def exported_metrics():
    """Metric names in the "Metrics" table of docs/OPERATING.md."""
    text = (ROOT / "docs/OPERATING.md").read_text()
    return set(re.findall(r"^\| `((?:tlc|process)_\w+)`", text, re.M))


def check_targets(url):
    """The relabelled labels of the fake pods check.sh gave prometheus.yml."""
    # The discovery manager passes targets on every 5 s at most.
    for _ in range(40):
        with urllib.request.urlopen(f"{url}/api/v1/targets?state=any", timeout=10) as response:
            body = json.load(response)
        if body["data"]["activeTargets"] or body["data"]["droppedTargets"]:
            break
        time.sleep(0.5)
    got = sorted(
        (t["labels"].get("pod"), t["labels"].get("namespace"), t["labels"].get("container"),
         t["labels"]["instance"], t["scrapeUrl"])
        for t in body["data"]["activeTargets"]
    )
    want = [
        ("trainer-ps-0", "ml", "tlc-sidecar", "10.1.2.3:17090", "http://10.1.2.3:17090/metrics"),
        ("trainer-worker-0", "ml", "tlc-sidecar", "[fd00::5]:17090", "http://[fd00::5]:17090/stats"),
    ]
    if got != want:
        print(f"FAIL prometheus.yml relabelling: targets {got}, expected {want}")
        return False
    print("ok   prometheus.yml relabelling: one target per tlc pod (its tlc-metrics port, IPv4 and IPv6, "
          "with namespace, pod, container and the annotation's path); the pod's other ports, an opted-out "
          "pod, a finished pod and another application's pod dropped")
    return True


def main(argv):
    url, files = argv[1], [a for a in argv[2:] if not a.startswith("--")]
    exported = exported_metrics()
    prometheus = Prometheus(url, timeout=10)
    ok = True
    for file in files:
        try:
            dashboard = json.loads(Path(file).read_text())
        except ValueError as error:
            print(f"FAIL {file}: not JSON: {error}")
            ok = False
            continue
        count, failed = 0, False
        variables = {v.get("name") for v in dashboard.get("templating", {}).get("list", [])}
        for where, expr in expressions(dashboard):
            count += 1
            # A panel that ignores a variable the dashboard offers shows
            # every pod while the header says one (a variable's own query
            # narrows by the variables before it only).
            for variable in ("job", "namespace", "pod") if not where.startswith("variable") else ():
                if variable in variables and f"${variable}" not in expr and f"${{{variable}}}" not in expr:
                    print(f"FAIL {file} {where}: ignores the ${variable} variable: {expr}")
                    failed = True
            try:
                concrete = substitute(expr, VALUES)
            except KeyError as error:
                print(f"FAIL {file} {where}: unknown variable {error} in {expr}")
                failed = True
                continue
            for name in set(re.findall(r"\b((?:tlc|process)_\w+)", concrete)):
                base = name
                for suffix in SUFFIXES:
                    if base.endswith(suffix) and base[: -len(suffix)] in exported:
                        base = base[: -len(suffix)]
                if base not in exported:
                    print(f"FAIL {file} {where}: {name} is not a metric tlcd exports")
                    failed = True
            body = prometheus.query(concrete)
            if body.get("status") != "success":
                print(f"FAIL {file} {where}: {body.get('errorType')}: {body.get('error')}\n     {concrete}")
                failed = True
        if failed:
            ok = False
        else:
            print(f"ok   {file}: JSON, {count} queries parsed by Prometheus, every metric one tlcd exports")
    if "--targets" in argv:
        ok = check_targets(url) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
