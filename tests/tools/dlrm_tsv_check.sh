#!/usr/bin/env bash
# ferry-dlrm --data: trains on a Criteo-format TSV file (label, 13 integer columns, 26 hex
# columns, some empty) written here, whose labels follow its categorical columns, and must pass
# the equivalence check and learn (test AUC >= 0.6 on a second file from the same rule); a
# malformed line is an error naming the file and the line.
set -euo pipefail
dlrm="$1"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
python3 - "$dir" <<'PY'
import random, sys
def write(path, n, seed):
    rng = random.Random(seed)
    with open(path, "w") as f:
        for _ in range(n):
            cats = [rng.randrange(1 << 32) for _ in range(26)]
            dense = [rng.randrange(0, 50) for _ in range(13)]
            # The click depends on three categorical ids (hashed into small tables by
            # ferry-dlrm) and on one dense column; ids are written as 8 hex digits.
            score = (cats[0] % 7) + (cats[3] % 5) - (cats[5] % 3) + dense[0] / 25.0
            label = 1 if score + rng.gauss(0, 1.5) > 5.5 else 0
            cols = [str(label)] + [str(v) if rng.random() > 0.05 else "" for v in dense]
            cols += ["%08x" % c if rng.random() > 0.05 else "" for c in cats]
            f.write("\t".join(cols) + "\n")
write(sys.argv[1] + "/train.tsv", 8192, 1)
write(sys.argv[1] + "/test.tsv", 2048, 2)
PY
"$dlrm" --data "$dir/train.tsv" --test-data "$dir/test.tsv" --world-size 2 --batch 64 \
  --epochs 3 --max-rows 7 --sparse-lr 1 --min-auc 0.6 | tail -3
# A broken line: one error line naming the file and the line, exit status 1 (not a crash).
{ head -n 40 "$dir/train.tsv"; printf '1\t2\tnot-a-number\n'; head -n 100 "$dir/test.tsv"; } \
  > "$dir/bad.tsv"
set +e
out=$("$dlrm" --data "$dir/bad.tsv" --world-size 1 --batch 8 --epochs 1 --check-steps 1 \
        --check-batch 8 2>&1)
status=$?
set -e
echo "$out" | tail -2
if [ "$status" -ne 1 ] || ! echo "$out" | grep -q "bad.tsv" || ! echo "$out" | grep -q "41"; then
  echo "dlrm_tsv_check: expected an error naming bad.tsv line 41 (status $status)" >&2
  exit 1
fi
echo "dlrm_tsv_check: ok"
