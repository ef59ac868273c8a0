#!/usr/bin/env bash
# A crash mid-save with one process per rank: ferry-dlrm under mpiexec (MPI) and ferry-run (UCX).
# Once the ranks resumed from the second epoch's checkpoint, one rank gets a file-size limit
# (prlimit --fsize) and is killed by SIGXFSZ while it writes its part of the third epoch's
# checkpoint, at several points of the write and on either rank. Every time the second epoch's
# checkpoint must stay as it was and no third one may appear; a resume from it then runs.
# Usage: dlrm_kill_save_check.sh FERRY_DLRM FERRY_RUN [mpi] [ucx]
set -uo pipefail
dlrm="$1" run="$2"
shift 2
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
small=(--tables 8 --max-rows 2000 --batch 64 --train-samples 8192 --test-samples 2048
       --check-steps 1 --min-auc 0)
fail=0
# The rank processes under launcher pid $1: ferry-run's children, or mpiexec's grandchildren.
ranks_of() {
  local kids k
  kids="$(pgrep -P "$1")"
  if [ "$transport" = mpi ]; then for k in $kids; do pgrep -P "$k"; done; else echo "$kids"; fi
}
for transport in "$@"; do
  launch() {  # in a subshell (& or $(...)): exec, so that $! is the launcher itself
    if [ "$transport" = mpi ]; then exec mpiexec -n 2 "$dlrm" "$@"
    else FERRY_BACKEND=ucx exec "$run" -n 2 --timeout 100 "$dlrm" "$@"; fi
  }
  ck="$dir/$transport"
  (launch --epochs 2 "${small[@]}" --checkpoint "$ck") > "$dir/first.txt" 2>&1 ||
    { echo "FAIL: $transport: the first run"; tail -5 "$dir/first.txt"; fail=1; continue; }
  cp "$ck/ckpt-00000002/metadata" "$dir/metadata.good"
  for case in "0 16" "1 100" "0 300"; do
    read -r victim_index kib <<<"$case"
    # A long third epoch, so that the limit is in place well before its save: 4096 steps, about
    # 1.5 s at the step's fastest here (0.35 ms), against the 50 ms poll below. The step got ten
    # times faster since this case was written; at 1024 steps the save sometimes came first.
    launch --epochs 3 "${small[@]}" --train-samples 524288 --resume "$ck" --checkpoint "$ck" \
      > "$dir/crash.txt" 2>&1 &
    launcher=$!
    limited=""
    for _ in $(seq 1 1200); do  # up to 60 s for the resume
      sleep 0.05
      if grep -q "resumed from" "$dir/crash.txt"; then
        mapfile -t pids < <(ranks_of "$launcher" | sort -n)
        if [ "${#pids[@]}" -eq 2 ]; then
          prlimit --pid "${pids[$victim_index]}" --fsize=$((kib * 1024)) && limited=yes
          break
        fi
      fi
      kill -0 "$launcher" 2>/dev/null || break
    done
    wait "$launcher"
    status=$?
    where="a rank limited to ${kib} KiB"
    if [ -n "$limited" ] && [ "$status" -ne 0 ] && [ ! -e "$ck/ckpt-00000003" ] &&
       cmp -s "$ck/ckpt-00000002/metadata" "$dir/metadata.good" &&
       [ -d "$ck/.ckpt-00000003.tmp" ] &&
       ! grep -q -E "signal 6|Aborted|core dumped|terminate called" "$dir/crash.txt"; then
      echo "ok: $transport: $where died mid-save (status $status): ckpt-00000002 intact; left: $(ls -A "$ck" | tr '\n' ' ')"
      grep -E "^ferry-dlrm: rank|^ferry-run: rank|BAD TERMINATION|KILLED BY SIGNAL" "$dir/crash.txt" |
        sed 's/^/    /' | cut -c1-200
    else
      echo "FAIL: $transport: $where: limited=${limited:-no} status $status, left $(ls -A "$ck" | tr '\n' ' ')"
      tail -5 "$dir/crash.txt"
      fail=1
    fi
  done
  out="$(launch --epochs 3 "${small[@]}" --resume "$ck" 2>&1)"
  if [ $? -eq 0 ] && grep -q "resumed from $ck/ckpt-00000002 after epoch 2" <<<"$out"; then
    echo "ok: $transport: resumed from ckpt-00000002 and trained epoch 3"
  else
    echo "FAIL: $transport: the resume after the crashes"
    tail -5 <<<"$out"
    fail=1
  fi
done
exit $fail
