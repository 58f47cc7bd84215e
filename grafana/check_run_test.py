#!/usr/bin/env python3
"""Unit tests of the parts of check_run.py, dashlib.py and units.py that need
no Prometheus: variable substitution and resolution, legends, Grafana's
unit formatting, and the sanity rules on synthetic series, including the
cases that must fail. Standard library only; check.sh runs them.

    python3 grafana/check_run_test.py
"""

import math
import sys
import unittest
from unittest import mock
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import check_run  # noqa: E402
import dashlib  # noqa: E402
from units import format_value  # noqa: E402

BYTES_PANEL = {"title": "Wire bytes per pod and direction", "fieldConfig": {"defaults": {"unit": "Bps"}}}
RATIO_PANEL = {"title": "Compression ratio", "fieldConfig": {"defaults": {"unit": "none"}}}


def series(values, start=1000.0, step=5.0, legend="s", **labels):
    return {"labels": labels, "legend": legend, "values": [(start + i * step, v) for i, v in enumerate(values)]}


def target(expr, ref="A", legend_format=None):
    return {"expr": expr, "refId": ref, "legendFormat": legend_format}


def verdict(panel, tgt, series_list, expect=None, context=None):
    return check_run.check_target(panel, tgt, series_list, expect or {}, context or {})


class FakePrometheus:
    """label_values answers from a fixed list of series' labels."""

    def __init__(self, series_labels):
        self.series_labels = series_labels
        self.selectors = []

    def label_values(self, label, selector, start, end):
        self.selectors.append(selector)
        return sorted({s[label] for s in self.series_labels if label in s})


class Substitution(unittest.TestCase):
    def test_every_form_is_replaced(self):
        values = {"job": "tlc", "pod": ".*", "__rate_interval": "30s"}
        self.assertEqual(dashlib.substitute('rate(x{job="$job", pod=~"${pod}", i=~"${pod:regex}"}[$__rate_interval])', values),
                         'rate(x{job="tlc", pod=~".*", i=~".*"}[30s])')

    def test_unknown_variable_raises(self):
        with self.assertRaises(KeyError):
            dashlib.substitute("up{job=\"$nope\"}", {})

    def test_all_uses_all_value_else_an_alternation(self):
        self.assertEqual(dashlib.all_value({"allValue": ".*"}, ["a"]), ".*")
        self.assertEqual(dashlib.all_value({}, ["a.b", "c"]), r"(a\.b|c)")

    def test_saved_selection(self):
        var = {"includeAll": False, "current": {"value": "tlc"}}
        self.assertEqual(dashlib.chosen_value(var, ["other", "tlc"]), "tlc")
        self.assertEqual(dashlib.chosen_value(var, ["other", "zz"]), "other")
        self.assertEqual(dashlib.chosen_value({"current": {}}, []), "")
        all_var = {"includeAll": True, "allValue": ".*", "current": {"value": ["$__all"]}}
        self.assertEqual(dashlib.chosen_value(all_var, []), ".*")

    def test_variable_query_forms(self):
        self.assertEqual(dashlib.variable_query({"type": "query", "query": {"query": 'label_values(up{job="$job"}, pod)'}}),
                         ('up{job="$job"}', "pod"))
        self.assertEqual(dashlib.variable_query({"type": "query", "query": "label_values(job)"}), (None, "job"))
        self.assertIsNone(dashlib.variable_query({"type": "datasource", "query": "prometheus"}))


