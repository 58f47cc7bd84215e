"""Validates rendered overlays (multi-document YAML) for deploy/k8s/check.sh.

- Built-in kinds: kubernetes_validate.validate(..., strict=True) against the
  given Kubernetes version (unknown fields are errors).
- TFJob (kubeflow.org/v1, a CRD without a schema here): each
  spec.tfReplicaSpecs.<R>.template becomes a v1 Pod and is validated as one.
- cert-manager objects (CRDs): structural checks only.
- The sidecar spec (components/sidecar/sidecar.yaml, the one copy, which the
  overlays apply and `tlcctl inject` embeds): what must hold of it whatever
  its values (tlc-init root with NET_ADMIN/NET_RAW only, tlc-sidecar a native
  sidecar, non-root, its UID the one tlc-init exempts, probes and mounts on
  its own ports and volumes, the scrape port its metrics port).
- Every pod template: the sidecar spec in it exactly as the file has it (the
  Component reached it), tlc-init's --tf-ports covering the tensorflow ports,
  no other container as tlcd's UID; tlcd.toml against the spec's ports and
  mounts.

Runs in the venv of check.sh (kubernetes-validate brings PyYAML).
"""

import argparse
import copy
import os
import re
import sys
import tomllib

import kubernetes_validate
import yaml

IMAGE_RE = re.compile(r"^ghcr\.io/tlc-project/tlcd:")
# What check.sh adds to the workloads it renders into rendered/keeps.yaml, and
# the Component must leave there (keys the spec does not set).
USER_ANNOTATIONS = {"example.com/owner": "ml-team"}
USER_LABELS = {"example.com/team": "vision"}
SPIFFE_RE = re.compile(r"^spiffe://[^/]+/ns/[^/]+/sa/[^/]+$")


