#!/usr/bin/env python3
"""bench-cache-chart.py DIR -> SVG chart of the flash cache against no cache.

DIR is a docs/bench-results/<date>-cache/ directory written by
scripts/bench-cache.sh: none.json and <mode>.json in the suite.sh format.
One row per measure and job count, one bar per cache mode: its ratio to the
same cluster without a cache, on a logarithmic axis centred on 1x; a tick
marks issue 42's goal for the row (10x for random reads and writes, 1x, no
worse, for sequential I/O). Plain SVG, no libraries.
"""
import json
import math
import os
import sys
from xml.sax.saxutils import escape

MEASURES = [("seq_write_MBps", "seq write 1 MiB"), ("seq_read_MBps", "seq read 1 MiB"),
            ("rand_write_iops", "rand write 4 KiB"), ("sync_write_iops", "rand write 4 KiB O_DSYNC"),
            ("rand_read_iops", "rand read 4 KiB"),
            ("md_create_ops", "creates"), ("md_remove_ops", "removes")]
GOALS = {"rand_write_iops": 10.0, "sync_write_iops": 10.0, "rand_read_iops": 10.0}
COLOURS = {"writethrough": "#1f5fbf", "writeback": "#d9822b"}
LO, HI = 1 / 4, 256
LEFT, PLOT_W, RIGHT, ROW_H, TOP = 170, 480, 80, 22, 58


def x_of(ratio):
    r = min(max(ratio, LO), HI)
    return LEFT + PLOT_W * (math.log(r) - math.log(LO)) / (math.log(HI) - math.log(LO))


def add_sync_writes(out_dir, mode, res):
    """Adds bench-cache.sh's O_DSYNC fio runs (<mode>-sync-<jobs>.json) to res."""
    for jobs in ("1", "2"):
        try:
            with open(os.path.join(out_dir, f"{mode}-sync-{jobs}.json")) as f:
                iops = sum(j["write"]["iops"] for j in json.load(f)["jobs"])
        except (OSError, ValueError, KeyError):
            continue
        res.setdefault("sync_write_iops", {})[jobs] = iops


def chart(out_dir):
    base = json.load(open(os.path.join(out_dir, "none.json")))
    modes = [m for m in ("writethrough", "writeback") if os.path.exists(os.path.join(out_dir, m + ".json"))]
    res = {m: json.load(open(os.path.join(out_dir, m + ".json"))) for m in modes}
    for m, r in [("none", base)] + list(res.items()):
        add_sync_writes(out_dir, m, r)
    rows = []
    for key, name in MEASURES:
        for jobs in ("1", "2"):
            b = base.get(key, {}).get(jobs)
            ratios = {m: res[m].get(key, {}).get(jobs) / b for m in modes if b and res[m].get(key, {}).get(jobs)}
            if ratios:
                rows.append((f"{name}, {jobs} job{'s' if jobs == '2' else ''}", key, ratios))
    bar_h = (ROW_H - 6) / max(len(modes), 1)
    height = TOP + len(rows) * ROW_H + 40
    width = LEFT + PLOT_W + RIGHT
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" font-size="12">',
           f'<text x="10" y="20" font-size="14" font-weight="bold">Flash cache against no cache, on a disk throttled to 150 IOPS</text>',
           f'<text x="10" y="38" fill="#555">ratio to the same cluster without a cache (log scale); ticks: the issue\'s goal</text>']
    for r in (0.25, 0.5, 1, 2, 4, 10, 20, 50, 100, 200):
        x = x_of(r)
        out.append(f'<line x1="{x:.1f}" y1="{TOP - 6}" x2="{x:.1f}" y2="{TOP + len(rows) * ROW_H}" stroke="{"#888" if r == 1 else "#ddd"}"/>')
        out.append(f'<text x="{x:.1f}" y="{TOP + len(rows) * ROW_H + 14}" text-anchor="middle" fill="#555">{r:g}x</text>')
    for i, (label, key, ratios) in enumerate(rows):
        y = TOP + i * ROW_H
        out.append(f'<text x="{LEFT - 8}" y="{y + ROW_H / 2 + 4:.1f}" text-anchor="end">{escape(label)}</text>')
        for j, m in enumerate(modes):
            if m not in ratios:
                continue
            x0, x1 = x_of(1), x_of(ratios[m])
            yb = y + 3 + j * bar_h
            out.append(f'<rect x="{min(x0, x1):.1f}" y="{yb:.1f}" width="{abs(x1 - x0):.1f}" height="{bar_h - 1:.1f}" fill="{COLOURS[m]}"/>')
            out.append(f'<text x="{max(x0, x1) + 4:.1f}" y="{yb + bar_h - 3:.1f}" fill="#333">{ratios[m]:.1f}x</text>')
        g = x_of(GOALS.get(key, 1.0))
        out.append(f'<line x1="{g:.1f}" y1="{y + 1}" x2="{g:.1f}" y2="{y + ROW_H - 1}" stroke="#c00" stroke-width="2"/>')
    ly = TOP + len(rows) * ROW_H + 30
    for j, m in enumerate(modes):
        out.append(f'<rect x="{LEFT + j * 140}" y="{ly - 10}" width="12" height="12" fill="{COLOURS[m]}"/>')
        out.append(f'<text x="{LEFT + j * 140 + 16}" y="{ly}">{m}</text>')
    out.append("</svg>")
    return "\n".join(out)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: bench-cache-chart.py DIR")
    print(chart(sys.argv[1]))
