#!/usr/bin/env bash
# Usage: tandem_train_np2.sh TANDEM_TRAIN DATA WORKDIR LAUNCHER...
# LAUNCHER... PROGRAM ARGS starts 2 processes of PROGRAM (run_mpi.sh mpiexec -np 2, or run_env.sh 2). Trains with
# 2 launched processes of tandem-train on cpu:0 each and with one process on cpu:0,cpu:1, and checks that the two
# runs agree (test MSE within 1e-5 relative), that the summary records both processes' devices, and that rank 0
# alone printed and wrote files.
set -euo pipefail
train="$1" data="$2" work="$3/tandem_train_np2_$$"
shift 3
mkdir -p "$work"
trap 'rm -rf "$work"' EXIT
common=(--data "$data" --epochs 20 --batch-size 50 --quiet)

fail() { echo "tandem_train_np2: $*" >&2; exit 1; }

"$@" "$train" "${common[@]}" --devices cpu:0 --summary-json "$work/launched.json" \
  --metrics "$work/launched.metrics" --checkpoint "$work/launched.safetensors" > "$work/launched.out"
"$train" "${common[@]}" --devices cpu:0,cpu:1 --summary-json "$work/single.json" > "$work/single.out"

# One number of a summary file: its line '  "key": value,'.
value() { sed -n "s/^  \"$2\": \\([^,]*\\),\\{0,1\\}$/\\1/p" "$1"; }

launched_mse=$(value "$work/launched.json" test_mse)
single_mse=$(value "$work/single.json" test_mse)
[ -n "$launched_mse" ] && [ -n "$single_mse" ] || fail "no test_mse in the summaries"
awk -v a="$launched_mse" -v b="$single_mse" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 1e-5 * b) }' ||
  fail "test mse $launched_mse in 2 processes on cpu:0 but $single_mse in one process on cpu:0,cpu:1"

[ "$(value "$work/launched.json" world_size)" = 2 ] || fail "world_size is not 2 in $(cat "$work/launched.json")"
tr -d ' \n' < "$work/launched.json" | grep -q '"rank_devices":\[\["cpu:0"\],\["cpu:0"\]\]' ||
  fail "rank_devices is not [[cpu:0], [cpu:0]] in $(cat "$work/launched.json")"
[ "$(grep -c '^done:' "$work/launched.out")" = 1 ] ||
  fail "expected one summary (rank 0's), got: $(cat "$work/launched.out")"
[ "$(wc -l < "$work/launched.metrics")" = 20 ] || fail "expected 20 metrics lines from rank 0"
[ -s "$work/launched.safetensors" ] || fail "rank 0 wrote no checkpoint"
files=$(cd "$work" && ls | sort | tr '\n' ' ')
[ "$files" = "launched.json launched.metrics launched.out launched.safetensors single.json single.out " ] ||
  fail "files left: $files"
echo "tandem_train_np2: test mse $launched_mse (2 processes x cpu:0) == $single_mse (cpu:0,cpu:1)"
