#!/usr/bin/env bash
# ferry-dlrm on simulated hosts (tools/hosts): the sharded DLRM trains across hosts, its plan's
# nodes are the job's hosts, and node-bound sharding on hosts of different sizes is refused.
#
#   hosts_dlrm.sh HARNESS MODE LAYOUT SHARDING FERRY_DLRM NODE [ARG...]
#       NODE = the ranks per node the plan must print ("2"), or "refused": the run must fail
#       saying why before it trains; ARGs go to ferry-dlrm
#
# HOSTS_DLRM_RATE (10gbit, 500mbit): the hosts' links are shaped to it (tools/hosts --rate). With
# --cross-host-bandwidth among the ARGs, the run must print where the planner's bandwidth came
# from (measured, or given), and a measured one on shaped links must not exceed their rate.
#
# Exit status 77 (skip) where the harness cannot make hosts here (it says why).
set -uo pipefail
harness="$1" mode="$2" layout="$3" sharding="$4" dlrm="$5" node="$6"
shift 6
fail() { echo "hosts_dlrm: FAILED: $*" >&2; exit 1; }
rate=()
[ -n "${HOSTS_DLRM_RATE:-}" ] && rate=(--rate "$HOSTS_DLRM_RATE")
bandwidth=""
for ((i = 1; i < $#; i++)); do
  [ "${!i}" = --cross-host-bandwidth ] && { j=$((i + 1)); bandwidth="${!j}"; }
done

out="$("$harness" --mode "$mode" --layout "$layout" "${rate[@]}" --timeout 100 -- "$dlrm" \
  --epochs 2 --tables 8 --max-rows 2000 --batch 64 --train-samples 16384 --test-samples 4096 \
  --sharding "$sharding" "$@" 2>&1)"
status=$?
printf '%s\n' "$out"
[ "$status" = 77 ] && exit 77
if [ "$node" = refused ]; then
  [ "$status" != 0 ] || fail "--sharding $sharding on hosts of $layout ranks ran"
  grep -q "hosts of different sizes" <<<"$out" || fail "no reason given for the refusal"
  if grep -q "equivalence" <<<"$out"; then fail "it trained before it refused"; fi
  exit 0
fi
[ "$status" = 0 ] || fail "the job ended with status $status"
grep -q "torchrec sharding plan: .* ranks, $node per node" <<<"$out" ||
  fail "the plan does not take $node ranks per node"
grep -q "equivalence passed" <<<"$out" || fail "no passed equivalence check"
grep -qE "cross-node traffic per step: |one node: no byte crosses nodes" <<<"$out" ||
  fail "the plan does not say what crosses nodes"
if [ "$bandwidth" = measure ]; then
  line="$(grep -o "cross-host bandwidth [0-9.]* [kMG]*B/s (measured)" <<<"$out")" ||
    fail "no measured cross-host bandwidth printed"
  if [ -n "${HOSTS_DLRM_RATE:-}" ]; then
    # The bytes per second measured, against the link's rate (a 256 KiB burst aside, tc's tbf
    # passes no more): a figure above it was not measured across the link.
    awk -v line="$line" -v rate="$HOSTS_DLRM_RATE" 'BEGIN {
      split(line, w, " "); v = w[3]; u = w[4]
      v *= (u == "GB/s") ? 1e9 : (u == "MB/s") ? 1e6 : (u == "kB/s") ? 1e3 : 1
      r = rate + 0; r *= (rate ~ /gbit$/) ? 1e9 / 8 : (rate ~ /mbit$/) ? 1e6 / 8 : 1
      exit !(v > 0 && v <= 1.1 * r) }' ||
      fail "$line: more than the links' $HOSTS_DLRM_RATE"
  fi
elif [ -n "$bandwidth" ]; then
  grep -q "cross-host bandwidth [0-9.]* [kMG]*B/s (given)" <<<"$out" ||
    fail "no given cross-host bandwidth printed"
fi
