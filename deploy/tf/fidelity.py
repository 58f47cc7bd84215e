#!/usr/bin/env python3
"""Fidelity: what tlc does to a model's accuracy, over the zoo, with error bars.

One synchronous run through tlcd differs from the run without it by a
changed trajectory as much as by compression: a single seed moves test
accuracy by 0.5-4 points either way. So a setting is judged by the pooled
mean of Δ (test accuracy through tlcd minus without, in points) over models
x seeds, with its 95% confidence interval, never by one model or one seed.

    fidelity.py run [--half tune|heldout|all] [--cases LIST] [--seeds 1,2,3]
                    [--steps N] [--eval-every E] [--config FILE] [--tlcd PATH]
                    [--out DIR] [--bases DIR] [--guard P] [-- train.py flags]
    fidelity.py report DIR              the tables and pictures of a run
    fidelity.py compare DIR_A DIR_B     B against A, pair by pair (same seeds)

run: every case (default: the zoo half, zoo.py cases) and seed goes through
deploy/tf/models.sh once: the run without sidecars and the run through tlcd,
the chief evaluating every E steps (test loss and accuracy, for the curves).
Synchronous runs without sidecars are deterministic, so each (case, steps,
seed, train.py flags) is run without sidecars once and kept under --bases
(default OUT/bases): a second setting run with the same --bases only runs
through tlcd. --guard P fails the run when a case loses more than P points
(models.sh --check --max-loss P: a diverged job, a decode failure).

report writes DIR/fidelity.md (and prints it): per model the mean Δ over
seeds with its 95% interval, the hop ratio (every TCP byte between tasks
without / through tlcd, from models.sh's kernel counters), time to accuracy
(the steps the run through tlcd needs to reach the accuracy the run without
it ends at; the seconds that takes on a 10 Mbit/s link, estimated from the
step's hop bytes in its busier direction, plus the loopback step time), and
the pooled mean over every (model, seed) pair; DIR/curves-MODEL.svg draws
test accuracy and loss per step, through tlcd against without, every seed.

compare pairs the runs of two settings seed by seed (the same bases) and
gives the pooled mean of ΔB - ΔA with its interval: a paired comparison,
which removes the seed's own luck from the difference.

Python 3 standard library only; the models.sh runs use $TLC_PYTHON's
TensorFlow.
"""

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import zoo  # noqa: E402

# Two-sided 95% quantiles of Student's t, by degrees of freedom.
T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
       11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131, 16: 2.120, 17: 2.110, 18: 2.101, 19: 2.093,
       20: 2.086, 25: 2.060, 30: 2.042, 40: 2.021, 60: 2.000, 120: 1.980}
LINK_BYTES_PER_SECOND = 10e6 / 8


def t95(df):
    """The 95% two-sided t quantile for df degrees of freedom (the nearest
    tabulated df at or below, which errs wide)."""
    return T95[max(k for k in T95 if k <= df)] if df < 1000 else 1.960


def interval(values):
    """(mean, half-width of the 95% interval, n); the half-width is None
    below two values."""
    n = len(values)
    if n == 0:
        return None, None, 0
    mean = statistics.fmean(values)
    if n < 2:
        return mean, None, n
    return mean, t95(n - 1) * statistics.stdev(values) / math.sqrt(n), n


def fmt_ci(values):
    mean, half, n = interval(values)
    if mean is None:
        return "-"
    if half is None:
        return f"{mean:+.2f} (n=1)"
    return f"{mean:+.2f} [{mean - half:+.2f}, {mean + half:+.2f}] (n={n})"


# ---- run ----


