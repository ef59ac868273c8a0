#!/usr/bin/env bash
# ferry-placement-probe prints its two medians and exits 0 on two CPUs; refuses bad options with
# status 2 and one CPU with status 1. Skipped (77) where this process may use fewer than two CPUs.
# Usage: placement_probe_check.sh FERRY_PLACEMENT_PROBE
set -uo pipefail
probe="$1"
if [ "$(nproc)" -lt 2 ]; then
  echo "skip: fewer than two CPUs"
  exit 77
fi
fail=0
out="$("$probe" --bytes 64K --iters 20 2>&1)"
status=$?
if [ "$status" -ne 0 ] ||
   ! grep -qE '^write after the other core read it: [0-9.]+ us; write of untouched memory: [0-9.]+ us \(65536 bytes, CPUs [0-9]+ and [0-9]+, medians of 20\)$' <<<"$out"; then
  echo "FAIL: probe run -> status $status, output: $out"
  fail=1
fi
for args in "--bytes 1K" "--iters x" "--cpus 0" "--cpus 1,1" "--nosuch"; do
  # shellcheck disable=SC2086
  "$probe" $args >/dev/null 2>&1
  status=$?
  if [ "$status" -ne 2 ]; then echo "FAIL: $args -> status $status (want 2)"; fail=1; fi
done
out="$(taskset -c 0 "$probe" --iters 3 2>&1)"
status=$?
if [ "$status" -ne 1 ] || ! grep -q "needs two CPUs" <<<"$out"; then
  echo "FAIL: one CPU -> status $status, output: $out"
  fail=1
fi
exit $fail
