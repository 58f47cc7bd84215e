"""What check_queries.py, check_run.py and render.py share: reading the
dashboards (panels, targets, template variables), replacing Grafana
variables in an expression, resolving the variables the way Grafana does
for a dashboard opened with its defaults, running a panel's target against
Prometheus' HTTP API over a time window, and the arguments that window
takes on the command line. Python 3 standard library only.
"""

import argparse
import json
import re
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

LABEL_VALUES = re.compile(r"\s*label_values\(\s*(?:(.*),\s*)?(\w+)\s*\)\s*")
VARIABLE = re.compile(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)")

# Grafana's $__rate_interval is max($__interval + scrape interval,
# 4 x scrape interval), the scrape interval being the datasource's "scrape
# interval" setting. prometheus-local.yml scrapes every 5 s, so a Grafana set
# to 5 s gives 20 s on a short range. 30 s keeps six scrapes per window, so a
# scrape missed while TF and the sidecars share the loopback machine's cores
# leaves no hole, and still shows the ramps of a run of a few minutes (a
# 1m window would smear a quarter of it).
DEFAULT_RATE_INTERVAL = "30s"


def load(path):
    """The dashboard JSON of a file."""
    return json.loads(Path(path).read_text())


def panels(dashboard):
    """Every panel, rows included, nested ones (collapsed rows) after their row."""
    found = []
    def walk(items):
        for panel in items:
            found.append(panel)
            walk(panel.get("panels", []))
    walk(dashboard.get("panels", []))
    return found


def targets(panel):
    """The targets of a panel that have a PromQL expression."""
    return [t for t in panel.get("targets", []) if t.get("expr")]


def variable_query(var):
    """(selector or None, label) of a label_values() variable; None for
    any other variable (datasource, custom, or a query of another form)."""
    if var.get("type") != "query":
        return None
    query = var.get("query")
    query = query.get("query") if isinstance(query, dict) else query
    match = LABEL_VALUES.fullmatch(query or "")
    return (match.group(1), match.group(2)) if match else None


def expressions(dashboard):
    """(where, expr) of every query of a dashboard: panel targets, and the
    selectors of variable queries (the whole query if not label_values)."""
    found = []
    for panel in panels(dashboard):
        for target in targets(panel):
            found.append((f'panel "{panel.get("title")}" {target.get("refId")}', target["expr"]))
    for var in dashboard.get("templating", {}).get("list", []):
        if var.get("type") != "query":
            continue
        parsed = variable_query(var)
        if parsed and parsed[0]:
            found.append((f'variable "{var["name"]}"', parsed[0]))
        elif not parsed:
            query = var.get("query")
            found.append((f'variable "{var["name"]}"', (query.get("query") if isinstance(query, dict) else query) or ""))
    return found


def substitute(expr, values):
    """expr with every $var / ${var} / ${var:format} replaced from values;
    raises KeyError on a variable values does not have."""
    def value(match):
        return values[match.group(1) or match.group(2)]
    return VARIABLE.sub(value, expr)


def all_value(var, options):
    """What Grafana puts in a query for the "All" selection of var: its
    allValue if set, else a regex alternation of every option."""
    if var.get("allValue"):
        return var["allValue"]
    if not options:
        return ""
    return "(" + "|".join(re.escape(o) for o in options) + ")"


def chosen_value(var, options):
    """What Grafana puts in a query for a variable opened with its saved
    selection: All if that is the selection, else the saved value if it is
    still an option, else the first option (empty if there are none)."""
    current = var.get("current") or {}
    saved = current.get("value")
    saved = saved if isinstance(saved, list) else [saved] if saved is not None else []
    if var.get("includeAll") and (saved == ["$__all"] or not saved):
        return all_value(var, options)
    kept = [v for v in saved if v in options]
    if kept:
        return kept[0] if len(kept) == 1 else "(" + "|".join(re.escape(v) for v in kept) + ")"
    return options[0] if options else ""


def single_value_variables(dashboard):
    """Names of the query variables that take exactly one value (no All, not
    multi): a dashboard shows one of them at a time, e.g. the pod of tlc-pod."""
    return [v["name"] for v in dashboard.get("templating", {}).get("list", [])
            if v.get("type") == "query" and not v.get("includeAll") and not v.get("multi")]