class Checker:
    def __init__(self, version):
        self.version = version
        self.errors = []
        self.counts = {"schema": 0, "pod templates": 0}
        self.spec = None  # the sidecar spec, once sidecar_spec() accepted it
        self.keeps = set()  # rendered files whose pod templates carry the user's keys
        self.keeping = False  # the overlay being read is one of them

    def error(self, where, msg):
        self.errors.append(f"{where}: {msg}")

    def expect(self, where, cond, msg):
        if not cond:
            self.error(where, msg)
        return cond

    # -- schemas ------------------------------------------------------------
    def validate_schema(self, where, obj):
        try:
            kubernetes_validate.validate(obj, self.version, strict=True)
            self.counts["schema"] += 1
        except kubernetes_validate.ValidationError as e:
            path = "/".join(str(p) for p in e.path)
            self.error(where, f"schema ({self.version}, strict): {e.message} at {path or '(top)'}")
        except (kubernetes_validate.SchemaNotFoundError, kubernetes_validate.InvalidSchemaError) as e:
            self.error(where, f"no schema for it in kubernetes-validate: {e}")

    # -- the sidecar spec ------------------------------------------------------
    def sidecar_spec(self, path):
        """Reads the one sidecar spec (components/sidecar/sidecar.yaml) and
        checks what must hold of it, whatever its values: the pods below and
        `tlcctl inject` take it as it is."""
        where = os.path.relpath(path)
        try:
            with open(path) as f:
                doc = yaml.safe_load(f)
            tpl = doc["template"]
            inits = tpl["spec"]["initContainers"]
            volumes = tpl["spec"]["volumes"]
            annotations = tpl["metadata"]["annotations"]
        except (OSError, yaml.YAMLError, KeyError, TypeError) as e:
            self.error(where, f"cannot read the sidecar spec: {e!r}")
            return None
        ex = lambda cond, msg: self.expect(where, cond, msg)
        names = [c.get("name") for c in inits]
        if not ex(names == ["tlc-init", "tlc-sidecar"], f"initContainers must be tlc-init, tlc-sidecar; got {names}"):
            return None
        init, side = inits
        # tlc-init: root with NET_ADMIN/NET_RAW only, a plain init container.
        for c in inits:
            ex(IMAGE_RE.match(c.get("image", "")), f"{c['name']}: image must be ghcr.io/tlc-project/tlcd:*")
            ex((c.get("resources") or {}).get("limits", {}).get("memory"), f"{c['name']}: memory limit missing")
        cmd = init.get("command") or []
        ex(cmd[:2] == ["/usr/local/bin/tlc-iptables", "apply"], f"tlc-init: command must run tlc-iptables apply, got {cmd}")
        ex("--tf-ports" in cmd[:-1], "tlc-init: --tf-ports missing (tlcctl inject sets the value after it)")
        sc = init.get("securityContext") or {}
        caps = sc.get("capabilities") or {}
        ex(sc.get("runAsUser") == 0 and sc.get("runAsNonRoot") is False, "tlc-init: must run as root (runAsUser 0, runAsNonRoot false)")
        ex(caps.get("drop") == ["ALL"] and sorted(caps.get("add") or []) == ["NET_ADMIN", "NET_RAW"],
           "tlc-init: capabilities must be drop [ALL], add [NET_ADMIN, NET_RAW]")
        ex("restartPolicy" not in init, "tlc-init: a plain init container (no restartPolicy)")
        for c in inits:
            ex(((c.get("securityContext") or {}).get("seccompProfile") or {}).get("type") == "RuntimeDefault",
               f"{c['name']}: seccompProfile RuntimeDefault missing")
        # tlc-sidecar: a native sidecar, unprivileged, bypassing the redirect by its UID.
        ex(side.get("restartPolicy") == "Always", "tlc-sidecar: restartPolicy: Always (native sidecar) missing")
        sc = side.get("securityContext") or {}
        uid = sc.get("runAsUser")
        ex(isinstance(uid, int) and uid > 0 and sc.get("runAsNonRoot") is True, "tlc-sidecar: must run as a non-root UID")
        ex(self.option(cmd, "--uid") == str(uid), f"tlc-init: --uid must be tlc-sidecar's runAsUser {uid}")
        ex(sc.get("allowPrivilegeEscalation") is False and sc.get("readOnlyRootFilesystem") is True,
           "tlc-sidecar: no privilege escalation, read-only root file system")
        ex((sc.get("capabilities") or {}).get("drop") == ["ALL"] and not (sc.get("capabilities") or {}).get("add"),
           "tlc-sidecar: capabilities must be drop [ALL], nothing added")
        ports = {p.get("name"): p.get("containerPort") for p in side.get("ports") or []}
        ex(set(ports) == {"tlc-outbound", "tlc-inbound", "tlc-metrics"},
           f"tlc-sidecar: ports must be tlc-outbound, tlc-inbound, tlc-metrics; got {sorted(ports)}")
        # tlc-iptables redirects to these (its defaults unless tlc-init names others).
        ex(ports.get("tlc-outbound") == int(self.option(cmd, "--outbound-port") or 17001)
           and ports.get("tlc-inbound") == int(self.option(cmd, "--inbound-port") or 17006),
           "tlc-sidecar: tlc-outbound and tlc-inbound must be the ports tlc-init redirects to")
        for kind in ("startupProbe", "readinessProbe", "livenessProbe"):
            get = (side.get(kind) or {}).get("httpGet") or {}
            ex(get.get("port") in ports, f"tlc-sidecar: {kind} must be httpGet on a named port of tlc-sidecar, got {get}")
        ex(annotations.get("prometheus.io/port") == str(ports.get("tlc-metrics")),
           "annotation prometheus.io/port must be tlc-metrics' port")
        ex(annotations.get("tlc.io/inject") == "true", 'annotation tlc.io/inject: "true" missing')
        # No mesh beside tlc: Istio (its label wins over its annotation), Istio
        # ambient, Linkerd, each turned off for the pod.
        labels = tpl["metadata"].get("labels") or {}
        ex(annotations.get("sidecar.istio.io/inject") == "false" and labels.get("sidecar.istio.io/inject") == "false",
           'sidecar.istio.io/inject: "false" missing as an annotation or a label')
        ex(labels.get("istio.io/dataplane-mode") == "none", "label istio.io/dataplane-mode: none missing")
        ex(annotations.get("linkerd.io/inject") == "disabled", "annotation linkerd.io/inject: disabled missing")
        for c in inits:
            limits = (c.get("resources") or {}).get("limits") or {}
            ex(limits.get("cpu"), f"{c['name']}: cpu limit missing (a namespace quota on limits.cpu refuses the pod)")
            csc = c.get("securityContext") or {}
            ex(csc.get("allowPrivilegeEscalation") is False and csc.get("readOnlyRootFilesystem") is True,
               f"{c['name']}: allowPrivilegeEscalation: false and readOnlyRootFilesystem: true expected")
        vols = {v.get("name"): v for v in volumes}
        for m in side.get("volumeMounts") or []:
            ex(m.get("name") in vols and m.get("readOnly") is True, f"tlc-sidecar: mount {m.get('name')} must be of a volume of the spec, readOnly")
        ex(((vols.get("tlc-tls") or {}).get("secret") or {}).get("optional") is True,
           "volume tlc-tls must be optional: only read with [tls] mode = \"mutual\"")
        ex(tpl["spec"].get("terminationGracePeriodSeconds", 0) > 30,
           "terminationGracePeriodSeconds must exceed tlcd's drain_seconds (30)")
        self.spec = doc
        return doc

    @staticmethod
    def option(cmd, flag):
        return cmd[cmd.index(flag) + 1] if flag in cmd[:-1] else None

    def pod_template(self, where, template, tf_port_name):
        """One rendered pod template: the sidecar spec in it as the spec file
        has it (the Component applied), and the pod consistent with it."""
        self.counts["pod templates"] += 1
        ex = lambda cond, msg: self.expect(where, cond, msg)
        want = self.spec["template"]
        meta = template.get("metadata") or {}
        ann = meta.get("annotations") or {}
        for k, v in want["metadata"]["annotations"].items():
            ex(ann.get(k) == v, f"annotation {k}: {v!r} of the sidecar spec missing (got {ann.get(k)!r})")
        labels = meta.get("labels") or {}
        for k, v in (want["metadata"].get("labels") or {}).items():
            ex(labels.get(k) == v, f"label {k}: {v!r} of the sidecar spec missing (got {labels.get(k)!r})")
        for what, got in (("annotation", ann), ("label", labels)):
            for k, v in got.items():
                ex(isinstance(v, str), f"{what} {k}: {v!r} is not a string (kustomize unquoted it)")
        if self.keeping:
            for what, got, mine in (("annotation", ann, USER_ANNOTATIONS), ("label", labels, USER_LABELS)):
                for k, v in mine.items():
                    ex(got.get(k) == v, f"the workload's own {what} {k}: {v!r} lost by the Component (got {got.get(k)!r})")
        spec = template.get("spec") or {}
        ex(spec.get("terminationGracePeriodSeconds") == want["spec"]["terminationGracePeriodSeconds"],
           "terminationGracePeriodSeconds is not the sidecar spec's")
        inits = spec.get("initContainers") or []
        names = [c.get("name") for c in inits]
        if not ex(names[:2] == ["tlc-init", "tlc-sidecar"],
                  f"initContainers must start with tlc-init, tlc-sidecar; got {names}"):
            return
        for got, spec_c in zip(inits, want["spec"]["initContainers"]):
            ex(got == spec_c, f"{got.get('name')} differs from the sidecar spec's (components/sidecar/sidecar.yaml)")
        vols = {v.get("name"): v for v in spec.get("volumes") or []}
        for v in want["spec"]["volumes"]:
            ex(vols.get(v["name"]) == v, f"volume {v['name']} missing or not the sidecar spec's")
        init, side = inits[0], inits[1]
        containers = spec.get("containers") or []
        tf = [c for c in containers if c.get("name") == "tensorflow"]
        if not ex(len(tf) == 1, "no container named tensorflow"):
            return
        tf_ports = [p for p in tf[0].get("ports") or []]
        ex(any(p.get("name") == tf_port_name and p.get("containerPort") == 2222 for p in tf_ports),
           f"tensorflow must have port 2222 named {tf_port_name}")
        cmd = init.get("command") or []
        ports_arg = (self.option(cmd, "--tf-ports") or "").split(",")
        for p in tf_ports:
            ex(str(p.get("containerPort")) in ports_arg,
               f"tlc-init: --tf-ports {','.join(ports_arg)} lacks the tensorflow port {p.get('containerPort')}")
        # No other container may run as tlcd's UID: its connections bypass the redirect.
        uid = (side.get("securityContext") or {}).get("runAsUser")
        for c in containers:
            c_uid = (c.get("securityContext") or {}).get("runAsUser")
            ex(c_uid != uid, f"container {c.get('name')} runs as {uid}, tlcd's UID (its traffic would bypass tlcd)")
        return side

    # -- tlcd.toml ------------------------------------------------------------
    def tlcd_toml(self, where, text, certificates):
        try:
            conf = tomllib.loads(text)
        except tomllib.TOMLDecodeError as e:
            self.error(where, f"tlcd.toml does not parse: {e}")
            return
        ex = lambda cond, msg: self.expect(where, cond, msg)
        side = self.spec["template"]["spec"]["initContainers"][1]
        ports = {p.get("name"): p.get("containerPort") for p in side.get("ports") or []}
        mounts = {m.get("name"): m.get("mountPath") for m in side.get("volumeMounts") or []}
        env = {e.get("name"): e.get("value") for e in side.get("env") or []}
        ex(conf.get("handover_socket") == "off",
           'tlcd.toml: handover_socket = "off" expected (read-only root file system; no take-over in a pod)')
        t = conf.get("transparent") or {}
        ex(t.get("outbound", "").endswith(f":{ports.get('tlc-outbound')}") and t.get("inbound", "").endswith(f":{ports.get('tlc-inbound')}"),
           "tlcd.toml: [transparent] must listen on the ports tlc-outbound and tlc-inbound of the sidecar spec (where tlc-init redirects)")
        ex((conf.get("metrics") or {}).get("listen", "").endswith(f":{ports.get('tlc-metrics')}"),
           "tlcd.toml: [metrics] listen must be on tlc-metrics' port")
        adm = conf.get("admin") or {}
        ex(adm.get("listen", "").startswith("127.0.0.1:"), "tlcd.toml: [admin] must listen on loopback only")
        token = adm.get("token_file", "")
        ex(token == env.get("TLC_ADMIN_TOKEN_FILE") and token.startswith(f"{mounts.get('tlc-admin-token')}/"),
           "tlcd.toml: [admin] token_file must be TLC_ADMIN_TOKEN_FILE, in the mounted Secret tlc-admin-token")
        tls = conf.get("tls") or {}
        if tls.get("mode") == "mutual":
            for k in ("cert", "key", "ca"):
                ex(str(tls.get(k, "")).startswith(f"{mounts.get('tlc-tls')}/"), f"tlcd.toml: [tls] {k} must be under {mounts.get('tlc-tls')} (the tlc-tls Secret)")
            ids = tls.get("peer_identities") or []
            ex(ids, "tlcd.toml: [tls] peer_identities missing")
            ex(certificates, "tlcd.toml: [tls] mode = mutual but no cert-manager Certificate for tlc-tls rendered")
            for uri in certificates:
                ex(any(re.fullmatch(re.escape(p).replace(r"\*", "[^/]+"), uri) for p in ids),
                   f"Certificate tlc-tls's URI {uri} matches none of peer_identities {ids}")

    # -- cert-manager -----------------------------------------------------------
    def certificate(self, where, obj):
        spec = obj.get("spec") or {}
        ex = lambda cond, msg: self.expect(where, cond, msg)
        ex(spec.get("secretName"), "Certificate: spec.secretName missing")
        ex((spec.get("issuerRef") or {}).get("name"), "Certificate: spec.issuerRef.name missing")
        if spec.get("secretName") == "tlc-tls":
            ex({"server auth", "client auth"} <= set(spec.get("usages") or []), "Certificate tlc-tls: usages need server auth and client auth")
            uris = spec.get("uris") or []
            ex(uris and all(SPIFFE_RE.match(u) for u in uris), f"Certificate tlc-tls: uris must be spiffe://DOMAIN/ns/NS/sa/SA, got {uris}")
            ns = (obj.get("metadata") or {}).get("namespace")
            for u in uris:
                ex(ns is None or f"/ns/{ns}/" in u, f"Certificate tlc-tls: URI {u} names another namespace than {ns}")
            return uris
        return []

    # -- one rendered overlay ---------------------------------------------------
    def overlay(self, path):
        name = os.path.basename(path)
        self.keeping = os.path.abspath(path) in self.keeps
        try:
            with open(path) as f:
                docs = [d for d in yaml.safe_load_all(f) if d]
        except (OSError, yaml.YAMLError) as e:
            self.error(name, f"cannot read the rendered YAML: {e}")
            return
        if not docs:
            self.error(name, "rendered nothing")
            return
        configmaps, certs, templates = [], [], 0
        for obj in docs:
            kind, api = obj.get("kind"), obj.get("apiVersion", "")
            where = f"{name}: {kind}/{(obj.get('metadata') or {}).get('name')}"
            if api == "kubeflow.org/v1" and kind == "TFJob":
                replicas = (obj.get("spec") or {}).get("tfReplicaSpecs") or {}
                self.expect(where, replicas, "spec.tfReplicaSpecs missing")
                for rname, rspec in replicas.items():
                    tpl = rspec.get("template") or {}
                    pod = {"apiVersion": "v1", "kind": "Pod",
                           "metadata": dict(copy.deepcopy(tpl.get("metadata") or {}), name=f"tfjob-{rname.lower()}"),
                           "spec": copy.deepcopy(tpl.get("spec") or {})}
                    self.validate_schema(f"{where} {rname} template as v1 Pod", pod)
                    self.pod_template(f"{where} {rname}", tpl, "tfjob-port")
                    self.expect(where, rspec.get("restartPolicy") in ("Never", "OnFailure", "Always", "ExitCode"),
                                f"{rname}: restartPolicy must be set")
                    templates += 1
                continue
            if kind == "PodTemplate" and (obj.get("metadata") or {}).get("name") == "tlc-sidecar":
                self.error(where, "the sidecar spec itself was rendered (config.kubernetes.io/local-config lost)")
                continue
            if api.startswith("cert-manager.io/"):
                if kind == "Certificate":
                    certs += self.certificate(where, obj)
                continue
            self.validate_schema(where, obj)
            if kind in ("StatefulSet", "Deployment", "Job", "DaemonSet"):
                self.pod_template(where, (obj.get("spec") or {}).get("template") or {}, "tf-port")
                templates += 1
            if kind == "ConfigMap" and obj["metadata"]["name"] == "tlc-config":
                configmaps.append((where, obj))
        if not self.expect(name, len(configmaps) == 1, f"exactly one ConfigMap tlc-config expected, got {len(configmaps)}"):
            return
        where, cm = configmaps[0]
        text = (cm.get("data") or {}).get("tlcd.toml")
        if self.expect(where, text, "key tlcd.toml missing"):
            self.tlcd_toml(where, text, certs)
        self.expect(name, templates > 0, "no pod template with the sidecar rendered")
        print(f"   {name}: {len(docs)} objects, {templates} pod templates checked")


