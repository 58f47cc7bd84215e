#!/usr/bin/env bash
# Launch 1 ps + 2 workers of train.py (counts adjustable) on one host, wait
# for them, collect their result JSONs and print a one-line summary.
#
#   deploy/tf/run_local.sh [options] [-- train.py flags...]
#
# Options (each also settable by the environment variable in brackets):
#   --host H            address every task listens on and is dialled at [HOST, 127.0.0.1]
#   --ps-port P         port of ps 0; ps j uses P+j [PS_PORT, 2222]
#   --worker-port P     port of worker 0; worker i uses P+i [WORKER_PORT,
#                       the port after the last ps: 2223]
#   --ps-tasks N        number of ps tasks [NUM_PS, 1]
#   --workers N         number of workers [NUM_WORKERS, 2]
#   --timeout S         kill everything after S seconds [TIMEOUT, 600]
#   --out DIR           results and logs [OUT, a new /tmp/tlc-tf.XXXXXX]
#   --peer VIEWER:PEER=HOST:PORT
#                       the address task VIEWER dials for task PEER, e.g.
#                       --peer worker0:ps=127.0.0.1:3000 (repeatable). The same as
#                       the environment variable <PEER>_ADDR_FOR_<VIEWER>, e.g.
#                       PS_ADDR_FOR_WORKER0=127.0.0.1:3000. Task names: ps0 (or
#                       ps), ps1, ..., worker0, worker1, ... A task's own entry
#                       is always its real listening address (TF binds the port
#                       of its own entry).
#
# The Python interpreter is $TLC_PYTHON, else /work/tfvenv/bin/python, else
# ./.venv-tf/bin/python (see setup-venv.sh).
#
# Exit status: 0 if every task exited 0, every worker ran at least one step
# and the chief reached the requested global step; 124 on timeout; 1 otherwise.
# (train.py --mode async: the workers share the global steps, so each runs
# about 1/n of them; a warning names a worker with less than half its share.)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
HOST=${HOST:-127.0.0.1}
PS_PORT=${PS_PORT:-2222}
WORKER_PORT=${WORKER_PORT:-}
NUM_PS=${NUM_PS:-1}
NUM_WORKERS=${NUM_WORKERS:-2}
TIMEOUT=${TIMEOUT:-600}
OUT=${OUT:-}

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit "${1:-0}"; }
die() { echo "run_local: $*" >&2; exit 1; }

# Upper-case variable name of a task: ps1 -> PS1, worker1 -> WORKER1; ps is
# ps0.
var_name() {
    case $1 in
        ps) printf PS0 ;;
        ps[0-9]* | worker[0-9]*) printf '%s' "${1^^}" ;;
        *) die "unknown task name '$1' (ps0, ps1, ..., worker0, worker1, ...)" ;;
    esac
}

train_args=()
peers=()
while (($#)); do
    case $1 in
        --host) HOST=$2; shift 2 ;;
        --ps-port) PS_PORT=$2; shift 2 ;;
        --worker-port) WORKER_PORT=$2; shift 2 ;;
        --ps-tasks) NUM_PS=$2; shift 2 ;;
        --workers) NUM_WORKERS=$2; shift 2 ;;
        --timeout) TIMEOUT=$2; shift 2 ;;
        --out) OUT=$2; shift 2 ;;
        --peer) peers+=("$2"); shift 2 ;;
        -h | --help) usage 0 ;;
        --) shift; train_args=("$@"); break ;;
        *) echo "run_local: unknown option '$1'" >&2; usage 2 >&2 ;;
    esac
done
[[ $NUM_WORKERS =~ ^[1-9][0-9]*$ ]] || die "--workers must be a positive integer"
[[ $NUM_PS =~ ^[1-9][0-9]*$ ]] || die "--ps-tasks must be a positive integer"
WORKER_PORT=${WORKER_PORT:-$((PS_PORT + NUM_PS))}

if [[ -n ${TLC_PYTHON:-} ]]; then
    PY=$TLC_PYTHON
elif [[ -x /work/tfvenv/bin/python ]]; then
    PY=/work/tfvenv/bin/python
elif [[ -x ./.venv-tf/bin/python ]]; then
    PY=./.venv-tf/bin/python
else
    die "no Python with TensorFlow: set TLC_PYTHON or run deploy/tf/setup-venv.sh"
fi

