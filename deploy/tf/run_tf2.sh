#!/usr/bin/env bash
# A TF2 ParameterServerStrategy job (deploy/tf/train_tf2.py: coordinator
# "chief" + 2 workers + 1 or 2 ps, each configured by TF_CONFIG as Kubeflow's
# training operator sets it) on loopback, directly (--mode none) or through
# one tlcd per task in explicit mode (--mode tlcd). Waits for the coordinator,
# then kills the workers and ps (which serve until killed, as under the
# operator) and the sidecars, and prints a summary (also OUT/summary.json).
#
#   deploy/tf/run_tf2.sh [--mode none|tlcd] [--steps N] [--workers N] [--ps 1|2] [--out DIR]
#       [--tlcd PATH] [--config FILE] [--record DIR] [--record-limit N]
#       [--timeout S] [-- train_tf2.py flags, e.g. --model embedding --seed 1]
#
# Tasks, in this order, are numbered k = 0..: chief (coordinator), worker0,
# worker1, ps0[, ps1] (with --workers 1: chief, worker0, ps0[, ps1]; 3 or 4
# workers shift the ps likewise). Ports of task k, as with 2 workers:
#
#   TF server                      24(00+k)  chief :2400, worker0 :2401, worker1 :2402, ps0 :2403, ps1 :2404
#   its tlcd, inbound route        44(00+k)  :44(00+k) -> TF :24(00+k)            (peers' sidecars call here)
#   its tlcd, outbound routes      54(k)(j)  :54kj -> task j's inbound :44(00+j)  (task k calls peer j here)
#                                            e.g. chief's sidecar: :5401 -> w0, :5402 -> w1, :5403 -> ps0;
#                                            worker0's: :5410 -> chief, :5412 -> w1, :5413 -> ps0; ...
#   its tlcd, admin API            152(00+k) (tlcctl --admin 127.0.0.1:15200 for the chief's)
#   its tlcd, metrics              152(90+k) http://127.0.0.1:15290/metrics for the chief's
#
# With --mode tlcd, task k's TF_CONFIG names itself at its real port and every
# peer j at 127.0.0.1:54kj. But the coordinator sends ITS cluster spec to every
# task it connects, and the workers and ps then dial each other at the
# addresses of that spec: worker -> ps and ps -> worker calls all go through
# the chief's sidecar (outbound :5401-:5404), which thus carries the
# RecvTensor calls of several requesting tasks. That is what happens in a real
# cluster too, and it is kept as it is.
#
# Options:
#   --mode none|tlcd   direct, or one tlcd per task (default none)
#   --steps N          training steps over all workers (default 300)
#   --workers N        workers, 1 to 4 (default 2)
#   --ps N             ps tasks, 1 or 2 (default 1)
#   --out DIR          logs, results, summary.json (default a new /tmp/tlc-tf2.XXXXXX)
#   --tlcd PATH        tlcd binary (default target/release/tlcd)
#   --config FILE      passed to every tlcd (--config)
#   --record DIR       every tlcd records RecvTensor calls on its outbound routes
#                      (passed through uncompressed) into DIR/<task>
#   --record-limit N   most calls each tlcd records (tlcd's default: 64)
#   --timeout S        kill everything if the coordinator is not done (default 600)
#   --log-level F      tlcd's log filter (RUST_LOG syntax; default info)
#   after --            flags for train_tf2.py (the coordinator uses them)
#
# Prints accuracy, steps and step time, and for each tlcd its last "sidecar
# totals" line (logged at SIGTERM) and the keyframes counted by its metrics
# (scraped before SIGTERM, kept in OUT/sidecars/metrics-<task>.txt), summed
# per direction. Exit status: 0 if the coordinator finished and applied every
# step; 124 on timeout; 1 otherwise. The interpreter is $TLC_PYTHON, else
# /work/tfvenv/bin/python, else .venv-tf/bin/python at the repository root.
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
mode=none steps=300 nps=1 nworkers=2 OUT="" TLCD=$root/target/release/tlcd config="" record="" record_limit=""
timeout=600 log_level=${RUST_LOG:-info}
train_args=()

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit "${1:-0}"; }
die() { echo "run_tf2: $*" >&2; exit 1; }
while (($#)); do
    case $1 in
        --mode) mode=$2; shift 2 ;;
        --steps) steps=$2; shift 2 ;;
        --ps) nps=$2; shift 2 ;;
        --workers) nworkers=$2; shift 2 ;;
        --out) OUT=$2; shift 2 ;;
        --tlcd) TLCD=$2; shift 2 ;;
        --config) config=$2; shift 2 ;;
        --record) record=$2; shift 2 ;;
        --record-limit) record_limit=$2; shift 2 ;;
        --timeout) timeout=$2; shift 2 ;;
        --log-level) log_level=$2; shift 2 ;;
        -h | --help) usage 0 ;;
        --) shift; train_args=("$@"); break ;;
        *) echo "run_tf2: unknown option '$1'" >&2; usage 2 >&2 ;;
    esac
