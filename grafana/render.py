#!/usr/bin/env python3
"""Draws each dashboard as Grafana would show it, every panel from its own
queries' data, into one PNG per dashboard. There is no Grafana here: this
is the picture of the dashboards in the README.

    render.py PROMETHEUS_URL --start T0 --end T1 --out DIR
              [--step 5] [--rate-interval 30s] [--pod POD] [--width 1600]
              DASHBOARD...

The variables are resolved as check_run.py does (Grafana's defaults: All
where the dashboard saves All); a dashboard showing one pod (tlc-pod) is
drawn for --pod, else for the first pod Prometheus has. Panels are laid
out by gridPos (24 columns, rows of 30 px plus 8 px gaps) in Grafana's dark
theme: time series as lines with the legend table below (legendFormat,
mean / max / last), stat panels as their reduced value (colored by the
panel's thresholds, Grafana's default green / red at 80 if it sets none),
tables with their merge / organize / sortBy transformations. A header
strip gives the variable values and the time range. Writes DIR/<uid>.png.

Needs matplotlib (not in CI): python3 -m venv .tools/plot &&
.tools/plot/bin/pip install matplotlib, then
    .tools/plot/bin/python grafana/render.py "$PROM_URL" --start "$T0" --end "$T1" \\
        --out grafana/screenshots grafana/dashboards/*.json
"""

import io
import math
import sys
import time
from pathlib import Path

from dashlib import (Prometheus, builtins, legend, load, panels, resolve_variables, run_target,
                     substitute, targets, window_parser)
from units import format_value

try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyBboxPatch, Rectangle
    from matplotlib.ticker import FuncFormatter
    from PIL import Image  # a dependency of matplotlib
except ImportError:
    sys.exit("render.py needs matplotlib: python3 -m venv .tools/plot && .tools/plot/bin/pip install matplotlib,\n"
             "then run it with .tools/plot/bin/python grafana/render.py ...")

# Grafana 10's dark theme.
CANVAS, PANEL, BORDER = "#111217", "#181b1f", "#2a2d33"
TEXT, DIM, GRID = "#ccccdc", "#8e8e9a", "#2c3036"
PALETTE = ["#7EB26D", "#EAB839", "#6ED0E0", "#EF843C", "#E24D42", "#1F78C1", "#BA43A9", "#705DA0",
           "#508642", "#CCA300", "#447EBC", "#C15C17", "#890F02", "#0A437C", "#6D1F62", "#584477"]
NAMED = {"green": "#73BF69", "red": "#F2495C", "yellow": "#FADE2A", "orange": "#FF9830",
         "blue": "#5794F2", "purple": "#B877D9", "text": TEXT}
DEFAULT_THRESHOLDS = [{"color": "green", "value": None}, {"color": "red", "value": 80}]

ROW_PX, GAP_PX, PAD_PX, HEADER_PX, DPI = 30, 8, 8, 58, 100
TITLE_PX, LEGEND_ROW_PX = 26, 14
FONT = {"title": 9.5, "tick": 7.5, "legend": 7.5, "header": 11}


# -- data -----------------------------------------------------------------

def fetch_panel(prometheus, panel, values, args):
    """[(target, [series])] of a panel, each series with its legend name."""
    found = []
    for target in targets(panel):
        try:
            series_list = run_target(prometheus, substitute(target["expr"], values), target,
                                     args.start, args.end, args.step)
        except RuntimeError as error:
            print(f"render: panel \"{panel.get('title')}\" {target.get('refId')}: {error}", file=sys.stderr)
            series_list = []
        for s in series_list:
            s["legend"] = legend(target, s["labels"])
        found.append((target, series_list))
    return found


def finite(values):
    return [v for v in values if v is not None and math.isfinite(v)]


def reduce_values(values, calc):
    """Grafana's reducers the dashboards use; NaN counts as null."""
    values = finite(values)
    if not values:
        return None
    return {"lastNotNull": values[-1], "last": values[-1], "mean": sum(values) / len(values),
            "max": max(values), "min": min(values), "sum": sum(values), "first": values[0],
            "firstNotNull": values[0]}.get(calc, values[-1])


def threshold_color(fieldconfig, value):
    steps = (fieldconfig.get("defaults", {}).get("thresholds") or {}).get("steps") or DEFAULT_THRESHOLDS
    color = steps[0]["color"]
    for step in steps[1:]:
        if value is not None and step.get("value") is not None and value >= step["value"]:
            color = step["color"]
    return NAMED.get(color, color)


# -- layout ---------------------------------------------------------------

