#!/usr/bin/env python3
"""FERRY_TIMELINE writes a Chrome trace (the JSON array format chrome://tracing and Perfetto
open) with a start and an end (a complete "X" event) per collective per rank.

usage: timeline_check.py FERRY_BENCH

Runs a short ferry-bench sweep of all_reduce and all_gather on 3 local ranks with the timeline
on, then checks that the file parses, names each rank as a trace process, and holds, for every
rank, both ops with a non-negative duration, the op's sequence number, in increasing order;
then the same ops on 2 MPI ranks through MPI's own calls, every one of them on the timeline.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

bench = sys.argv[1]
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


with tempfile.TemporaryDirectory() as tmp:
    path = os.path.join(tmp, "trace.%p.json")
    env = dict(os.environ, FERRY_TIMELINE=path)
    p = subprocess.run([bench, "--op", "all_reduce,all_gather", "--world-size", "3", "--sizes",
                        "4K", "--iters", "2", "--warmup", "1"], env=env, capture_output=True,
                       text=True, timeout=110)
    check(p.returncode == 0, f"ferry-bench exits 0: {p.stderr[-500:]}")
    files = [f for f in os.listdir(tmp) if f.startswith("trace.")]
    check(len(files) == 1 and files[0].endswith(".json") and files[0][6:-5].isdigit(),
          f"one file, %p expanded to the pid: {files}")
    with open(os.path.join(tmp, files[0])) as f:
        events = json.load(f)  # the array is closed at exit: plain JSON
    check(isinstance(events, list) and events, "a non-empty JSON array")
    names = {e["pid"]: e["args"]["name"] for e in events
             if e.get("ph") == "M" and e.get("name") == "process_name"}
    check(sorted(names) == [0, 1, 2], f"a trace process per rank: {names}")
    for rank in range(3):
        ops = [e for e in events if e.get("ph") == "X" and e["pid"] == rank]
        kinds = {e["name"] for e in ops}
        check({"all_reduce", "all_gather"} <= kinds, f"rank {rank} has both ops: {kinds}")
        check(all(e["dur"] >= 0 and e["ts"] > 0 and "seq" in e["args"] for e in ops),
              f"rank {rank}: ts, dur and seq on every event")
        # Events are written as the ops end; on one group that is the issue order.
        seqs = [e["args"]["seq"] for e in ops if e["tid"] == ops[0]["tid"]]
        check(seqs == sorted(seqs), f"rank {rank}: seq in order {seqs[:10]}")
        check(not any(e["args"].get("failed") for e in ops), f"rank {rank}: no failed op")

# Under MPI an op may start at issue as MPI's own call, with no context of ferry's around it
# until (unless) a wait runs it to the end: each such op is on the timeline too, none missing.
mpiexec = shutil.which("mpiexec")
if mpiexec is None:
    print("skipped the MPI half: no mpiexec")
else:
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "trace.%r.json")
        env = dict(os.environ, FERRY_TIMELINE=path,
                   FERRY_ALGO="all_reduce:native,all_gather:persistent")
        p = subprocess.run([mpiexec, "-n", "2", bench, "--transport", "mpi", "--op",
                            "all_reduce,all_gather", "--sizes", "4K", "--iters", "3",
                            "--warmup", "1"], env=env, capture_output=True, text=True,
                           timeout=110)
        check(p.returncode == 0, f"ferry-bench under mpiexec exits 0: {p.stderr[-500:]}")
        for rank in range(2):
            with open(os.path.join(tmp, f"trace.{rank}.json")) as f:
                ops = [e for e in json.load(f) if e.get("ph") == "X"]
            kinds = {e["name"] for e in ops}
            check({"all_reduce", "all_gather"} <= kinds, f"MPI rank {rank} has both ops: {kinds}")
            world = sorted(e["args"]["seq"] for e in ops if e["tid"] == 0)
            check(world == list(range(world[0], world[-1] + 1)) if world else False,
                  f"MPI rank {rank}: every op of the world group on the timeline, "
                  f"seq {world[:5]}...{world[-5:]} ({len(world)} events)")

print("FAILED" if failures else "ok", f"({len(failures)} failures)")
sys.exit(1 if failures else 0)