done
[[ $mode == none || $mode == tlcd ]] || die "--mode is none or tlcd"
[[ $nps == 1 || $nps == 2 ]] || die "--ps is 1 or 2"
[[ $nworkers =~ ^[1-4]$ ]] || die "--workers is 1 to 4"
[[ $steps =~ ^[1-9][0-9]*$ ]] || die "--steps must be a positive integer"
if [[ $mode == tlcd ]]; then
    [[ -x $TLCD ]] || die "no tlcd at $TLCD (cargo build --release -p tlc-daemon)"
    [[ -z $config || -r $config ]] || die "cannot read --config $config"
else
    [[ -z $record && -z $config ]] || die "--record and --config need --mode tlcd"
fi
if [[ -n ${TLC_PYTHON:-} ]]; then
    PY=$TLC_PYTHON
elif [[ -x /work/tfvenv/bin/python ]]; then
    PY=/work/tfvenv/bin/python
elif [[ -x $root/.venv-tf/bin/python ]]; then
    PY=$root/.venv-tf/bin/python
else
    die "no Python with TensorFlow: set TLC_PYTHON or run deploy/tf/setup-venv.sh"
fi

OUT=${OUT:-$(mktemp -d /tmp/tlc-tf2.XXXXXX)}
mkdir -p "$OUT"
rm -rf "$OUT"/sidecars "$OUT"/{chief,worker,ps}[0-9]*.log "$OUT"/{result.json,summary.json,launch.log}
[[ $mode == tlcd ]] && mkdir -p "$OUT/sidecars"

tasks=(chief0)
for ((i = 0; i < nworkers; i++)); do tasks+=("worker$i"); done
for ((i = 0; i < nps; i++)); do tasks+=("ps$i"); done
short() { case $1 in chief0) echo chief ;; worker*) echo "w${1#worker}" ;; *) echo "$1" ;; esac; }

# TF_CONFIG of task k: itself at its real port, peer j at 127.0.0.1:54kj
# (tlcd) or at its real port (none).
tf_config() {
    local k=$1 j t addr chief="" workers="" ps=""
    for j in "${!tasks[@]}"; do
        t=${tasks[$j]}
        if [[ $mode == none || $j == "$k" ]]; then addr=127.0.0.1:$((2400 + j)); else addr=127.0.0.1:54$k$j; fi
        case $t in
            chief*) chief+="${chief:+,}\"$addr\"" ;;
            worker*) workers+="${workers:+,}\"$addr\"" ;;
            ps*) ps+="${ps:+,}\"$addr\"" ;;
        esac
    done
    t=${tasks[$k]}
    local type=${t%%[0-9]*} index=${t##*[a-z]}
    printf '{"cluster":{"chief":[%s],"worker":[%s],"ps":[%s]},"task":{"type":"%s","index":%s}}' \
        "$chief" "$workers" "$ps" "$type" "$index"
}