class Layout:
    """Pixel boxes of gridPos cells, and their conversion to figure fractions."""

    def __init__(self, width, grid_rows):
        self.width = width
        self.col = (width - 2 * PAD_PX + GAP_PX) / 24
        self.height = HEADER_PX + PAD_PX + grid_rows * (ROW_PX + GAP_PX) + PAD_PX

    def box(self, pos):
        """(x, y, w, h) in pixels from the top-left of the figure."""
        x = PAD_PX + pos["x"] * self.col
        y = HEADER_PX + PAD_PX + pos["y"] * (ROW_PX + GAP_PX)
        return x, y, pos["w"] * self.col - GAP_PX, pos["h"] * (ROW_PX + GAP_PX) - GAP_PX

    def frac(self, x, y, w, h):
        """The figure-fraction rectangle (left, bottom, width, height) of a pixel box."""
        return x / self.width, 1 - (y + h) / self.height, w / self.width, h / self.height

    def point(self, x, y):
        return x / self.width, 1 - y / self.height


def panel_frame(fig, layout, panel):
    """The panel's background and title; returns its pixel box."""
    x, y, w, h = layout.box(panel["gridPos"])
    left, bottom, fw, fh = layout.frac(x, y, w, h)
    fig.patches.append(FancyBboxPatch((left, bottom), fw, fh, boxstyle="round,pad=0,rounding_size=0.002",
                                      transform=fig.transFigure, facecolor=PANEL, edgecolor=BORDER, lw=0.8,
                                      zorder=-2))
    fig.text(*layout.point(x + 8, y + TITLE_PX / 2), panel.get("title", ""), color=TEXT,
             fontsize=FONT["title"], fontweight="bold", va="center", ha="left")
    return x, y, w, h


def no_data(fig, layout, x, y, w, h):
    fig.text(*layout.point(x + w / 2, y + (h + TITLE_PX) / 2), "No data", color=DIM,
             fontsize=FONT["title"] + 2, ha="center", va="center")


# -- time series ----------------------------------------------------------

def time_ticks(start, end, width_px):
    """Tick positions on whole clock steps, about one per 90 px."""
    span = end - start
    for step in (5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 21600):
        if span / step <= max(2, width_px / 90):
            break
    first = math.ceil(start / step) * step
    return [t for t in range(int(first), int(end) + 1, step)], step


def value_ticks(low, high, unit, count=4):
    """About count ticks, 1, 2, 2.5 or 5 times a power of ten apart in the
    unit's own scale: MiB for Grafana's bytes (IEC), MB/s for Bps (SI)."""
    base = 1024 if unit in ("bytes", "binBps") else 1000 if unit in ("Bps", "decbytes", "bps") else 10
    scale = base ** max(0, math.floor(math.log(max(abs(high), 1e-12), base))) if base != 10 else 1
    raw_step = (high - low) / scale / count
    if raw_step <= 0:
        return [low]
    magnitude = 10 ** math.floor(math.log10(raw_step))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw_step) * scale
    first = math.ceil(low / step) * step
    return [first + i * step for i in range(int((high - first) / step + 1e-9) + 1)]


def tick_label(value, unit):
    """An axis label: the unit's format without trailing zeros (50 MB/s, 1.5 s)."""
    number, sep, rest = format_value(value, unit).partition(" ")
    percent = number.endswith("%")
    digits = number.rstrip("%")
    if "." in digits:
        digits = digits.rstrip("0").rstrip(".")
    return digits + ("%" if percent else "") + sep + rest


def legend_rows(series, calcs):
    """[(color, name, [calc values])] of every series with its legend calcs."""
    rows = []
    for color, s in series:
        values = [v for _, v in s["values"]]
        rows.append((color, s["legend"], [reduce_values(values, c) for c in calcs]))
    return rows