# The real listening address of every task, and the cluster spec as one task
# sees it: its own real entry, and its peers at <PEER>_ADDR_FOR_<VIEWER> if set.
tasks=()
declare -A real=()
for ((j = 0; j < NUM_PS; j++)); do
    tasks+=("ps$j")
    real[ps$j]="$HOST:$((PS_PORT + j))"
done
for ((i = 0; i < NUM_WORKERS; i++)); do
    tasks+=("worker$i")
    real[worker$i]="$HOST:$((WORKER_PORT + i))"
done
for p in "${peers[@]}"; do
    [[ $p =~ ^([a-z0-9]+):([a-z0-9]+)=(.+)$ ]] || die "--peer wants VIEWER:PEER=HOST:PORT, got '$p'"
    for t in "${BASH_REMATCH[1]}" "${BASH_REMATCH[2]}"; do
        [[ -n ${real[$t]:-} || $t == ps ]] || die "--peer $p: no task '$t' (ps0, ps1, ..., worker0, worker1, ...)"
    done
    printf -v "$(var_name "${BASH_REMATCH[2]}")_ADDR_FOR_$(var_name "${BASH_REMATCH[1]}")" '%s' "${BASH_REMATCH[3]}"
done
# Variable-name spellings of a task: PS0 may also be written PS.
names() { var_name "$1"; [[ $1 == ps || $1 == ps0 ]] && printf ' PS'; }
seen_by() { # VIEWER PEER
    local pn vn v
    if [[ $1 != "$2" ]]; then
        for pn in $(names "$2"); do
            for vn in $(names "$1"); do
                v=${pn}_ADDR_FOR_$vn
                [[ -n ${!v:-} ]] && { printf '%s' "${!v}"; return; }
            done
        done
    fi
    printf '%s' "${real[$2]}"
}

OUT=${OUT:-$(mktemp -d /tmp/tlc-tf.XXXXXX)}
mkdir -p "$OUT"
# Only what a previous run put there, so stale results are never read.
rm -f "$OUT"/{ps,worker}[0-9]*.{json,log} "$OUT"/{launch.log,summary.json}

