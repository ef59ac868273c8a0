#!/usr/bin/env python3
"""Draws a ferry-bench --json file: bus bandwidth against size for each op (one line per form,
out of place and in place), and, when the run had --vs-mpi, ferry's time over MPI's against size
(below 1: ferry is faster). Several files (runs on different transports, say) share the axes.

usage: tools/plot_bench.py RUN.json [RUN.json ...] -o bench.png

Needs python3 and matplotlib (Debian: python3-matplotlib; tools/setup --plot installs it).
"""
import argparse
import json
import sys


def load(path):
    with open(path) as f:
        run = json.load(f)
    if run.get("tool") != "ferry-bench" or "rows" not in run:
        sys.exit(f"plot_bench.py: {path} is not a ferry-bench --json file "
                 f"(expected a 'tool': 'ferry-bench' document with 'rows')")
    return run


def label(run, place, several):
    s = run["settings"]
    text = f"{place} of place"
    if several:
        text = f"{s['transport']} n={s['world_size']} {s['dtype']}, {text}"
    return text


def size_label(nbytes):
    for unit, scale in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if nbytes >= scale:
            return f"{nbytes / scale:g}{unit}"
    return f"{nbytes}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", metavar="RUN.json")
    ap.add_argument("-o", "--output", required=True, help="image to write (.png, .svg, .pdf)")
    args = ap.parse_args()
    runs = [load(p) for p in args.runs]

    try:
        import matplotlib
        matplotlib.use("Agg")  # no display needed
        import matplotlib.pyplot as plt
    except ImportError:
        sys.exit("plot_bench.py: needs matplotlib (Debian: apt install python3-matplotlib, or "
                 "tools/setup --plot)")

    ops = []
    for run in runs:
        for row in run["rows"]:
            if row["op"] not in ops:
                ops.append(row["op"])
    if not ops:
        sys.exit("plot_bench.py: the files hold no rows")
    with_ratio = any("ratio" in row for run in runs for row in run["rows"])
    per_op = 2 if with_ratio else 1  # rows of axes per op: bandwidth, then the ratio
    ncols = min(4, len(ops))
    blocks = (len(ops) + ncols - 1) // ncols
    fig, axes = plt.subplots(blocks * per_op, ncols, figsize=(4.2 * ncols, 3.2 * blocks * per_op),
                             squeeze=False)
    for i in range(len(ops), blocks * ncols):  # the empty places of the last block
        for k in range(per_op):
            axes[(i // ncols) * per_op + k][i % ncols].set_visible(False)
    several = len(runs) > 1
    for i, op in enumerate(ops):
        row, col = (i // ncols) * per_op, i % ncols
        bw = axes[row][col]
        ratio = axes[row + 1][col] if with_ratio else None
        for run in runs:
            for place in ("out", "in"):
                rows = [r for r in run["rows"] if r["op"] == op and r["place"] == place]
                rows = [r for r in rows if r["bytes"] > 0]
                if not rows:
                    continue
                x = [r["bytes"] for r in rows]
                style = "-o" if place == "out" else "--s"
                bw.plot(x, [r["busbw_gbps"] for r in rows], style, ms=3,
                        label=label(run, place, several))
                pairs = [(r["bytes"], r["ratio"]) for r in rows if r.get("ratio") is not None]
                if ratio is not None and pairs:
                    ratio.plot([p[0] for p in pairs], [p[1] for p in pairs], style, ms=3,
                               label=label(run, place, several))
        bw.set_title(op)
        bw.set_xscale("log", base=2)
        bw.set_ylabel("busbw (GB/s)")
        bw.grid(True, which="both", alpha=0.3)
        bw.legend(fontsize="x-small")
        if ratio is not None:
            ratio.set_xscale("log", base=2)
            ratio.axhline(1.0, color="grey", lw=0.8)
            ratio.set_ylabel("time / MPI time")
            ratio.grid(True, which="both", alpha=0.3)
        bottom = ratio if ratio is not None else bw
        bottom.set_xlabel("size per rank (B)")
        ticks = sorted({r["bytes"] for run in runs for r in run["rows"]
                        if r["op"] == op and r["bytes"] > 0})
        shown = ticks[::max(1, len(ticks) // 6)]
        for ax in filter(None, (bw, ratio)):
            ax.set_xticks(shown)
            ax.set_xticklabels([size_label(t) for t in shown])
    first = runs[0]
    fig.suptitle(f"ferry-bench {first['version']} on {first['host']} "
                 f"({first['settings']['transport']}, {first['settings']['world_size']} ranks, "
                 f"{first['settings']['dtype']})", fontsize="small")
    fig.tight_layout()
    fig.savefig(args.output, dpi=110)
    print(f"plot_bench.py: wrote {args.output}")


if __name__ == "__main__":
    main()
