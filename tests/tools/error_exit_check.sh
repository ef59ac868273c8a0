#!/usr/bin/env bash
# Every tool ends a failed run with one line "TOOL: rank R: message" on stderr and status 1: no
# std::terminate, no abort, no core dump. Runs the tools into ferry errors: a bad FERRY_BACKEND,
# --resume of a file that is not a checkpoint, and (with ferry-run and UCX) a peer killed
# mid-training, whose survivor must report the PeerFailure, not abort.
# Usage: error_exit_check.sh FERRY_DLRM FERRY_TRAIN FERRY_BENCH FERRY_RUN FERRY_EMBEDDING_BENCH
#        [ucx] [mpi]
set -uo pipefail
dlrm="$1" train="$2" bench="$3" run="$4" embedding_bench="$5"
ucx="" mpi=""
for a in "${@:6}"; do
  case "$a" in ucx) ucx=ucx ;; mpi) mpi=mpi ;; esac
done
fail=0
expect() {  # expect STATUS PATTERN command...
  local want="$1" pattern="$2"
  shift 2
  local out status
  out="$("$@" 2>&1)"
  status=$?
  if [ "$status" -ne "$want" ] || ! grep -q -- "$pattern" <<<"$out" ||
     grep -q -E "terminate called|Aborted|core dumped" <<<"$out"; then
    echo "FAIL: $* -> status $status (want $want, '$pattern'), output:"
    echo "$out" | tail -8
    fail=1
  else
    echo "ok: $* -> $status: $(grep -m1 -- "$pattern" <<<"$out")"
  fi
}
expect 1 "^ferry-dlrm: rank 0: .*FERRY_BACKEND" env FERRY_BACKEND=nosuch "$dlrm" --epochs 1
expect 1 "^ferry-train: rank 0: .*FERRY_BACKEND" env FERRY_BACKEND=nosuch "$train" --epochs 1
expect 1 "^ferry-embedding-bench: rank 0: .*FERRY_BACKEND" env FERRY_BACKEND=nosuch \
  "$embedding_bench" --iters 1 --rows 1000
# ferry-bench reads the environment as part of its command line: status 2.
expect 2 "^ferry-bench: environment: .*FERRY_BACKEND" env FERRY_BACKEND=nosuch "$bench" --iters 1
expect 1 "^ferry-dlrm: rank [01]: checkpoint load /dev/null: rank 0: /dev/null is not a checkpoint directory" \
  "$dlrm" --world-size 2 --epochs 1 --resume /dev/null
# Every rank of a local world refuses it alike, naming the rank that found the fault.
expect 1 "^ferry-dlrm: rank [012]: checkpoint load .*: rank 0: .*no-such-dir does not exist" \
  "$dlrm" --world-size 3 --epochs 1 --resume /nonexistent/no-such-dir
if [ "$ucx" = ucx ]; then
  # One process per rank: each prints its own line with its own rank.
  out="$(FERRY_BACKEND=ucx "$run" -n 2 --timeout 60 "$dlrm" --epochs 1 --resume /dev/null 2>&1)"
  status=$?
  for r in 0 1; do
    if ! grep -q "^ferry-dlrm: rank $r: .*/dev/null is not a checkpoint directory" <<<"$out" ||
       grep -q -E "signal|Aborted|core dumped" <<<"$out" || [ "$status" -ne 1 ]; then
      echo "FAIL: ferry-run -n 2 ferry-dlrm --resume /dev/null (rank $r) -> $status:"
      echo "$out" | tail -8
      fail=1
    else
      echo "ok: ferry-run -n 2 ferry-dlrm --resume /dev/null: rank $r: one line, status 1"
    fi
  done
  # A peer killed mid-training: the survivor reports the PeerFailure in one line, exit 1.
  log="$(mktemp)"
  FERRY_BACKEND=ucx FERRY_TIMEOUT=30 "$run" -n 2 --timeout 90 "$train" --epochs 10000 \
    > "$log" 2>&1 &
  runner=$!
  victim=""
  for _ in $(seq 1 300); do  # up to 30 s for both ranks to start training
    sleep 0.1
    mapfile -t kids < <(pgrep -P "$runner")
    if [ "${#kids[@]}" -eq 2 ] && grep -q "epoch" "$log"; then victim="${kids[1]}"; break; fi
  done
  if [ -n "$victim" ]; then
    kill -KILL "$victim"
    wait "$runner"
    out="$(cat "$log")"
    if grep -q -E "^ferry-train: rank [01]: " <<<"$out" &&
       grep -q -E "rank [01] exited with status 1" <<<"$out" &&
       ! grep -q -E "signal 6|Aborted|core dumped|terminate called" <<<"$out"; then
      echo "ok: a killed peer: $(grep -m1 -E '^ferry-train: rank' <<<"$out" | cut -c1-150)"
    else
      echo "FAIL: a killed peer during ferry-train:"
      tail -8 <<<"$out"
      fail=1
    fi
  else
    kill -TERM "$runner" 2>/dev/null
    wait "$runner"
    echo "FAIL: ferry-train under ferry-run did not start:"
    tail -5 "$log"
    fail=1
  fi
  rm -f "$log"
fi
if [ "$mpi" = mpi ]; then
  out="$(mpiexec -n 2 "$dlrm" --epochs 1 --resume /dev/null 2>&1)"
  status=$?
  if [ "$status" -eq 1 ] &&
     [ "$(grep -c "^ferry-dlrm: rank [01]: checkpoint load /dev/null: rank 0: /dev/null is not a checkpoint directory" <<<"$out")" -eq 2 ] &&
     ! grep -q -E "Aborted|core dumped|terminate called|signal" <<<"$out"; then
    echo "ok: mpiexec -n 2 ferry-dlrm --resume /dev/null: one line per rank, status 1"
  else
    echo "FAIL: mpiexec -n 2 ferry-dlrm --resume /dev/null -> $status:"
    tail -6 <<<"$out"
    fail=1
  fi
fi
exit $fail
