#!/usr/bin/env python3
"""bench-chart.py DIR  -> SVG chart of TandemFS against the best peer on stdout.

DIR is a docs/bench-results/<date>/ directory written by bench-compare.sh
(the same input as bench-table.py). One row per measure and job count: a
bar for TandemFS with its default two copies, the ratio to the best peer
that keeps two copies, and one for TandemFS with one copy, the ratio to the
best peer that keeps one (like against like), on a logarithmic axis
centred on 1x, so that behind and ahead look alike; a tick marks the row's
goal in issue 2 (ahead of every peer; 2x for random I/O; 3x for creates).
Plain SVG, no libraries, so it renders on GitHub and in any browser.
"""
import importlib.util
import math
import os
import sys
from xml.sax.saxutils import escape

_spec = importlib.util.spec_from_file_location(
    "bench_table", os.path.join(os.path.dirname(os.path.abspath(__file__)), "bench-table.py"))
bench_table = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench_table)

# Goals of issue 2, as a ratio to the best peer.
GOALS = {"rand_write_iops": 2.0, "rand_read_iops": 2.0, "md_create_ops": 3.0, "md3k_create_ops": 3.0}

SERIES = [("tandem", "TandemFS, 2 copies (the default), against peers keeping 2", "#1f5fbf"),
          ("tandem1", "TandemFS, 1 copy, against peers keeping 1", "#8fb5ea")]

LO, HI = 1 / 8, 16  # the axis, as ratios
LEFT, PLOT_W, RIGHT = 190, 460, 95
ROW_H, TOP = 22, 58


def goal(key):
    return GOALS.get(key, 1.0)


def rows(res):
    """(label, measure key, {series: ratio or None}, the best peers' names) for
    every row that some peer measured. Each series is compared with the best
    peer keeping as many copies as it does."""
    out = []
    for key, label in bench_table.MEASURES:
        for j in res.jobs:
            if res.best_peer(key, j) is None:
                continue
            ratios, names = {}, []
            for s, _, _ in SERIES:
                bp = res.best_peer(key, j, bench_table.COPIES[s])
                v = res.val(s, key, j)
                ratios[s] = v / bp[0] if v is not None and bp and bp[0] else None
                if bp:
                    names.append(bench_table.NAMES.get(bp[1], bp[1]))
            out.append(("%s, %s job%s" % (label, j, "" if j == "1" else "s"), key, ratios,
                        " / ".join(names) or "—"))
    return out


def xpos(ratio):
    """The x coordinate of a ratio on the log axis, clamped to it."""
    r = min(max(ratio, LO), HI)
    return LEFT + PLOT_W * (math.log2(r) - math.log2(LO)) / (math.log2(HI) - math.log2(LO))


def svg(title, chart_rows):
    height = TOP + ROW_H * len(chart_rows) + 70
    width = LEFT + PLOT_W + RIGHT
    e = []
    e.append('<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" '
             'font-family="sans-serif" font-size="11">' % (width, height, width, height))
    e.append('<rect width="100%" height="100%" fill="white"/>')
    e.append('<text x="%d" y="18" font-size="14" font-weight="bold">%s</text>' % (LEFT - 180, escape(title)))
    e.append('<text x="%d" y="34" fill="#444">TandemFS / best peer keeping as many copies, each row '
             '(log scale); tick: the goal in issue 2</text>' % (LEFT - 180))
    bottom = TOP + ROW_H * len(chart_rows)
    r = LO
    while r <= HI:
        x = xpos(r)
        e.append('<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="%s" stroke-width="%s"/>' % (
            x, TOP - 6, x, bottom, "#333" if r == 1 else "#ddd", "1.5" if r == 1 else "1"))
        e.append('<text x="%.1f" y="%d" text-anchor="middle" fill="#444">%s&#215;</text>' % (
            x, TOP - 10, ("1/%d" % round(1 / r)) if r < 1 else "%d" % r))
        r *= 2
    for i, (label, key, ratios, peer) in enumerate(chart_rows):
        y = TOP + i * ROW_H
        if i % 2:
            e.append('<rect x="0" y="%d" width="%d" height="%d" fill="#f6f6f6"/>' % (y, width, ROW_H))
        e.append('<text x="%d" y="%d" text-anchor="end">%s</text>' % (LEFT - 6, y + 14, escape(label)))
        bar_h = (ROW_H - 6) / len(SERIES)
        for k, (s, _, colour) in enumerate(SERIES):
            by = y + 3 + k * bar_h
            v = ratios.get(s)
            if v is None:
                e.append('<text x="%.1f" y="%.1f" fill="#888">&#8212;</text>' % (xpos(1) + 3, by + bar_h - 1))
                continue
            x0, x1 = sorted((xpos(1), xpos(v)))
            e.append('<rect class="bar" data-series="%s" data-ratio="%.4f" x="%.1f" y="%.1f" width="%.1f" '
                     'height="%.1f" fill="%s"/>' % (s, v, x0, by, max(x1 - x0, 0.5), bar_h - 1, colour))
            e.append('<text x="%.1f" y="%.1f" font-size="9" fill="#222">%.2f</text>' % (
                max(x1, xpos(1)) + 3, by + bar_h - 2, v))
        gx = xpos(goal(key))
        e.append('<line class="goal" data-goal="%.1f" x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="black" '
                 'stroke-width="2"/>' % (goal(key), gx, y + 1, gx, y + ROW_H - 1))
        e.append('<text x="%d" y="%d" fill="#666" font-size="9">vs %s</text>' % (
            LEFT + PLOT_W + 8, y + 14, escape(peer)))
    ly = bottom + 22
    for k, (_, name, colour) in enumerate(SERIES):
        e.append('<rect x="%d" y="%d" width="12" height="10" fill="%s"/>' % (LEFT - 180, ly + k * 16, colour))
        e.append('<text x="%d" y="%d">%s</text>' % (LEFT - 163, ly + k * 16 + 9, escape(name)))
    e.append('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black" stroke-width="2"/>' % (
        LEFT + 150, ly, LEFT + 150, ly + 10))
    e.append('<text x="%d" y="%d">goal: ahead of every peer; 2&#215; for random I/O; 3&#215; for creates</text>' % (
        LEFT + 156, ly + 9))
    e.append('</svg>')
    return "\n".join(e) + "\n"


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    d = sys.argv[1]
    res = bench_table.Results(d)
    sys.stdout.write(svg("Benchmark comparison " + os.path.basename(os.path.normpath(d)), rows(res)))


if __name__ == "__main__":
    main()
