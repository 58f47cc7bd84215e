#!/usr/bin/env python3
"""Runs a rendered Kubernetes TFJob in network-namespace pods, as a cluster would.

    deploy/local/kube/run.py MANIFEST... [options] [-- training program flags]

MANIFEST: what `kubectl kustomize deploy/k8s/overlays/tfjob` or
`tlcctl inject` wrote (the TFJob with the tlc sidecar in its pod templates,
the tlc-config ConfigMap). Every pod of the TFJob runs in a pod of
deploy/local/pods.sh (the PS in tlc-ps, worker i in tlc-wi; 10.77.0.0/24,
--rate Mbit/s on every pod's link), each of its containers as the kubelet
and a container runtime would run it (pod.py, container.py): the init
step, then tlcd as a native sidecar (its command, args, environment,
mounted ConfigMap and Secret, UID, capabilities and memory limit from the
manifest), then the `tensorflow` container with TF_CONFIG as the Kubeflow
training operator builds it. A real Prometheus scrapes the pods by the
repository's Kubernetes scrape config (prom.py). What is not Kubernetes:
no API server, scheduler or image pull; cluster DNS is an /etc/hosts with
every replica's Service name; the training image is a stand-in (the host's
TensorFlow venv, with --tf-app at /app); probes and scrapes come from a
"node" namespace, tlc-node (10.77.0.2).

Options:
  --rate MBIT          link rate of every pod [10]
  --out DIR            results, logs, Prometheus data [a new /tmp/tlc-kube.XXXXXX]
  --timeout S          delete every pod after S seconds [900]
  --secret NAME:KEY=VALUE   a Secret, as `kubectl create secret generic NAME
                       --from-literal=KEY=VALUE` would make it (repeatable)
  --tlc-image DIR      the tlcd image's file tree [deploy/container/rootfs, made
                       by deploy/container/check-layout.sh]
  --tf-app DIR         what the training image has at /app [deploy/tf]
  --python PY          Python with TensorFlow for the training stand-in
                       [$TLC_PYTHON, else .venv-tf/bin/python]
  --exec-after S       once every sidecar has compressed something (or S seconds
                       after the training starts), `tlcctl status` in every
                       sidecar, as `kubectl exec` would run it [60]
  --check-dashboards   after the job, grafana/check_run.py against this run's
                       Prometheus (every dashboard query, with sane values)
  --expect KEY=VALUE   passed on to check_run.py (repeatable)
  --keep               leave the pods and Prometheus up (pods.sh down removes them)

Everything after `--` is appended to the `tensorflow` container's args.
Writes DIR/summary.json, DIR/events.jsonl (every start, probe, signal and
exit), DIR/pods/<pod>/<container>.log (as `kubectl logs`), DIR/prometheus/.
Exit status 0 when the job succeeded and every check passed. Needs root.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import container as runtime  # noqa: E402
import manifest  # noqa: E402
import prom  # noqa: E402
from pod import START, Events, PodRun  # noqa: E402

ROOT = HERE.parent.parent.parent
PODS_SH = HERE.parent / "pods.sh"
NODE_NS = "tlc-node"
PROMETHEUS_LISTEN = "127.0.0.1:9090"


def parse_args(argv: list[str]) -> argparse.Namespace:
    tail: list[str] = []
    if "--" in argv:
        tail = argv[argv.index("--") + 1:]
        argv = argv[:argv.index("--")]
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], usage=__doc__.split("\n\n")[1].strip())
    p.add_argument("manifests", nargs="+", type=Path)
    p.add_argument("--rate", type=int, default=10)
    p.add_argument("--out", type=Path)
    p.add_argument("--timeout", type=float, default=900)
    p.add_argument("--secret", action="append", default=[])
    p.add_argument("--tlc-image", type=Path, default=ROOT / "deploy/container/rootfs")
    p.add_argument("--tf-app", type=Path, default=ROOT / "deploy/tf")
    p.add_argument("--python", default=os.environ.get("TLC_PYTHON") or str(ROOT / ".venv-tf/bin/python"))
    p.add_argument("--exec-after", type=float, default=60)
    p.add_argument("--check-dashboards", action="store_true")
    p.add_argument("--expect", action="append", default=[])
    p.add_argument("--keep", action="store_true")
    args = p.parse_args(argv)
    args.tf_args = tail
    return args


def fail(message: str) -> None:
    sys.exit(f"kube/run: error: {message}")


def secrets_from(flags: list[str]) -> dict[str, dict[str, str]]:
    """--secret NAME:KEY=VALUE flags as Secrets' data."""
    secrets: dict[str, dict[str, str]] = {}
    for flag in flags:
        name, sep, rest = flag.partition(":")
        key, eq, value = rest.partition("=")
        if not (sep and eq and name and key):
            fail(f"--secret {flag!r}: expected NAME:KEY=VALUE")
        secrets.setdefault(name, {})[key] = value
    return secrets