def run(a, train_args):
    out = os.path.abspath(a.out)
    bases = os.path.abspath(a.bases or os.path.join(out, "bases"))
    os.makedirs(out, exist_ok=True)
    cases = a.cases.split(",") if a.cases else zoo_cases(a.half)
    seeds = [int(s) for s in a.seeds.split(",")]
    flags = ["--eval-every", str(a.eval_every)] + train_args
    with open(os.path.join(out, "fidelity.json"), "w") as f:
        json.dump({"cases": cases, "seeds": seeds, "steps": a.steps, "config": a.config,
                   "train_args": flags}, f, indent=2)
    failed = []
    for case in cases:
        bare, _, at = case.partition("@")
        steps = int(at) if at else a.steps
        name = f"{bare}@{steps}"
        for seed in seeds:
            run_dir = os.path.join(out, "runs", name, f"seed{seed}")
            key = "_".join([name, f"seed{seed}"] + [x.lstrip("-") for x in flags]).replace("/", "_")
            base = os.path.join(bases, key)
            cmd = [os.path.join(HERE, "models.sh"), "--cases", bare, "--steps", str(steps),
                   "--out", run_dir]
            if os.path.exists(os.path.join(base, "meta.txt")):
                cmd += ["--base-from", base]
            if a.config:
                cmd += ["--config", os.path.abspath(a.config)]
            if a.tlcd:
                cmd += ["--tlcd", a.tlcd]
            if a.guard is not None:
                cmd += ["--check", "--max-loss", str(a.guard)]
            cmd += ["--", "--seed", str(seed)] + flags
            print(f"fidelity: {name} seed {seed}: {' '.join(cmd[1:])}", flush=True)
            rc = subprocess.call(cmd)
            if rc:
                failed.append(f"{name} seed {seed} (models.sh exit {rc}, {run_dir})")
            if not os.path.exists(os.path.join(base, "meta.txt")) and rc == 0:
                keep_base(run_dir, base, bare)
    print(report(out))
    for f in failed:
        print(f"fidelity: FAILED: {f}", file=sys.stderr)
    return 1 if failed else 0


def zoo_cases(half):
    return [m.case for m in zoo.MEMBERS if half in ("all", m.half)]


def keep_base(run_dir, base, case):
    """Keeps a run's pass without sidecars as models.sh --base-from wants it."""
    os.makedirs(os.path.join(base, case), exist_ok=True)
    shutil.copy(os.path.join(run_dir, "meta.txt"), base)
    shutil.copytree(os.path.join(run_dir, case, "base"), os.path.join(base, case, "base"), dirs_exist_ok=True)
    for f in ("base.out", "base.hop"):
        if os.path.exists(os.path.join(run_dir, case, f)):
            shutil.copy(os.path.join(run_dir, case, f), os.path.join(base, case))
    with open(os.path.join(run_dir, "runs.tsv")) as src, open(os.path.join(base, "runs.tsv"), "w") as dst:
        dst.writelines(line for line in src if line.split("\t")[1] == "base")


# ---- report ----


def load_pairs(out):
    """{(model, seed): pair} for every finished run under OUT/runs."""
    pairs = {}
    root = os.path.join(out, "runs")
    for name in sorted(os.listdir(root)) if os.path.isdir(root) else []:
        for seed_dir in sorted(os.listdir(os.path.join(root, name))):
            path = os.path.join(root, name, seed_dir)
            try:
                res = json.load(open(os.path.join(path, "results.json")))
            except (OSError, ValueError):
                continue
            for row in res["cases"]:
                chief = {k: chief_result(os.path.join(path, row["case"], k)) for k in ("base", "tlcd")}
                pairs[(name, int(seed_dir[4:]))] = {"row": row, "chief": chief}
    return pairs


def chief_result(path):
    try:
        return json.load(open(os.path.join(path, "worker0.json")))
    except (OSError, ValueError):
        return {}


def final_delta(pair):
    """Test accuracy through tlcd minus without at the end, points."""
    return pair["row"].get("accuracy_delta_points")


def tail_delta(pair):
    """The same over the last quarter of training: the mean of the chief's
    evaluations there (the end included), through tlcd minus without. One
    evaluation moves with the step it falls on (batch norm's moving
    statistics, a rate at the edge of stability); the mean of a few moves
    less, so it resolves smaller differences."""
    means = []
    for kind in ("base", "tlcd"):
        curve = pair["chief"][kind].get("curve", [])
        last = max((q["local_step"] for q in curve), default=0)
        tail = [q["test_accuracy"] for q in curve if q["local_step"] >= 0.75 * last]
        if not tail:
            return None
        means.append(statistics.fmean(tail))
    return round((means[1] - means[0]) * 100, 2)


