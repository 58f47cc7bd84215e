#!/usr/bin/env bash
# Runs deploy/tf/run_local.sh (1 ps + 2 workers of an unmodified TF job on
# loopback, or --ps-tasks N / --workers M) with one tlcd per task in explicit
# mode: every task's peers are pointed at its own sidecar's outbound ports,
# every sidecar forwards to the peer task's sidecar inbound port, which
# forwards to the task.
#
#   deploy/tf/run_with_tlcd.sh [--tlcd PATH] [--config FILE] [--record DIR] [--out DIR]
#                              [--ps-tasks N] [--workers M] [--tls]
#                              [--fault SIDECAR:KIND@STEP]... [-- train.py flags]
#
# 1 ps + 2 workers (the default):
#   ps      TF :2322  <- tlcd-ps inbound :4322 ; tlcd-ps outbound :5323 -> w0 :4323, :5324 -> w1 :4324
#   worker0 TF :2323  <- tlcd-w0 inbound :4323 ; tlcd-w0 outbound :5322 -> ps :4322
#   worker1 TF :2324  <- tlcd-w1 inbound :4324 ; tlcd-w1 outbound :6322 -> ps :4322
#   admin API (tlcctl --admin) ps 127.0.0.1:15100, w0 :15101, w1 :15102;
#   metrics http://127.0.0.1:15190/metrics (ps), :15191 (w0), :15192 (w1)
#
# Any other shape (at most 7 tasks): task k in the order ps0, ps1, ...,
# w0, w1, ... listens on TF :2322+k behind tlcd-<task> inbound :4322+k; task
# v dials task p at its sidecar's outbound :5330+10v+p (every ordered pair,
# ps to ps included: two ps tasks dial each other); admin :15100+k, metrics
# :15190+k. E.g. --ps-tasks 2: ps0 :2322, ps1 :2323, w0 :2324, w1 :2325;
# w0 dials ps0 at :5350 and ps1 at :5351, ps1 dials ps0 at :5340, w1 at :5343.
#
# --config is given to every tlcd (a TOML file: policy, codec, sparsity);
# --record DIR records the RecvTensor calls each sidecar sends (DIR/<sidecar>).
# --tls: the sidecars speak mutual TLS to each other, each with its own
# certificate from deploy/tls/make-certs.sh (in --out/certs: SPIFFE ID
# spiffe://tlc.local/ns/default/sa/<sidecar>), accepting any sidecar of
# that namespace; given as TLC_TLS__* environment variables.
# --fault SIDECAR:KIND@STEP (repeatable) disturbs a sidecar (ps, w0, w1, ...;
# ps0, ps1 with --ps-tasks 2) once the chief has logged local step STEP
# (the harness adds --log-every 10, so STEP is a multiple of 10):
#   term     SIGTERM, then a new tlcd with the same arguments once the old one
#            has exited (a container restart: no overlap);
#   kill     kill -9, then a new tlcd at once (a crash, an OOM kill);
#   restart  a new tlcd with the same arguments takes the listening sockets
#            over from the running one (`tlcd --take-over`), which then drains
#            (an upgrade in place);
#   stop     SIGTERM and no new tlcd (the sidecar is gone for good).
# What was done and when is in --out/sidecars/faults.log.
# TLC_LINGER=S keeps the sidecars up S seconds after the job before their
# metrics are read and they stop (default 0), so that a Prometheus scraping
# them (grafana/record_run.sh) records the final counters.
# Prints run_local.sh's summary and each sidecar's counters; logs in --out
# (the sidecars' in --out/sidecars: tlcd-<sidecar>.log, and metrics-<sidecar>.txt,
# each sidecar's /metrics scraped after the job, before the sidecars stop,
# and tensors-<sidecar>.json, its `tlcctl -o json tensors`, when a tlcctl sits
# beside $TLCD or is named by $TLCCTL).
# Every task here runs on one machine, where the link decision
# ([policy.link] mode = "auto") would rightly send tensors raw: these
# harnesses measure what compression does, so their sidecars compress
# wherever the policy says (TLC_POLICY__LINK__MODE=always, also tlcd's
# default) unless the caller sets the variable (e.g.
# TLC_POLICY__LINK__MODE=auto to measure the decision itself).
set -euo pipefail
export TLC_POLICY__LINK__MODE=${TLC_POLICY__LINK__MODE:-always}

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
TLCD=${TLCD:-$root/target/release/tlcd}
config=""; record=""; OUT=${OUT:-$(mktemp -d /tmp/tlc-tlcd.XXXXXX)}
num_ps=1; num_workers=2; tls=0; faults=()
while (($#)); do
    case $1 in
        --tlcd) TLCD=$2; shift 2 ;;
        --config) config=$2; shift 2 ;;
        --record) record=$2; shift 2 ;;
        --out) OUT=$2; shift 2 ;;
        --ps-tasks) num_ps=$2; shift 2 ;;
        --workers) num_workers=$2; shift 2 ;;
        --tls) tls=1; shift ;;
        --fault) faults+=("$2"); shift 2 ;;
        --) shift; break ;;
        *) echo "run_with_tlcd: unknown argument '$1'" >&2; exit 2 ;;
    esac
