#!/usr/bin/env bash
# The simulated-hosts tests (tools/hosts): each runs a job on hosts the harness makes and then
# checks that the harness left nothing behind (no namespace named after its run, no folder).
#
#   hosts_test.sh HARNESS job MODE LAYOUT PROGRAM [ARG...]
#       the job (PROGRAM on every rank) must succeed
#   hosts_test.sh HARNESS info MODE LAYOUT FERRY_INFO
#       ferry-info --layout and FERRY_DEBUG=info print the layout the harness made
#   hosts_test.sh HARNESS fault MODE LAYOUT KIND HOST PROGRAM [ARG...]
#       a fault (KIND kill or cut, of host HOST) strikes the job of hosts_faults (PROGRAM, whose
#       ranks check their own errors): over UCX every rank the fault did not kill must report
#       its check passed, the killed ones must have been killed, and the run must succeed
#   hosts_test.sh HARNESS finalize LAYOUT RUNS FERRY_INFO
#       ferry-info --layout under mpiexec across the hosts, RUNS times, ferry starting and ending
#       MPI: every run must end with status 0 and every rank's line; where MPI_Finalize did not
#       return within its bound (FERRY_TIMEOUT=3 here), every rank must say so and have told
#       mpiexec that it ends on purpose
#   hosts_test.sh HARNESS leftovers
#       runs ended by SIGTERM and by the harness's own timeout leave nothing; one killed by
#       SIGKILL leaves its namespaces, which `tools/hosts cleanup` then removes
#
# Exit status 77 (skip) where the harness cannot make hosts here (it says why).
set -uo pipefail
harness="$1" what="$2"
shift 2
fail() { echo "hosts_test: FAILED: $*" >&2; exit 1; }
export TMPDIR="${TMPDIR:-/tmp}"

# The names a run of pid $1 would have left.
leftovers_of() {
  ip netns list 2>/dev/null | awk '{print $1}' | grep "^ferryhosts-$1-" || true
  ls -d "$TMPDIR/ferryhosts-$1" 2>/dev/null || true
}

# Runs the harness with "$@" in the background (so its pid is known), waits, checks leftovers.
# Sets `status` and `out` (its stdout and stderr).
run_harness() {
  local log
  log="$(mktemp)"
  "$harness" "$@" >"$log" 2>&1 &
  local pid=$!
  wait "$pid"
  status=$?
  out="$(cat "$log")"
  rm -f "$log"
  printf '%s\n' "$out"
  [ "$status" = 77 ] && exit 77
  local left
  left="$(leftovers_of "$pid")"
  [ -z "$left" ] || fail "the run (status $status) left: $left"
}

layout_args() { echo "--layout ${1// /,}"; }