def time_to_accuracy(pair):
    """(steps through tlcd, steps without) to reach the accuracy the run
    without tlcd ends at, from the chief's curves; None where not reached."""
    base, tlcd = pair["chief"]["base"], pair["chief"]["tlcd"]
    target = base.get("test_accuracy")
    if target is None:
        return None, None

    def first(curve):
        return next((p["local_step"] for p in curve if p["test_accuracy"] >= target), None)

    return first(tlcd.get("curve", [])), first(base.get("curve", []))


def direction_ratios(runs):
    """'push× / pull×' from tlcd's counters, summed over the runs."""
    sums = {k: sum(p["row"]["tlcd"].get(k) or 0 for _, p in runs)
            for k in ("push_raw", "push_wire", "pull_raw", "pull_wire")}
    return " / ".join(f"{sums[d + '_raw'] / sums[d + '_wire']:.0f}×" if sums[d + "_wire"] else "-"
                      for d in ("push", "pull"))


def norm_ratio(pair):
    """The median over the model's kernels and matrices of their L2 norm
    after training through tlcd / without (train.py's weight_norms). With
    batch norm a kernel's norm sets its effective step size (a larger norm,
    a smaller step), so a ratio above 1 is training slowed down."""
    base, tlcd = pair["chief"]["base"].get("weight_norms"), pair["chief"]["tlcd"].get("weight_norms")
    if not base or not tlcd:
        return None
    return statistics.median(tlcd[k] / base[k] for k in base if k in tlcd and base[k] > 0)


def link_seconds_per_step(pair, kind):
    """Estimated step time on a 10 Mbit/s link: the loopback step plus the
    step's hop bytes in its busier direction at 10 Mbit/s."""
    r = pair["row"][kind]
    hop, steps, step_s = r.get("hop"), r.get("global_step"), r.get("step_seconds")
    if not hop or not steps or step_s is None:
        return None
    busier = max(hop["request"]["payload"], hop["response"]["payload"])
    return step_s + busier / steps / LINK_BYTES_PER_SECOND


