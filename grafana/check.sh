#!/usr/bin/env bash
# Checks grafana/: both Prometheus configs and the rules they load
# (promtool check config / check rules / test rules), the relabelling of
# the Kubernetes config, and every dashboard: valid JSON, every PromQL
# expression parsed by a real Prometheus, every metric one tlcd exports.
# Also runs check_run_test.py (the rules check_run.py applies to a real
# run's data, on synthetic series).
#
# Needs Debian's prometheus package (promtool, /usr/bin/prometheus) and
# python3. Starts a throwaway Prometheus on a free loopback port with its
# storage in a temporary folder, and stops it on exit. Exits non-zero on
# any failure.
#
#   grafana/check.sh
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
prom_dir=$here/prometheus
PROMTOOL=${PROMTOOL:-promtool}
PROMETHEUS=${PROMETHEUS:-/usr/bin/prometheus}
failed=0
fail() { echo "FAIL $*"; failed=1; }

for tool in "$PROMTOOL" "$PROMETHEUS" python3; do
    command -v "$tool" >/dev/null || { echo "check.sh: $tool not found (apt-get install prometheus python3)" >&2; exit 2; }
done

tmp=$(mktemp -d)
prom_pid=
cleanup() {
    if [[ -n $prom_pid ]]; then kill "$prom_pid" 2>/dev/null || true; wait "$prom_pid" 2>/dev/null || true; fi
    [[ -n ${KEEP_TMP:-} ]] && echo "kept $tmp" || rm -rf "$tmp"
}
trap cleanup EXIT

# prometheus.yml with its kubernetes_sd_configs replaced by static targets
# carrying the labels Kubernetes discovery gives (one target per declared
# container port): a tlc pod's three ports (only tlc-metrics may be kept),
# an IPv6 tlc pod with a metrics path of its own, a tlc pod that opted out,
# a finished one, and another application's annotated pod. Debian's build
# of Prometheus has no Kubernetes discovery, so this is also what promtool
# checks there. deploy/local/kube/run.py runs the same file on real pods.
cp "$prom_dir/alerts.yml" "$tmp/alerts.yml"
python3 - "$prom_dir/prometheus.yml" "$tmp/prometheus-k8s-as-static.yml" <<'PY'
import sys
text = open(sys.argv[1]).read()
sd = "    kubernetes_sd_configs:\n      - role: pod\n"
assert sd in text, "prometheus.yml: no kubernetes_sd_configs with role pod"
def port(ip, number, port_name, pod, container, annotations, phase="Running"):
    address = f"[{ip}]:{number}" if ":" in ip else f"{ip}:{number}"
    labels = {"pod_ip": ip, "pod_name": pod, "pod_phase": phase, "pod_container_name": container,
              "pod_container_port_number": number, "pod_container_port_name": port_name}
    lines = [f'      - targets: ["{address}"]', "        labels:", '          __meta_kubernetes_namespace: "ml"']
    lines += [f'          __meta_kubernetes_{k}: "{v}"' for k, v in labels.items()]
    lines += [f'          __meta_kubernetes_pod_annotation_prometheus_io_{k}: "{v}"' for k, v in annotations.items()]
    return "\n".join(lines) + "\n"
tlc = {"scrape": "true", "port": "17090"}
static = "    static_configs:\n" \
    + port("10.1.2.3", 17090, "tlc-metrics", "trainer-ps-0", "tlc-sidecar", tlc) \
    + port("10.1.2.3", 17006, "tlc-inbound", "trainer-ps-0", "tlc-sidecar", tlc) \
    + port("10.1.2.3", 2222, "tfjob-port", "trainer-ps-0", "tensorflow", tlc) \
    + port("fd00::5", 17090, "tlc-metrics", "trainer-worker-0", "tlc-sidecar", dict(tlc, path="/stats")) \
    + port("10.1.2.5", 17090, "tlc-metrics", "opted-out-0", "tlc-sidecar", dict(tlc, scrape="false")) \
    + port("10.1.2.6", 17090, "tlc-metrics", "finished-0", "tlc-sidecar", tlc, phase="Succeeded") \
    + port("10.1.2.4", 8080, "http", "unrelated-0", "app", {"scrape": "true", "port": "8080"})
