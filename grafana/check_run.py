#!/usr/bin/env python3
"""Checks that every dashboard query returns sane data from a real run.

    check_run.py PROMETHEUS_URL --start T0 --end T1 [--step 5]
                 [--rate-interval 30s] [--pod POD] [--expect KEY=VALUE ...]
                 [--report FILE.json] DASHBOARD...

For every panel target of every dashboard, the Grafana variables are
replaced the way Grafana does for the dashboard opened with its defaults:
label_values() variables are resolved against the Prometheus at
PROMETHEUS_URL over [T0, T1] and take their saved selection, "All" (the
variable's allValue, e.g. ".*", which also matches series without the label,
such as namespace on the static targets of a local run). A dashboard with a
single-valued variable (tlc-pod's pod) is checked once per value found, or
only for --pod POD. $__range is the window (T1 - T0, in seconds),
$__interval the step, $__rate_interval --rate-interval (see
dashlib.DEFAULT_RATE_INTERVAL). Range targets are run with /api/v1/query_range over
[T0, T1] at --step seconds, instant targets (tables) with /api/v1/query at T1.

Every target must return at least one series with samples, except those
MAY_BE_EMPTY allows, and its values must pass the rules of what the panel
shows (RULES, chosen from the panel's unit, title and the metrics the
expression reads): compression ratios above 1, byte rates not negative, raw
not below wire, wire bytes per pod within the link, latency quantiles in
(0, 60] s, CPU within the cores, resident memory above 1 MiB, ...; NaN only
in a quotient or quantile (0/0 while idle: counted), never an infinity.
--expect sets what the run should have shown:
    min_ratio=X   the peak compression ratio of every ratio target is >= X
    link_mbit=M   wire bytes/s of one pod <= M * 125000 * 1.2
    sparsity=S    tlc_sparsity == S
    steps=N       the global step reaches N (and never goes back)
    pods=N        "Sidecars up" (sum and count of up) == N at the end
    whole_until=T the end the up rules judge (unix seconds): the last moment
                  every pod was meant to run; a pod whose job ended before
                  --end stops its sidecar between two scrapes
    cores=N       CPU <= N cores (default: this machine's)

Prints a table (panel, target, series, samples, values, verdict), then every
failure with its dashboard, panel and target; --report writes every target's
series (labels, legend, samples, min / max / last, NaN count) as JSON.
Exits 1 on any failure. Python 3 standard library only.

Example, on the run grafana/record_run.sh recorded:
    . /tmp/panels/run.env
    grafana/check_run.py "$PROM_URL" --start "$T0" --end "$T1" \\
        --expect pods=3 --expect sparsity=1.0 --expect min_ratio=10 \\
        grafana/dashboards/*.json
"""

import json
import math
import os
import re
import sys
from pathlib import Path

from dashlib import (Prometheus, builtins, legend, load, panels, resolve_variables, run_target,
                     single_value_variables, substitute, targets, window_parser)
from units import format_value

# Metrics a healthy run may never create: tlcd registers these series on
# their first event, so a query reading only them returns no series. A
# target is allowed to be empty only if every metric it reads is here. Each
# is a candidate for tlcd to export at 0 from the start instead, unless 0
# would be a false value. Every other family a dashboard reads tlcd exports
# from its start (the decode failures at 0 since this check found them
# missing); a target that selects label values a run may lack (the link_*
# pass-through reasons) ends in `or on() vector(0)` instead, where 0 is true.
MAY_BE_EMPTY: dict[str, str] = {
    # Metrics a healthy run may legitimately lack, with the reason.
    "tlc_link_rate_bytes_per_second": "a link's rate appears once tlcd has timed a burst of its answers "
                                      "(64 KiB and up); 0 b/s would read as a dead link",
}

MIB = 1024 * 1024
LINK_SLACK = 1.2          # framing, bursts within a scrape interval
CPU_SLACK = 1.1           # two scrapes' CPU readings are not taken exactly 5 s apart
EXPECT_KEYS = ("min_ratio", "link_mbit", "sparsity", "steps", "pods", "cores", "whole_until")


