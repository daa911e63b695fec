#!/usr/bin/env bash
# Multi-process data parallel against PyTorch's DDP, measured in one run on a machine with two GPUs (see
# docs/benchmarks.md). Builds nothing: it needs $TANDEM_BUILD_DIR (default build-gpu) built with CUDA and MPI
# (benchmarks/gpu_suite.sh build), mpirun, and python3 with torch. It runs
#   - build-gpu/bin/ddp_step_bench under mpirun -np 2 (one GPU per process), then in one process driving both GPUs,
#     each in plain FP32 and BF16 mixed precision (the workload wide-bf16), and again with TANDEM_ALLOW_TF32=1;
#   - benchmarks/torch_ddp_bench.py under torchrun --nproc_per_node 2;
#   - build-gpu/bin/nccl_mpi_allreduce (ProcessGroup::all_reduce beside raw NCCL with MPI bootstrap) under
#     mpirun -np 2, when it was built;
# keeps every log and JSON lines file under OUTDIR, and prints the comparison (benchmarks/ddp_compare.py), also
# written to OUTDIR/ddp_table.md. Exit status 1 when any run failed (the table then shows it as missing).
#
# Usage: benchmarks/ddp_suite.sh [OUTDIR]        (default: out/ddp)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
out="${1:-out/ddp}"
build="${TANDEM_BUILD_DIR:-build-gpu}"
mkdir -p "$out" || exit 1
runs=(tandem_2x1 tandem_2x1_tf32 tandem_1x2 tandem_1x2_tf32 allreduce torch)
for name in "${runs[@]}"; do rm -f "$out/$name.log" "$out/$name.jsonl"; done
rm -f "$out/commands.log" "$out/allreduce.md" "$out/ddp_table.md"
export NCCL_NVLS_ENABLE=0  # never use NVLink multicast on shared machines

# --bind-to none: each process runs worker threads (one per device) beside its main thread; binding a process to
# one core would serialize them.
mpirun=(mpirun -np 2 --bind-to none -x NCCL_NVLS_ENABLE)
[ "$(id -u)" = 0 ] && mpirun+=(--allow-run-as-root)
bench="$build/bin/ddp_step_bench"
all_reduce="$build/bin/nccl_mpi_allreduce"
status=0

# run LOG COMMAND...: runs the command (10 minutes at most), its output in OUTDIR/LOG; a failure is reported and
# remembered, and the suite goes on.
run() {
  local log="$1"
  shift
  echo "+ $*" >>"$out/commands.log"
  timeout 600 "$@" >"$out/$log" 2>&1
  local code=$?
  if [ $code -ne 0 ]; then
    echo "ddp_suite: exit status $code from: $* (log: $out/$log)" >&2
    tail -15 "$out/$log" >&2
    status=1
  fi
}

if [ -x "$bench" ]; then
  run tandem_2x1.log "${mpirun[@]}" "$bench" --jsonl "$out/tandem_2x1.jsonl"
  run tandem_2x1_tf32.log env TANDEM_ALLOW_TF32=1 "${mpirun[@]}" -x TANDEM_ALLOW_TF32 "$bench" \
    --jsonl "$out/tandem_2x1_tf32.jsonl"
  run tandem_1x2.log "$bench" --devices-per-process 2 --jsonl "$out/tandem_1x2.jsonl"
  run tandem_1x2_tf32.log env TANDEM_ALLOW_TF32=1 "$bench" --devices-per-process 2 --jsonl "$out/tandem_1x2_tf32.jsonl"
else
  echo "ddp_suite: $bench is missing: build tandem with CUDA and MPI first (benchmarks/gpu_suite.sh build)" >&2
  status=1
fi

if [ -x "$all_reduce" ]; then
  run allreduce.log "${mpirun[@]}" "$all_reduce" --markdown "$out/allreduce.md"
else
  echo "ddp_suite: $all_reduce was not built; the all-reduce comparison is left out" >&2
fi

run torch.log env PYTHONUNBUFFERED=1 python3 -m torch.distributed.run --standalone --nproc_per_node 2 \
  benchmarks/torch_ddp_bench.py --jsonl "$out/torch.jsonl"

python3 benchmarks/ddp_compare.py --tandem "$out"/tandem_*.jsonl --torch "$out/torch.jsonl" \
  --allreduce "$out/allreduce.md" --markdown "$out/ddp_table.md" || status=1
exit $status