def images_for(job: manifest.Job, args: argparse.Namespace) -> dict[str, runtime.Image]:
    """Every image the pods name, mapped to what stands for it here."""
    tlcd = args.tlc_image / "usr/local/bin"
    python = subprocess.run([args.python, "-c", "import sys; print(sys.prefix); print(sys.base_prefix)"],
                            capture_output=True, text=True, check=False)
    if python.returncode != 0:
        fail(f"{args.python} does not run (set --python or TLC_PYTHON; deploy/tf/setup-venv.sh makes one)")
    prefix, base = (Path(p) for p in python.stdout.split())
    images = {}
    for pod in job.pods:
        for spec in pod.init_containers + pod.containers:
            if spec.image in images:
                continue
            if "tlcd" in spec.image.rsplit("/", 1)[-1]:
                if not (tlcd / "tlcd").exists():
                    fail(f"no tlcd image tree at {args.tlc_image} (run deploy/container/check-layout.sh)")
                # The Containerfile's USER and ENTRYPOINT.
                images[spec.image] = runtime.Image(spec.image, [(tlcd, "/usr/local/bin")],
                                                   entrypoint=["/usr/local/bin/tlcd"], user=1337, group=1337)
            else:
                images[spec.image] = runtime.Image(
                    spec.image, [(args.tf_app.resolve(), "/app")], same_path=sorted({prefix, base}),
                    path=f"{prefix}/bin:{runtime.DEFAULT_PATH}")
    return images


def netns_of(pod: manifest.Pod) -> tuple[str, str]:
    """The pods.sh namespace and address of a replica (lib.sh's convention)."""
    if pod.replica_type == "ps":
        return "tlc-ps", "10.77.0.10"
    return f"tlc-w{pod.index}", f"10.77.0.{11 + pod.index}"


def write_pod_files(job: manifest.Job, pod: manifest.Pod, ip: str, out: Path) -> dict[str, Path]:
    """/etc files and volumes of one pod; returns volume name -> host directory."""
    etc = out / "etc"
    etc.mkdir(parents=True, exist_ok=True)
    # Cluster DNS stand-in: every replica's Service name, as the operator's
    # headless Services would resolve.
    hosts = ["127.0.0.1\tlocalhost", f"{ip}\t{pod.name}"]
    for other in job.pods:
        _, other_ip = netns_of(other)
        hosts.append(f"{other_ip}\t{other.hostname} {other.hostname}.cluster.local")
    (etc / "hosts").write_text("\n".join(hosts) + "\n")
    (etc / "hostname").write_text(pod.name + "\n")
    (etc / "resolv.conf").write_text(f"search {pod.namespace}.svc.cluster.local svc.cluster.local cluster.local\n"
                                     "options ndots:5\n")
    volumes = {}
    for name, source in pod.volumes.items():
        target = out / "volumes" / name
        target.mkdir(parents=True, exist_ok=True)
        if "configMap" in source or "secret" in source:
            ref = source.get("configMap") or source.get("secret")
            store = job.config_maps if "configMap" in source else job.secrets
            key = ref.get("name") or ref.get("secretName")
            data = store.get(key)
            if data is None and not ref.get("optional"):
                kind = "ConfigMap" if "configMap" in source else "Secret"
                fail(f"pod {pod.name}: volume {name}: {kind} {key} does not exist (the pod would never start); "
                     + ("give it with --secret" if kind == "Secret" else "is it in the manifests?"))
            items = ref.get("items")
            for key_name, content in (data or {}).items():
                paths = [i["path"] for i in items or [] if i["key"] == key_name] if items else [key_name]
                for path in paths:
                    (target / path).parent.mkdir(parents=True, exist_ok=True)
                    (target / path).write_text(content)
                    (target / path).chmod(0o644)
        elif "emptyDir" not in source:
            fail(f"pod {pod.name}: volume {name}: only configMap, secret and emptyDir are supported")
        target.chmod(0o777 if "emptyDir" in source else 0o755)
        volumes[name] = target
    return volumes