def report(out):
    pairs = load_pairs(out)
    models = sorted({m for m, _ in pairs}, key=lambda m: (half_of(m), m))
    lines = [f"# Fidelity: {out}", "",
             "Δ: test accuracy through tlcd minus without, points, per seed; mean with its 95% interval "
             "(Student's t). Hop ratio: TCP bytes between tasks without / through tlcd (kernel counters). "
             "Steps to accuracy: local steps until the run reaches the accuracy the run without tlcd ends at "
             "(through tlcd / without; '>' = not reached). Est. s @10 Mbit/s: those steps at the loopback step "
             "time plus the step's hop bytes (busier direction) at 10 Mbit/s: an estimate, not a pod run. "
             "Norm ratio: the median over kernels of their L2 norm after training, through tlcd / without, "
             "mean over seeds. Push / pull: tlcd's own ratios of the compressed tensors (gradients; model "
             "values and rows), over all seeds. Last-quarter Δ: the mean of the evaluations in the last quarter "
             "of training, through tlcd minus without (less noisy than the end alone).", "",
             "| model | half | Δ by seed | mean Δ [95% interval] | last-quarter Δ [95%] | hop ratio | "
             "accuracy without | push / pull | steps to accuracy (tlcd / without) | "
             "est. s @10 Mbit/s (tlcd / without) | norm ratio |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    by_half = {}
    for m in models:
        mine = sorted((s, p) for (mm, s), p in pairs.items() if mm == m)
        deltas = [d for d in (final_delta(p) for _, p in mine) if d is not None]
        tails = [d for d in (tail_delta(p) for _, p in mine) if d is not None]
        by_half.setdefault(half_of(m), {"final": [], "tail": []})
        by_half[half_of(m)]["final"].extend(deltas)
        by_half[half_of(m)]["tail"].extend(tails)
        ratios = [p["row"]["hop_ratio"] for _, p in mine if p["row"].get("hop_ratio")]
        accs = [p["chief"]["base"].get("test_accuracy") for _, p in mine]
        tta, secs = [], []
        for _, p in mine:
            t, b = time_to_accuracy(p)
            steps = p["chief"]["base"].get("local_steps")
            tta.append(f"{t if t is not None else '>' + str(steps)}/{b}")
            st, sb = link_seconds_per_step(p, "tlcd"), link_seconds_per_step(p, "base")
            if st and sb and b:
                secs.append(f"{(t or steps) * st:.0f}{'+' if t is None else ''}/{b * sb:.0f}")
        accs = [x for x in accs if x is not None]
        norms = [r for r in (norm_ratio(p) for _, p in mine) if r is not None]
        cells = [m, half_of(m), " / ".join(f"{d:+.2f}" for d in deltas), fmt_ci(deltas), fmt_ci(tails),
                 f"{min(ratios):.1f}–{max(ratios):.1f}×" if ratios else "-",
                 f"{statistics.fmean(accs):.2%}" if accs else "-", direction_ratios(mine), ", ".join(tta), ", ".join(secs) or "-",
                 f"{statistics.fmean(norms):.3f}" if norms else "-"]
        lines.append("| " + " | ".join(cells) + " |")
        draw(out, m, mine)
    lines += ["", "| pooled over (model, seed) | Δ mean [95% interval] | below 0 / above 0 | "
              "last-quarter Δ mean [95%] |", "|---|---|---|---|"]
    if len(by_half) > 1:
        by_half["all"] = {k: [d for h in list(by_half.values()) for d in h[k]] for k in ("final", "tail")}
    for half, d in by_half.items():
        final = d["final"]
        lines.append(f"| {half} | {fmt_ci(final)} | {sum(x < 0 for x in final)} / {sum(x > 0 for x in final)} | "
                     f"{fmt_ci(d['tail'])} |")
    text = "\n".join(lines) + "\n"
    with open(os.path.join(out, "fidelity.md"), "w") as f:
        f.write(text)
    return text


def half_of(model):
    name = model.split("@")[0]
    m = zoo.BY_NAME.get(name.split("-")[0])
    return m.half if m else "harness"


def compare(a, b):
    pa, pb = load_pairs(a), load_pairs(b)
    common = sorted(set(pa) & set(pb))
    lines = [f"# {b} against {a}: ΔB − ΔA, points, paired by (model, seed)", "",
             "| model | ΔA by seed | ΔB by seed | ΔB − ΔA mean [95%] | hop ratio A / B |", "|---|---|---|---|---|"]
    diffs, tails = {}, {}
    for m in sorted({m for m, _ in common}):
        keys = [k for k in common if k[0] == m]
        da = [final_delta(pa[k]) for k in keys]
        db = [final_delta(pb[k]) for k in keys]
        d = [y - x for x, y in zip(da, db) if x is not None and y is not None]
        diffs.setdefault(half_of(m), []).extend(d)
        t = [y - x for x, y in zip((tail_delta(pa[k]) for k in keys), (tail_delta(pb[k]) for k in keys))
             if x is not None and y is not None]
        tails.setdefault(half_of(m), []).extend(t)
        ra = [pa[k]["row"].get("hop_ratio") or 0 for k in keys]
        rb = [pb[k]["row"].get("hop_ratio") or 0 for k in keys]
        lines.append(f"| {m} | {' / '.join(f'{x:+.2f}' for x in da if x is not None)} | "
                     f"{' / '.join(f'{y:+.2f}' for y in db if y is not None)} | {fmt_ci(d)} | "
                     f"{statistics.fmean(ra):.1f}× / {statistics.fmean(rb):.1f}× |")
    lines += ["", "| pooled | ΔB − ΔA mean [95%] | the same, last quarter |", "|---|---|---|"]
    for half, d in sorted(diffs.items()):
        lines.append(f"| {half} | {fmt_ci(d)} | {fmt_ci(tails[half])} |")
    lines.append(f"| all | {fmt_ci([x for d in diffs.values() for x in d])} | "
                 f"{fmt_ci([x for d in tails.values() for x in d])} |")
    return "\n".join(lines) + "\n"


# ---- pictures ----


def draw(out, model, runs):
    """DIR/curves-MODEL.svg: test accuracy and loss per local step, every
    seed through tlcd (red) and without (grey), the seeds' mean bold."""
    panels = []
    for key, label in (("test_accuracy", "test accuracy"), ("test_loss", "test loss")):
        series = {"base": [], "tlcd": []}
        for _, p in runs:
            for kind in series:
                curve = [(q["local_step"], q[key]) for q in p["chief"][kind].get("curve", []) if q.get(key) is not None]
                if curve:
                    series[kind].append(curve)
        panels.append((label, series))
    if not any(s for _, series in panels for s in series.values()):
        return
    width, height, pad = 360, 240, 40
    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{2 * width}" height="{height + 30}" '
           f'font-family="sans-serif" font-size="11">',
           f'<text x="10" y="16" font-size="13">{model}: through tlcd (red) and without (grey), '
           f'{len(runs)} seed(s), mean bold</text>']
    for i, (label, series) in enumerate(panels):
        points = [pt for s in series.values() for c in s for pt in c]
        if not points:
            continue
        x0, x1 = 0, max(x for x, _ in points)
        y0, y1 = min(y for _, y in points), max(y for _, y in points)
        y1 = y1 if y1 > y0 else y0 + 1

        def sx(x):
            return i * width + pad + (x - x0) / (x1 - x0 or 1) * (width - 2 * pad)

        def sy(y):
            return 30 + (height - pad) - (y - y0) / (y1 - y0) * (height - 2 * pad)

        ox = i * width + pad
        svg.append(f'<rect x="{ox}" y="{30 + pad}" width="{width - 2 * pad}" height="{height - 2 * pad}" '
                   f'fill="none" stroke="#999"/>')
        svg.append(f'<text x="{ox}" y="{30 + pad - 6}">{label}</text>')
        for v in (y0, (y0 + y1) / 2, y1):
            svg.append(f'<text x="{ox - 4}" y="{sy(v) + 4:.1f}" text-anchor="end">{v:.3g}</text>')
        svg.append(f'<text x="{ox + width - 2 * pad}" y="{30 + height - pad + 14}" text-anchor="end">'
                   f'step {x1}</text>')
        for kind, colour in (("base", "#777"), ("tlcd", "#d22")):
            for c in series[kind]:
                svg.append(polyline(c, sx, sy, colour, 0.8, 0.5))
            mean = mean_curve(series[kind])
            if mean:
                svg.append(polyline(mean, sx, sy, colour, 2.2, 1.0))
    svg.append("</svg>")
    with open(os.path.join(out, f"curves-{model.replace('@', '-')}.svg"), "w") as f:
        f.write("\n".join(svg) + "\n")