case "$what" in
  job)
    mode="$1" layout="$2"
    shift 2
    # shellcheck disable=SC2046
    run_harness --mode "$mode" $(layout_args "$layout") --timeout 100 --launcher-vars -- "$@"
    [ "$status" = 0 ] || fail "the job ended with status $status"
    # ferry's UCX transport hands every request back before its worker ends, withdrawn ones
    # included (MPICH's own UCX, under --mode mpi, is not ferry's to answer for).
    if [ "$mode" = ucx ] && grep -q "was not returned to mpool" <<<"$out"; then
      fail "UCX warned at exit of a request ferry never handed back"
    fi
    ;;
  info)
    mode="$1" layout="$2" info="$3"
    IFS=, read -r -a sizes <<<"$layout"
    hosts=${#sizes[@]} world=0
    for s in "${sizes[@]}"; do world=$((world + s)); done
    # shellcheck disable=SC2046
    run_harness --mode "$mode" $(layout_args "$layout") --timeout 60 -- \
      env FERRY_DEBUG=info FERRY_DEBUG_SUBSYS=init,ucx "$info" --layout
    [ "$status" = 0 ] || fail "ferry-info --layout ended with status $status"
    grep -q "^layout: $world ranks on $hosts hosts" <<<"$out" ||
      fail "no layout line for $world ranks on $hosts hosts"
    r=0
    for ((h = 0; h < hosts; h++)); do
      grep -q "^  host $h (ferry-h$h): ${sizes[h]} rank" <<<"$out" ||
        fail "no line for host $h with ${sizes[h]} ranks"
      for ((l = 0; l < sizes[h]; l++)); do
        grep -q "^rank $r: host $h (ferry-h$h), local rank $l of ${sizes[h]}$" <<<"$out" \
          || fail "rank $r is not reported as local rank $l of ${sizes[h]} on host $h"
        grep -q "rank $r: host $h of $hosts, local rank $l of ${sizes[h]}" <<<"$out" \
          || fail "FERRY_DEBUG=info does not say where rank $r runs"
        # The UCX transport reads by CMA only from the ranks it counts on its host.
        if [ "$mode" = ucx ]; then
          grep -q "ucx\] rank $r of $world: UCP worker ready, ${sizes[h]} ranks on this host" \
            <<<"$out" || fail "the UCX transport of rank $r does not count ${sizes[h]} ranks on its host"
        fi
        r=$((r + 1))
      done
    done
    grep -q "hosts: $hosts hosts" <<<"$out" || fail "FERRY_DEBUG=info has no hosts line"
    # Ranks on several hosts sharing some, without MPI's collectives: the hierarchical all_reduce.
    grep -q "^all_reduce on this world: 8 B direct, 64 KiB hierarchical, 16384 KiB hierarchical$" \
      <<<"$out" || fail "ferry-info does not say that all_reduce takes the hierarchical algorithm"
    for c in reduce_scatter all_gather; do
      grep -q "^$c on this world: 8 B hierarchical, 64 KiB hierarchical, 16384 KiB hierarchical$" \
        <<<"$out" || fail "ferry-info does not say that $c takes the hierarchical algorithm"
    done
    ;;
  fault)
    mode="$1" layout="$2" kind="$3" host="$4"
    shift 4
    IFS=, read -r -a sizes <<<"$layout"
    world=0
    for s in "${sizes[@]}"; do world=$((world + s)); done
    # init keeps a long deadline (a loaded machine may start slowly); the program sets its own.
    # shellcheck disable=SC2046
    run_harness --mode "$mode" $(layout_args "$layout") --timeout 60 "--$kind" "$host" -- \
      env FERRY_TIMEOUT=30 "$@"
    grep -q "^tools/hosts: fault: " <<<"$out" || fail "the fault never struck"
    survivors=$world killed=0
    [ "$kind" = kill ] && survivors=$((world - sizes[host])) killed=${sizes[host]}
    passed="$(grep -cE "^hosts-faults: rank [0-9]+ .*: ok$" <<<"$out")"
    [ "$passed" = "$survivors" ] || fail "$passed of $survivors surviving ranks passed their checks"
    dead="$(grep -cE \
      "^tools/hosts: rank [0-9]+ \(host $host\): status 137 \(killed by the fault\)$" <<<"$out")"
    [ "$dead" = "$killed" ] || fail "$dead of $killed ranks on host $host were killed by the fault"
    [ "$status" = 0 ] || fail "the run ended with status $status"
    ;;
  finalize)
    layout="$1" runs="$2" info="$3"
    IFS=, read -r -a sizes <<<"$layout"
    world=0
    for s in "${sizes[@]}"; do world=$((world + s)); done
    bounded=0
    for ((run = 1; run <= runs; run++)); do
      # shellcheck disable=SC2046
      run_harness --mode mpi $(layout_args "$layout") --timeout 60 -- \
        env FERRY_TIMEOUT=3 "$info" --layout
      [ "$status" = 0 ] || fail "run $run ended with status $status"
      lines="$(grep -cE "^rank [0-9]+: host [0-9]+ " <<<"$out")"
      [ "$lines" = "$world" ] || fail "run $run: $lines of $world ranks printed their line"
      stuck="$(grep -cE "^ferry: rank [0-9]+: MPI_Finalize did not return within 3000 ms" \
        <<<"$out")"
      told="$(grep -cE "^ferry: rank [0-9]+: mpiexec was told that this rank ends" <<<"$out")"
      [ "$told" = "$stuck" ] || fail "run $run: $stuck ranks passed the bound, $told told mpiexec"
      [ "$stuck" = 0 ] || bounded=$((bounded + 1))
    done
    echo "hosts_test: MPI_Finalize passed its bound in $bounded of $runs runs"
    ;;
  leftovers)
    # Ended by SIGTERM while its job runs: its trap removes everything.
    "$harness" --timeout 60 -- sleep 30 >/dev/null 2>&1 &
    pid=$!
    for _ in $(seq 1 100); do
      [ -n "$(ip netns list | grep "^ferryhosts-$pid-h1")" ] && break
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    wait_status=0
    if [ -z "$(leftovers_of "$pid")" ]; then
      wait "$pid"
      [ $? = 77 ] && exit 77
      fail "the hosts never appeared"
    fi
    sleep 0.5  # its ranks started
    kill -TERM "$pid"
    wait "$pid" || wait_status=$?
    [ "$wait_status" = 143 ] || fail "a run ended by SIGTERM exits with $wait_status, not 143"
    [ -z "$(leftovers_of "$pid")" ] || fail "a run ended by SIGTERM left: $(leftovers_of "$pid")"
    echo "hosts_test: a run ended by SIGTERM left nothing"
    # Its own timeout.
    run_harness --timeout 2 -- sleep 30
    [ "$status" = 124 ] || fail "a run past --timeout exits with $status, not 124"
    grep -q "did not end within 2 s" <<<"$out" || fail "the timeout is not reported"
    echo "hosts_test: a run past its timeout left nothing"
    # Killed by SIGKILL: nothing can run then; cleanup removes what it left, and only that.
    "$harness" --timeout 60 -- sleep 30 >/dev/null 2>&1 &
    pid=$!
    for _ in $(seq 1 100); do
      [ -n "$(ip netns list | grep "^ferryhosts-$pid-h1")" ] && break
      sleep 0.1
    done
    sleep 0.5
    kill -KILL "$pid"
    wait "$pid" 2>/dev/null
    [ -n "$(leftovers_of "$pid")" ] || fail "a run killed by SIGKILL left nothing to clean up (?)"
    "$harness" cleanup || fail "tools/hosts cleanup failed"
    [ -z "$(leftovers_of "$pid")" ] || fail "cleanup left: $(leftovers_of "$pid")"
    echo "hosts_test: cleanup removed what a run killed by SIGKILL left"
    ;;
  *) fail "unknown test $what" ;;
esac
echo "hosts_test: $what passed"
