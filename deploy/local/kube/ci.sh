#!/usr/bin/env bash
# What CI runs of deploy/local/kube: the Kubernetes manifests, run.
#   1. The TFJob overlay as deploy/k8s/check.sh rendered it
#      (deploy/k8s/rendered/tfjob.yaml), in network-namespace pods at
#      --rate Mbit/s, with Prometheus scraping by grafana/prometheus/prometheus.yml,
#      then every dashboard query checked against that run's data
#      (grafana/check_run.py: data, and sane values).
#   2. A user's TFJob without tlc (deploy/k8s/examples/my-tfjob.yaml) through
#      `tlcctl inject` and `tlcctl inject --print-config`, run the same way.
#   3. The same TFJob through `tlcctl inject --explicit`: no tlc-init, no
#      container with a capability added or running as root (checked in the
#      manifest; the runner gives each container what its manifest says),
#      TensorFlow's TF_CONFIG rewritten to dial its sidecar; run the same way.
# Each run must succeed as a job (every pod completed, sidecars started before
# and stopped after TensorFlow, probes, exec, scrapes: deploy/local/kube/run.py).
#
#   deploy/local/kube/ci.sh [--rate MBIT] [--steps N] [--out DIR]
#
# --steps (default 2000) is the first run's: long enough (about a minute of
# training here) for the dashboards' rate() windows to hold several
# scrapes. The second and third runs train 300 steps.
# Needs root, deploy/k8s/check.sh and deploy/container/check-layout.sh run
# before (the rendered manifests, the image's file tree), target/release/tlcctl,
# and TLC_PYTHON (or .venv-tf) with TensorFlow.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
rate=10; steps=2000; OUT=""
while (($#)); do
    case $1 in
        --rate) rate=${2:?}; shift 2 ;;
        --steps) steps=${2:?}; shift 2 ;;
        --out) OUT=${2:?}; shift 2 ;;
        -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) echo "kube/ci: unknown argument '$1'" >&2; exit 2 ;;
    esac
done
OUT=${OUT:-$(mktemp -d /tmp/tlc-kube-ci.XXXXXX)}
mkdir -p "$OUT"
chmod 755 "$OUT"
rendered=$root/deploy/k8s/rendered/tfjob.yaml
tlcctl=$root/target/release/tlcctl
[[ -r $rendered ]] || { echo "kube/ci: no $rendered (run deploy/k8s/check.sh first)" >&2; exit 1; }
[[ -x $tlcctl ]] || { echo "kube/ci: no $tlcctl (cargo build --release -p tlc-ctl)" >&2; exit 1; }

# run.py needs PyYAML: Debian's python3-yaml is for Debian's python3, which
# may not be the first python3 on PATH (pyenv's, on the project's machines).
python=python3
"$python" -c 'import yaml' 2>/dev/null || python=/usr/bin/python3

# The runner takes the image from deploy/container/rootfs for any image
# whose name has "tlcd" in its last part; inject refuses the sidecar spec's
# placeholder (no registry serves it), so a user's name stands in.
export TLC_IMAGE=registry.example.com/tlc/tlcd:0.1.0

# As README.md says to create it: `kubectl create secret generic tlc-admin-token --from-literal=token=...`.
token=$(openssl rand -hex 32)
# The MLP at hidden width 256 (50,826 parameters; its two large layers above
# tlcd's 64 KiB threshold), as deploy/local/ci-small.sh.
train=(--hidden 256)

echo "kube/ci: 0. manifest.py's unit tests"
"$python" "$here/manifest_test.py"

echo "kube/ci: 1. the rendered TFJob overlay ($rendered)"
"$python" "$here/run.py" "$rendered" --rate "$rate" --out "$OUT/tfjob" --secret "tlc-admin-token:token=$token" \
    --check-dashboards --expect "link_mbit=$rate" --expect pods=3 --expect sparsity=1.0 \
    -- --steps "$steps" "${train[@]}"

echo "kube/ci: 2. a TFJob of a user's, through tlcctl inject (deploy/k8s/examples/my-tfjob.yaml)"
{
    "$tlcctl" inject "$root/deploy/k8s/examples/my-tfjob.yaml"
    echo "---"
    "$tlcctl" inject --print-config
} >"$OUT/injected.yaml"
"$python" "$here/run.py" "$OUT/injected.yaml" --rate "$rate" --out "$OUT/injected" --secret "tlc-admin-token:token=$token" \
    -- --steps 300 "${train[@]}"
echo "kube/ci: 3. the same TFJob in explicit mode (tlcctl inject --explicit): no iptables, no privileged container"
{
    "$tlcctl" inject --explicit "$root/deploy/k8s/examples/my-tfjob.yaml"
    echo "---"
    "$tlcctl" inject --print-config
} >"$OUT/explicit.yaml"
# Nothing in it may ask for more than Pod Security's "restricted" allows
# of capabilities: no NET_ADMIN, NET_RAW or root anywhere.
"$python" - "$OUT/explicit.yaml" <<'PY'
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
for doc in docs:
    for role, spec in (doc.get("spec", {}).get("tfReplicaSpecs") or {}).items():
        pod = spec["template"]["spec"]
        for c in pod.get("initContainers", []) + pod.get("containers", []):
            sc = c.get("securityContext") or {}
            added = (sc.get("capabilities") or {}).get("add") or []
            assert not added, f"{role} {c['name']}: capabilities {added}"
            assert c["name"] != "tlc-init", f"{role}: tlc-init in explicit mode"
            assert sc.get("runAsUser") != 0, f"{role} {c['name']}: runs as root"
print("kube/ci: explicit mode: no container adds a capability or runs as root")
PY
"$python" "$here/run.py" "$OUT/explicit.yaml" --rate "$rate" --out "$OUT/explicit" --secret "tlc-admin-token:token=$token" \
    -- --steps 300 "${train[@]}"
echo "kube/ci: ok (runs in $OUT)"