# -- the variable selections ---------------------------------------------

def selections(dashboard, prometheus, start, end, base, pod=None):
    """[(name, values)]: the variable values to check a dashboard with, one
    entry per value of its single-valued variables (tlc-pod: one per pod),
    or just the one --pod gives."""
    values, options = resolve_variables(dashboard, prometheus, start, end, base)
    single = [n for n in single_value_variables(dashboard) if n == "pod"]
    if not single:
        return [("", values)]
    picks = [pod] if pod else options.get("pod", [])
    return [(f"pod={p}", resolve_variables(dashboard, prometheus, start, end, base, {"pod": p})[0])
            for p in picks]


# -- the rules ------------------------------------------------------------

def metrics_of(expr):
    return set(re.findall(r"\b((?:tlc|process)_\w+|up)\s*[{\[(]", expr))


def unit_of(panel, target):
    """The unit of a target's values: the panel's, or a byName override
    matching the target's legend (the table's ratio column)."""
    for override in panel.get("fieldConfig", {}).get("overrides", []):
        matcher = override.get("matcher", {})
        if matcher.get("id") == "byName" and matcher.get("options") == target.get("legendFormat"):
            for prop in override.get("properties", []):
                if prop.get("id") == "unit":
                    return prop.get("value")
    return panel.get("fieldConfig", {}).get("defaults", {}).get("unit")


def rules_for(panel, target):
    """Names of the RULES a target's values must pass."""
    expr, unit = target["expr"], unit_of(panel, target)
    title, legend_format = panel.get("title", "").lower(), (target.get("legendFormat") or "").lower()
    names = ["finite", "not_negative"]
    if "ratio" in title and unit in (None, "none") or legend_format == "ratio":
        names.append("ratio")
    if unit in ("Bps", "binBps") and "wire_bytes_total" in expr and "raw_bytes_total" not in expr:
        names.append("link")
    if "histogram_quantile" in expr and unit == "s":
        names.append("latency")
    if "time()" in expr and unit == "s":
        names.append("since")
    if "process_cpu_seconds_total" in expr:
        names.append("cpu")
    if "process_resident_memory_bytes" in expr and unit in ("bytes", "decbytes"):
        names.append("memory")
    if unit == "percentunit":
        names.append("fraction")
    if "tlc_sparsity" in expr:
        names.append("sparsity")
    if re.search(r"\btlc_training_global_step\b", expr):
        names.append("global_step")
    if re.search(r"_info\s*\{", expr):
        names.append("info")
    if re.match(r"\s*(sum|count)\s*\(\s*up\s*\{", expr):
        names.append("up_total")
    elif re.match(r"\s*up\s*\{", expr):
        names.append("up_one")
    return names


def finite_values(series):
    return [v for _, v in series["values"] if math.isfinite(v)]


def rule_finite(series_list, target, expect, context):
    """NaN only where a quotient or quantile can be 0/0; never an infinity."""
    problems = []
    may_nan = "/" in target["expr"] or "histogram_quantile" in target["expr"]
    for s in series_list:
        nans = sum(math.isnan(v) for _, v in s["values"])
        infs = sum(math.isinf(v) for _, v in s["values"])
        if infs:
            problems.append(f"{s['legend']}: {infs} infinite values")
        if nans and not may_nan:
            problems.append(f"{s['legend']}: {nans} NaN values in a query that divides nothing")
    # A series may be NaN throughout (a histogram whose only events came
    # before the window, e.g. keyframes decoded at the start), the target not.
    if not any(finite_values(s) for s in series_list):
        problems.append("no finite value in any series")
    return problems


def bounded(context, series_list, low, high, what, low_open=False):
    """Problems of the finite values outside [low, high] ((low, high] if
    low_open), written in the target's unit."""
    problems = []
    for s in series_list:
        values = finite_values(s)
        if not values:
            continue
        lo, hi = min(values), max(values)
        if (lo <= low if low_open else lo < low) or hi > high:
            unit = context.get("unit")
            problems.append(f"{s['legend']}: {what}, got {format_value(lo, unit)} .. {format_value(hi, unit)}")
    return problems