declare -A pid=()
sidecar_pids=()
stop_tasks() {
    local t alive=()
    for t in "${!pid[@]}"; do kill -0 "${pid[$t]}" 2>/dev/null && alive+=("${pid[$t]}"); done
    ((${#alive[@]})) || return 0
    kill "${alive[@]}" 2>/dev/null || true
    sleep 1
    kill -9 "${alive[@]}" 2>/dev/null || true
    wait "${alive[@]}" 2>/dev/null || true
}
stop_sidecars() { # SIGTERM: each drains and logs its totals
    local p
    for p in "${sidecar_pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    for p in "${sidecar_pids[@]}"; do wait "$p" 2>/dev/null || true; done
    sidecar_pids=()
}
cleanup() { stop_tasks; stop_sidecars; }
trap cleanup EXIT
trap 'echo "run_tf2: interrupted" >&2; exit 130' INT TERM

if [[ $mode == tlcd ]]; then
    for k in "${!tasks[@]}"; do
        name=$(short "${tasks[$k]}")
        args=(--route "127.0.0.1:$((4400 + k))=127.0.0.1:$((2400 + k)),inbound")
        for j in "${!tasks[@]}"; do
            [[ $j == "$k" ]] || args+=(--route "127.0.0.1:54$k$j=127.0.0.1:$((4400 + j)),outbound")
        done
        args+=(--admin-listen "127.0.0.1:$((15200 + k))" --metrics-listen "127.0.0.1:$((15290 + k))")
        [[ -n $config ]] && args+=(--config "$config")
        [[ -n $record ]] && args+=(--record "$record/$name")
        [[ -n $record_limit ]] && args+=(--record-limit "$record_limit")
        [[ -n ${TLC_THREADS:-} ]] && args+=(--threads "$TLC_THREADS")
        echo "run_tf2: tlcd-$name: ${args[*]}" >>"$OUT/launch.log"
        RUST_LOG=$log_level "$TLCD" "${args[@]}" >"$OUT/sidecars/tlcd-$name.log" 2>&1 &
        sidecar_pids+=($!)
    done
    sleep 0.5
    for p in "${sidecar_pids[@]}"; do
        kill -0 "$p" 2>/dev/null || { tail -n 3 "$OUT"/sidecars/tlcd-*.log >&2; die "a tlcd did not start"; }
    done
fi

started=$(date +%s.%N)
for k in "${!tasks[@]}"; do
    t=${tasks[$k]}
    cfg=$(tf_config "$k")
    echo "run_tf2: $t: TF_CONFIG=$cfg" >>"$OUT/launch.log"
    extra=()
    [[ $t == chief0 ]] && extra=(--steps "$steps" --result "$OUT/result.json" "${train_args[@]}")
    TF_CONFIG=$cfg "$PY" -u "$here/train_tf2.py" "${extra[@]}" >"$OUT/$t.log" 2>&1 &
    pid[$t]=$!
done

# The coordinator decides; a worker or ps that dies first is a failure too.
status=ok
deadline=$(($(date +%s) + timeout))
while :; do
    if ! kill -0 "${pid[chief0]}" 2>/dev/null; then
        set +e; wait "${pid[chief0]}"; rc=$?; set -e
        ((rc == 0)) || { echo "run_tf2: the coordinator exited with status $rc (log: $OUT/chief0.log)" >&2
                         tail -n 5 "$OUT/chief0.log" >&2; status=failed; }
        break
    fi
    for t in "${tasks[@]}"; do
        [[ $t == chief0 ]] && continue
        kill -0 "${pid[$t]}" 2>/dev/null && continue
        echo "run_tf2: $t exited before the coordinator was done (log: $OUT/$t.log)" >&2
        tail -n 5 "$OUT/$t.log" >&2
        status=failed
    done
    [[ $status == ok ]] || break
    (($(date +%s) < deadline)) || { status=timeout; break; }
    sleep 0.2
done
ended=$(date +%s.%N)
stop_tasks
if [[ $mode == tlcd ]]; then
    for k in "${!tasks[@]}"; do
        name=$(short "${tasks[$k]}")
        curl -sf --max-time 5 "http://127.0.0.1:$((15290 + k))/metrics" >"$OUT/sidecars/metrics-$name.txt" ||
            echo "run_tf2: could not scrape tlcd-$name's metrics" >&2
    done
    stop_sidecars
fi
trap - EXIT
if [[ $status == timeout ]]; then
    echo "run_tf2: timed out after ${timeout}s, killed everything (logs in $OUT)" >&2
    exit 124
fi
[[ $status == ok ]] || { echo "run_tf2: failed (logs in $OUT)" >&2; exit 1; }

names=()
for t in "${tasks[@]}"; do names+=("$(short "$t")"); done
"$PY" - "$OUT" "$mode" "$started" "$ended" "${names[@]}" <<'EOF'
import json, re, sys
out, mode, started, ended, names = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4]), sys.argv[5:]
try:
    r = json.load(open(f"{out}/result.json"))
except OSError as e:
    sys.exit(f"run_tf2: no result from the coordinator: {e}")
summary = {"mode": mode, "ok": r["steps_done"] == r["steps"], "wall_seconds": round(ended - started, 2), "out": out}
summary.update({k: r[k] for k in ("model", "steps", "steps_done", "seconds", "step_seconds", "warmup_seconds",
                                   "test_accuracy", "test_loss", "train_loss_last20", "params", "seed")})
print(f"tf2-run {'ok' if summary['ok'] else 'FAILED'} ({mode}): {r['model']} steps={r['steps_done']}/{r['steps']} "
      f"step={r['step_seconds']*1000:.1f}ms (after {r['warmup_seconds']:.1f}s warm-up) acc={r['test_accuracy']:.4f} "
      f"loss={r['test_loss']:.4f} wall={summary['wall_seconds']:.1f}s out={out}")
if mode == "tlcd":
    keys = ["decode_failures", "fallbacks", "fallbacks_served", "restored"]
    total = {d: {"tensors": 0, "raw_bytes": 0, "wire_bytes": 0, "refinements": 0} for d in ("push", "pull")}
    total.update({k: 0 for k in keys + ["keyframes_holder", "keyframes_requester"]})
    sidecars = {}
    for name in names:
        log = open(f"{out}/sidecars/tlcd-{name}.log", errors="replace").read()
        lines = [l for l in log.splitlines() if "sidecar totals" in l]
        line = re.sub(r"\x1b\[[0-9;]*m", "", lines[-1]).split("sidecar totals", 1)[1].strip() if lines else None
        s = {"totals": line}
        if line:
            for d in ("push", "pull"):
                m = re.search(d + r": tensors=(\d+) raw_bytes=(\d+) wire_bytes=(\d+)", line)
                s[d] = {"tensors": int(m[1]), "raw_bytes": int(m[2]), "wire_bytes": int(m[3])}
                m = re.search(d + r": [^;]*\brefinements=(\d+)", line)  # newer tlcd only
                s[d]["refinements"] = int(m[1]) if m else 0
                for f in total[d]:
                    total[d][f] += s[d][f]
            for k in keys:
                s[k] = int(re.search(k + r"=(\d+)", line)[1])
                total[k] += s[k]
            for k in ("drift_resets", "passed_bytes"):  # newer tlcd only
                m = re.search(r"\b" + k + r"=(\d+)", line)
                s[k] = int(m[1]) if m else 0
                total[k] = total.get(k, 0) + s[k]

        try:
            metrics = open(f"{out}/sidecars/metrics-{name}.txt").read()
        except OSError:
            metrics = ""
        for side in ("holder", "requester"):
            m = re.search(r'^tlc_keyframes_total\{side="' + side + r'"\} (\d+)', metrics, re.M)
            s[f"keyframes_{side}"] = int(m[1]) if m else 0
            total[f"keyframes_{side}"] += s[f"keyframes_{side}"]
        sidecars[name] = s
        print(f"tlcd-{name}: {line or 'NO TOTALS LOGGED'}; keyframes holder={s['keyframes_holder']} "
              f"requester={s['keyframes_requester']}")
    for d in ("push", "pull"):
        t = total[d]
        t["ratio"] = round(t["raw_bytes"] / t["wire_bytes"], 2) if t["wire_bytes"] else None
    summary["sidecars"] = sidecars
    summary["sidecar_totals"] = total
    print(f"all sidecars: push {total['push']['raw_bytes']} -> {total['push']['wire_bytes']} B "
          f"({total['push']['ratio']}x, {total['push']['tensors']} tensors); "
          f"pull {total['pull']['raw_bytes']} -> {total['pull']['wire_bytes']} B "
          f"({total['pull']['ratio']}x, {total['pull']['tensors']} tensors); "
          f"decode_failures={total['decode_failures']} fallbacks={total['fallbacks']} "
          f"keyframes served={total['keyframes_holder']} applied={total['keyframes_requester']}")
json.dump(summary, open(f"{out}/summary.json", "w"), indent=2)
sys.exit(0 if summary["ok"] else 1)
EOF
