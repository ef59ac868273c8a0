#!/bin/bash
# Runs one hung-peer job (hung_peer_main --keep-stopped under a launcher: "$@") and checks it from
# its output: every survivor printed its finalize line and no check failed, the watcher ended the
# stopped rank, and nothing of the job is left running. The launcher's own status must be 0,
# except where the watcher killed the stopped rank (the MPI transport): mpiexec then reports that
# rank's signal, which is accepted for that pid alone.
set -u
n=0
for ((i = 1; i < $#; ++i)); do
  [ "${!i}" = "-n" ] && { j=$((i + 1)); n=${!j}; }
done
[ "$n" -ge 2 ] || { echo "hung_peer_check: no -n N among the arguments: $*"; exit 2; }
out=$("$@" 2>&1)
status=$?
echo "$out"
fail=0
finalized=$(grep -cE "^hung-peer: rank [0-9]+ finalize (returned|raised)" <<<"$out")
if [ "$finalized" -ne $((n - 1)) ]; then
  echo "FAIL: $finalized of $((n - 1)) survivors reported their finalize"
  fail=1
fi
if grep -qE "CHECK FAILED|unexpected exception" <<<"$out"; then
  echo "FAIL: a survivor's check failed (above)"
  fail=1
fi
watcher=$(grep -oE "^hung-peer: watcher: victim rank [0-9]+ pid [0-9]+ (killed|resumed)" <<<"$out")
victim_pid=$(awk '{print $7}' <<<"$watcher")
if [ -z "$victim_pid" ]; then
  echo "FAIL: the watcher did not end the stopped rank"
  fail=1
elif [ "$status" -ne 0 ]; then
  # Only the killed victim may have ended badly.
  bad=$(grep -oE "PID [0-9]+ RUNNING AT" <<<"$out" | awk '{print $2}' | sort -u)
  if [[ "$watcher" != *killed ]] || [ "$bad" != "$victim_pid" ]; then
    echo "FAIL: the launcher exited $status, and not for the killed stopped rank alone (pids: $bad)"
    fail=1
  fi
fi
# With HUNG_CHECK_FORCE_CLOSE=1 (and FERRY_DEBUG=info) every survivor must have closed its
# endpoint to the stopped rank with force, the close that releases what UCX holds with it.
if [ "${HUNG_CHECK_FORCE_CLOSE:-0}" = 1 ] && [ -n "$victim_pid" ]; then
  victim_rank=$(awk '{print $5}' <<<"$watcher")
  forced=$(grep -oE "rank [0-9]+: closing the endpoint to rank $victim_rank with force" <<<"$out" |
           sort -u | wc -l)
  if [ "$forced" -ne $((n - 1)) ]; then
    echo "FAIL: $forced of $((n - 1)) survivors closed their endpoint to rank $victim_rank with force"
    fail=1
  fi
fi
# Nothing is left: the victim (stopped or not) and its watcher are gone.
for _ in $(seq 50); do
  kill -0 "$victim_pid" 2>/dev/null || break
  sleep 0.1
done
if [ -n "$victim_pid" ] && kill -0 "$victim_pid" 2>/dev/null; then
  echo "FAIL: the stopped rank (pid $victim_pid) is still there: $(ps -o stat=,args= -p "$victim_pid")"
  kill -KILL "$victim_pid" 2>/dev/null
  fail=1
fi
[ $fail -eq 0 ] && echo "hung_peer_check: ok ($((n - 1)) survivors finalized, the stopped rank ${watcher##* })"
exit $fail