def polyline(curve, sx, sy, colour, width, opacity):
    pts = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in curve)
    return (f'<polyline points="{pts}" fill="none" stroke="{colour}" stroke-width="{width}" '
            f'stroke-opacity="{opacity}"/>')


def mean_curve(curves):
    """The pointwise mean over the steps every curve has."""
    if not curves:
        return []
    steps = sorted(set.intersection(*(set(x for x, _ in c) for c in curves)))
    values = [dict(c) for c in curves]
    return [(s, statistics.fmean(v[s] for v in values)) for s in steps]


def main(argv):
    train_args = []
    if "--" in argv:
        i = argv.index("--")
        argv, train_args = argv[:i], argv[i + 1:]
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    sub = p.add_subparsers(dest="what", required=True)
    r = sub.add_parser("run")
    r.add_argument("--half", choices=[zoo.TUNE, zoo.HELDOUT, "all"], default=zoo.TUNE)
    r.add_argument("--cases", help="models.sh cases (CASE[@STEPS],...) instead of the zoo half")
    r.add_argument("--seeds", default="1,2,3")
    r.add_argument("--steps", type=int, default=300)
    r.add_argument("--eval-every", type=int, default=25)
    r.add_argument("--config")
    r.add_argument("--tlcd")
    r.add_argument("--out", required=True)
    r.add_argument("--bases")
    r.add_argument("--guard", type=float)
    rep = sub.add_parser("report")
    rep.add_argument("dir")
    c = sub.add_parser("compare")
    c.add_argument("a")
    c.add_argument("b")
    a = p.parse_args(argv)
    if a.what == "run":
        return run(a, train_args)
    if a.what == "report":
        print(report(os.path.abspath(a.dir)))
        return 0
    print(compare(os.path.abspath(a.a), os.path.abspath(a.b)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
