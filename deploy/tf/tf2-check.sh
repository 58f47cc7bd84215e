#!/usr/bin/env bash
# CI's TF2 case: a ParameterServerStrategy job (coordinator + 2 workers +
# 1 ps, asynchronous: each gradient applied on arrival) run without
# sidecars and through tlcd (run_tf2.sh), same seed and steps. Fails when,
# through tlcd:
#   - a sidecar reports a decode failure or a pull drift reset;
#   - test accuracy is more than MAX_LOSS points (default 10) below the run
#     without sidecars. A diverging job ends near 10% (80+ points lost),
#     which is what this catches. It is not a precision bound: TF2's
#     asynchronous runs differ by 1.7 points from run to run without tlcd,
#     and through tlcd (300 steps, 10 runs on 2026-11-24) they lost 0 to
#     4.7 points, 1.8 on average; README has the figures;
#   - pulls or pushes are less than MIN_RATIO (default 10) times smaller;
#   - after training, what the coordinator reads of a variable (v.numpy())
#     or writes of it into a checkpoint or a SavedModel (what Keras'
#     model.save exports) is not the variable on its ps, bit for bit
#     (train_tf2.py --check-final-read).
#
#   deploy/tf/tf2-check.sh [--steps N] [--out DIR] [--tlcd PATH] [-- train_tf2.py flags]
#
# Prints one line per run and a verdict; results in DIR/{none,tlcd}.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
steps=300 OUT="" extra=() tlcd=()
while (($#)); do
    case $1 in
        --steps) steps=${2:?}; shift 2 ;;
        --out) OUT=${2:?}; shift 2 ;;
        --tlcd) tlcd=(--tlcd "${2:?}"); shift 2 ;;
        --) shift; extra=("$@"); break ;;
        *) echo "tf2-check: unknown argument '$1'" >&2; exit 2 ;;
    esac
done
OUT=${OUT:-$(mktemp -d /tmp/tlc-tf2-check.XXXXXX)}
mkdir -p "$OUT"
chmod 0755 "$OUT"
for mode in none tlcd; do
    "$here/run_tf2.sh" --mode "$mode" --steps "$steps" --out "$OUT/$mode" "${tlcd[@]}" \
        -- --check-final-read "$OUT/$mode/checkpoint" "${extra[@]}" \
        > "$OUT/$mode.out" 2>&1 || { cat "$OUT/$mode.out" >&2; echo "tf2-check: the run '$mode' failed" >&2; exit 1; }
    grep -E '^(tf2-run|all sidecars)' "$OUT/$mode.out"
done
PY=${TLC_PYTHON:-python3}
"$PY" - "$OUT" "${MAX_LOSS:-10}" "${MIN_RATIO:-10}" <<'PYEOF'
import json, sys
out, max_loss, min_ratio = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
none = json.load(open(f"{out}/none/summary.json"))
tlcd = json.load(open(f"{out}/tlcd/summary.json"))
t = tlcd["sidecar_totals"]
delta = (tlcd["test_accuracy"] - none["test_accuracy"]) * 100
problems = []
if t["decode_failures"]:
    problems.append(f"{t['decode_failures']} decode failures")
if t.get("drift_resets"):
    problems.append(f"{t['drift_resets']} pull drift resets")
for mode in ("none", "tlcd"):
    read = json.load(open(f"{out}/{mode}/result.json"))["final_read"]
    if read["read_differs"] or read["saved_differs"] or read["exported_differs"]:
        problems.append(f"{mode}: after training {read['read_differs']} variables read, "
                        f"{read['saved_differs']} saved and {read['exported_differs']} exported "
                        f"other than the model ({', '.join(read['differing'])})")
if delta < -max_loss:
    problems.append(f"accuracy {-delta:.2f} points below the run without sidecars (at most {max_loss})")
for d in ("push", "pull"):
    if (t[d]["ratio"] or 0) < min_ratio:
        problems.append(f"{d} only {t[d]['ratio']}x smaller (at least {min_ratio}x)")
print(f"tf2-check: accuracy {none['test_accuracy']:.4f} without, {tlcd['test_accuracy']:.4f} through tlcd "
      f"({delta:+.2f} points); push {t['push']['ratio']}x, pull {t['pull']['ratio']}x; "
      f"refinements push {t['push'].get('refinements', 0)} pull {t['pull'].get('refinements', 0)}; "
      f"decode failures {t['decode_failures']}, drift resets {t.get('drift_resets', 0)}; "
      f"final read through tlcd: {read['read_differs']} of {read['variables']} variables differ, "
      f"{read['saved_differs']} in the checkpoint, {read['exported_differs']} in the SavedModel")
if problems:
    sys.exit("tf2-check: FAILED: " + "; ".join(problems))
PYEOF
