#!/usr/bin/env bash
# Every tool takes the shared command line (tools/cli/args.h): --help prints usage and exits 0,
# a malformed number or an unknown option exits 2 naming it, and ferry-bench refuses to run
# under a launcher without a multi-process --transport.
# Usage: cli_check.sh TOOL...  (paths of the built tools)
set -uo pipefail
fail=0
expect() {  # expect STATUS PATTERN command...
  local want="$1" pattern="$2"
  shift 2
  local out status
  out="$("$@" 2>&1)"
  status=$?
  if [ "$status" -ne "$want" ] || ! grep -q -- "$pattern" <<<"$out"; then
    echo "FAIL: $* -> status $status (want $want), output:"
    echo "$out" | head -5
    fail=1
  else
    echo "ok: $* -> $status"
  fi
}
for tool in "$@"; do
  name="$(basename "$tool")"
  expect 0 "usage: $name" "$tool" --help
  expect 2 "unknown option '--no-such-flag'" "$tool" --no-such-flag
  case "$name" in
    ferry-train|ferry-dlrm) expect 2 "'3x'" "$tool" --epochs 3x
                            expect 2 "'3x'" "$tool" --epochs=3x ;;
    ferry-bench) expect 2 "'3x'" "$tool" --iters 3x
                 expect 2 "--transport mpi" env PMI_SIZE=2 PMI_RANK=0 "$tool" --iters 1
                 expect 2 "ferry-run" env FERRY_WORLD_SIZE=2 FERRY_RANK=0 "$tool" --iters 1 ;;
    ferry-run) expect 2 "'3x'" "$tool" -n 3x true ;;
    ferry-autograd-bench) expect 2 "'3x'" "$tool" --reps 3x ;;
    ferry-embedding-bench) expect 2 "'3x'" "$tool" --iters 3x ;;
  esac
done
exit $fail
