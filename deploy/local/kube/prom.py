"""A real Prometheus scraping the pods by the project's Kubernetes scrape config.

Debian's Prometheus has no Kubernetes discovery, so the discovery is the
one part replaced: `grafana/prometheus/prometheus.yml` is used as it is,
relabelling rules and all, with its `kubernetes_sd_configs` swapped for a
`file_sd_configs` file in which this runner writes, for every pod, the
targets Kubernetes' pod discovery would give (one per declared container
port, or one per container without ports, each with the
`__meta_kubernetes_pod_*` labels of that role). Whatever the relabelling
keeps, drops or rewrites is then Prometheus' own doing. The scrape interval
is lowered from 15 s to 5 s (a run lasts minutes) and said so in the
config's first line.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
import urllib.parse
from pathlib import Path

from manifest import Pod
from netns import http_get

SD_BLOCK = "    kubernetes_sd_configs:\n      - role: pod\n"


def sanitize(name: str) -> str:
    """A label name as Kubernetes discovery writes annotation and label keys."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", name)


def pod_targets(pod: Pod, ip: str, phase: str) -> list[dict]:
    """The targets Kubernetes' `role: pod` discovery would give for `pod`."""
    common = {
        "__meta_kubernetes_namespace": pod.namespace,
        "__meta_kubernetes_pod_name": pod.name,
        "__meta_kubernetes_pod_ip": ip,
        "__meta_kubernetes_pod_host_ip": "10.77.0.2",
        "__meta_kubernetes_pod_node_name": "tlc-node",
        "__meta_kubernetes_pod_phase": phase,
        "__meta_kubernetes_pod_controller_kind": "TFJob",
        "__meta_kubernetes_pod_controller_name": pod.labels.get("training.kubeflow.org/job-name", ""),
    }
    for key, value in pod.annotations.items():
        common[f"__meta_kubernetes_pod_annotation_{sanitize(key)}"] = value
        common[f"__meta_kubernetes_pod_annotationpresent_{sanitize(key)}"] = "true"
    for key, value in pod.labels.items():
        common[f"__meta_kubernetes_pod_label_{sanitize(key)}"] = value
        common[f"__meta_kubernetes_pod_labelpresent_{sanitize(key)}"] = "true"
    groups = []
    for container in pod.init_containers + pod.containers:
        labels = dict(common, __meta_kubernetes_pod_container_name=container.name,
                      __meta_kubernetes_pod_container_image=container.image,
                      __meta_kubernetes_pod_container_init="true" if container.init else "false")
        if not container.ports:
            groups.append({"targets": [ip], "labels": labels})
        for name, number in container.ports.items():
            port_labels = dict(labels, __meta_kubernetes_pod_container_port_number=str(number),
                               __meta_kubernetes_pod_container_port_protocol="TCP")
            if name != str(number):
                port_labels["__meta_kubernetes_pod_container_port_name"] = name
            groups.append({"targets": [f"{ip}:{number}"], "labels": port_labels})
    return groups


def write_config(source: Path, alerts: Path, out: Path, interval: str = "5s") -> Path:
    """`source` with file discovery in place of Kubernetes'; returns the config's path."""
    text = source.read_text()
    if SD_BLOCK not in text:
        raise ValueError(f"{source}: no `kubernetes_sd_configs: - role: pod` block to replace")
    targets = out / "targets.json"
    text = text.replace(SD_BLOCK, "    file_sd_configs:\n"
                                  f"      - files: [{json.dumps(str(targets))}]\n"
                                  "        refresh_interval: 1s\n")
    text = re.sub(r"scrape_interval: \S+", f"scrape_interval: {interval}", text)
    text = re.sub(r"evaluation_interval: \S+", f"evaluation_interval: {interval}", text)
    text = re.sub(r"scrape_timeout: \S+", f"scrape_timeout: {interval}", text)
    header = (f"# {source.name} as deploy/local/kube/run.py runs it: kubernetes_sd_configs replaced by\n"
              f"# file_sd_configs (the pods' discovery labels, written by the runner), intervals {interval}.\n")
    config = out / "prometheus.yml"
    config.write_text(header + text)
    (out / alerts.name).write_text(alerts.read_text())
    targets.write_text("[]\n")
    return config


def write_targets(out: Path, groups: list[dict]) -> None:
    """Replaces the discovery file in one step (Prometheus re-reads it)."""
    tmp = out / "targets.json.tmp"
    tmp.write_text(json.dumps(groups, indent=1) + "\n")
    tmp.replace(out / "targets.json")


class Prometheus:
    """Prometheus in the node's network namespace, queried through it."""

    def __init__(self, netns: str, binary: str, config: Path, data: Path, log: Path, listen: str):
        self.netns, self.listen = netns, listen
        self.log = open(log, "ab", buffering=0)
        self.process = subprocess.Popen(
            ["ip", "netns", "exec", netns, binary, f"--config.file={config}", f"--storage.tsdb.path={data}",
             f"--web.listen-address={listen}", "--storage.tsdb.retention.time=30d"],
            stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)

    def get(self, path: str, params: dict | None = None, timeout: float = 10) -> dict:
        """GET the API (from inside the node's namespace) and return the JSON."""
        url = f"http://{self.listen}{path}"
        if params:
            url += "?" + urllib.parse.urlencode(params)
        reply = http_get(self.netns, url, timeout)
        if reply.status == 0:
            raise RuntimeError(f"prometheus {path}: no reply")
        return json.loads(reply.body)

    def wait_ready(self, seconds: float = 30) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"prometheus exited with {self.process.returncode} (its log: {self.log.name})")
            if http_get(self.netns, f"http://{self.listen}/-/ready", 1).status == 200:
                return
            time.sleep(0.3)
        raise RuntimeError("prometheus not ready after 30 s")

    def query(self, expr: str, at: float | None = None) -> list[dict]:
        """An instant query's result vector."""
        params = {"query": expr}
        if at is not None:
            params["time"] = f"{at:.3f}"
        reply = self.get("/api/v1/query", params)
        if reply.get("status") != "success":
            raise RuntimeError(f"query {expr!r}: {reply.get('error')}")
        return reply["data"]["result"]

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.close()
