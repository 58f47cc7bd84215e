"""What a cluster would make of a set of Kubernetes manifests: the pods.

Reads the objects `kubectl kustomize` or `tlcctl inject` wrote (a TFJob,
the ConfigMaps and Secrets its pods mount) and turns each replica of the
TFJob into a `Pod`: its name, labels and annotations, its containers in the
order the kubelet starts them, its volumes with their files, and the
environment the Kubeflow training operator adds to the `tensorflow`
container (TF_CONFIG). Nothing here runs anything: `pod.py` does.

What the operator does is taken from kubeflow/training-operator
(`pkg/controller.v1/tensorflow`): a pod and a headless Service per replica,
both named `<job>-<replica type, lower case>-<index>`; TF_CONFIG
`{"cluster": {"ps": [...], "worker": [...]}, "task": {"type": "ps",
"index": 0}, "environment": "cloud"}` whose addresses are those Services'
names, `<pod>.<namespace>.svc:<port>`, with the port of the `tensorflow`
container's `tfjob-port` (2222 when there is none).
"""

from __future__ import annotations

import base64
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

try:
    import yaml
except ImportError as err:  # pragma: no cover - depends on the machine
    raise SystemExit("deploy/local/kube needs PyYAML: apt-get install python3-yaml") from err

TF_CONTAINER = "tensorflow"
TF_PORT_NAME = "tfjob-port"
TF_DEFAULT_PORT = 2222
# The replica types this runner can place: one ps pod and N worker pods
# (deploy/local/pods.sh makes exactly that network).
SUPPORTED_REPLICAS = ("PS", "Worker")


class ManifestError(Exception):
    """A manifest this runner cannot run, with the reason."""


@dataclass
class Probe:
    """An httpGet probe (the only kind tlc's manifests use)."""

    path: str
    port: int
    period: float
    failure_threshold: int

    @staticmethod
    def parse(spec: dict | None, ports: dict[str, int], where: str) -> "Probe | None":
        if not spec:
            return None
        http = spec.get("httpGet")
        if not http:
            raise ManifestError(f"{where}: only httpGet probes are supported, got {sorted(spec)}")
        port = http.get("port")
        if isinstance(port, str):
            if port not in ports:
                raise ManifestError(f"{where}: probe port '{port}' is not a named port of the container")
            port = ports[port]
        return Probe(
            path=http.get("path", "/"),
            port=int(port),
            period=float(spec.get("periodSeconds", 10)),
            failure_threshold=int(spec.get("failureThreshold", 3)),
        )


@dataclass
class Mount:
    """A volumeMount: volume `volume` at `path` in the container."""

    volume: str
    path: str
    read_only: bool


@dataclass
class Container:
    """One container of a pod, as the kubelet would run it."""

    name: str
    image: str
    command: list[str]
    args: list[str]
    env: dict[str, str]
    ports: dict[str, int]  # name -> containerPort (unnamed ports under their number)
    mounts: list[Mount]
    run_as_user: int | None
    run_as_group: int | None
    no_new_privs: bool
    read_only_root: bool
    cap_add: list[str]
    cap_drop: list[str]
    memory_limit: int | None
    working_dir: str | None
    sidecar: bool  # an init container with restartPolicy: Always
    init: bool
    startup: Probe | None = None
    readiness: Probe | None = None
    liveness: Probe | None = None


@dataclass
class Pod:
    """One pod of the job, everything the runner needs to start it."""

    name: str
    namespace: str
    replica_type: str  # "ps" or "worker"
    index: int
    labels: dict[str, str]
    annotations: dict[str, str]
    init_containers: list[Container]
    containers: list[Container]
    volumes: dict[str, dict]  # name -> volume source as in the manifest
    grace_seconds: float
    service_account: str | None
    restart_policy: str

    @property
    def hostname(self) -> str:
        """The headless Service's name the operator gives this replica."""
        return f"{self.name}.{self.namespace}.svc"


@dataclass
class Job:
    """A TFJob and the objects its pods refer to."""

    name: str
    namespace: str
    pods: list[Pod]
    clean_pod_policy: str
    config_maps: dict[str, dict[str, str]] = field(default_factory=dict)
    secrets: dict[str, dict[str, str]] = field(default_factory=dict)


