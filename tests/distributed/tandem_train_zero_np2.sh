#!/usr/bin/env bash
# Usage: tandem_train_zero_np2.sh TANDEM_TRAIN DATA WORKDIR LAUNCHER...
# LAUNCHER... PROGRAM ARGS starts 2 processes of PROGRAM (run_mpi.sh mpiexec -np 2). Trains with --zero 0, --zero 1
# (ZeRO stage 1: the optimizer state sharded over the 4 devices, 2 processes x cpu:0,cpu:1) and --zero 2 (the reduced
# gradients sharded too) for SGD with momentum and AdamW, and checks that the summaries' losses agree within 1e-6
# relative, that each device of the sharded runs holds about a quarter of the optimizer state
# (optimizer_state_bytes_per_device) and at --zero 2 a quarter of the gradients (gradient_bytes_per_device); that a
# --zero 1 checkpoint of the 2 processes after 5 epochs resumes in one process on 3 devices (--zero 1 and 2) and on
# 1 device (--zero 0) and ends where the uninterrupted run does (1e-6 relative); --zero 3 is refused with a usage
# error.
set -euo pipefail
train="$1" data="$2" work="$3/tandem_train_zero_np2_$$"
shift 3
mkdir -p "$work"
trap 'rm -rf "$work"' EXIT
setup=(--data "$data" --batch-size 50 --quiet)
common=("${setup[@]}" --epochs 10 --devices cpu:0,cpu:1)

fail() { echo "tandem_train_zero_np2: $*" >&2; exit 1; }
# One number of a summary file: its line '  "key": value,'.
value() { sed -n "s/^  \"$2\": \\([^,]*\\),\\{0,1\\}$/\\1/p" "$1"; }
close() { awk -v a="$1" -v b="$2" 'BEGIN { d = a - b; if (d < 0) d = -d; m = b < 0 ? -b : b; exit !(d <= 1e-6 * m) }'; }

# A quarter of `whole` bytes, each of the 4 devices' shards padded by under one element per bucket and buffer.
quarter() { [ -n "$1" ] && [ "$2" -gt 0 ] && [ $((4 * $1)) -ge "$2" ] && [ $((4 * $1)) -lt $(($2 + 4 * 64)) ]; }

for optimizer in sgd adamw; do
  for zero in 0 1 2; do
    "$@" "$train" "${common[@]}" --optimizer "$optimizer" --zero "$zero" \
      --summary-json "$work/$optimizer$zero.json" > "$work/out" 2>&1 || fail "--zero $zero: $(cat "$work/out")"
  done
  replicated=$(value "$work/${optimizer}0.json" optimizer_state_bytes_per_device)
  gradients=$(value "$work/${optimizer}0.json" gradient_bytes_per_device)
  for zero in 1 2; do
    for key in train_mse test_mse; do
      a=$(value "$work/${optimizer}$zero.json" "$key") b=$(value "$work/${optimizer}0.json" "$key")
      [ -n "$a" ] && [ -n "$b" ] || fail "no $key in the summaries"
      close "$a" "$b" || fail "$optimizer: $key $a with --zero $zero but $b with --zero 0"
    done
    sharded=$(value "$work/${optimizer}$zero.json" optimizer_state_bytes_per_device)
    quarter "$sharded" "$replicated" ||
      fail "$optimizer: $sharded optimizer state bytes per device with --zero $zero but $replicated with --zero 0"
  done
  shard=$(value "$work/${optimizer}2.json" gradient_bytes_per_device)
  quarter "$shard" "$gradients" ||
    fail "$optimizer: $shard gradient bytes per device with --zero 2 but $gradients with --zero 0"
  echo "tandem_train_zero_np2: $optimizer: test mse $b, state bytes per device $replicated -> $sharded," \
    "gradient bytes per device $gradients -> $shard"
done

expect_usage_error() {
  local pattern="$1"
  shift
  if "$train" --data "$data" --epochs 1 --quiet "$@" > "$work/out" 2>&1; then fail "$* trained"; fi
  grep -q -- "$pattern" "$work/out" || fail "expected '$pattern' in: $(cat "$work/out")"
}
expect_usage_error "--zero must be an integer in \\[0, 2\\]" --zero 3

"$@" "$train" "${setup[@]}" --epochs 5 --devices cpu:0,cpu:1 --optimizer adamw --zero 1 \
  --checkpoint "$work/half.safetensors" > "$work/out" 2>&1 || fail "the first half: $(cat "$work/out")"
for resume in "1 cpu:0,cpu:1,cpu:2" "2 cpu:0,cpu:1,cpu:2" "0 cpu:0"; do
  read -r zero devices <<< "$resume"
  "$train" "${setup[@]}" --epochs 10 --devices "$devices" --optimizer adamw --zero "$zero" \
    --resume "$work/half.safetensors" --summary-json "$work/resumed.json" > "$work/out" 2>&1 ||
    fail "the resume with --zero $zero on $devices: $(cat "$work/out")"
  a=$(value "$work/resumed.json" test_mse) b=$(value "$work/adamw1.json" test_mse)
  [ -n "$a" ] && close "$a" "$b" ||
    fail "resumed with --zero $zero on $devices: test mse $a, but $b uninterrupted on 2 processes"
  echo "tandem_train_zero_np2: resumed with --zero $zero on $devices: test mse $a (uninterrupted: $b)"
done
rm -f "$work"/*.json "$work"/*.safetensors "$work/out"
[ -z "$(ls "$work")" ] || fail "files left: $(ls "$work")"