def selftest(version):
    """The validator must see what it is asked to check: a native sidecar is
    refused before 1.28 and accepted at the version under test."""
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "t"},
           "spec": {"initContainers": [{"name": "s", "image": "i", "restartPolicy": "Always"}],
                    "containers": [{"name": "c", "image": "i"}]}}
    try:
        kubernetes_validate.validate(pod, "1.27.0", strict=True)
        return "kubernetes-validate accepted initContainers[].restartPolicy for 1.27 (strict): it is not checking fields"
    except kubernetes_validate.ValidationError:
        pass
    try:
        kubernetes_validate.validate(pod, version, strict=True)
    except kubernetes_validate.ValidationError as e:
        return f"Kubernetes {version} refuses a native sidecar ({e.message}): use >= 1.29"
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kubernetes-version", default="1.29.0")
    ap.add_argument("--spec", required=True, help="components/sidecar/sidecar.yaml")
    ap.add_argument("--keeps", action="append", default=[],
                    help="a rendered file whose pod templates must keep the user's annotations and labels")
    ap.add_argument("files", nargs="+")
    args = ap.parse_args()
    try:
        major, minor = (int(x) for x in args.kubernetes_version.split(".")[:2])
    except ValueError:
        major, minor = 0, 0
    if (major, minor) < (1, 29):
        print(f"FAIL: Kubernetes {args.kubernetes_version}: native sidecars need >= 1.29", file=sys.stderr)
        return 1
    problem = selftest(args.kubernetes_version)
    if problem:
        print(f"FAIL: self-test: {problem}", file=sys.stderr)
        return 1
    print(f"== validate (kubernetes-validate {kubernetes_validate.version.__version__}, "
          f"Kubernetes {args.kubernetes_version}, strict) and assert the sidecar spec")
    ch = Checker(args.kubernetes_version)
    ch.keeps = {os.path.abspath(p) for p in args.keeps}
    missing = ch.keeps - {os.path.abspath(p) for p in args.files}
    if missing:
        print(f"FAIL: --keeps {sorted(missing)} not among the files checked", file=sys.stderr)
        return 1
    if ch.sidecar_spec(args.spec):
        for path in args.files:
            ch.overlay(path)
    if ch.errors:
        for e in ch.errors:
            print(f"FAIL: {e}", file=sys.stderr)
        print(f"{len(ch.errors)} failure(s)", file=sys.stderr)
        return 1
    print(f"   {ch.counts['schema']} objects valid against the schemas, "
          f"{ch.counts['pod templates']} pod templates carry the sidecar spec")
    return 0


if __name__ == "__main__":
    sys.exit(main())