def rule_not_negative(series_list, target, expect, context):
    return bounded(context, series_list, 0, math.inf, "must not be negative")


def rule_ratio(series_list, target, expect, context):
    problems = bounded(context, series_list, 1, math.inf, "a compression ratio must be above 1", low_open=True)
    want = expect.get("min_ratio")
    peaks = [max(finite_values(s)) for s in series_list if finite_values(s)]
    if want is not None and peaks and max(peaks) < want:
        problems.append(f"peak ratio {max(peaks):.2f} below the expected {want:g}")
    return problems


def rule_link(series_list, target, expect, context):
    """Wire bytes/s of one pod within --expect link_mbit (series of one pod
    only: a pod label, or a dashboard showing one pod)."""
    if expect.get("link_mbit") is None:
        return []
    limit = expect["link_mbit"] * 125000 * LINK_SLACK
    per_pod = [s for s in series_list if "pod" in s["labels"] or context.get("one_pod")]
    return bounded(context, per_pod, 0, limit, f"wire bytes/s of one pod above {format_value(limit, 'Bps')}")


def rule_latency(series_list, target, expect, context):
    return bounded(context, series_list, 0, 60, "a latency quantile must be in (0, 60] s", low_open=True)


def rule_since(series_list, target, expect, context):
    return bounded(context, series_list, 0, 60, "the global step must have advanced within 60 s while the job ran")


def rule_cpu(series_list, target, expect, context):
    cores = expect.get("cores") or os.cpu_count()
    return bounded(context, series_list, 0, cores * CPU_SLACK, f"CPU must be within {cores:g} cores")


def rule_memory(series_list, target, expect, context):
    return bounded(context, series_list, MIB, math.inf, "resident memory must be above 1 MiB", low_open=True)


def rule_fraction(series_list, target, expect, context):
    return bounded(context, series_list, 0, 1, "a fraction must be in [0, 1]")


def rule_sparsity(series_list, target, expect, context):
    want = expect.get("sparsity")
    if want is None:
        return bounded(context, series_list, 1, 2, "3LC sparsity must be in [1, 2)")
    return bounded(context, series_list, want - 1e-9, want + 1e-9, f"sparsity must be {want:g}")


def rule_global_step(series_list, target, expect, context):
    problems = []
    for s in series_list:
        values = finite_values(s)
        drops = sum(b < a for a, b in zip(values, values[1:]))
        if drops:
            problems.append(f"{s['legend']}: the global step went back {drops} times")
    want = expect.get("steps")
    reached = max((max(finite_values(s)) for s in series_list if finite_values(s)), default=None)
    if want is not None and reached is not None and reached < want:
        problems.append(f"the global step reached {reached:g}, not {want:g}")
    return problems


def rule_info(series_list, target, expect, context):
    return bounded(context, series_list, 1, 1, "an info metric is 1")


def last_value(series, until=None):
    """The last finite value, of the samples at or before `until` if given."""
    values = [v for t, v in series["values"] if math.isfinite(v) and (until is None or t <= until)]
    return values[-1] if values else None


def rule_up_total(series_list, target, expect, context):
    want = expect.get("pods")
    if want is None:
        return []
    want = 1 if context.get("one_pod") else want
    until = expect.get("whole_until")
    lasts = [(s, last_value(s, until)) for s in series_list]
    return [f"{s['legend']}: {last:g} at the end, expected {want:g}"
            for s, last in lasts if last is not None and last != want]


def rule_up_one(series_list, target, expect, context):
    until = expect.get("whole_until")
    lasts = [(s, last_value(s, until)) for s in series_list]
    return [f"{s['legend']}: up is {last:g} at the end"
            for s, last in lasts if last is not None and last != 1]


RULES = {name[len("rule_"):]: fn for name, fn in globals().items() if name.startswith("rule_")}


