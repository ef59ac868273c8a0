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
    ferry-train) expect 2 "'3x'" "$tool" --epochs 3x
                 expect 2 "'3x'" "$tool" --epochs=3x ;;
    ferry-dlrm) expect 2 "'3x'" "$tool" --epochs 3x
                expect 2 "'3x'" "$tool" --epochs=3x
                # Choices are usage errors too, raised before the run starts.
                expect 2 "--sharding foo: expected planner" "$tool" --sharding foo
                expect 2 "--codec fp7: expected fp32" "$tool" --codec fp7 ;;
    ferry-bench) expect 2 "'3x'" "$tool" --iters 3x
                 expect 2 "--transport mpi" env PMI_SIZE=2 PMI_RANK=0 "$tool" --iters 1
                 expect 2 "ferry-run" env FERRY_WORLD_SIZE=2 FERRY_RANK=0 "$tool" --iters 1 ;;
    ferry-run) expect 2 "'3x'" "$tool" -n 3x true ;;
    ferry-autograd-bench) expect 2 "'3x'" "$tool" --reps 3x ;;
    ferry-embedding-bench) expect 2 "'3x'" "$tool" --iters 3x ;;
    ferry-info)
      # Every setting the library knows is shown, in one unit style (no "60.000000 s").
      out="$("$tool" --no-algorithms 2>&1)"
      for v in FERRY_TIMEOUT FERRY_CHECK FERRY_ALGO FERRY_DEBUG FERRY_DEBUG_FILE FERRY_STALL_WARN_S \
               FERRY_TIMELINE FERRY_DEBUG_SUBSYS FERRY_HOST_CACHE_MB FERRY_BACKEND \
               FERRY_MPI_PERSISTENT FERRY_MPI_EXCHANGE FERRY_PROGRESS_THREAD FERRY_UCX_CMA \
               FERRY_UCX_CMA_MIN_BYTES FERRY_UCX_ERROR_HANDLING FERRY_RENDEZVOUS FERRY_RANK \
               FERRY_WORLD_SIZE FERRY_SECRET FERRY_RENDEZVOUS_BIND; do
        grep -q "^  $v " <<<"$out" || { echo "FAIL: ferry-info does not show $v"; fail=1; }
      done
      if grep -q "[0-9]\.[0-9]*0000 s" <<<"$out"; then
        echo "FAIL: ferry-info prints seconds with trailing zeros"; fail=1
      fi
      expect 0 "FERRY_TIMEOUT  *2.5 s" env FERRY_TIMEOUT=2.5 "$tool" --no-algorithms
      expect 0 "FERRY_SECRET  *(set)" env FERRY_SECRET=abc "$tool" --no-algorithms
      # The table: per collective its algorithms and both automatic choices (without and with
      # collectives of the transport's own); an override shows.
      # shm (shared memory) first, for ranks that share a host.
      expect 0 "^all_reduce  *native|persistent|exchange|ring|recursive_doubling|direct|shm|hierarchical  *shm if ranks on one host; direct if <= 4 KiB" \
        "$tool"
      # The hierarchical all_reduce, for ranks on several hosts some of which hold several.
      expect 0 "^all_reduce .*; hierarchical if ranks on several hosts, some sharing one; else ring " \
        "$tool"
      expect 0 "^barrier  *native|persistent|dissemination|shm  *shm if ranks on one host; else dissemination  *shm if ranks on one host; else persistent; else native  *-" \
        "$tool"
      expect 0 "^broadcast  *native|persistent|exchange|tree|shm  *shm if ranks on one host; else tree  *persistent if <= 8 KiB; shm if ranks on one host; exchange if 2 ranks; else native  *native" \
        env FERRY_ALGO=broadcast:native "$tool"
      # Switched off, a way's rows leave the automatic choice.
      expect 0 "^barrier  *native|persistent|dissemination|shm  *shm if ranks on one host; else dissemination  *shm if ranks on one host; else native  *-" \
        env FERRY_MPI_PERSISTENT=0 "$tool"
      # An algorithm the collective does not have: named, with what was given and the choices.
      expect 1 "broadcast has no algorithm 'ring'; expected one of native, persistent, exchange, tree, shm" \
        env FERRY_ALGO=broadcast:ring "$tool" ;;
  esac
done
exit $fail
