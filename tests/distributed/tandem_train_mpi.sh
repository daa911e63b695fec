#!/usr/bin/env bash
# Usage: tandem_train_mpi.sh RUN_MPI MPIEXEC TANDEM_TRAIN DATA WORKDIR
# Trains with `RUN_MPI MPIEXEC -np 2 tandem-train --devices cpu:0` and with one process on cpu:0,cpu:1, and checks
# that the two runs agree (test MSE within 1e-5 relative), that the summary records both processes' devices, and that
# rank 0 alone printed and wrote files.
set -euo pipefail
run_mpi="$1" mpiexec="$2" train="$3" data="$4" work="$5/tandem_train_mpi_$$"
mkdir -p "$work"
trap 'rm -rf "$work"' EXIT
common=(--data "$data" --epochs 20 --batch-size 50 --quiet)

fail() { echo "tandem_train_mpi: $*" >&2; exit 1; }

"$run_mpi" "$mpiexec" -np 2 "$train" "${common[@]}" --devices cpu:0 --summary-json "$work/mpi.json" \
  --metrics "$work/mpi.metrics" --checkpoint "$work/mpi.safetensors" > "$work/mpi.out"
"$train" "${common[@]}" --devices cpu:0,cpu:1 --summary-json "$work/single.json" > "$work/single.out"

# One number of a summary file: its line '  "key": value,'.
value() { sed -n "s/^  \"$2\": \\([^,]*\\),\\{0,1\\}$/\\1/p" "$1"; }

mpi_mse=$(value "$work/mpi.json" test_mse)
single_mse=$(value "$work/single.json" test_mse)
[ -n "$mpi_mse" ] && [ -n "$single_mse" ] || fail "no test_mse in the summaries"
awk -v a="$mpi_mse" -v b="$single_mse" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 1e-5 * b) }' ||
  fail "test mse $mpi_mse under mpirun -np 2 but $single_mse in one process on cpu:0,cpu:1"

[ "$(value "$work/mpi.json" world_size)" = 2 ] || fail "world_size is not 2 in $(cat "$work/mpi.json")"
tr -d ' \n' < "$work/mpi.json" | grep -q '"rank_devices":\[\["cpu:0"\],\["cpu:0"\]\]' ||
  fail "rank_devices is not [[cpu:0], [cpu:0]] in $(cat "$work/mpi.json")"
[ "$(grep -c '^done:' "$work/mpi.out")" = 1 ] || fail "expected one summary (rank 0's), got: $(cat "$work/mpi.out")"
[ "$(wc -l < "$work/mpi.metrics")" = 20 ] || fail "expected 20 metrics lines from rank 0"
[ -s "$work/mpi.safetensors" ] || fail "rank 0 wrote no checkpoint"
files=$(cd "$work" && ls | sort | tr '\n' ' ')
[ "$files" = "mpi.json mpi.metrics mpi.out mpi.safetensors single.json single.out " ] || fail "files left: $files"
echo "tandem_train_mpi: test mse $mpi_mse (mpirun -np 2 x cpu:0) == $single_mse (cpu:0,cpu:1)"