declare -A pid=()
cleanup() {
    local t alive=()
    for t in "${!pid[@]}"; do
        kill -0 "${pid[$t]}" 2>/dev/null && alive+=("${pid[$t]}")
    done
    ((${#alive[@]})) || return 0
    kill "${alive[@]}" 2>/dev/null || true
    sleep 1
    kill -9 "${alive[@]}" 2>/dev/null || true
    wait "${alive[@]}" 2>/dev/null || true
}
trap cleanup EXIT
trap 'echo "run_local: interrupted" >&2; exit 130' INT TERM

started=$(date +%s.%N)
# All at once: TF retries its dials, and train.py has every worker wait for
# the others before the first step, but a late task still delays the run.
for t in "${tasks[@]}"; do
    ps_spec=
    for ((j = 0; j < NUM_PS; j++)); do
        ps_spec+="${ps_spec:+,}$(seen_by "$t" "ps$j")"
    done
    workers_spec=
    for ((i = 0; i < NUM_WORKERS; i++)); do
        workers_spec+="${workers_spec:+,}$(seen_by "$t" "worker$i")"
    done
    if [[ $t == ps* ]]; then job=ps task=${t#ps}; else job=worker task=${t#worker}; fi
    echo "run_local: $t: --ps $ps_spec --workers $workers_spec" >>"$OUT/launch.log"
    "$PY" -u "$here/train.py" --job "$job" --task "$task" --ps "$ps_spec" --workers "$workers_spec" \
        --result "$OUT/$t.json" "${train_args[@]}" >"$OUT/$t.log" 2>&1 &
    pid[$t]=$!
done

# Poll rather than `wait -n`, so the timeout is honoured and each task's exit
# status is known by name.
declare -A rc=()
status=ok
deadline=$(($(date +%s) + TIMEOUT))
while ((${#rc[@]} < ${#tasks[@]})); do
    for t in "${tasks[@]}"; do
        [[ -n ${rc[$t]:-} ]] && continue
        kill -0 "${pid[$t]}" 2>/dev/null && continue
        set +e; wait "${pid[$t]}"; rc[$t]=$?; set -e
        if ((rc[$t] != 0)); then
            echo "run_local: $t exited with status ${rc[$t]} (log: $OUT/$t.log)" >&2
            tail -n 5 "$OUT/$t.log" >&2
            status=failed
        fi
    done
    [[ $status == ok ]] || break
    if (($(date +%s) >= deadline)); then
        status=timeout
        break
    fi
    sleep 0.2
done
ended=$(date +%s.%N)
cleanup
if [[ $status == timeout ]]; then
    echo "run_local: timed out after ${TIMEOUT}s, killed all tasks (logs in $OUT)" >&2
    exit 124
fi
[[ $status == ok ]] || { echo "run_local: failed, killed the other tasks (logs in $OUT)" >&2; exit 1; }

# Check and summarise the results; also written to $OUT/summary.json.
"$PY" - "$OUT" "$NUM_WORKERS" "$started" "$ended" <<'EOF'
import json, sys
out, n = sys.argv[1], int(sys.argv[2])
wall = float(sys.argv[4]) - float(sys.argv[3])
try:
    workers = [json.load(open(f"{out}/worker{i}.json")) for i in range(n)]
except OSError as e:
    sys.exit(f"run_local: missing result: {e}")
chief = workers[0]
local = [w["local_steps"] for w in workers]
step_s = sum(w["seconds"] for w in workers) / sum(local) if sum(local) else None
# Older train.py results have neither key: the MLP, synchronous.
model, mode = chief.get("model", "mlp"), chief.get("mode", "sync")
summary = {
    "ok": True, "global_step": chief["global_step"], "local_steps": local,
    "step_seconds": round(step_s, 5) if step_s else None, "test_accuracy": chief.get("test_accuracy"),
    "test_loss": chief.get("test_loss"), "wall_seconds": round(wall, 2),
    "params": chief["params"], "out": out, "model": model, "mode": mode,
}
for key in ("final_read_max_diff", "restore_max_diff", "eval_read_max_diff", "eval_read_max_rel_l2"):
    if key in chief:
        summary[key] = chief[key]
problems = [f"worker{i} ran no steps" for i, s in enumerate(local) if s == 0]
# SyncReplicasOptimizer counts gradients, not workers: a worker that lags
# leaves its share of the steps to the others. Asynchronous workers share
# the global steps, about 1/n each. Worth knowing, not a failure.
share = chief["global_step"] / (n if mode == "async" else 1)
for i, s in enumerate(local):
    if 0 < s < share / 2:
        print(f"run_local: warning: worker{i} ran only {s} of {chief['global_step']} steps", file=sys.stderr)
# Short of the target means TF silently re-initialised the model (seen after
# a reset connection) and the "successful" run trained from scratch.
if chief["global_step"] < chief["target_steps"]:
    problems.append(f"chief ended at global step {chief['global_step']} of {chief['target_steps']}")
# A global step that went back to 0 is a model TF re-initialised mid-run
# (after a broken connection to the ps): the run trained partly from
# scratch. Back to a later step is a checkpoint restored: TF's recovery.
rewinds = []
for i, w in enumerate(workers):
    for high, low in w.get("global_step_regressions", []):
        if low == 0:
            problems.append(f"worker{i} saw the global step go back from {high} to {low}: "
                            "the model was re-initialised mid-run")
        else:
            rewinds.append(f"worker{i}: {high} -> {low}")
if rewinds:
    summary["checkpoint_restores"] = rewinds
    print("run_local: checkpoint restored (global step went back): " + ", ".join(rewinds), file=sys.stderr)
summary["sessions"] = [w.get("sessions", 1) for w in workers]
if problems:
    summary["ok"] = False
    summary["problems"] = problems
json.dump(summary, open(f"{out}/summary.json", "w"), indent=2)
print(f"tf-run {'ok' if not problems else 'FAILED: ' + '; '.join(problems)}: "
      f"steps={chief['global_step']} local_steps={'/'.join(map(str, local))} "
      f"step={step_s or 0:.4f}s acc={chief.get('test_accuracy')} loss={chief.get('test_loss')} "
      f"wall={wall:.1f}s out={out}"
      + ("" if summary["sessions"] == [1] * n else f" sessions={'/'.join(map(str, summary['sessions']))}")
      + ("" if (model, mode) == ("mlp", "sync") else f" model={model} mode={mode}")
      + ("" if "final_read_max_diff" not in summary else f" final_read_max_diff={summary['final_read_max_diff']:g}")
      + ("" if "restore_max_diff" not in summary else f" restore_max_diff={summary['restore_max_diff']:g}")
      + ("" if "eval_read_max_diff" not in summary else f" eval_read_max_diff={summary['eval_read_max_diff']:g}"
         f" eval_read_max_rel_l2={summary['eval_read_max_rel_l2']:g}"))
sys.exit(1 if problems else 0)
EOF