def draw_legend(fig, layout, box, rows, calcs, unit):
    """Grafana's table legend below the graph; rows that do not fit are counted."""
    x, y, w, h = box
    names = {"mean": "Mean", "max": "Max", "lastNotNull": "Last *", "last": "Last", "min": "Min"}
    col_w = 62
    point = layout.point
    for i, calc in enumerate(calcs):
        cx = x + w - 8 - (len(calcs) - 1 - i) * col_w
        fig.text(*point(cx, y + LEGEND_ROW_PX / 2), names.get(calc, calc), color="#6e9fff",
                 fontsize=FONT["legend"], ha="right", va="center")
    fit = int(h // LEGEND_ROW_PX) - 1
    shown = rows if len(rows) <= fit else rows[: max(fit - 1, 0)]
    name_w = w - 16 - len(calcs) * col_w
    for i, (color, name, values) in enumerate(shown):
        ry = y + (i + 1.5) * LEGEND_ROW_PX
        fig.patches.append(Rectangle(layout.point(x + 8, ry + 1), 12 / layout.width, 3 / layout.height,
                                     transform=fig.transFigure, color=color))
        label = name if len(name) * 5.6 < name_w - 20 else name[: max(int((name_w - 20) / 5.6) - 1, 4)] + "…"
        fig.text(*point(x + 24, ry), label, color=TEXT, fontsize=FONT["legend"], va="center")
        for j, value in enumerate(values):
            cx = x + w - 8 - (len(values) - 1 - j) * col_w
            fig.text(*point(cx, ry), format_value(value, unit), color=TEXT, fontsize=FONT["legend"],
                     ha="right", va="center")
    if len(shown) < len(rows):
        fig.text(*point(x + 24, y + (len(shown) + 1.5) * LEGEND_ROW_PX), f"+ {len(rows) - len(shown)} more series",
                 color=DIM, fontsize=FONT["legend"], va="center")


def draw_timeseries(fig, layout, panel, data, args):
    x, y, w, h = panel_frame(fig, layout, panel)
    series = [s for _, series_list in data for s in series_list if s["values"]]
    if not series:
        return no_data(fig, layout, x, y, w, h)
    defaults = panel.get("fieldConfig", {}).get("defaults", {})
    unit, custom = defaults.get("unit"), defaults.get("custom", {})
    calcs = panel.get("options", {}).get("legend", {}).get("calcs", [])
    colored = [(PALETTE[i % len(PALETTE)], s) for i, s in enumerate(series)]
    legend_h = min((len(series) + 1) * LEGEND_ROW_PX, int(h * 0.42)) + 4
    plot = (x + 62, y + TITLE_PX + 2, w - 62 - 10, h - TITLE_PX - 2 - 18 - legend_h)
    ax = fig.add_axes(layout.frac(*plot))
    ax.set_facecolor(PANEL)
    lowest = math.inf
    for color, s in colored:
        ts = [t for t, _ in s["values"]]
        vs = [v if math.isfinite(v) else math.nan for _, v in s["values"]]
        lowest = min([lowest] + finite(vs))
        ax.plot(ts, vs, color=color, lw=custom.get("lineWidth", 1) + 0.3)
        if custom.get("fillOpacity"):
            ax.fill_between(ts, vs, color=color, alpha=custom["fillOpacity"] / 100, lw=0)
    highest = max(finite(v for s in series for _, v in s["values"]) or [1])
    low = 0 if lowest >= 0 else lowest - 0.05 * (highest - lowest)
    high = highest + 0.08 * (highest - low) if highest > low else low + 1
    style_axes(ax, unit, args, plot[2], (low, high))
    draw_legend(fig, layout, (x, y + h - legend_h, w, legend_h), legend_rows(colored, calcs), calcs, unit)


def style_axes(ax, unit, args, width_px, y_range):
    ax.set_xlim(args.start, args.end)
    ticks, step = time_ticks(args.start, args.end, width_px)
    ax.set_xticks(ticks)
    clock = "%H:%M:%S" if step < 60 else "%H:%M"
    ax.xaxis.set_major_formatter(FuncFormatter(lambda t, _: time.strftime(clock, time.localtime(t))))
    ax.set_ylim(*y_range)
    ax.set_yticks(value_ticks(*y_range, unit))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: tick_label(v, unit)))
    ax.tick_params(colors=DIM, labelsize=FONT["tick"], length=0, pad=3)
    ax.grid(True, color=GRID, lw=0.6)
    for spine in ax.spines.values():
        spine.set_visible(False)


# -- stat -----------------------------------------------------------------

def draw_stat(fig, layout, panel, data, args):
    """One big value per series (the panel's reducer), side by side, with
    the series' name above when there are several, and a sparkline."""
    x, y, w, h = panel_frame(fig, layout, panel)
    series = [s for _, series_list in data for s in series_list if s["values"]]
    if not series:
        return no_data(fig, layout, x, y, w, h)
    fieldconfig = panel.get("fieldConfig", {})
    unit, decimals = fieldconfig.get("defaults", {}).get("unit"), fieldconfig.get("defaults", {}).get("decimals")
    calc = (panel.get("options", {}).get("reduceOptions", {}).get("calcs") or ["lastNotNull"])[0]
    sparkline = panel.get("options", {}).get("graphMode", "area") == "area"
    cell_w, top = w / len(series), y + TITLE_PX
    size = min(30, max(12, (h - TITLE_PX) * 0.30), cell_w / 5.5)
    for i, s in enumerate(series):
        value = reduce_values([v for _, v in s["values"]], calc)
        color = threshold_color(fieldconfig, value)
        cx, body = x + (i + 0.5) * cell_w, h - TITLE_PX
        if sparkline:
            draw_sparkline(fig, layout, (x + i * cell_w + 4, top + body * 0.55, cell_w - 8, body * 0.42), s, color)
        if len(series) > 1:
            fig.text(*layout.point(cx, top + body * 0.14), s["legend"], color=TEXT, fontsize=FONT["legend"] + 0.5,
                     ha="center", va="center")
        fig.text(*layout.point(cx, top + body * (0.45 if len(series) > 1 else 0.4)),
                 format_value(value, unit, decimals), color=color, fontsize=size, fontweight="bold",
                 ha="center", va="center")


