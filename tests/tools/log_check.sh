#!/usr/bin/env bash
# The log format (runtime/log.h): FERRY_DEBUG_FILE with %h %p %r gives one file per rank, every
# line carries a UTC timestamp, host:pid and the rank, and a process's first line names the
# version. Runs ferry-train on 2 local ranks for one epoch.
# Usage: log_check.sh FERRY_TRAIN
set -euo pipefail
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
FERRY_DEBUG=info FERRY_DEBUG_FILE="$dir/ferry.%h.%p.%r.log" "$1" --world-size 2 --epochs 1 >/dev/null
host="$(hostname)"
ls "$dir"
for r in - 0 1; do
  compgen -G "$dir/ferry.$host.*.$r.log" >/dev/null || { echo "FAIL: no log file for rank $r"; exit 1; }
done
first="$(head -1 "$dir"/ferry.*.-.log)"
[[ "$first" =~ ^\[ferry\ [0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{6}\ .+:[0-9]+\ r-\ INFO\ init\]\ ferry\ version\ [0-9]+\.[0-9]+\.[0-9]+$ ]] ||
  { echo "FAIL: first line '$first'"; exit 1; }
for r in 0 1; do
  # Every line that starts a log record (the algorithm table continues over plain lines).
  bad="$(grep '^\[ferry' "$dir"/ferry.*."$r".log |
         grep -Ev "^\[ferry [0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{6} .+:[0-9]+ r$r (WARN|INFO|TRACE) [a-z]+\] " || true)"
  [ -z "$bad" ] || { echo "FAIL: rank $r lines not in the format:"; echo "$bad" | head -3; exit 1; }
  grep -q "^\[ferry .* r$r INFO init\] world group" "$dir"/ferry.*."$r".log ||
    { echo "FAIL: rank $r's file lacks its world group line"; exit 1; }
done
echo "ok: one file per rank, every line timestamped with host:pid and rank"
