"""Specification of bench-chart.py: what its chart shows for a results directory.

Run: python3 -m unittest discover -s scripts -p '*_test.py'
"""
import importlib.util
import json
import os
import shutil
import tempfile
import unittest
import xml.etree.ElementTree as ET

_spec = importlib.util.spec_from_file_location(
    "bench_chart", os.path.join(os.path.dirname(os.path.abspath(__file__)), "bench-chart.py"))
bench_chart = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench_chart)

SVG = "{http://www.w3.org/2000/svg}"


def results_dir(test, systems):
    """A results directory, removed after test, with one suite.sh JSON file
    per system: systems maps a name to {measure: {jobs: value}}."""
    d = tempfile.mkdtemp(prefix="bench-chart-test-")
    test.addCleanup(shutil.rmtree, d)
    for name, measures in systems.items():
        data = dict(measures)
        data["meta"] = {"jobs": ["1"]}
        with open(os.path.join(d, name + ".json"), "w") as f:
            json.dump(data, f)
    return d


def chart(d):
    res = bench_chart.bench_table.Results(d)
    return ET.fromstring(bench_chart.svg("test", bench_chart.rows(res)))


def bars(root):
    return [r for r in root.iter(SVG + "rect") if r.get("class") == "bar"]


class ChartTest(unittest.TestCase):
    def test_a_bar_is_the_ratio_to_the_best_peer_and_grows_right_when_ahead_left_when_behind(self):
        d = results_dir(self, {
            "tandem": {"seq_write_MBps": {"1": 200.0}},
            "tandem1": {"seq_write_MBps": {"1": 50.0}},
            "glusterfs": {"seq_write_MBps": {"1": 100.0}},
            "moosefs": {"seq_write_MBps": {"1": 100.0}},
        })
        by_series = {b.get("data-series"): b for b in bars(chart(d))}
        self.assertAlmostEqual(float(by_series["tandem"].get("data-ratio")), 2.0)
        self.assertAlmostEqual(float(by_series["tandem1"].get("data-ratio")), 0.5)
        one = bench_chart.xpos(1)
        ahead, behind = by_series["tandem"], by_series["tandem1"]
        self.assertAlmostEqual(float(ahead.get("x")), one, places=1)
        self.assertGreater(float(ahead.get("width")), 0)
        self.assertAlmostEqual(float(behind.get("x")) + float(behind.get("width")), one, places=1)
        # Twice as far and half as far lie the same distance from 1x.
        self.assertAlmostEqual(float(ahead.get("width")), float(behind.get("width")), places=1)

    def test_each_series_is_compared_with_peers_keeping_as_many_copies(self):
        d = results_dir(self, {
            "tandem": {"seq_write_MBps": {"1": 120.0}},
            "tandem1": {"seq_write_MBps": {"1": 300.0}},
            "juicefs": {"seq_write_MBps": {"1": 600.0}},      # 1 copy
            "moosefs": {"seq_write_MBps": {"1": 40.0}},       # 2 copies
            "glusterfs-r2": {"seq_write_MBps": {"1": 60.0}},  # 2 copies
        })
        by_series = {b.get("data-series"): b for b in bars(chart(d))}
        self.assertAlmostEqual(float(by_series["tandem"].get("data-ratio")), 2.0)   # 120 / 60
        self.assertAlmostEqual(float(by_series["tandem1"].get("data-ratio")), 0.5)  # 300 / 600

    def test_the_goal_tick_is_2x_for_random_io_3x_for_creates_and_1x_elsewhere(self):
        d = results_dir(self, {
            "tandem": {"rand_write_iops": {"1": 10.0}, "md_create_ops": {"1": 10.0}, "md_stat_ops": {"1": 10.0}},
            "juicefs": {"rand_write_iops": {"1": 5.0}, "md_create_ops": {"1": 5.0}, "md_stat_ops": {"1": 5.0}},
        })
        goals = [float(g.get("data-goal")) for g in chart(d).iter(SVG + "line") if g.get("class") == "goal"]
        self.assertEqual(goals, [2.0, 3.0, 1.0])  # table order: rand write, md create, md stat

    def test_a_system_without_a_value_gets_no_bar(self):
        d = results_dir(self, {
            "tandem": {"seq_read_MBps": {"1": 300.0}},
            "seaweedfs-r2": {"seq_read_MBps": {"1": 100.0}},
        })
        self.assertEqual([b.get("data-series") for b in bars(chart(d))], ["tandem"])

    def test_rows_no_peer_measured_are_left_out(self):
        d = results_dir(self, {
            "tandem": {"seq_read_MBps": {"1": 300.0}, "md_read_ops": {"1": 9.0}},
            "moosefs": {"seq_read_MBps": {"1": 100.0}},
        })
        labels = [t.text for t in chart(d).iter(SVG + "text") if t.get("text-anchor") == "end"]
        self.assertEqual(labels, ["seq read MB/s, 1 job"])

    def test_ratios_beyond_the_axis_are_drawn_at_its_end(self):
        self.assertAlmostEqual(bench_chart.xpos(1000), bench_chart.xpos(bench_chart.HI))
        self.assertAlmostEqual(bench_chart.xpos(0.001), bench_chart.xpos(bench_chart.LO))


if __name__ == "__main__":
    unittest.main()
