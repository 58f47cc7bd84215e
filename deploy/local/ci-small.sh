#!/usr/bin/env bash
# The small version of deploy/local/compare that CI runs: the real
# TensorFlow job in network-namespace pods over a rate-limited link, once
# without sidecars and once through tlcd in transparent mode (iptables, 3LC
# s = 1.0), same seed and steps. Fails when either run does not finish
# (both workers must run every step), when accuracy through tlcd is more
# than 1 point below the run without, or when the bytes the pods' links
# carried (kernel counters, all pods) are not at least 10x fewer.
#
#   deploy/local/ci-small.sh [--rate MBIT] [--steps N] [--hidden H] [--out DIR]
#
# Defaults: 10 Mbit/s, 300 steps, hidden width 256 (a 50,826-parameter MLP
# whose two large layers are above tlcd's 64 KiB threshold; the full
# 596,490-parameter model needs ~8 s per step at 10 Mbit/s without tlc,
# too long for CI). Needs root, TLC_PYTHON (or the venvs run.sh looks for)
# and target/release/tlcd.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
rate=10; steps=300; hidden=256; OUT=""
while (($#)); do
    case $1 in
        --rate) rate=${2:?}; shift 2 ;;
        --steps) steps=${2:?}; shift 2 ;;
        --hidden) hidden=${2:?}; shift 2 ;;
        --out) OUT=${2:?}; shift 2 ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) echo "ci-small: unknown argument '$1'" >&2; exit 2 ;;
    esac
done
OUT=${OUT:-$(mktemp -d /tmp/tlc-ci-small.XXXXXX)}
mkdir -p "$OUT"
# tlcd runs as its own UID (run.sh --uid) and must reach its config under
# here; mktemp makes the directory 0700.
chmod 755 "$OUT"

for mode in none tlcd; do
    echo "ci-small: $steps steps at $rate Mbit/s, mode $mode"
    if ! "$here/run.sh" --mode "$mode" --rate "$rate" --steps "$steps" --timeout 1200 \
        --out "$OUT/$mode" -- --hidden "$hidden" >"$OUT/$mode.out" 2>&1; then
        tail -n 20 "$OUT/$mode.out" >&2
        echo "ci-small: FAILED: the run with mode $mode did not finish (logs in $OUT/$mode)" >&2
        exit 1
    fi
    tail -n 1 "$OUT/$mode.out"
done

python3 - "$OUT" <<'PY'
import json, sys
out = sys.argv[1]
base = json.load(open(f"{out}/none/summary.json"))
tlc = json.load(open(f"{out}/tlcd/summary.json"))
problems = []
for name, s in (("none", base), ("tlcd", tlc)):
    if not s.get("ok"):
        problems.append(f"{name}: {s.get('problems')}")
    if any(n != s["steps"] for n in s.get("local_steps", [])) and s.get("global_step", 0) < s["steps"]:
        problems.append(f"{name}: workers ran {s.get('local_steps')} of {s['steps']} steps")
drop = (base["test_accuracy"] - tlc["test_accuracy"]) * 100
wire = base["kernel_tx_total_bytes"] / max(1, tlc["kernel_tx_total_bytes"])
speedup = base["step_seconds"] / tlc["step_seconds"] if tlc["step_seconds"] else 0.0
print(f"ci-small: accuracy {base['test_accuracy']:.4f} without, {tlc['test_accuracy']:.4f} through tlcd "
      f"({-drop:+.2f} points); step {base['step_seconds']:.3f} s vs {tlc['step_seconds']:.3f} s ({speedup:.1f}x); "
      f"kernel bytes sent {base['kernel_tx_total_bytes']/1e6:.1f} MB vs {tlc['kernel_tx_total_bytes']/1e6:.1f} MB ({wire:.1f}x fewer)")
if drop > 1.0:
    problems.append(f"accuracy {drop:.2f} points below the run without sidecars")
if wire < 10:
    problems.append(f"wire bytes only {wire:.1f}x fewer (< 10x)")
if problems:
    sys.exit("ci-small: FAILED: " + "; ".join(problems))
print("ci-small: ok")
PY
