"""A pod's life as the kubelet runs it (Kubernetes 1.29+, native sidecars).

1. Init containers one after the other. A plain one must exit 0 before the
   next starts (with `restartPolicy: Never`, a failure fails the pod). One
   with `restartPolicy: Always` is a sidecar: it is started, and the next
   container waits until its startupProbe succeeds.
2. Then every main container at once.
3. Probes, from the node: readiness and liveness for as long as a
   container runs. A liveness failure is where the kubelet would restart the
   container; this runner records it and fails the pod's verdict instead.
4. Once every main container has exited, the sidecars are stopped in the
   reverse order of their start: SIGTERM, then SIGKILL at the end of the
   pod's terminationGracePeriodSeconds. The pod has succeeded if every main
   container exited 0.
5. Deleting a pod (the operator's cleanPodPolicy, or a timeout) sends
   SIGTERM to the main containers first, then stops the sidecars the same
   way, all within one grace period.

Every step is an event (`Events`), written as JSON lines and kept for the
run's verdict.
"""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import container as runtime
from manifest import Container, Pod
from netns import http_get

START = time.monotonic()


class Events:
    """What happened, in order: thread-safe, appended to a JSON-lines file."""

    def __init__(self, path: Path):
        self.path = path
        self.items: list[dict] = []
        self.lock = threading.Lock()

    def add(self, pod: str, container: str, what: str, **details) -> None:
        item = {"t": round(time.monotonic() - START, 3), "pod": pod, "container": container, "event": what}
        item.update(details)
        with self.lock:
            self.items.append(item)
            with open(self.path, "a") as f:
                f.write(json.dumps(item) + "\n")
        extra = " ".join(f"{k}={v}" for k, v in details.items())
        print(f"[{item['t']:8.2f}s] {pod}/{container}: {what} {extra}".rstrip(), flush=True)

    def of(self, pod: str, what: str) -> list[dict]:
        with self.lock:
            return [e for e in self.items if e["pod"] == pod and e["event"] == what]


def probe_once(node_netns: str, ip: str, probe) -> bool:
    """An httpGet probe from the node: any status 200-399 within 1 s is a success."""
    return 200 <= http_get(node_netns, f"http://{ip}:{probe.port}{probe.path}", 1).status < 400


@dataclass
class Running:
    """A started container."""

    spec: Container
    process: subprocess.Popen
    cgroup: runtime.MemoryCgroup
    started: float
    exit_code: int | None = None
    ready: bool = False
    liveness_failures: int = 0
    stop_probes: threading.Event = field(default_factory=threading.Event)