class Resolution(unittest.TestCase):
    """The real dashboards' variables against the labels of the local run."""

    LOCAL = [{"job": "tlc", "pod": p, "instance": f"127.0.0.1:1519{i}"} for i, p in enumerate(["ps", "w0", "w1"])]

    def resolve(self, name, fixed=None):
        dashboard = dashlib.load(HERE / "dashboards" / name)
        prometheus = FakePrometheus(self.LOCAL)
        base = check_run.builtins(0, 600, 5, "30s")
        values, options = dashlib.resolve_variables(dashboard, prometheus, 0, 600, base, fixed)
        return values, options, prometheus

    def test_overview_opens_on_all(self):
        values, options, prometheus = self.resolve("tlc-overview.json")
        # Any scrape job: "tlc" here, a PodMonitor's name under the Prometheus Operator.
        self.assertEqual((values["job"], values["namespace"], values["pod"]), (".+", ".*", ".*"))
        self.assertEqual(options["namespace"], [])          # static targets have no namespace
        self.assertIn('tlc_build_info{job=~".+", namespace=~".*"}', prometheus.selectors)
        self.assertEqual(values["__range"], "600s")

    def test_per_pod_dashboard_takes_one_pod(self):
        values, options, _ = self.resolve("tlc-pod.json", {"pod": "w1"})
        self.assertEqual(options["pod"], ["ps", "w0", "w1"])
        self.assertEqual((values["pod"], values["instance"]), ("w1", ".*"))
        self.assertEqual(dashlib.single_value_variables(dashlib.load(HERE / "dashboards" / "tlc-pod.json")),
                         ["pod"])

    def test_every_target_substitutes(self):
        for name in ("tlc-overview.json", "tlc-pod.json"):
            values, _, _ = self.resolve(name, {"pod": "ps"} if name == "tlc-pod.json" else None)
            for panel in dashlib.panels(dashlib.load(HERE / "dashboards" / name)):
                for tgt in dashlib.targets(panel):
                    self.assertNotIn("$", dashlib.substitute(tgt["expr"], values))

    def test_legend(self):
        self.assertEqual(dashlib.legend({"legendFormat": "{{pod}} {{direction}}"}, {"pod": "ps"}), "ps")
        self.assertEqual(dashlib.legend({"legendFormat": "raw {{ direction }}"}, {"direction": "pull"}), "raw pull")
        self.assertEqual(dashlib.legend({}, {"__name__": "up", "pod": "ps"}), 'up{pod="ps"}')


class Units(unittest.TestCase):
    def test_grafana_formats(self):
        cases = [(1.5e6, "Bps", "1.50 MB/s"), (222.4e6, "Bps", "222 MB/s"), (999, "Bps", "999 B/s"),
                 (421 * 2**20, "bytes", "421 MiB"), (0.0123, "s", "12.3 ms"), (2.86e-5, "s", "28.6 µs"),
                 (1.5, "s", "1.50 s"), (0.42, "percentunit", "42%"), (0.0078, "percentunit", "0.780%"), (3.0, "none", "3"),
                 (84.53, "none", "84.5"), (376, "reqps", "376 req/s"), (0, "Bps", "0 B/s"),
                 (9.6e6, "bps", "9.60 Mb/s"), (2.5, "opm", "2.50 ops/min")]
        for value, unit, text in cases:
            self.assertEqual(format_value(value, unit), text, (value, unit))

    def test_decimals_and_specials(self):
        self.assertEqual(format_value(84.0, "none", 1), "84.0")
        self.assertEqual(format_value(math.nan, "Bps"), "NaN")
        self.assertEqual(format_value(math.inf, "none"), "+Inf")
        self.assertEqual(format_value(None, "none"), "No data")