def raw_wire_pairs(panel):
    """(raw target, wire target) pairs of a panel: the same expression but
    for _raw_bytes_ against _wire_bytes_ (a topk() around the raw one aside)."""
    def core(expr):
        match = re.fullmatch(r"\s*topk\(\s*\d+\s*,\s*(.*)\)\s*", expr, re.S)
        return match.group(1) if match else expr
    found = []
    for raw in targets(panel):
        if "_wire_bytes_" in raw["expr"] or "_raw_bytes_" not in raw["expr"]:
            continue
        for wire in targets(panel):
            if core(wire["expr"]) == core(raw["expr"]).replace("_raw_bytes_", "_wire_bytes_"):
                found.append((raw, wire))
    return found


def raw_not_below_wire(raw_series, wire_series):
    """Problems where a wire series is above the raw series of the same labels."""
    raw_by_labels = {tuple(sorted(s["labels"].items())): dict(s["values"]) for s in raw_series}
    problems = []
    for s in wire_series:
        raw = raw_by_labels.get(tuple(sorted(s["labels"].items())))
        if raw is None:
            continue
        above = [t for t, v in s["values"] if t in raw and math.isfinite(v) and v > raw[t] * (1 + 1e-9) + 1e-9]
        if above:
            problems.append(f"{s['legend']}: wire above raw at {len(above)} samples")
    return problems


def may_be_empty(expr):
    """The MAY_BE_EMPTY reason if every metric expr reads is there, else None."""
    names = metrics_of(expr)
    bases = {re.sub(r"_(bucket|sum|count)$", "", n) for n in names}
    if bases and all(b in MAY_BE_EMPTY for b in bases):
        return "; ".join(sorted({MAY_BE_EMPTY[b] for b in bases}))
    return None


def check_target(panel, target, series_list, expect, context):
    """(verdict, problems, notes) of one target's series."""
    if not any(s["values"] for s in series_list):
        reason = may_be_empty(target["expr"])
        return ("empty (allowed)", [], [reason]) if reason else ("FAIL", ["no series with samples"], [])
    problems, context = [], {**context, "unit": unit_of(panel, target)}
    for name in rules_for(panel, target):
        problems += RULES[name](series_list, target, expect, context)
    nans = sum(math.isnan(v) for s in series_list for _, v in s["values"])
    notes = [f"{nans} NaN (0/0 while idle)"] if nans and not problems else []
    return ("FAIL" if problems else "ok"), problems, notes


# -- running a dashboard --------------------------------------------------

def summary(series_list):
    """Series and sample counts, and min / max / last over the finite values."""
    values = [v for s in series_list for v in finite_values(s)]
    lasts = [last_value(s) for s in series_list if last_value(s) is not None]
    return {"series": len(series_list), "samples": sum(len(s["values"]) for s in series_list),
            "min": min(values, default=None), "max": max(values, default=None),
            "last": max(lasts, default=None)}


def series_record(s):
    values = finite_values(s)
    return {"labels": s["labels"], "legend": s["legend"], "samples": len(s["values"]),
            "nan": sum(math.isnan(v) for _, v in s["values"]),
            "min": min(values, default=None), "max": max(values, default=None), "last": last_value(s)}


def check_panel(prometheus, panel, values, args, context):
    """One record per target of a panel (the raw / wire comparison included)."""
    records, by_ref = [], {}
    for target in targets(panel):
        expr = substitute(target["expr"], values)
        record = {"panel": panel.get("title"), "target": target.get("refId"), "expr": expr,
                  "unit": unit_of(panel, target)}
        try:
            series_list = run_target(prometheus, expr, target, args.start, args.end, args.step)
        except RuntimeError as error:
            record.update(verdict="FAIL", problems=[str(error)], notes=[], series_detail=[], **summary([]))
            records.append(record)
            continue
        for s in series_list:
            s["legend"] = legend(target, s["labels"])
        verdict, problems, notes = check_target(panel, target, series_list, args.expect, context)
        record.update(verdict=verdict, problems=problems, notes=notes, **summary(series_list),
                      series_detail=[series_record(s) for s in series_list])
        records.append(record)
        by_ref[target.get("refId")] = (record, series_list)
    for raw, wire in raw_wire_pairs(panel):
        if raw.get("refId") in by_ref and wire.get("refId") in by_ref:
            record, wire_series = by_ref[wire["refId"]]
            problems = raw_not_below_wire(by_ref[raw["refId"]][1], wire_series)
            if problems:
                record["problems"] += [f"against {raw['refId']}: {p}" for p in problems]
                record["verdict"] = "FAIL"
    return records