class PodRun(threading.Thread):
    """Runs one pod from its first init container to its last exit."""

    def __init__(self, pod: Pod, netns: str, ip: str, node_netns: str, images: dict, volumes: dict[str, Path],
                 out: Path, events: Events, extra_args: dict[str, list[str]]):
        super().__init__(name=pod.name, daemon=True)
        self.pod, self.netns, self.ip, self.node_netns = pod, netns, ip, node_netns
        self.images, self.volumes, self.out, self.events = images, volumes, out, events
        self.extra_args = extra_args
        self.phase = "Pending"
        self.reason = ""
        self.running: dict[str, Running] = {}
        self.sidecars: list[str] = []
        self.deleted = threading.Event()
        self.delete_deadline: float | None = None
        self.lock = threading.Lock()

    # -- starting ----------------------------------------------------------

    def start_container(self, spec: Container) -> Running:
        image = self.images[spec.image]
        root = self.out / spec.name / "root"
        root.mkdir(parents=True, exist_ok=True)
        cgroup = runtime.MemoryCgroup(f"{self.pod.name}-{spec.name}", spec.memory_limit)
        if cgroup.error:
            self.events.add(self.pod.name, spec.name, "MemoryLimitNotEnforced", reason=cgroup.error)
        command, script = runtime.launch_command(
            self.netns, self.pod, spec, image, root, self.out / "etc", self.volumes, self.ip, cgroup,
            self.extra_args.get(spec.name, []))
        process = runtime.start(command, script, root, self.out / f"{spec.name}.log", cgroup)
        running = Running(spec, process, cgroup, time.monotonic())
        with self.lock:
            self.running[spec.name] = running
        self.events.add(self.pod.name, spec.name, "Started", pid=process.pid,
                        user=spec.run_as_user if spec.run_as_user is not None else image.user,
                        memory_limit=spec.memory_limit)
        return running

    def wait_startup(self, running: Running) -> bool:
        """Waits for the startupProbe (or, without one, for the process to stay up)."""
        probe = running.spec.startup
        failures = 0
        while True:
            if running.process.poll() is not None:
                self.record_exit(running)
                return False
            if probe is None or probe_once(self.node_netns, self.ip, probe):
                self.events.add(self.pod.name, running.spec.name, "StartupProbeSucceeded",
                                after=round(time.monotonic() - running.started, 3))
                return True
            failures += 1
            if failures >= probe.failure_threshold:
                self.events.add(self.pod.name, running.spec.name, "StartupProbeFailed", failures=failures)
                return False
            time.sleep(probe.period)

    def watch_probes(self, running: Running) -> None:
        """Readiness and liveness probes until the container stops."""
        spec = running.spec
        due = {"readiness": 0.0, "liveness": spec.liveness.period if spec.liveness else 0.0}
        while not running.stop_probes.wait(0.5):
            now = time.monotonic() - running.started
            for kind, probe in (("readiness", spec.readiness), ("liveness", spec.liveness)):
                if probe is None or now < due[kind]:
                    continue
                due[kind] = now + probe.period
                ok = probe_once(self.node_netns, self.ip, probe)
                if running.stop_probes.is_set():
                    return
                if kind == "readiness" and ok != running.ready:
                    running.ready = ok
                    self.events.add(self.pod.name, spec.name, "Ready" if ok else "NotReady")
                if kind == "liveness":
                    running.liveness_failures = 0 if ok else running.liveness_failures + 1
                    if running.liveness_failures == probe.failure_threshold:
                        self.events.add(self.pod.name, spec.name, "LivenessProbeFailed",
                                        note="the kubelet would restart this container")

    def record_exit(self, running: Running) -> None:
        if running.exit_code is not None:
            return
        code = running.process.wait()
        running.exit_code = code
        running.stop_probes.set()
        running.cgroup.remove()
        details = {"exit_code": code} if code >= 0 else {"signal": signal.Signals(-code).name}
        self.events.add(self.pod.name, running.spec.name, "Exited",
                        ran=round(time.monotonic() - running.started, 3), **details)

    # -- stopping ----------------------------------------------------------

    def stop_container(self, name: str, deadline: float) -> None:
        running = self.running[name]
        if running.process.poll() is None:
            running.process.send_signal(signal.SIGTERM)
            self.events.add(self.pod.name, name, "Killing", signal="SIGTERM",
                            grace=round(max(0.0, deadline - time.monotonic()), 1))
            try:
                running.process.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                running.process.kill()
                self.events.add(self.pod.name, name, "Killing", signal="SIGKILL", note="grace period over")
        self.record_exit(running)

    def delete(self) -> None:
        """Deletes the pod (API server side): the pod thread stops its containers."""
        if not self.deleted.is_set():
            self.delete_deadline = time.monotonic() + self.pod.grace_seconds
            self.events.add(self.pod.name, "-", "Deleting", grace=self.pod.grace_seconds)
            self.deleted.set()

    # -- the life ----------------------------------------------------------

    def run(self) -> None:
        try:
            self.live()
        except Exception as err:  # a bug or a host failure: the pod fails loudly
            self.phase, self.reason = "Failed", f"runner error: {err}"
            self.events.add(self.pod.name, "-", "RunnerError", error=str(err))
            for name in list(self.running):
                self.stop_container(name, time.monotonic() + 1)

    def live(self) -> None:
        self.phase = "Running"
        for spec in self.pod.init_containers:
            running = self.start_container(spec)
            if spec.sidecar:
                self.sidecars.append(spec.name)
                threading.Thread(target=self.watch_probes, args=(running,), daemon=True).start()
                if not self.wait_startup(running):
                    return self.fail(f"sidecar {spec.name} did not start")
            else:
                self.record_exit(running)
                if running.exit_code != 0:
                    return self.fail(f"init container {spec.name} exited {running.exit_code}")
            if self.deleted.is_set():
                return self.fail("deleted while starting")
        mains = [self.start_container(spec) for spec in self.pod.containers]
        for running in mains:
            threading.Thread(target=self.watch_probes, args=(running,), daemon=True).start()
        while any(r.process.poll() is None for r in mains):
            if self.deleted.wait(0.2):
                for running in mains:
                    self.stop_container(running.spec.name, self.delete_deadline)
                break
        for running in mains:
            self.record_exit(running)
        deadline = self.delete_deadline or time.monotonic() + self.pod.grace_seconds
        for name in reversed(self.sidecars):
            self.stop_container(name, deadline)
        failed = [r.spec.name for r in mains if r.exit_code != 0]
        self.phase = "Failed" if failed else "Succeeded"
        self.reason = f"exited non-zero: {failed}" if failed else ""
        if self.deleted.is_set():
            self.reason = f"deleted ({self.reason or 'every container exited 0'})"
        self.events.add(self.pod.name, "-", self.phase, reason=self.reason)

    def fail(self, reason: str) -> None:
        for name in reversed(list(self.running)):
            self.stop_container(name, time.monotonic() + self.pod.grace_seconds)
        self.phase, self.reason = "Failed", reason
        self.events.add(self.pod.name, "-", "Failed", reason=reason)
