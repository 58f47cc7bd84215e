#!/usr/bin/env bash
# Records a real run for check_run.py and render.py: starts a Prometheus
# with grafana/prometheus/prometheus-local.yml (scraping the sidecars of
# deploy/tf/run_with_tlcd.sh on 127.0.0.1:15190-15192 every 5 s), runs the
# TF job through tlcd, stops Prometheus and keeps its data.
#
#   grafana/record_run.sh [--out DIR] [--port P] [-- run_with_tlcd.sh args]
#   grafana/record_run.sh --serve [--out DIR] [--port P]
#
# --out DIR (default /tmp/panels): DIR/data is Prometheus' storage, DIR/run
# the job's logs (run_with_tlcd.sh --out), DIR/run.env the window:
# PROM_URL, T0 (Unix time before the sidecars start), T1 (when the sidecars
# were last scraped by run_with_tlcd.sh: after the job and TLC_LINGER
# seconds, default 15, before they stop).
# --port P: Prometheus listens on 127.0.0.1:P (default 9391).
# Everything after -- goes to run_with_tlcd.sh (default: -- --steps 600);
# TLCD and TLC_PYTHON are passed through. Example, as recorded for the
# README:
#   TLCD=/tmp/tlcd-main TLC_PYTHON=/work/main/.venv-tf/bin/python \
#       grafana/record_run.sh -- --steps 8000
#   . /tmp/panels/run.env
#   grafana/check_run.py "$PROM_URL" --start "$T0" --end "$T1" grafana/dashboards/*.json
#
# The loopback ports are shared by every loopback TF run on the machine, so
# the whole recording runs under flock /tmp/tlc-loopback-tf.lock (the script
# takes it itself).
#
# --serve starts Prometheus again on DIR/data, scraping nothing, and stays
# in the foreground until interrupted: query the recorded run at leisure.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
LOCK=/tmp/tlc-loopback-tf.lock
PROMETHEUS=${PROMETHEUS:-/usr/bin/prometheus}

out=/tmp/panels; port=9391; serve=0; run_args=()
while (($#)); do
    case $1 in
        --out) out=$2; shift 2 ;;
        --port) port=$2; shift 2 ;;
        --serve) serve=1; shift ;;
        --) shift; run_args=("$@"); break ;;
        *) echo "record_run: unknown argument '$1'" >&2; exit 2 ;;
    esac
done
((${#run_args[@]})) || run_args=(--steps 600)
url=http://127.0.0.1:$port
mkdir -p "$out"

wait_ready() { # pid
    for _ in $(seq 1 150); do
        curl -sf -m 1 "$url/-/ready" >/dev/null 2>&1 && return 0
        kill -0 "$1" 2>/dev/null || break
        sleep 0.2
    done
    tail -n 20 "$out/prometheus.log" >&2
    echo "record_run: Prometheus did not start on $url" >&2
    return 1
}

if ((serve)); then
    [[ -d $out/data ]] || { echo "record_run: no $out/data to serve" >&2; exit 1; }
    printf 'global:\n  scrape_interval: 5s\n' >"$out/serve.yml"
    echo "record_run: serving $out/data on $url (Ctrl-C stops)"
    [[ -e $out/run.env ]] && cat "$out/run.env"
    exec "$PROMETHEUS" --config.file="$out/serve.yml" --storage.tsdb.path="$out/data" \
        --storage.tsdb.retention.time=3650d --web.listen-address="127.0.0.1:$port"
fi

# Take the loopback lock (re-running this script under flock) before
# anything listens on or scrapes the shared ports.
if [[ -z ${TLC_LOOPBACK_LOCKED:-} ]]; then
    exec env TLC_LOOPBACK_LOCKED=1 flock "$LOCK" "$0" --out "$out" --port "$port" -- "${run_args[@]}"
fi

mkdir -p "$out/prometheus"
cp "$here/prometheus/prometheus-local.yml" "$here/prometheus/alerts.yml" "$out/prometheus/"
"$PROMETHEUS" --config.file="$out/prometheus/prometheus-local.yml" --storage.tsdb.path="$out/data" \
    --storage.tsdb.retention.time=3650d --web.listen-address="127.0.0.1:$port" \
    >"$out/prometheus.log" 2>&1 &
prom_pid=$!
trap 'kill "$prom_pid" 2>/dev/null || true; wait "$prom_pid" 2>/dev/null || true' EXIT
wait_ready "$prom_pid"

t0=$(date +%s)
status=0
# The sidecars stay up three scrape intervals after the job, so that
# Prometheus records the final counters (the global step the job reached).
TLC_LINGER=${TLC_LINGER:-15} "$root/deploy/tf/run_with_tlcd.sh" --out "$out/run" -- "${run_args[@]}" || status=$?
# The last moment the sidecars were up: run_with_tlcd.sh scrapes them after
# the job and its TLC_LINGER, before it stops them.
t1=$(stat -c %Y "$out"/run/sidecars/metrics-*.txt 2>/dev/null | sort -n | tail -n 1)
t1=${t1:-$(date +%s)}
printf 'PROM_URL=%s\nT0=%s\nT1=%s\nRUN_ARGS="%s"\nSTATUS=%s\n' "$url" "$t0" "$t1" "${run_args[*]}" "$status" \
    >"$out/run.env"
cat "$out/run.env"
echo "record_run: Prometheus data in $out/data; grafana/record_run.sh --serve --out $out to query it"
exit "$status"
