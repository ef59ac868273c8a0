#!/usr/bin/env bash
# Bring-up like torchrun's and srun's: two ferry-train processes given only the launchers'
# variables (RANK / WORLD_SIZE / LOCAL_RANK / MASTER_ADDR / MASTER_PORT, or SLURM_PROCID /
# SLURM_NTASKS / SLURM_LOCALID / SLURM_STEP_NODELIST / MASTER_PORT) and FERRY_SECRET form one
# world of 2 over UCX and train; without an address or a secret they fail naming what is
# missing instead of training alone.
# Usage: launch_check.sh FERRY_TRAIN   (exit 77: skipped, this ferry has no UCX)
set -uo pipefail
train="$1"
# Read whole before matching: `ferry-info | grep -q` under pipefail failed whenever grep exited
# at the first match while ferry-info was still writing (SIGPIPE), and skipped the test.
info="$("$(dirname "$train")/ferry-info" 2>/dev/null)"
grep -qw ucx <<<"$info" || { echo "no UCX: skipped"; exit 77; }
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
fail=0
# A port free now and outside the kernel's ephemeral range (ip_local_port_range): the launchers
# imitated here leave rank 0 to bind MASTER_PORT itself, and meanwhile every rank's UCX worker
# binds ports the kernel picks from that range; a port from it could be taken before rank 0
# binds it.
free_port() {
  python3 - <<'PY'
import random, socket
low = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
for _ in range(1000):
    port = random.randrange(max(1024, low - 12000), low)
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", port))
    except OSError:
        continue
    finally:
        s.close()
    print(port)
    break
PY
}
run_pair() {  # run_pair NAME VARS_FOR_RANK0 -- VARS_FOR_RANK1
  local name="$1"; shift
  local r0=() r1=() side=0
  for a in "$@"; do
    if [ "$a" = "--" ]; then side=1; continue; fi
    if [ $side -eq 0 ]; then r0+=("$a"); else r1+=("$a"); fi
  done
  env -u FERRY_BACKEND "${r0[@]}" "$train" --epochs 2 > "$dir/$name.0" 2>&1 &
  local p0=$!
  env -u FERRY_BACKEND "${r1[@]}" "$train" --epochs 2 > "$dir/$name.1" 2>&1 &
  local p1=$!
  wait $p0; local s0=$?
  wait $p1; local s1=$?
  if [ $s0 -ne 0 ] || [ $s1 -ne 0 ] || ! grep -q "ferry-train: 2 ranks (ucx)" "$dir/$name.0" ||
     ! grep -q "learned" "$dir/$name.0"; then
    echo "FAIL: $name: exit $s0 / $s1"; head -5 "$dir/$name.0" "$dir/$name.1"; fail=1
  else
    echo "ok: $name: one world of 2 ranks over ucx"
  fi
}
port="$(free_port)"
common=(FERRY_SECRET=launch-check MASTER_ADDR=127.0.0.1 MASTER_PORT="$port" WORLD_SIZE=2)
run_pair torchrun "${common[@]}" RANK=0 LOCAL_RANK=0 -- "${common[@]}" RANK=1 LOCAL_RANK=1
port="$(free_port)"
common=(FERRY_SECRET=launch-check SLURM_STEP_NODELIST=localhost MASTER_PORT="$port" SLURM_NTASKS=2)
run_pair slurm "${common[@]}" SLURM_PROCID=0 SLURM_LOCALID=0 -- "${common[@]}" SLURM_PROCID=1 SLURM_LOCALID=1

expect_error() {  # expect_error NAME PATTERN VARS...
  local name="$1" pattern="$2"; shift 2
  local out
  out="$(env -u FERRY_BACKEND "$@" "$train" --epochs 1 2>&1)"
  local status=$?
  if [ $status -eq 0 ] || ! grep -q -- "$pattern" <<<"$out"; then
    echo "FAIL: $name: status $status, output:"; echo "$out" | head -3; fail=1
  else
    echo "ok: $name: refused, naming $pattern"
  fi
}
expect_error "torchrun without MASTER_ADDR" "MASTER_ADDR" FERRY_SECRET=x RANK=0 WORLD_SIZE=2
expect_error "torchrun without FERRY_SECRET" "FERRY_SECRET" -u FERRY_SECRET RANK=0 WORLD_SIZE=2 \
  MASTER_ADDR=127.0.0.1 MASTER_PORT=1
exit $fail