class Prometheus:
    """The few calls of Prometheus' HTTP API the checks need."""

    def __init__(self, url, timeout=30):
        self.url = url.rstrip("/")
        self.timeout = timeout

    def call(self, path, params, post=True):
        """The JSON body of a POST (or GET) to path, also for an HTTP error
        (bad_data comes back as 400 with a JSON body)."""
        encoded = urllib.parse.urlencode(params, doseq=True)
        request = (urllib.request.Request(f"{self.url}{path}", encoded.encode()) if post
                   else urllib.request.Request(f"{self.url}{path}?{encoded}"))
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                return json.load(response)
        except urllib.error.HTTPError as error:
            return json.load(error)

    def query(self, expr, time=None):
        params = {"query": expr}
        if time is not None:
            params["time"] = f"{time:.3f}"
        return self.call("/api/v1/query", params)

    def query_range(self, expr, start, end, step):
        return self.call("/api/v1/query_range",
                         {"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step}s"})

    def label_values(self, label, selector, start, end):
        """Sorted values of label on the series selector matches in [start, end]."""
        params = {"start": f"{start:.3f}", "end": f"{end:.3f}"}
        if selector:
            params["match[]"] = selector
        body = self.call(f"/api/v1/label/{label}/values", params, post=False)
        if body.get("status") != "success":
            raise RuntimeError(f"label_values({selector}, {label}): {body.get('error')}")
        return sorted(body["data"])


def parse_series(body):
    """[{labels, values: [(t, v)]}] of a query or query_range answer."""
    result = body["data"]["result"]
    if body["data"]["resultType"] == "vector":
        return [{"labels": r["metric"], "values": [(float(r["value"][0]), float(r["value"][1]))]} for r in result]
    if body["data"]["resultType"] == "scalar":
        return [{"labels": {}, "values": [(float(result[0]), float(result[1]))]}]
    return [{"labels": r["metric"], "values": [(float(t), float(v)) for t, v in r["values"]]} for r in result]


def is_instant(target):
    return bool(target.get("instant")) and not target.get("range")


def run_target(prometheus, expr, target, start, end, step):
    """The series a target returns, or raises RuntimeError with Prometheus' error."""
    if is_instant(target):
        body = prometheus.query(expr, end)
    else:
        body = prometheus.query_range(expr, start, end, step)
    if body.get("status") != "success":
        raise RuntimeError(f"{body.get('errorType')}: {body.get('error')}")
    return parse_series(body)


def builtins(start, end, step, rate_interval):
    """Grafana's global variables for a window [start, end] (seconds)."""
    return {"__rate_interval": rate_interval, "__interval": f"{step}s",
            "__range": f"{round(end - start)}s", "__range_s": str(round(end - start)),
            "DS_PROMETHEUS": "prometheus"}


def resolve_variables(dashboard, prometheus, start, end, builtins, fixed=None):
    """{name: value} for every template variable, in the dashboard's order
    (a variable's query may use the ones before it): label_values()
    variables from the series Prometheus has in [start, end], each given its
    saved selection (All for those saved as All); fixed overrides a
    variable's value (e.g. the one pod of tlc-pod). builtins are the
    $__ variables and the datasource's. Also returns {name: options}."""
    values, options = dict(builtins), {}
    for var in dashboard.get("templating", {}).get("list", []):
        name = var["name"]
        parsed = variable_query(var)
        if parsed is not None:
            selector = substitute(parsed[0], values) if parsed[0] else None
            options[name] = prometheus.label_values(parsed[1], selector, start, end)
        if fixed and name in fixed:
            values[name] = fixed[name]
        elif parsed is not None:
            values[name] = chosen_value(var, options[name])
        elif var.get("type") == "datasource":
            values.setdefault(name, "prometheus")
        elif var.get("type") in ("custom", "constant", "textbox"):
            values[name] = str((var.get("current") or {}).get("value", var.get("query", "")))
    return values, options


def legend(target, labels):
    """A series' name in the legend: the target's legendFormat with every
    {{label}} replaced (a missing label gives ""), else the labels."""
    fmt = target.get("legendFormat")
    if fmt and fmt != "__auto":
        return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""), fmt).strip()
    inner = ", ".join(f'{k}="{v}"' for k, v in sorted(labels.items()) if k != "__name__")
    return f'{labels.get("__name__", "")}{{{inner}}}'


def window_parser(description, pod_help):
    """An argument parser with what check_run.py and render.py both take:
    PROMETHEUS_URL, DASHBOARD..., --start, --end, --step, --rate-interval, --pod."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("url", metavar="PROMETHEUS_URL")
    parser.add_argument("dashboards", nargs="+", metavar="DASHBOARD")
    parser.add_argument("--start", type=float, required=True, help="T0, Unix seconds")
    parser.add_argument("--end", type=float, required=True, help="T1, Unix seconds")
    parser.add_argument("--step", type=int, default=5, help="query_range step in seconds (default 5)")
    parser.add_argument("--rate-interval", default=DEFAULT_RATE_INTERVAL,
                        help=f"what $__rate_interval becomes (default {DEFAULT_RATE_INTERVAL})")
    parser.add_argument("--pod", help=pod_help)
    return parser