def exec_in_sidecars(runs: list[PodRun], images: dict, out: Path, events: Events) -> dict[str, dict]:
    """`kubectl exec POD -c tlc-sidecar -- tlcctl status` in every pod."""
    results = {}
    for run in runs:
        sidecar = next((c for c in run.pod.init_containers if c.sidecar), None)
        running = run.running.get(sidecar.name) if sidecar else None
        if running is None or running.process.poll() is not None:
            # `kubectl exec` into a container that is not running fails
            # before it starts anything: nothing of tlcd's to check.
            results[run.pod.name] = {"exit_code": None, "output": ["skipped: the sidecar was not running"]}
            continue
        spec = manifest.Container(**{**sidecar.__dict__, "command": ["/usr/local/bin/tlcctl", "status"],
                                     "args": [], "name": f"{sidecar.name}-exec", "memory_limit": None})
        root = run.out / "exec" / "root"
        root.mkdir(parents=True, exist_ok=True)
        command, script = runtime.launch_command(run.netns, run.pod, spec, images[sidecar.image], root,
                                                 run.out / "etc", run.volumes, run.ip, None, [])
        runtime.write_script(root, script)
        done = subprocess.run(command, capture_output=True, text=True, timeout=30, check=False)
        (run.out / "exec-tlcctl-status.txt").write_text(done.stdout + done.stderr)
        results[run.pod.name] = {"exit_code": done.returncode, "output": done.stdout.strip().splitlines()[:12]}
        events.add(run.pod.name, sidecar.name, "Exec", command="tlcctl status", exit_code=done.returncode)
    return results


def interface_bytes(netns: str) -> int:
    out = subprocess.run(["ip", "netns", "exec", netns, "cat", "/sys/class/net/eth0/statistics/tx_bytes"],
                         capture_output=True, text=True, check=False)
    return int(out.stdout.strip() or 0)


def result_of(log: Path) -> dict | None:
    """train.py's `result {...}` line from a container's log."""
    if not log.exists():
        return None
    for line in reversed(log.read_text(errors="replace").splitlines()):
        if "] result {" in line:
            return json.loads(line.split("] result ", 1)[1])
    return None


def operate(job: manifest.Job, runs: list[PodRun], timeout: float, events: Events,
            on_pod_phases: Callable[[], None]) -> str:
    """The training operator's part: the job's phase from its pods', and cleanPodPolicy.
    `on_pod_phases` is called whenever a pod's phase changed (discovery follows it)."""
    chief = next(r for r in runs if r.pod.replica_type == "worker" and r.pod.index == 0)
    deadline = time.monotonic() + timeout
    phase = "Running"
    seen = None
    while any(r.is_alive() for r in runs):
        phases = [r.phase for r in runs]
        if phases != seen:
            seen = phases
            on_pod_phases()
        if phase == "Running":
            if chief.phase == "Succeeded":
                phase = "Succeeded"
            elif any(r.phase == "Failed" for r in runs):
                phase = "Failed"
            elif time.monotonic() > deadline:
                phase = "TimedOut"
            if phase != "Running":
                events.add(job.name, "-", f"Job{phase}", clean_pod_policy=job.clean_pod_policy)
                if phase == "TimedOut" or job.clean_pod_policy in ("Running", "All"):
                    for run in runs:
                        if run.phase in ("Pending", "Running"):
                            run.delete()
        time.sleep(0.3)
    if phase == "Running":
        phase = "Succeeded" if chief.phase == "Succeeded" else "Failed"
    return phase


def scrape_checks(prometheus: prom.Prometheus, job: manifest.Job, t0: float, t1: float) -> list[str]:
    """What the scrape config must have done on this run, checked in Prometheus itself."""
    problems = []
    window = f"{max(1, int(t1 - t0))}s"
    series = prometheus.query(f'count by (namespace, pod) (count_over_time(up{{job="tlc"}}[{window}]))', at=t1)
    per_pod = {s["metric"].get("pod"): int(float(s["value"][1])) for s in series}
    for pod in job.pods:
        if per_pod.get(pod.name) != 1:
            problems.append(f"pod {pod.name}: {per_pod.get(pod.name, 0)} scrape targets (expected exactly 1)")
    namespaces = {s["metric"].get("namespace") for s in series}
    if namespaces != {job.namespace}:
        problems.append(f"scraped namespaces {sorted(map(str, namespaces))}, expected ['{job.namespace}']")
    raw = prometheus.query(f'sum by (pod) (max_over_time(tlc_tensor_raw_bytes_total{{job="tlc"}}[{window}]))', at=t1)
    wire = prometheus.query(f'sum by (pod) (max_over_time(tlc_tensor_wire_bytes_total{{job="tlc"}}[{window}]))', at=t1)
    wire_by_pod = {s["metric"]["pod"]: float(s["value"][1]) for s in wire}
    for s in raw:
        pod, raw_bytes = s["metric"]["pod"], float(s["value"][1])
        if raw_bytes <= 0 or wire_by_pod.get(pod, 0) <= 0:
            problems.append(f"pod {pod}: tlcd compressed nothing (raw {raw_bytes}, wire {wire_by_pod.get(pod)})")
    if len(raw) != len(job.pods):
        problems.append(f"tensor byte counters from {len(raw)} pods, expected {len(job.pods)}")
    return problems