open(sys.argv[2], "w").write(text.replace(sd, static))
PY

echo "== promtool check config"
if "$PROMTOOL" check config "$prom_dir/prometheus.yml" >"$tmp/k8s.out" 2>&1; then
    echo "ok   prometheus.yml"
elif grep -q "field kubernetes_sd_configs not found" "$tmp/k8s.out"; then
    # Then check the same file with static targets in place of discovery.
    if "$PROMTOOL" check config "$tmp/prometheus-k8s-as-static.yml" >"$tmp/k8s.out" 2>&1; then
        echo "ok   prometheus.yml (this promtool has no Kubernetes discovery: checked with static targets in its place)"
    else
        cat "$tmp/k8s.out"; fail "prometheus.yml"
    fi
else
    cat "$tmp/k8s.out"; fail "prometheus.yml"
fi
if "$PROMTOOL" check config "$prom_dir/prometheus-local.yml" >"$tmp/local.out" 2>&1; then
    echo "ok   prometheus-local.yml"
else
    cat "$tmp/local.out"; fail "prometheus-local.yml"
fi

echo "== promtool check rules, test rules"
if "$PROMTOOL" check rules "$prom_dir/alerts.yml" >"$tmp/rules.out" 2>&1; then
    echo "ok   alerts.yml: $(grep -o '[0-9]* rules found' "$tmp/rules.out")"
else
    cat "$tmp/rules.out"; fail "alerts.yml"
fi
if (cd "$prom_dir" && "$PROMTOOL" test rules alerts_test.yml) >"$tmp/test.out" 2>&1; then
    echo "ok   alerts_test.yml"
else
    cat "$tmp/test.out"; fail "alerts_test.yml"
fi

echo "== podmonitor.yaml: a PodMonitor on the sidecar spec's metrics port"
if python3 - "$prom_dir/podmonitor.yaml" "$here/../deploy/k8s/components/sidecar/sidecar.yaml" <<'PY'
import re, sys
monitor, spec = (open(p).read() for p in sys.argv[1:])
port = re.search(r"name: (tlc-metrics), containerPort", spec)
assert port, "the sidecar spec has no port named tlc-metrics"
assert "kind: PodMonitor" in monitor and "apiVersion: monitoring.coreos.com/v1" in monitor
assert re.search(r"- port: " + port.group(1) + r"\n", monitor), "the PodMonitor does not scrape " + port.group(1)
assert "any: true" in monitor and "selector: {}" in monitor
PY
then
    echo "ok   podmonitor.yaml scrapes tlc-metrics in every namespace"
else
    fail "podmonitor.yaml"
fi

echo "== check_run_test.py"
if python3 "$here/check_run_test.py" >"$tmp/unit.out" 2>&1; then
    echo "ok   check_run_test.py: $(grep -o 'Ran [0-9]* tests' "$tmp/unit.out")"
else
    cat "$tmp/unit.out"; fail "check_run_test.py"
fi

echo "== dashboards, through a throwaway Prometheus"
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$PROMETHEUS" --config.file="$tmp/prometheus-k8s-as-static.yml" \
    --storage.tsdb.path="$tmp/data" --web.listen-address="127.0.0.1:$port" \
    >"$tmp/prometheus.log" 2>&1 &
prom_pid=$!
url=http://127.0.0.1:$port
for _ in $(seq 1 100); do
    if python3 -c "import urllib.request, sys; urllib.request.urlopen(sys.argv[1] + '/-/ready', timeout=1)" "$url" 2>/dev/null; then
        ready=1; break
    fi
    kill -0 "$prom_pid" 2>/dev/null || break
    sleep 0.2
done
if [[ -z ${ready:-} ]]; then
    tail -20 "$tmp/prometheus.log"
    echo "FAIL could not start $PROMETHEUS"; exit 1
fi
python3 "$here/check_queries.py" "$url" "$here"/dashboards/*.json --targets || failed=1

if (( failed )); then echo "grafana/check.sh: FAILED"; exit 1; fi
echo "grafana/check.sh: all ok"
