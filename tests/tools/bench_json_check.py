#!/usr/bin/env python3
"""ferry-bench --json and the #wrong column, end to end.

usage: bench_json_check.py FERRY_BENCH [PLOT_SCRIPT]

1. A short sweep of every op, both forms, writes a JSON document that parses, names the
   version, host and settings, has one row per op, size and form (broadcast in place only,
   all_to_all out of place only), and counts 0 wrong elements in every row.
2. The same sweep with --test-corrupt N (N output elements overwritten after the run that is
   counted) must report exactly N wrong elements in every row and exit 1: the column compares
   real outputs rather than passing by construction.
   The clean run's table also gives the copy bandwidth behind x_ideal at its start and end.
3. A sweep across 1 MiB measures the copy bandwidth again before each size from 1 MiB up:
   those rows, and only those, have an x_now, which is x_ideal scaled by the two rates.
4. With PLOT_SCRIPT: tools/plot_bench.py draws the JSON into a PNG (exit 77, skipped, when
   matplotlib is not installed).
"""
import json
import os
import re
import subprocess
import sys
import tempfile

bench = sys.argv[1]
plot = sys.argv[2] if len(sys.argv) > 2 else None
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def run(args, json_path):
    cmd = [bench, "--op", "all", "--world-size", "3", "--sizes", "4K,64K", "--iters", "2",
           "--warmup", "1", "--json", json_path] + args
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=110)
    with open(json_path) as f:
        doc = json.load(f)
    return p, doc


with tempfile.TemporaryDirectory() as tmp:
    plot_python = None
    if plot:
        # Debian's python3-matplotlib lives in the system interpreter, which need not be the
        # python3 first on PATH (a pyenv one, say).
        for candidate in (sys.executable, "/usr/bin/python3"):
            if os.path.exists(candidate) and subprocess.run(
                    [candidate, "-c", "import matplotlib"], capture_output=True).returncode == 0:
                plot_python = candidate
                break
        if plot_python is None:
            print("matplotlib not installed (tools/setup --plot): skipped")
            sys.exit(77)
    good = os.path.join(tmp, "good.json")
    p, doc = run([], good)
    check(p.returncode == 0, f"clean run exits 0, got {p.returncode}: {p.stderr[-500:]}")
    for key in ("version", "host", "date", "settings", "rows", "build"):
        check(key in doc, f"document has '{key}'")
    check(doc.get("ok") is True, "clean run has ok: true")
    s = doc["settings"]
    check(s["world_size"] == 3 and s["transport"] == "local" and s["sizes"] == [4096, 65536],
          f"settings as given: {s}")
    forms = {}
    for r in doc["rows"]:
        forms.setdefault(r["op"], set()).add(r["place"])
        check(r["wrong"] == 0, f"{r['op']} {r['place']} {r['bytes']} B: #wrong 0, got {r['wrong']}")
        check(r["time_us"]["median"] > 0 and r["busbw_gbps"] >= 0, f"{r['op']}: times filled")
    for op in ("all_reduce", "all_gather", "reduce_scatter", "reduce"):
        check(forms.get(op) == {"out", "in"}, f"{op} has out and in rows: {forms.get(op)}")
    check(forms.get("broadcast") == {"in"}, f"broadcast in place only: {forms.get('broadcast')}")
    check(forms.get("all_to_all") == {"out"}, f"all_to_all out only: {forms.get('all_to_all')}")
    check(forms.get("memcpy") == {"out"}, "memcpy row present")
    check(forms.get("barrier") == {"out"}, "one barrier row (it moves no bytes)")
    check(len(doc["rows"]) == 2 * (4 * 2 + 3) + 1, f"23 rows, got {len(doc['rows'])}")
    check("#wrong" in p.stdout, "the table has a #wrong column")
    # The copy rate behind x_ideal, measured at the start and again at the end (it drifts),
    # the end's line after the last table, with the ratio of the two as printed.
    start = re.search(r"^# ideal: copy bandwidth ([0-9.]+) GB/s per rank", p.stdout, re.M)
    end = re.search(r"^# ideal at the end: copy bandwidth ([0-9.]+) GB/s per rank, "
                    r"([0-9.]+)x the start's", p.stdout, re.M)
    check(start is not None and end is not None,
          f"the copy bandwidth at the start and at the end: {p.stdout[-400:]}")
    if start and end:
        check(end.start() > p.stdout.rfind("# mean busbw"), "the end's line after the last table")
        a, b, ratio = float(start.group(1)), float(end.group(1)), float(end.group(2))
        check(a > 0 and b > 0 and abs(ratio - b / a) <= 0.01 + 0.01 * b / a,
              f"the end's ratio {ratio} is {b} / {a}")

    now = os.path.join(tmp, "now.json")
    p, doc = run(["--op", "all_reduce,all_gather", "--sizes", "256K,1M,2M"], now)
    check(p.returncode == 0, f"run across 1 MiB exits 0, got {p.returncode}: {p.stderr[-500:]}")
    check(len(doc["rows"]) == 12, f"12 rows, got {len(doc['rows'])}")
    asked = (256 << 10, 1 << 20, 2 << 20)

    def size_asked(r):  # all_gather's rows round the size down to whole blocks of 3 ranks
        return min(asked, key=lambda s: abs(s - r["bytes"]))

    for r in doc["rows"]:
        has_now = "x_now" in r
        check(has_now == (size_asked(r) >= 1 << 20),
              f"{r['op']} {r['bytes']} B: x_now from 1 MiB up only, given {r.get('x_now')}")
        if has_now:
            check(r["x_now"] > 0 and r["x_ideal"] > 0, f"{r['op']} {r['bytes']} B: both > 0")
    # x_now / x_ideal is the start's rate / the moment's: one factor per op and size.
    for op in ("all_reduce", "all_gather"):
        for size in asked[1:]:
            factors = {round(r["x_now"] / r["x_ideal"], 3) for r in doc["rows"]
                       if r["op"] == op and size_asked(r) == size}
            check(len(factors) == 1, f"{op} {size} B: one rate for the size's rows: {factors}")

    bad = os.path.join(tmp, "bad.json")
    p, doc = run(["--test-corrupt", "5", "--op", "all_reduce,all_gather,reduce_scatter,"
                  "all_to_all,broadcast,reduce"], bad)
    check(p.returncode == 1, f"corrupted run exits 1, got {p.returncode}")
    check("#wrong" in p.stderr, f"corrupted run says why: {p.stderr[-300:]}")
    check(doc.get("ok") is False, "corrupted run has ok: false")
    check(len(doc["rows"]) == 2 * (4 * 2 + 2), f"20 rows, got {len(doc['rows'])}")
    for r in doc["rows"]:
        check(r["wrong"] == 5, f"{r['op']} {r['place']} {r['bytes']} B: #wrong 5, got {r['wrong']}")

    if plot:
        png = os.path.join(tmp, "bench.png")
        q = subprocess.run([plot_python, plot, good, "-o", png], capture_output=True,
                           text=True, timeout=110)
        check(q.returncode == 0, f"plot exits 0: {q.stderr[-500:]}")
        with open(png, "rb") as f:
            check(f.read(8) == b"\x89PNG\r\n\x1a\n", "plot wrote a PNG")

print("FAILED" if failures else "ok", f"({len(failures)} failures)")
sys.exit(1 if failures else 0)
