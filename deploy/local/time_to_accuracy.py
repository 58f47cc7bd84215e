#!/usr/bin/env python3
"""Time to accuracy: how long each run's training took to reach the accuracy
the reference run (without tlc) reached at its last step.

    deploy/local/time_to_accuracy.py REFERENCE_DIR RUN_DIR [RUN_DIR...]

Each DIR is a `deploy/local/run.sh --out DIR` whose chief ran train.py with
`--eval-every N`: worker0.json then holds a `curve` of (local step, training
seconds, test accuracy), the clock stopped while the chief evaluated. The
target is the reference's final accuracy; a run reaches it at the first
evaluation at or above it. Prints one line per directory and, as the last
line, a JSON summary."""

import json
import sys


def load(out):
    with open(f"{out}/worker0.json") as f:
        result = json.load(f)
    curve = result.get("curve")
    if not curve:
        sys.exit(f"{out}/worker0.json has no curve: run train.py with --eval-every N")
    return result, curve


def reached(curve, target):
    """The first evaluation at or above `target`, or None."""
    return next((p for p in curve if p["test_accuracy"] >= target), None)


def main(argv):
    if len(argv) < 3:
        sys.exit(__doc__)
    runs = [(out, *load(out)) for out in argv[1:]]
    ref_curve = runs[0][2]
    target = ref_curve[-1]["test_accuracy"]
    ref_point = reached(ref_curve, target)
    rows = []
    for out, result, curve in runs:
        point = reached(curve, target)
        row = {
            "dir": out,
            "steps": result["local_steps"],
            "step_seconds": result["step_seconds"],
            "final_accuracy": curve[-1]["test_accuracy"],
            "reached_at_step": point and point["local_step"],
            "seconds_to_target": point and point["train_seconds"],
        }
        if point and ref_point:
            row["faster"] = round(ref_point["train_seconds"] / point["train_seconds"], 2)
        rows.append(row)
        got = (f"reached at step {point['local_step']} after {point['train_seconds']:.1f} s"
               if point else f"not reached in {result['local_steps']} steps")
        print(f"{out}: {result['local_steps']} steps of {result['step_seconds']:.3f} s, final "
              f"{curve[-1]['test_accuracy']:.4f}; target {target:.4f} {got}"
              + (f" ({row['faster']}x the reference)" if "faster" in row else ""))
    print(json.dumps({"target": target, "runs": rows}))


if __name__ == "__main__":
    main(sys.argv)