def draw_sparkline(fig, layout, box, series, color):
    ax = fig.add_axes(layout.frac(*box))
    ts = [t for t, _ in series["values"]]
    vs = [v if math.isfinite(v) else math.nan for _, v in series["values"]]
    if finite(vs):
        ax.fill_between(ts, vs, min(finite(vs)), color=color, alpha=0.12, lw=0)
        ax.plot(ts, vs, color=color, lw=0.9, alpha=0.6)
    ax.axis("off")


# -- table ----------------------------------------------------------------

def table_frame(panel, data):
    """(columns, rows) of a table panel: the instant series of every target
    joined on their labels (merge), renamed / hidden (organize), sorted (sortBy)."""
    label_names, merged = [], {}
    for target, series_list in data:
        for s in series_list:
            labels = {k: v for k, v in s["labels"].items() if k != "__name__"}
            label_names += [k for k in sorted(labels) if k not in label_names]
            merged.setdefault(tuple(sorted(labels.items())), {}).update(
                {f"Value #{target.get('refId')}": s["values"][-1][1] if s["values"] else None, **labels})
    columns = label_names + [f"Value #{t.get('refId')}" for t, _ in data]
    rows = list(merged.values())
    for step in panel.get("transformations", []):
        options = step.get("options", {})
        if step["id"] == "organize":
            rename = options.get("renameByName", {})
            columns = [c for c in columns if not options.get("excludeByName", {}).get(c)]
            rows = [{rename.get(k, k): v for k, v in r.items()} for r in rows]
            columns = [rename.get(c, c) for c in columns]
        elif step["id"] == "sortBy":
            for sort in reversed(options.get("sort", [])):
                sign = -1 if sort.get("desc") else 1
                number = lambda v: v if isinstance(v, float) and math.isfinite(v) else None
                rows.sort(key=lambda r: (number(r.get(sort["field"])) is None,
                                         sign * (number(r.get(sort["field"])) or 0)))
    return columns, rows


def column_unit(panel, column):
    fieldconfig = panel.get("fieldConfig", {})
    unit, decimals = fieldconfig.get("defaults", {}).get("unit"), fieldconfig.get("defaults", {}).get("decimals")
    for override in fieldconfig.get("overrides", []):
        if override.get("matcher", {}).get("id") == "byName" and override["matcher"].get("options") == column:
            for prop in override.get("properties", []):
                unit = prop["value"] if prop.get("id") == "unit" else unit
                decimals = prop["value"] if prop.get("id") == "decimals" else decimals
    return unit, decimals