class Rules(unittest.TestCase):
    RATIO = target("sum(rate(tlc_tensor_raw_bytes_total[30s])) / sum(rate(tlc_tensor_wire_bytes_total[30s]))")
    WIRE = target("sum by (pod, direction) (rate(tlc_tensor_wire_bytes_total[30s]))")

    def test_ratio_above_one_passes_with_nan_counted(self):
        result, problems, notes = verdict(RATIO_PANEL, self.RATIO, [series([math.nan, 40, 80])])
        self.assertEqual((result, problems), ("ok", []))
        self.assertEqual(notes, ["1 NaN (0/0 while idle)"])

    def test_ratio_below_one_fails(self):
        result, problems, _ = verdict(RATIO_PANEL, self.RATIO, [series([1.2, 0.8])])
        self.assertEqual(result, "FAIL")
        self.assertIn("above 1", problems[0])

    def test_min_ratio_is_the_peak(self):
        self.assertEqual(verdict(RATIO_PANEL, self.RATIO, [series([5, 20])], {"min_ratio": 10})[0], "ok")
        self.assertEqual(verdict(RATIO_PANEL, self.RATIO, [series([5, 9])], {"min_ratio": 10})[0], "FAIL")

    def test_empty_result_fails_unless_allowed(self):
        self.assertEqual(verdict(BYTES_PANEL, self.WIRE, []), ("FAIL", ["no series with samples"], []))
        self.assertEqual(verdict(BYTES_PANEL, self.WIRE, [series([])])[0], "FAIL")
        allowed = target('sum(increase(tlc_decode_failures_total{job="tlc"}[300s]))')
        # tlcd exports every family at 0 but the link rates (none until a link is measured).
        self.assertEqual(verdict(RATIO_PANEL, allowed, [])[0], "FAIL")
        rate_panel = {"title": "Link rate per peer", "fieldConfig": {"defaults": {"unit": "bps"}}}
        link_rate = target('8 * max by (peer) (tlc_link_rate_bytes_per_second{job="tlc"})')
        self.assertEqual(verdict(rate_panel, link_rate, [])[0], "empty (allowed)")
        self.assertEqual(verdict(rate_panel, link_rate, [series([8e7, -1])])[0], "FAIL")
        link_pass = target('sum(rate(tlc_passthrough_total{job="tlc", reason="link_fast"}[30s])) or on() vector(0)')
        self.assertEqual(verdict(RATIO_PANEL, link_pass, [])[0], "FAIL")
        with mock.patch.dict(check_run.MAY_BE_EMPTY, {"tlc_decode_failures_total": "made on first failure"}):
            self.assertEqual(verdict(RATIO_PANEL, allowed, [])[0], "empty (allowed)")
            mixed = target("rate(tlc_decode_failures_total[30s]) + rate(tlc_fallbacks_total[30s])")
            self.assertEqual(verdict(RATIO_PANEL, mixed, [])[0], "FAIL")

    def test_nan_only_in_a_quotient_and_never_inf(self):
        plain = target("sum(tlc_contexts)")
        self.assertEqual(verdict({"title": "Contexts"}, plain, [series([1, math.nan])])[0], "FAIL")
        self.assertEqual(verdict(RATIO_PANEL, self.RATIO, [series([2, math.inf])])[0], "FAIL")
        self.assertEqual(verdict(RATIO_PANEL, self.RATIO, [series([math.nan, math.nan])])[0], "FAIL")

    def test_up_is_judged_while_the_whole_job_ran(self):
        up_panel = {"title": "Sidecars up"}
        total, one = target('sum(up{job="tlc"})'), target('up{job="tlc"}')
        # A worker that finished first: its sidecar stopped at 1015, a scrape saw it down.
        ended = series([3, 3, 3, 2]), series([1, 1, 1, 0])
        self.assertEqual(verdict(up_panel, total, [ended[0]], {"pods": 3})[0], "FAIL")
        self.assertEqual(verdict(up_panel, one, [ended[1]])[0], "FAIL")
        self.assertEqual(verdict(up_panel, total, [ended[0]], {"pods": 3, "whole_until": 1012})[0], "ok")
        self.assertEqual(verdict(up_panel, one, [ended[1]], {"whole_until": 1012})[0], "ok")
        # A sidecar down while every pod was meant to run still fails.
        self.assertEqual(verdict(up_panel, one, [series([1, 0, 1, 1])], {"whole_until": 1007})[0], "FAIL")

    def test_negative_bytes_fail(self):
        saved = target("sum(rate(tlc_tensor_raw_bytes_total[30s])) - sum(rate(tlc_tensor_wire_bytes_total[30s]))")
        self.assertEqual(verdict(BYTES_PANEL, saved, [series([10, -1])])[0], "FAIL")

    def test_link_per_pod(self):
        expect = {"link_mbit": 10}
        fast = series([1e6, 1.6e6], pod="ps", direction="pull")
        self.assertEqual(verdict(BYTES_PANEL, self.WIRE, [series([1e6, 1.4e6], pod="w0")], expect)[0], "ok")
        self.assertEqual(verdict(BYTES_PANEL, self.WIRE, [fast], expect)[0], "FAIL")
        summed = target("sum by (direction) (rate(tlc_tensor_wire_bytes_total[30s]))")
        self.assertEqual(verdict(BYTES_PANEL, summed, [series([5e6])], expect)[0], "ok")   # all pods
        self.assertEqual(verdict(BYTES_PANEL, summed, [series([5e6])], expect, {"one_pod": True})[0], "FAIL")

    def test_raw_not_below_wire(self):
        panel = {"title": "Top", "targets": [target("topk(20, sum by (tensor) (rate(tlc_tensor_top_raw_bytes_total[1m])))", "A"),
                                             target("sum by (tensor) (rate(tlc_tensor_top_wire_bytes_total[1m]))", "B")]}
        pairs = check_run.raw_wire_pairs(panel)
        self.assertEqual([(r["refId"], w["refId"]) for r, w in pairs], [("A", "B")])
        raw = [series([100, 100], tensor="a"), series([50], tensor="b")]
        self.assertEqual(check_run.raw_not_below_wire(raw, [series([10, 99], tensor="a")]), [])
        self.assertEqual(len(check_run.raw_not_below_wire(raw, [series([10, 101], tensor="a")])), 1)

    def test_latency_quantiles(self):
        panel = {"title": "Latency", "fieldConfig": {"defaults": {"unit": "s"}}}
        quantile = target("histogram_quantile(0.99, sum by (le) (rate(tlc_recv_tensor_seconds_bucket[30s])))")
        self.assertEqual(verdict(panel, quantile, [series([0.01, math.nan, 2])])[0], "ok")
        self.assertEqual(verdict(panel, quantile, [series([0.01, 0])])[0], "FAIL")
        self.assertEqual(verdict(panel, quantile, [series([61])])[0], "FAIL")

    def test_cpu_memory_fraction(self):
        cpu = target("sum by (pod) (rate(process_cpu_seconds_total[30s]))")
        self.assertEqual(verdict({"title": "CPU"}, cpu, [series([0.3, 1.9])], {"cores": 2})[0], "ok")
        self.assertEqual(verdict({"title": "CPU"}, cpu, [series([0.3, 2.5])], {"cores": 2})[0], "FAIL")
        memory = target("sum by (pod) (process_resident_memory_bytes)")
        in_bytes = {"title": "Memory", "fieldConfig": {"defaults": {"unit": "bytes"}}}
        self.assertEqual(verdict(in_bytes, memory, [series([400e6])])[0], "ok")
        self.assertEqual(verdict(in_bytes, memory, [series([512e3, 400e6])])[0], "FAIL")
        # Memory against its limit is a fraction, not bytes.
        against_limit = {"title": "Memory against its limit", "fieldConfig": {"defaults": {"unit": "percentunit"}}}
        ratio = target("max by (pod) (process_resident_memory_bytes / ignoring(source) tlc_memory_limit_bytes)")
        self.assertEqual(verdict(against_limit, ratio, [series([0.008, 0.09])])[0], "ok")
        self.assertEqual(verdict(against_limit, ratio, [series([0.5, 1.3])])[0], "FAIL")
        fraction = {"title": "In flight", "fieldConfig": {"defaults": {"unit": "percentunit"}}}
        self.assertEqual(verdict(fraction, target("max(tlc_in_flight_bytes / tlc_in_flight_budget_bytes)"),
                                 [series([0.1, 1.2])])[0], "FAIL")

    def test_sparsity(self):
        sparsity = target("max by (pod) (tlc_sparsity)")
        self.assertEqual(verdict({"title": "s"}, sparsity, [series([1.0])], {"sparsity": 1.0})[0], "ok")
        self.assertEqual(verdict({"title": "s"}, sparsity, [series([1.75])], {"sparsity": 1.0})[0], "FAIL")
        self.assertEqual(verdict({"title": "s"}, sparsity, [series([2.5])])[0], "FAIL")

    def test_global_step(self):
        step = target("max by (pod) (tlc_training_global_step)")
        self.assertEqual(verdict({"title": "Global step"}, step, [series([1, 5, 600])], {"steps": 600})[0], "ok")
        self.assertEqual(verdict({"title": "Global step"}, step, [series([1, 5, 599])], {"steps": 600})[0], "FAIL")
        self.assertEqual(verdict({"title": "Global step"}, step, [series([1, 700, 0, 600])])[0], "FAIL")
        since = target("time() - max(tlc_training_global_step_advanced_timestamp_seconds)")
        self.assertNotIn("global_step", check_run.rules_for({"fieldConfig": {"defaults": {"unit": "s"}}}, since))

    def test_sidecars_up(self):
        up = target('sum(up{job="tlc"})')
        self.assertEqual(verdict({"title": "Sidecars up"}, up, [series([2, 3])], {"pods": 3})[0], "ok")
        self.assertEqual(verdict({"title": "Sidecars up"}, up, [series([3, 2])], {"pods": 3})[0], "FAIL")
        one = target('up{job="tlc", pod="ps"}')
        self.assertEqual(verdict({"title": "Up"}, one, [series([1, 0])])[0], "FAIL")

    def test_rules_follow_the_real_panels(self):
        dashboard = dashlib.load(HERE / "dashboards" / "tlc-overview.json")
        by_title = {p.get("title"): p for p in dashlib.panels(dashboard)}
        table = by_title["Top tensors: bytes saved per second"]
        rules = {t["refId"]: check_run.rules_for(table, t) for t in dashlib.targets(table)}
        self.assertIn("ratio", rules["D"])
        self.assertNotIn("ratio", rules["A"])
        self.assertEqual(check_run.unit_of(table, dashlib.targets(table)[3]), "none")
        wire = by_title["Wire bytes per pod and direction"]
        self.assertIn("link", check_run.rules_for(wire, dashlib.targets(wire)[0]))
        latency = by_title["RecvTensor latency p50 / p99 by role"]
        self.assertIn("latency", check_run.rules_for(latency, dashlib.targets(latency)[0]))

    def test_expect_keys(self):
        self.assertEqual(check_run.parse_expect(["pods=3", "min_ratio=1.5"]), {"pods": 3.0, "min_ratio": 1.5})
        with self.assertRaises(ValueError):
            check_run.parse_expect(["podz=3"])


if __name__ == "__main__":
    unittest.main()
