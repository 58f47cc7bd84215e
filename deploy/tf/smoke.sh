#!/usr/bin/env bash
# The real-TensorFlow check CI runs: the unmodified training job (1 ps, 2
# workers, 596k parameters) without sidecars and through one tlcd per task
# (explicit mode, 3LC s = 1.0, loopback), same seed and steps. Fails if
# either run fails, a worker did not run every step, the accuracy through
# tlcd is more than 1 point below the run without, the sidecars report a
# decode failure, or tensor bytes on the sidecar hop are not at least 20x
# smaller than the tensors.
#
#   deploy/tf/smoke.sh [--steps N]      (default 600)
#
# Needs tlcd built (cargo build --release -p tlc-daemon) and a TF venv
# (deploy/tf/setup-venv.sh; the interpreter from $TLC_PYTHON).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
steps=600
while (($#)); do
    case $1 in
        --steps) steps=$2; shift 2 ;;
        *) echo "smoke: unknown argument '$1'" >&2; exit 2 ;;
    esac
done
out=$(mktemp -d /tmp/tlc-smoke.XXXXXX)

echo "smoke: $steps steps without sidecars"
PS_PORT=2322 WORKER_PORT=2323 "$here/run_local.sh" --out "$out/base" -- --steps "$steps"
echo "smoke: $steps steps through tlcd (3LC, s = 1.0)"
"$here/run_with_tlcd.sh" --out "$out/tlc" -- --steps "$steps"

python3 - "$out" <<'PY'
import json, re, sys
out = sys.argv[1]
base = json.load(open(f"{out}/base/summary.json"))
tlc = json.load(open(f"{out}/tlc/summary.json"))
raw = wire = failures = 0
for name in ("ps", "w0", "w1"):
    log = open(f"{out}/tlc/sidecars/tlcd-{name}.log", errors="replace").read()
    totals = [l for l in log.splitlines() if "sidecar totals" in l]
    if not totals:
        sys.exit(f"smoke: tlcd-{name} logged no totals")
    line = totals[-1]
    for direction in ("push", "pull"):
        m = re.search(direction + r": tensors=\d+ raw_bytes=(\d+) wire_bytes=(\d+)", line)
        raw += int(m.group(1)); wire += int(m.group(2))
    failures += int(re.search(r"decode_failures=(\d+)", line).group(1))
ratio = raw / wire if wire else 0.0
drop = (base["test_accuracy"] - tlc["test_accuracy"]) * 100
print(f"smoke: accuracy {base['test_accuracy']:.4f} without, {tlc['test_accuracy']:.4f} through tlcd "
      f"({-drop:+.2f} points); step {base['step_seconds']*1000:.1f} ms vs {tlc['step_seconds']*1000:.1f} ms; "
      f"tensor bytes {raw} -> {wire} on the sidecar hop ({ratio:.1f}x); decode failures {failures}")
problems = []
if drop > 1.0: problems.append(f"accuracy {drop:.2f} points below the run without sidecars")
if ratio < 20: problems.append(f"compression {ratio:.1f}x < 20x")
if failures: problems.append(f"{failures} decode failures")
if problems:
    sys.exit("smoke: FAILED: " + "; ".join(problems))
print("smoke: ok")
PY
