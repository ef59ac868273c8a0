#!/usr/bin/env bash
# ferry-dlrm on simulated hosts (tools/hosts): the sharded DLRM trains across hosts, its plan's
# nodes are the job's hosts, and node-bound sharding on hosts of different sizes is refused.
#
#   hosts_dlrm.sh HARNESS MODE LAYOUT SHARDING FERRY_DLRM NODE [ARG...]
#       NODE = the ranks per node the plan must print ("2"), or "refused": the run must fail
#       saying why before it trains; ARGs go to ferry-dlrm
#
# Exit status 77 (skip) where the harness cannot make hosts here (it says why).
set -uo pipefail
harness="$1" mode="$2" layout="$3" sharding="$4" dlrm="$5" node="$6"
shift 6
fail() { echo "hosts_dlrm: FAILED: $*" >&2; exit 1; }

out="$("$harness" --mode "$mode" --layout "$layout" --timeout 100 -- "$dlrm" --epochs 2 \
  --tables 8 --max-rows 2000 --batch 64 --train-samples 16384 --test-samples 4096 \
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