def check_dashboard(prometheus, path, args):
    dashboard = load(path)
    base = builtins(args.start, args.end, args.step, args.rate_interval)
    records = []
    for selection, values in selections(dashboard, prometheus, args.start, args.end, base, args.pod):
        context = {"one_pod": selection.startswith("pod=")}
        for panel in panels(dashboard):
            for record in check_panel(prometheus, panel, values, args, context):
                record.update(dashboard=Path(path).name, selection=selection)
                records.append(record)
    if not records:
        records.append({"dashboard": Path(path).name, "selection": "", "panel": "-", "target": "-",
                        "verdict": "FAIL", "problems": ["no variable selection (no pod found?)"],
                        "notes": [], **summary([])})
    return records


# -- output ---------------------------------------------------------------

def short(text, width):
    return text if len(text) <= width else text[: width - 1] + "…"


def print_table(records):
    header = f"{'dashboard':<20} {'panel':<44} {'ref':<3} {'series':>6} {'samples':>7}  {'min .. max (last)':<36} verdict"
    print(header)
    print("-" * len(header))
    for r in records:
        where = short(r["dashboard"].removesuffix(".json") + (f" [{r['selection']}]" if r["selection"] else ""), 20)
        span = "" if r["min"] is None else \
            f"{format_value(r['min'], r.get('unit'))} .. {format_value(r['max'], r.get('unit'))} ({format_value(r['last'], r.get('unit'))})"
        notes = f"  {'; '.join(r['notes'])}" if r["notes"] else ""
        print(f"{where:<20} {short(r['panel'], 44):<44} {r['target']:<3} {r['series']:>6} {r['samples']:>7}  "
              f"{short(span, 36):<36} {r['verdict']}{notes}")


def print_failures(records):
    failed = [r for r in records if r["verdict"] == "FAIL"]
    for r in failed:
        where = r["dashboard"] + (f" [{r['selection']}]" if r["selection"] else "")
        for problem in r["problems"]:
            print(f"FAIL {where} panel \"{r['panel']}\" {r['target']}: {problem}")
    ok = sum(r["verdict"] == "ok" for r in records)
    empty = sum(r["verdict"].startswith("empty") for r in records)
    print(f"{len(records)} targets: {ok} ok, {empty} empty (allowed), {len(failed)} failed")
    return not failed


def parse_expect(items):
    """{key: float} of KEY=VALUE items; raises ValueError on an unknown key."""
    expect = {}
    for item in items:
        key, _, value = item.partition("=")
        if key not in EXPECT_KEYS or not value:
            raise ValueError(f"--expect {item}: expected one of {', '.join(EXPECT_KEYS)} =VALUE")
        expect[key] = float(value)
    return expect


def parse_args(argv):
    parser = window_parser(__doc__.split("\n\n")[0], "check single-pod dashboards for this pod only")
    parser.add_argument("--expect", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--report", help="write every target's series summary here (JSON)")
    args = parser.parse_args(argv)
    try:
        args.expect = parse_expect(args.expect)
    except ValueError as error:
        parser.error(str(error))
    if args.end <= args.start:
        parser.error("--end must be after --start")
    return args


def main(argv):
    args = parse_args(argv)
    prometheus = Prometheus(args.url)
    records = []
    for path in args.dashboards:
        records += check_dashboard(prometheus, path, args)
    print_table(records)
    print()
    ok = print_failures(records)
    if args.report:
        Path(args.report).write_text(json.dumps({"start": args.start, "end": args.end, "step": args.step,
                                                 "rate_interval": args.rate_interval, "expect": args.expect,
                                                 "targets": records}, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