def load_documents(paths: list[Path]) -> list[dict]:
    """Every object in the YAML files (multi-document, `List` kinds expanded)."""
    docs = []
    for path in paths:
        try:
            loaded = list(yaml.safe_load_all(path.read_text()))
        except (OSError, yaml.YAMLError) as err:
            raise ManifestError(f"{path}: {err}") from err
        for doc in loaded:
            if not doc:
                continue
            if not isinstance(doc, dict):
                raise ManifestError(f"{path}: a document is not a mapping")
            docs.extend(doc.get("items", []) if doc.get("kind") == "List" else [doc])
    return docs


def memory_bytes(quantity: str | int | None) -> int | None:
    """A Kubernetes memory quantity ("1Gi", "256M", "1e9") in bytes."""
    if quantity is None:
        return None
    match = re.fullmatch(r"([0-9.eE+]+)(Ki|Mi|Gi|Ti|k|M|G|T)?", str(quantity))
    if not match:
        raise ManifestError(f"memory quantity '{quantity}' not understood")
    units = {None: 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12,
             "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
    return int(float(match.group(1)) * units[match.group(2)])


def parse_container(spec: dict, pod_security: dict, init: bool, where: str) -> Container:
    """A container spec, with the pod's securityContext as its defaults."""
    name = spec.get("name") or "?"
    where = f"{where} container {name}"
    ports = {}
    for port in spec.get("ports", []) or []:
        number = int(port["containerPort"])
        ports[port.get("name") or str(number)] = number
    env = {}
    for var in spec.get("env", []) or []:
        if "value" in var:
            env[var["name"]] = str(var["value"])
        elif "valueFrom" in var:
            # Resolved per pod (fieldRef), see pod.py; kept as a marker.
            ref = var["valueFrom"].get("fieldRef", {}).get("fieldPath")
            if ref not in ("metadata.name", "metadata.namespace", "status.podIP"):
                raise ManifestError(f"{where}: env {var['name']}: only fieldRef metadata.name, "
                                    f"metadata.namespace and status.podIP are supported")
            env[var["name"]] = "$(fieldRef:" + ref + ")"
        else:
            env[var["name"]] = ""
    security = {**pod_security, **(spec.get("securityContext") or {})}
    caps = security.get("capabilities") or {}
    limits = (spec.get("resources") or {}).get("limits") or {}
    container = Container(
        name=name,
        image=spec.get("image", ""),
        command=[str(a) for a in spec.get("command", []) or []],
        args=[str(a) for a in spec.get("args", []) or []],
        env=env,
        ports=ports,
        mounts=[Mount(m["name"], m["mountPath"], bool(m.get("readOnly", False)))
                for m in spec.get("volumeMounts", []) or []],
        run_as_user=security.get("runAsUser"),
        run_as_group=security.get("runAsGroup"),
        no_new_privs=security.get("allowPrivilegeEscalation") is False,
        read_only_root=bool(security.get("readOnlyRootFilesystem", False)),
        cap_add=[c.upper() for c in caps.get("add", []) or []],
        cap_drop=[c.upper() for c in caps.get("drop", []) or []],
        memory_limit=memory_bytes(limits.get("memory")),
        working_dir=spec.get("workingDir"),
        sidecar=init and spec.get("restartPolicy") == "Always",
        init=init,
    )
    container.startup = Probe.parse(spec.get("startupProbe"), ports, where)
    container.readiness = Probe.parse(spec.get("readinessProbe"), ports, where)
    container.liveness = Probe.parse(spec.get("livenessProbe"), ports, where)
    if security.get("runAsNonRoot") and container.run_as_user in (None, 0):
        # The kubelet refuses to start such a container; so does this runner.
        raise ManifestError(f"{where}: runAsNonRoot with runAsUser {container.run_as_user}")
    return container


def tf_port(template: dict) -> int:
    """The port the operator puts in TF_CONFIG for this replica type."""
    for container in template.get("spec", {}).get("containers", []) or []:
        if container.get("name") == TF_CONTAINER:
            for port in container.get("ports", []) or []:
                if port.get("name") == TF_PORT_NAME:
                    return int(port["containerPort"])
    return TF_DEFAULT_PORT


def tf_config(cluster: dict[str, list[str]], replica_type: str, index: int) -> str:
    """TF_CONFIG as the training operator writes it (Go's json.Marshal: compact)."""
    return json.dumps({"cluster": cluster, "task": {"type": replica_type, "index": index},
                       "environment": "cloud"}, separators=(",", ":"))


def job_from(docs: list[dict], default_namespace: str = "default") -> Job:
    """The one TFJob in `docs`, expanded into pods."""
    tfjobs = [d for d in docs if d.get("kind") == "TFJob"]
    if len(tfjobs) != 1:
        raise ManifestError(f"expected exactly one TFJob in the manifests, found {len(tfjobs)}")
    tfjob = tfjobs[0]
    meta = tfjob.get("metadata", {})
    name = meta.get("name") or "tfjob"
    namespace = meta.get("namespace") or default_namespace
    replica_specs = tfjob.get("spec", {}).get("tfReplicaSpecs", {}) or {}
    unsupported = sorted(set(replica_specs) - set(SUPPORTED_REPLICAS))
    if unsupported:
        raise ManifestError(f"TFJob {name}: replica types {unsupported} are not supported here "
                            f"(one PS and N Workers: deploy/local/pods.sh's network)")
    if int(replica_specs.get("PS", {}).get("replicas", 1)) != 1:
        raise ManifestError(f"TFJob {name}: exactly one PS replica is supported")
    cluster = {}
    for rtype in SUPPORTED_REPLICAS:
        spec = replica_specs.get(rtype)
        if spec is None:
            raise ManifestError(f"TFJob {name}: no {rtype} replicas")
        rt = rtype.lower()
        port = tf_port(spec.get("template", {}))
        cluster[rt] = [f"{name}-{rt}-{i}.{namespace}.svc:{port}"
                       for i in range(int(spec.get("replicas", 1)))]
    pods = []
    for rtype in SUPPORTED_REPLICAS:
        spec = replica_specs[rtype]
        rt = rtype.lower()
        for index in range(int(spec.get("replicas", 1))):
            pods.append(pod_from(spec, name, namespace, rt, index, tf_config(cluster, rt, index)))
    job = Job(name=name, namespace=namespace, pods=pods,
              clean_pod_policy=tfjob.get("spec", {}).get("runPolicy", {}).get("cleanPodPolicy", "Running"))
    for doc in docs:
        kind, doc_meta = doc.get("kind"), doc.get("metadata", {})
        if doc_meta.get("namespace", namespace) != namespace:
            continue
        if kind == "ConfigMap":
            job.config_maps[doc_meta["name"]] = {k: str(v) for k, v in (doc.get("data") or {}).items()}
        elif kind == "Secret":
            data = {k: base64.b64decode(v).decode() for k, v in (doc.get("data") or {}).items()}
            data.update({k: str(v) for k, v in (doc.get("stringData") or {}).items()})
            job.secrets[doc_meta["name"]] = data
    return job


def pod_from(spec: dict, job: str, namespace: str, rt: str, index: int, tf_config_json: str) -> Pod:
    """One replica's pod: the template, with what the operator adds."""
    template = spec.get("template", {})
    meta = template.get("metadata", {}) or {}
    pod_spec = template.get("spec", {}) or {}
    name = f"{job}-{rt}-{index}"
    security = pod_spec.get("securityContext") or {}
    # The pod-level securityContext shares only these fields with containers.
    security = {k: v for k, v in security.items() if k in ("runAsUser", "runAsGroup", "runAsNonRoot")}
    inits = [parse_container(c, security, True, f"pod {name}") for c in pod_spec.get("initContainers", []) or []]
    mains = [parse_container(c, security, False, f"pod {name}") for c in pod_spec.get("containers", []) or []]
    tf = [c for c in mains if c.name == TF_CONTAINER]
    if not tf:
        raise ManifestError(f"pod {name}: no container named '{TF_CONTAINER}' (the operator sets TF_CONFIG there)")
    tf[0].env["TF_CONFIG"] = tf_config_json
    labels = dict(meta.get("labels") or {})
    # The labels the operator adds to every pod of a job.
    labels.update({"training.kubeflow.org/job-name": job, "training.kubeflow.org/operator-name": "tfjob-controller",
                   "training.kubeflow.org/replica-type": rt, "training.kubeflow.org/replica-index": str(index)})
    if rt == "worker" and index == 0:
        labels["training.kubeflow.org/job-role"] = "master"
    return Pod(
        name=name, namespace=namespace, replica_type=rt, index=index, labels=labels,
        annotations={k: str(v) for k, v in (meta.get("annotations") or {}).items()},
        init_containers=inits, containers=mains,
        volumes={v["name"]: v for v in pod_spec.get("volumes", []) or []},
        grace_seconds=float(pod_spec.get("terminationGracePeriodSeconds", 30)),
        service_account=pod_spec.get("serviceAccountName"),
        restart_policy=spec.get("restartPolicy", "Never"),
    )
