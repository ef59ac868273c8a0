#!/usr/bin/env bash
# One fuzz target for a short time (FERRY_FUZZ_SECONDS, default 5) from its seed corpus:
# the meson test of suite 'fuzz'. New inputs go to a temporary folder, never into the repo's
# corpus. Fails on any crash, sanitizer report or broken property.
set -uo pipefail
target="$1" corpus="$2" seconds="${FERRY_FUZZ_SECONDS:-5}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
"$target" "$work" "$corpus" -max_total_time="$seconds" -print_final_stats=1 \
  -artifact_prefix="$work/" -timeout=10 -rss_limit_mb=2048 > "$work/log" 2>&1
status=$?
# libFuzzer's progress lines (#1234 NEW ...) are noise here; the rest is the summary or the
# report.
grep -v '^#[0-9]' "$work/log"
if [ "$status" -ne 0 ]; then
  # The input that failed, so that the failure can be reproduced from the log alone.
  for f in "$work"/crash-* "$work"/leak-* "$work"/timeout-* "$work"/oom-*; do
    [ -f "$f" ] && { echo "input that failed ($(basename "$f")):"; od -An -tx1 "$f" | head -40; }
  done
fi
exit "$status"