def whole_until(runs: list[PodRun], events: Events) -> float | None:
    """Unix time of the first exit of a training container: until then every
    sidecar was meant to be up. After it, a finished pod's sidecar stops, and
    a scrape may catch it down before discovery drops the pod."""
    exits = [e["t"] for run in runs for e in events.of(run.pod.name, "Exited")
             if e["container"] not in run.sidecars]
    if not exits:
        return None
    return time.time() - (time.monotonic() - START) + min(exits)


def verdict(job_phase: str, runs: list[PodRun], events: Events, execs: dict) -> list[str]:
    """Everything the kubelet and the operator saw that a healthy run must not show."""
    problems = [] if job_phase == "Succeeded" else [f"job {job_phase}"]
    for run in runs:
        name = run.pod.name
        if run.phase != "Succeeded" and not run.deleted.is_set():
            problems.append(f"pod {name}: {run.phase} {run.reason}")
        for e in events.of(name, "LivenessProbeFailed") + events.of(name, "StartupProbeFailed"):
            problems.append(f"pod {name}/{e['container']}: {e['event']}")
        for e in events.of(name, "Killing"):
            if e.get("signal") == "SIGKILL":
                problems.append(f"pod {name}/{e['container']}: killed at the end of the grace period")
        for e in events.of(name, "Exited"):
            if e["container"] in run.sidecars and e.get("exit_code") != 0:
                problems.append(f"pod {name}/{e['container']}: sidecar exited {e.get('exit_code', e.get('signal'))}")
        if not events.of(name, "Ready"):
            problems.append(f"pod {name}: the sidecar never became ready")
        if execs.get(name, {}).get("exit_code") not in (0, None):
            problems.append(f"pod {name}: `tlcctl status` in the sidecar exited {execs[name]['exit_code']}")
    if not any(e.get("exit_code") == 0 for e in execs.values()):
        problems.append("`tlcctl status` ran in no sidecar (the job ended first: a longer run is needed)")
    return problems


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    if os.geteuid() != 0:
        fail("must run as root (network namespaces, mounts, cgroups, iptables)")
    for tool in ("ip", "unshare", "setpriv", "chroot", "curl", "prometheus", "iptables"):
        if not shutil.which(tool):
            fail(f"{tool} not found (apt-get install iproute2 util-linux coreutils curl prometheus iptables)")
    try:
        job = manifest.job_from(manifest.load_documents(args.manifests), default_namespace="default")
    except manifest.ManifestError as err:
        fail(str(err))
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        fail(f"a manifest is not what Kubernetes accepts ({type(err).__name__}: {err}); "
             "validate it first (deploy/k8s/check.sh does for the overlays)")
    for name, data in secrets_from(args.secret).items():
        job.secrets.setdefault(name, {}).update(data)
    images = images_for(job, args)
    out = args.out or Path(tempfile.mkdtemp(prefix="tlc-kube."))
    out.mkdir(parents=True, exist_ok=True)
    for path in (out, out / "pods"):
        path.mkdir(exist_ok=True)
        path.chmod(0o755)
    for stale in ("events.jsonl", "summary.json"):
        (out / stale).unlink(missing_ok=True)
    events = Events(out / "events.jsonl")
    workers = sum(1 for p in job.pods if p.replica_type == "worker")
    print(f"kube/run: TFJob {job.namespace}/{job.name}: {len(job.pods)} pods, {args.rate} Mbit/s, out {out}")
    subprocess.run([str(PODS_SH), "up", "--workers", str(workers), "--rate", str(args.rate), "--node"], check=True)

    prometheus = None
    try:
        prom_dir = out / "prometheus"
        # A previous run's samples in the same --out would be read as this
        # run's (same pod names and labels, within Prometheus' lookback).
        shutil.rmtree(prom_dir, ignore_errors=True)
        prom_dir.mkdir()
        config = prom.write_config(ROOT / "grafana/prometheus/prometheus.yml",
                                   ROOT / "grafana/prometheus/alerts.yml", prom_dir)
        runs = []
        for pod in job.pods:
            netns, ip = netns_of(pod)
            pod_out = out / "pods" / pod.name
            if pod_out.exists():
                shutil.rmtree(pod_out)
            pod_out.mkdir(parents=True)
            pod_out.chmod(0o755)
            volumes = write_pod_files(job, pod, ip, pod_out)
            extra = {manifest.TF_CONTAINER: args.tf_args}
            runs.append(PodRun(pod, netns, ip, NODE_NS, images, volumes, pod_out, events, extra))

        def discover() -> None:
            # What Kubernetes' pod discovery would list now: a pod's phase
            # changes its targets' labels (the scrape config drops finished pods).
            prom.write_targets(prom_dir, [g for r in runs for g in prom.pod_targets(r.pod, r.ip, r.phase)])

        discover()
        prometheus = prom.Prometheus(NODE_NS, "prometheus", config, prom_dir / "data", prom_dir / "prometheus.log",
                                     PROMETHEUS_LISTEN)
        prometheus.wait_ready()
        before = {run.pod.name: interface_bytes(run.netns) for run in runs}
        t0 = time.time()
        for run in runs:
            run.start()
        execs: dict = {}

        def exec_later() -> None:
            # Once every sidecar has compressed something (Prometheus says),
            # or --exec-after s after the training containers started.
            while not all(r.running.get(manifest.TF_CONTAINER) for r in runs):
                if not any(r.is_alive() for r in runs):
                    return
                time.sleep(0.5)
            deadline = time.monotonic() + args.exec_after
            while time.monotonic() < deadline:
                busy = prometheus.query('count(sum by (pod) (tlc_tensor_wire_bytes_total{job="tlc"}) > 0)')
                if busy and int(float(busy[0]["value"][1])) == len(runs):
                    break
                time.sleep(2)
            execs.update(exec_in_sidecars(runs, images, out, events))

        exec_thread = threading.Thread(target=exec_later, daemon=True)
        exec_thread.start()
        job_phase = operate(job, runs, args.timeout, events, discover)
        exec_thread.join(60)
        t1 = time.time()
        after = {run.pod.name: interface_bytes(run.netns) for run in runs}
        time.sleep(2)  # discovery's last change reaches Prometheus
        problems = verdict(job_phase, runs, events, execs)
        problems += scrape_checks(prometheus, job, t0, t1)
        chief_log = out / "pods" / f"{job.name}-worker-0" / f"{manifest.TF_CONTAINER}.log"
        result = result_of(chief_log)
        if result is None:
            problems.append(f"no training result in {chief_log}")
        summary = {
            "job": job.name, "namespace": job.namespace, "phase": job_phase, "rate_mbit": args.rate,
            "start": t0, "end": t1, "seconds": round(t1 - t0, 1), "result": result,
            "pods": {r.pod.name: {"phase": r.phase, "reason": r.reason,
                                  "tx_bytes": after[r.pod.name] - before[r.pod.name]} for r in runs},
            "exec": execs, "problems": problems, "prometheus_data": str(prom_dir / "data"),
        }
        if args.check_dashboards:
            check = [sys.executable, str(ROOT / "grafana/check_run.py"), f"http://{PROMETHEUS_LISTEN}",
                     "--start", f"{t0:.0f}", "--end", f"{t1:.0f}", "--report", str(out / "dashboards.json")]
            check += [a for e in args.expect for a in ("--expect", e)]
            until = whole_until(runs, events)
            if until is not None:
                check += ["--expect", f"whole_until={until:.3f}"]
            check += [str(p) for p in sorted((ROOT / "grafana/dashboards").glob("*.json"))]
            done = subprocess.run(["ip", "netns", "exec", NODE_NS] + check, check=False)
            summary["dashboards"] = "ok" if done.returncode == 0 else f"check_run.py exited {done.returncode}"
            if done.returncode != 0:
                problems.append("dashboard queries: " + summary["dashboards"])
        (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        accuracy = f"accuracy {result['test_accuracy']:.4f}" if result and "test_accuracy" in result else "no result"
        print(f"kube/run: job {job_phase} in {t1 - t0:.1f} s, {accuracy}; pods "
              + ", ".join(f"{r.pod.name} {r.phase}" for r in runs)
              + "; kernel bytes sent " + ", ".join(f"{n} {b / 1e6:.2f} MB" for n, b in summary["pods"].items()
                                                    for b in [b["tx_bytes"]]))
        for problem in problems:
            print(f"kube/run: PROBLEM: {problem}")
        print("kube/run: ok" if not problems else f"kube/run: FAILED ({len(problems)} problems; {out})")
        return 0 if not problems else 1
    finally:
        if not args.keep:
            if prometheus is not None:
                prometheus.stop()
            subprocess.run([str(PODS_SH), "down"], check=False)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
