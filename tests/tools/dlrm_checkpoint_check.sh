#!/usr/bin/env bash
# ferry-dlrm's checkpoints on disk: a crash while saving (the process killed by SIGXFSZ under
# `ulimit -f`, mid-write) leaves the previous checkpoint, which a resume on another world size
# loads; and the corrupt-file table, each row refused with status 1 and one line naming what is
# wrong (a flipped bit, a huge length field sealed with a valid checksum, epochs_done outside
# [0, --epochs], another model: tables, rows, dim), with the memory of the refusal bounded.
# Usage: dlrm_checkpoint_check.sh path/to/ferry-dlrm
set -uo pipefail
dlrm="$1"
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
small=(--tables 8 --max-rows 2000 --batch 64 --train-samples 8192 --test-samples 2048
       --check-steps 1 --min-auc 0)
fail=0
expect() {  # expect STATUS PATTERN command...
  local want="$1" pattern="$2"
  shift 2
  local out status
  out="$("$@" 2>&1)"
  status=$?
  if [ "$status" -ne "$want" ] || ! grep -q -- "$pattern" <<<"$out" ||
     grep -q -E "terminate called|Aborted|core dumped|bad_alloc" <<<"$out"; then
    echo "FAIL: $* -> status $status (want $want, '$pattern'), output:"
    echo "$out" | tail -6
    fail=1
  else
    echo "ok: -> $status: $(grep -m1 -- "$pattern" <<<"$out" | cut -c1-220)"
  fi
}
ck="$dir/ck"
"$dlrm" --world-size 2 --epochs 2 "${small[@]}" --checkpoint "$ck" > "$dir/first.txt" 2>&1 ||
  { echo "FAIL: the first run"; tail -5 "$dir/first.txt"; exit 1; }
ls "$ck"
[ -f "$ck/ckpt-00000001/metadata" ] && [ -f "$ck/ckpt-00000002/metadata" ] ||
  { echo "FAIL: ckpt-00000001 and ckpt-00000002 expected"; exit 1; }
cp -r "$ck/ckpt-00000002" "$dir/pristine"

# A crash mid-save: the third epoch's checkpoint dies at its first 64 KiB.
(ulimit -f 64; exec "$dlrm" --world-size 2 --epochs 3 "${small[@]}" --resume "$ck" \
  --checkpoint "$ck") > "$dir/crash.txt" 2>&1
status=$?
echo "the run killed mid-save: status $status; left: $(ls -A "$ck" | tr '\n' ' ')"
if [ "$status" -eq 0 ] || [ -e "$ck/ckpt-00000003" ] || [ ! -d "$ck/.ckpt-00000003.tmp" ] || ! cmp -s "$ck/ckpt-00000002/metadata" "$dir/pristine/metadata"; then
  echo "FAIL: not killed mid-save, or no intact ckpt-00000002 left (or ckpt-00000003 committed)"
  fail=1
fi
expect 0 "resumed from $ck/ckpt-00000002 after epoch 2" \
  "$dlrm" --world-size 3 --epochs 3 "${small[@]}" --resume "$ck"

# The corrupt-file table. Each on a copy of the pristine checkpoint.
fresh() { rm -rf "$dir/bad"; cp -r "$dir/pristine" "$dir/bad"; }
reseal() {  # reseal PYTHON-EXPR-ON-s: edits the metadata's body and recomputes its checksum
  python3 - "$dir/bad/metadata" "$1" <<'PY'
import sys
def crc32c(b):
    t = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        t.append(c)
    c = 0xffffffff
    for x in b:
        c = (c >> 8) ^ t[(c ^ x) & 0xff]
    return c ^ 0xffffffff
path, expr = sys.argv[1], sys.argv[2]
text = open(path).read()
s = text[:text.rindex("end ")]
s = eval(expr)
open(path, "w").write(s + "end %08x\n" % crc32c(s.encode()))
PY
}
resume() { "$dlrm" --world-size 2 --epochs 3 "${small[@]}" --resume "$dir/bad" "$@"; }

fresh; head -c 300 "$dir/pristine/metadata" > "$dir/bad/metadata"
expect 1 "^ferry-dlrm: rank [0-9]: .*metadata is truncated" resume
fresh; printf 'FDLRMCK1' > "$dir/bad/metadata"
expect 1 "^ferry-dlrm: rank [0-9]: .*not a ferry checkpoint" resume
fresh; truncate -s -100 "$dir/bad/rank-00001.bin"
expect 1 "^ferry-dlrm: rank [0-9]: .*rank-00001.bin is [0-9]* bytes; the metadata says" resume
fresh; python3 -c "
import sys; p=sys.argv[1]; b=bytearray(open(p,'rb').read()); b[5000]^=0x04; open(p,'wb').write(b)" \
  "$dir/bad/rank-00000.bin"
expect 1 "^ferry-dlrm: rank [0-9]: .*tensor embedding_bags\.t_[0-9]*\.weight, block at .*rank-00000.bin: checksum mismatch" resume
fresh; reseal "s.replace('counter epochs_done 2', 'counter epochs_done 1000')"
expect 1 "counter epochs_done .* is 1000, expected within \[0, 3\]" resume
fresh; reseal "s.replace('counter epochs_done 2', 'counter epochs_done -3')"
expect 1 "counter epochs_done .* is -3, expected within \[0, 3\]" resume
fresh
expect 1 "counter epochs_done .* is 2, expected within \[0, 1\]" \
  "$dlrm" --world-size 2 --epochs 1 "${small[@]}" --resume "$dir/bad"
# Huge length fields, sealed with a valid checksum: refused from the file's length, in bounded
# memory (a 2 GB address-space limit; the lengths would ask for 64 TiB).
fresh; reseal "__import__('re').sub(r'(tensor embedding_bags.t_0.weight float32 )[0-9]+', r'\g<1>1099511627776', s)"
expect 1 "cover .* of its 17592186044416 elements" \
  bash -c 'ulimit -v 2000000; exec "$@"' _ "$dlrm" --world-size 2 --epochs 3 "${small[@]}" --resume "$dir/bad"
fresh; reseal "__import__('re').sub(r'(block embedding_bags.t_0.weight [0-9]+ [0-9,]+ [0-9,]+ [0-9]+ )[0-9]+', r'\g<1>17592186044416', s, count=1)"
expect 1 "says 17592186044416 bytes" resume
# Another model: a different table count, row count or dim.
fresh
expect 1 "config tables in .* is '8', this program has '7'" \
  "$dlrm" --world-size 2 --epochs 3 --tables 7 --max-rows 2000 --batch 64 --train-samples 8192 \
  --test-samples 2048 --check-steps 1 --min-auc 0 --resume "$dir/bad"
expect 1 "expected shape \[[0-9]*, 16\], the checkpoint has \[[0-9]*, 16\]" \
  "$dlrm" --world-size 2 --epochs 3 --tables 8 --max-rows 1000 --batch 64 --train-samples 8192 \
  --test-samples 2048 --check-steps 1 --min-auc 0 --resume "$dir/bad"
expect 1 "expected shape \[[0-9]*, 8\], the checkpoint has \[[0-9]*, 16\]" \
  "$dlrm" --world-size 2 --epochs 3 "${small[@]}" --dim 8 --resume "$dir/bad"
# Nothing left to train: the loaded model is the verdict, not an error.
expect 0 "resumed from .*bad after epoch 2" \
  "$dlrm" --world-size 2 --epochs 2 "${small[@]}" --resume "$dir/bad"
exit $fail