def draw_table(fig, layout, panel, data, args):
    x, y, w, h = panel_frame(fig, layout, panel)
    columns, rows = table_frame(panel, data)
    if not rows:
        return no_data(fig, layout, x, y, w, h)
    row_h = 19
    weights = [3.2 if c == "tensor" else 1 for c in columns]
    edges = [x + 8 + (w - 16) * sum(weights[:i]) / sum(weights) for i in range(len(columns) + 1)]
    top = y + TITLE_PX + 2
    for i, column in enumerate(columns):
        fig.text(*layout.point(edges[i] + 4, top + row_h / 2), column, color="#6e9fff",
                 fontsize=FONT["legend"] + 0.5, fontweight="bold", va="center")
    fit = int((h - TITLE_PX - 2 - row_h) // row_h)
    for r, row in enumerate(rows[:fit]):
        ry = top + (r + 1) * row_h
        if r % 2 == 0:
            fig.patches.append(Rectangle(layout.point(x + 4, ry + row_h), (w - 8) / layout.width,
                                         row_h / layout.height, transform=fig.transFigure, color="#1f2227", zorder=-1))
        for i, column in enumerate(columns):
            value = row.get(column)
            numeric = isinstance(value, float)
            text = format_value(value, *column_unit(panel, column)) if numeric else str(value or "")
            px = edges[i + 1] - 6 if numeric else edges[i] + 4
            fig.text(*layout.point(px, ry + row_h / 2), text, color=TEXT, fontsize=FONT["legend"] + 0.5,
                     ha="right" if numeric else "left", va="center")


# -- dashboard ------------------------------------------------------------

def draw_row(fig, layout, panel):
    x, y, w, h = layout.box(panel["gridPos"])
    fig.text(*layout.point(x + 2, y + h / 2 + 2), "⌄  " + panel.get("title", ""), color=TEXT,
             fontsize=FONT["title"] + 1.5, fontweight="bold", va="center")


def draw_header(fig, layout, dashboard, values, args):
    shown = []
    for var in dashboard.get("templating", {}).get("list", []):
        if var.get("hide") == 2 or var.get("type") == "datasource":
            continue
        value = values.get(var["name"], "")
        all_selected = var.get("includeAll") and value == var.get("allValue")
        shown.append(f"{var.get('label') or var['name']}: {'All' if all_selected else value}")
    start = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(args.start))
    end = time.strftime("%H:%M:%S %Z", time.localtime(args.end))
    minutes, seconds = divmod(round(args.end - args.start), 60)
    fig.patches.append(Rectangle((0, 1 - HEADER_PX / layout.height), 1, HEADER_PX / layout.height,
                                 transform=fig.transFigure, color="#181b1f", zorder=-2))
    fig.text(*layout.point(PAD_PX + 4, 18), dashboard.get("title", ""), color=TEXT,
             fontsize=FONT["header"] + 2, fontweight="bold", va="center")
    fig.text(*layout.point(layout.width - PAD_PX - 4, 18), f"{start} to {end}  ({minutes}m {seconds}s)",
             color=TEXT, fontsize=FONT["header"], ha="right", va="center")
    fig.text(*layout.point(PAD_PX + 4, 42), "     ".join(shown), color=DIM, fontsize=FONT["header"] - 1, va="center")
    fig.text(*layout.point(layout.width - PAD_PX - 4, 42),
             f"step {args.step}s, $__rate_interval {args.rate_interval}, Prometheus {args.url}",
             color=DIM, fontsize=FONT["header"] - 1, ha="right", va="center")


DRAW = {"timeseries": draw_timeseries, "stat": draw_stat, "table": draw_table}


def render(prometheus, path, args):
    """Writes args.out/<uid>.png for the dashboard at path; returns its path."""
    dashboard = load(path)
    base = builtins(args.start, args.end, args.step, args.rate_interval)
    values, options = resolve_variables(dashboard, prometheus, args.start, args.end, base)
    single = [v for v in dashboard.get("templating", {}).get("list", [])
              if v["name"] == "pod" and not v.get("includeAll") and not v.get("multi")]
    if single:
        pod = args.pod or (options.get("pod") or [""])[0]
        values = resolve_variables(dashboard, prometheus, args.start, args.end, base, {"pod": pod})[0]
    items = [p for p in panels(dashboard) if "gridPos" in p]
    layout = Layout(args.width, max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in items))
    fig = plt.figure(figsize=(layout.width / DPI, layout.height / DPI), dpi=DPI, facecolor=CANVAS)
    draw_header(fig, layout, dashboard, values, args)
    for panel in items:
        if panel.get("type") == "row":
            draw_row(fig, layout, panel)
        elif panel.get("type") in DRAW:
            DRAW[panel["type"]](fig, layout, panel, fetch_panel(prometheus, panel, values, args), args)
        else:
            x, y, w, h = panel_frame(fig, layout, panel)
            no_data(fig, layout, x, y, w, h)
    out = Path(args.out) / f"{dashboard.get('uid') or Path(path).stem}.png"
    save_png(fig, out)
    plt.close(fig)
    return out


def save_png(fig, out):
    """The figure as a 256-colour PNG: a third of the size of matplotlib's
    RGBA one, with no visible difference on these flat colours."""
    buffer = io.BytesIO()
    fig.savefig(buffer, dpi=DPI, facecolor=CANVAS, format="png")
    image = Image.open(buffer).convert("RGB")
    image.quantize(colors=256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE).save(out, optimize=True)


def parse_args(argv):
    parser = window_parser(__doc__.split("\n\n")[0], "the pod of single-pod dashboards (default: the first found)")
    parser.add_argument("--out", required=True, help="folder for the PNGs")
    parser.add_argument("--width", type=int, default=1600, help="image width in pixels (default 1600)")
    return parser.parse_args(argv)


def main(argv):
    args = parse_args(argv)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    prometheus = Prometheus(args.url)
    for path in args.dashboards:
        print(render(prometheus, path, args))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