done
[[ -x $TLCD ]] || { echo "run_with_tlcd: no tlcd at $TLCD (cargo build --release -p tlc-daemon)" >&2; exit 1; }
[[ $num_ps =~ ^[1-9][0-9]*$ && $num_workers =~ ^[1-9][0-9]*$ ]] ||
    { echo "run_with_tlcd: --ps-tasks and --workers must be positive integers" >&2; exit 2; }
((num_ps + num_workers <= 7)) ||
    { echo "run_with_tlcd: at most 7 tasks (the port layout has room for no more)" >&2; exit 2; }
mkdir -p "$OUT/sidecars"
# Only what a previous run put there, so stale counters are never read.
rm -f "$OUT"/sidecars/tlcd-*.log "$OUT"/sidecars/metrics-*.txt "$OUT"/sidecars/tensors-*.json "$OUT"/sidecars/*.pid "$OUT"/sidecars/faults.log
for fault in "${faults[@]}"; do
    [[ $fault =~ ^[a-z0-9]+:(term|kill|restart|stop)@[0-9]+$ ]] ||
        { echo "run_with_tlcd: --fault '$fault': expected SIDECAR:term|kill|restart|stop@STEP" >&2; exit 2; }
done

# Each sidecar's pid is in sidecars/<name>.pid: a fault replaces it.
cleanup() {
    local file
    for file in "$OUT"/sidecars/*.pid; do
        [[ -e $file ]] && kill -TERM "$(cat "$file")" 2>/dev/null || true
    done
    wait 2>/dev/null || true
}
trap cleanup EXIT

names=()
declare -A metrics_port=() admin_port=() sidecar_args=()
start_tlcd() { # name, admin port, metrics port, then --route arguments
    local name=$1 admin=$2 metrics=$3; shift 3
    sidecar_args[$name]="$admin $metrics $*"
    launch_tlcd "$name" "$admin" "$metrics" "$@"
    names+=("$name")
    metrics_port[$name]=$metrics
    admin_port[$name]=$admin
}
launch_tlcd() { # name, admin port, metrics port, then tlcd arguments
    local name=$1 admin=$2 metrics=$3; shift 3
    local args=("$@" --admin-listen "127.0.0.1:$admin" --metrics-listen "127.0.0.1:$metrics")
    [[ -n $config ]] && args+=(--config "$config")
    [[ -n $record ]] && args+=(--record "$record/$name")
    [[ -n ${TLC_THREADS:-} ]] && args+=(--threads "$TLC_THREADS")
    local env=()
    if ((tls)); then
        "$root/deploy/tls/make-certs.sh" "$OUT/certs" "$name" >/dev/null
        env=(TLC_TLS__MODE=mutual TLC_TLS__CERT="$OUT/certs/$name.pem"
            TLC_TLS__KEY="$OUT/certs/$name-key.pem" TLC_TLS__CA="$OUT/certs/ca.pem"
            TLC_TLS__PEER_IDENTITIES="spiffe://tlc.local/ns/default/sa/*")
    fi
    env "${env[@]}" RUST_LOG=${RUST_LOG:-info} "$TLCD" "${args[@]}" >>"$OUT/sidecars/tlcd-$name.log" 2>&1 &
    echo $! >"$OUT/sidecars/$name.pid"
}

# Waits for the chief's "local step STEP" line, then disturbs the sidecar.
inject_fault() { # SIDECAR:KIND@STEP
    local name=${1%%:*} rest=${1#*:} kind step old
    kind=${rest%@*} step=${rest#*@}
    [[ -n ${sidecar_args[$name]:-} ]] || { echo "run_with_tlcd: --fault: no sidecar '$name'" >&2; return 1; }
    until grep -aq "local step $step:" "$OUT/worker0.log" 2>/dev/null; do
        [[ -e $OUT/worker0.json ]] && { echo "$(date +%T.%N) $1: the run ended first" >>"$OUT/sidecars/faults.log"; return 0; }
        sleep 0.05
    done
    old=$(cat "$OUT/sidecars/$name.pid")
    # shellcheck disable=SC2086 # the saved arguments are words
    set -- "$name" ${sidecar_args[$name]}
    echo "$(date +%T.%N) $name: $kind at local step $step (pid $old)" >>"$OUT/sidecars/faults.log"
    echo "=== $(date +%T.%N) run_with_tlcd: $kind ===" >>"$OUT/sidecars/tlcd-$name.log"
    case $kind in
        term | stop)
            kill -TERM "$old"
            while kill -0 "$old" 2>/dev/null; do sleep 0.01; done
            echo "$(date +%T.%N) $name: pid $old exited" >>"$OUT/sidecars/faults.log"
            [[ $kind == stop ]] && return 0
            launch_tlcd "$@" ;;
        kill)
            kill -KILL "$old"
            while kill -0 "$old" 2>/dev/null; do sleep 0.01; done
            launch_tlcd "$@" ;;
        restart)
            launch_tlcd "$@" --take-over ;;
    esac
    echo "$(date +%T.%N) $name: new tlcd, pid $(cat "$OUT/sidecars/$name.pid")" >>"$OUT/sidecars/faults.log"
}

peers=()
if ((num_ps == 1 && num_workers == 2)); then
    start_tlcd ps 15100 15190 --route 127.0.0.1:4322=127.0.0.1:2322,inbound \
        --route 127.0.0.1:5323=127.0.0.1:4323,outbound --route 127.0.0.1:5324=127.0.0.1:4324,outbound
    start_tlcd w0 15101 15191 --route 127.0.0.1:4323=127.0.0.1:2323,inbound --route 127.0.0.1:5322=127.0.0.1:4322,outbound
    start_tlcd w1 15102 15192 --route 127.0.0.1:4324=127.0.0.1:2324,inbound --route 127.0.0.1:6322=127.0.0.1:4322,outbound
    peers=(--peer ps:worker0=127.0.0.1:5323 --peer ps:worker1=127.0.0.1:5324
        --peer worker0:ps=127.0.0.1:5322 --peer worker1:ps=127.0.0.1:6322)
else
    tasks=() sidecars=()
    for ((j = 0; j < num_ps; j++)); do tasks+=("ps$j"); sidecars+=("ps$j"); done
    for ((i = 0; i < num_workers; i++)); do tasks+=("worker$i"); sidecars+=("w$i"); done
    for ((v = 0; v < ${#tasks[@]}; v++)); do
        routes=(--route "127.0.0.1:$((4322 + v))=127.0.0.1:$((2322 + v)),inbound")
        for ((p = 0; p < ${#tasks[@]}; p++)); do
            ((p == v)) && continue
            port=$((5330 + 10 * v + p))
            routes+=(--route "127.0.0.1:$port=127.0.0.1:$((4322 + p)),outbound")
            peers+=(--peer "${tasks[v]}:${tasks[p]}=127.0.0.1:$port")
        done
        start_tlcd "${sidecars[v]}" $((15100 + v)) $((15190 + v)) "${routes[@]}"
    done
fi
sleep 0.5
for name in "${names[@]}"; do
    kill -0 "$(cat "$OUT/sidecars/$name.pid")" 2>/dev/null ||
        { echo "run_with_tlcd: a tlcd did not start:" >&2; tail -n 3 "$OUT"/sidecars/tlcd-*.log >&2; exit 1; }
done

rm -f "$OUT/worker0.log" "$OUT/worker0.json"
injectors=()
for fault in "${faults[@]}"; do
    inject_fault "$fault" &
    injectors+=($!)
done
# Faults are triggered by the chief's log of its local steps.
train_args=()
((${#faults[@]})) && train_args=(--log-every 10)

status=0
PS_PORT=2322 WORKER_PORT=$((2322 + num_ps)) "$here/run_local.sh" --out "$OUT" \
    --ps-tasks "$num_ps" --workers "$num_workers" "${peers[@]}" \
    -- "${train_args[@]}" "$@" || status=$?
for pid in "${injectors[@]}"; do kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; done
[[ -e $OUT/sidecars/faults.log ]] && sed 's/^/fault: /' "$OUT/sidecars/faults.log"
sleep "${TLC_LINGER:-0}"
# Counters only /metrics has (keyframes, per-codec bytes, latencies), read
# while the sidecars are still up.
for name in "${names[@]}"; do
    curl -sf -m 5 "http://127.0.0.1:${metrics_port[$name]}/metrics" >"$OUT/sidecars/metrics-$name.txt" 2>/dev/null ||
        echo "run_with_tlcd: could not scrape tlcd-$name's metrics" >&2
    # Per tensor: what each context sent, for a breakdown of the bytes.
    if [[ -x ${TLCCTL:-$(dirname "$TLCD")/tlcctl} ]]; then
        "${TLCCTL:-$(dirname "$TLCD")/tlcctl}" --admin "127.0.0.1:${admin_port[$name]}" -o json tensors \
            >"$OUT/sidecars/tensors-$name.json" 2>/dev/null || rm -f "$OUT/sidecars/tensors-$name.json"
    fi
done
cleanup
trap - EXIT
for name in "${names[@]}"; do
    echo "tlcd-$name: $(grep -a 'sidecar totals' "$OUT/sidecars/tlcd-$name.log" | tail -n 1 | sed 's/.*sidecar totals/sidecar totals/')"
done
if ((tls)); then
    # TLS must really have been on, and no peer refused.
    for name in "${names[@]}"; do
        grep -aq 'mutual TLS between sidecars' "$OUT/sidecars/tlcd-$name.log" ||
            { echo "run_with_tlcd: tlcd-$name did not start with TLS" >&2; status=1; }
        refused=$(sed -n 's/^tlc_connections_refused_total{reason="tls"} \([0-9]*\)$/\1/p' "$OUT/sidecars/metrics-$name.txt")
        [[ ${refused:-missing} == 0 ]] ||
            { echo "run_with_tlcd: tlcd-$name refused ${refused:-?} TLS connections" >&2; status=1; }
    done
    echo "tls: every sidecar spoke mutual TLS, no connection refused"
fi
exit "$status"
