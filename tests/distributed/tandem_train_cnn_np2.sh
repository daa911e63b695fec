#!/usr/bin/env bash
# Usage: tandem_train_cnn_np2.sh TANDEM_TRAIN DIGITS_CSV WORKDIR LAUNCHER...
# LAUNCHER... PROGRAM ARGS starts 2 processes of PROGRAM (run_mpi.sh mpiexec -np 2). Trains the digits CNN
# (--model cnn, its defaults) with 2 launched processes of tandem-train on cpu:0 each and with one process on
# cpu:0,cpu:1, and checks that the launched run reaches test accuracy 0.97 or more and that the two agree (the same
# accuracy, test loss within 1e-4 relative: the random crops are keyed by example, not by process).
set -euo pipefail
train="$1" data="$2" work="$3/tandem_train_cnn_np2_$$"
shift 3
mkdir -p "$work"
trap 'rm -rf "$work"' EXIT
common=(--model cnn --image-shape 1,8,8 --data "$data" --task classification --quiet)

fail() { echo "tandem_train_cnn_np2: $*" >&2; exit 1; }

"$@" "$train" "${common[@]}" --devices cpu:0 --summary-json "$work/launched.json" > "$work/launched.out"
"$train" "${common[@]}" --devices cpu:0,cpu:1 --summary-json "$work/single.json" > "$work/single.out"

# One number of a summary file: its line '  "key": value,'.
value() { sed -n "s/^  \"$2\": \\([^,]*\\),\\{0,1\\}$/\\1/p" "$1"; }

launched_accuracy=$(value "$work/launched.json" test_accuracy)
single_accuracy=$(value "$work/single.json" test_accuracy)
launched_loss=$(value "$work/launched.json" test_loss)
single_loss=$(value "$work/single.json" test_loss)
[ -n "$launched_accuracy" ] && [ -n "$single_accuracy" ] || fail "no test_accuracy in the summaries"
[ "$(value "$work/launched.json" world_size)" = 2 ] || fail "world_size is not 2 in $(cat "$work/launched.json")"
awk -v a="$launched_accuracy" 'BEGIN { exit !(a >= 0.97) }' ||
  fail "test accuracy $launched_accuracy in 2 processes on cpu:0, below 0.97"
[ "$launched_accuracy" = "$single_accuracy" ] ||
  fail "test accuracy $launched_accuracy in 2 processes on cpu:0 but $single_accuracy in one process on cpu:0,cpu:1"
awk -v a="$launched_loss" -v b="$single_loss" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 1e-4 * b) }' ||
  fail "test loss $launched_loss in 2 processes on cpu:0 but $single_loss in one process on cpu:0,cpu:1"
echo "tandem_train_cnn_np2: test accuracy $launched_accuracy (2 processes x cpu:0) == $single_accuracy (cpu:0,cpu:1)"
