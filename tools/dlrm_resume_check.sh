#!/usr/bin/env bash
# Checkpoint and resume of ferry-dlrm: a run resumed from the checkpoint written after epoch 2
# must print exactly the same epoch-3 train loss, test loss, AUC and accuracy, and every
# epoch-3 step's loss (the --metrics CSV, 6 decimals), as the
# uninterrupted 3-epoch run (same world size and plan: bit-identical), and a resume on a
# different world size (2 -> 3 ranks, so a different plan) must load and still pass its checks.
# Usage: dlrm_resume_check.sh path/to/ferry-dlrm
set -euo pipefail
dlrm="$1"
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
small=(--tables 8 --max-rows 2000 --batch 64 --train-samples 16384 --test-samples 4096
       --check-steps 1)
metrics_of() { grep "^epoch $1:" "$2" | sed -E 's/^epoch [0-9]+: [0-9]+ steps, [0-9]+ samples\/s \| //'; }

"$dlrm" --world-size 2 --epochs 3 "${small[@]}" --metrics "$dir/full.csv" > "$dir/full.txt"
"$dlrm" --world-size 2 --epochs 2 "${small[@]}" --checkpoint "$dir/ck" > "$dir/first.txt"
"$dlrm" --world-size 2 --epochs 3 "${small[@]}" --resume "$dir/ck" --metrics "$dir/resumed.csv" \
  > "$dir/resumed.txt"
want="$(metrics_of 3 "$dir/full.txt")"
got="$(metrics_of 3 "$dir/resumed.txt")"
echo "uninterrupted epoch 3: $want"
echo "resumed epoch 3:       $got"
if [ -z "$want" ] || [ "$want" != "$got" ]; then
  echo "FAILED: the resumed run does not continue the same curve"
  exit 1
fi
# Every step's loss of epoch 3 (rank 0, 6 decimals) must match too.
if [ "$(awk -F, '$1 == 3 {print $2, $NF}' "$dir/full.csv")" != \
     "$(awk -F, '$1 == 3 {print $2, $NF}' "$dir/resumed.csv")" ]; then
  echo "FAILED: epoch 3's per-step losses differ after the resume"
  exit 1
fi
"$dlrm" --world-size 3 --epochs 3 "${small[@]}" --resume "$dir/ck" > "$dir/resharded.txt"
echo "resumed on 3 ranks:    $(metrics_of 3 "$dir/resharded.txt")"
echo "passed"
