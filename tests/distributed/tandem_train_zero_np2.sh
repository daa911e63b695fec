#!/usr/bin/env bash
# Usage: tandem_train_zero_np2.sh TANDEM_TRAIN DATA WORKDIR LAUNCHER...
# LAUNCHER... PROGRAM ARGS starts 2 processes of PROGRAM (run_mpi.sh mpiexec -np 2). Trains with --zero 0 and
# --zero 1 (ZeRO stage 1: the optimizer state sharded over the 4 devices, 2 processes x cpu:0,cpu:1) for SGD with
# momentum and AdamW, and checks that the summaries' losses agree within 1e-6 relative and that each device of the
# sharded run holds less optimizer state (optimizer_state_bytes_per_device); that a --zero 1 checkpoint of the 2
# processes after 5 epochs resumes in one process on 3 devices (--zero 1) and on 1 device (--zero 0) and ends where
# the uninterrupted run does (1e-6 relative); --zero 2 is refused with a usage error.
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

for optimizer in sgd adamw; do
  for zero in 0 1; do
    "$@" "$train" "${common[@]}" --optimizer "$optimizer" --zero "$zero" \
      --summary-json "$work/$optimizer$zero.json" > "$work/out" 2>&1 || fail "--zero $zero: $(cat "$work/out")"
  done
  for key in train_mse test_mse; do
    a=$(value "$work/${optimizer}1.json" "$key") b=$(value "$work/${optimizer}0.json" "$key")
    [ -n "$a" ] && [ -n "$b" ] || fail "no $key in the summaries"
    close "$a" "$b" || fail "$optimizer: $key $a with --zero 1 but $b with --zero 0"
  done
  sharded=$(value "$work/${optimizer}1.json" optimizer_state_bytes_per_device)
  replicated=$(value "$work/${optimizer}0.json" optimizer_state_bytes_per_device)
  [ -n "$sharded" ] && [ "$replicated" -gt 0 ] && [ $((4 * sharded)) -lt $((replicated + 4 * 64)) ] &&
    [ "$sharded" -lt "$replicated" ] ||
    fail "$optimizer: $sharded optimizer state bytes per device with --zero 1 but $replicated with --zero 0"
  echo "tandem_train_zero_np2: $optimizer: test mse $b, state bytes per device $replicated -> $sharded"
done

expect_usage_error() {
  local pattern="$1"
  shift
  if "$train" --data "$data" --epochs 1 --quiet "$@" > "$work/out" 2>&1; then fail "$* trained"; fi
  grep -q -- "$pattern" "$work/out" || fail "expected '$pattern' in: $(cat "$work/out")"
}
expect_usage_error "--zero 2 (sharded gradients) is not supported yet" --zero 2

"$@" "$train" "${setup[@]}" --epochs 5 --devices cpu:0,cpu:1 --optimizer adamw --zero 1 \
  --checkpoint "$work/half.safetensors" > "$work/out" 2>&1 || fail "the first half: $(cat "$work/out")"
for resume in "1 cpu:0,cpu:1,cpu:2" "0 cpu:0"; do
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
