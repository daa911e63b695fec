#!/usr/bin/env bash
# Step time against model width on a machine with two GPUs, tandem and PyTorch measured in one run (see
# docs/benchmarks.md): 4 x Linear(W) with ReLU between, global batch 8192, FP32, for each width W:
#   - $TANDEM_BUILD_DIR/bin/train_step_bench --widths: tandem in one process driving both GPUs through
#     parallel::TrainingStep, eager (capture off) and captured as one CUDA graph;
#   - benchmarks/torch_ddp_bench.py --widths under torchrun --nproc_per_node 2: PyTorch's DDP, one process per GPU;
# then benchmarks/width_sweep.py writes OUTDIR/width_sweep.md and OUTDIR/step_time_vs_width.svg.
#
# Usage: benchmarks/width_sweep.sh [OUTDIR] [WIDTHS]      (default: out/width, 64,256,1024,2048,4096)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
out="${1:-out/width}"
widths="${2:-64,256,1024,2048,4096}"
build="${TANDEM_BUILD_DIR:-build-gpu}"
mkdir -p "$out" || exit 1
rm -f "$out/tandem.jsonl" "$out/torch.jsonl"
export NCCL_NVLS_ENABLE=0  # never use NVLink multicast on shared machines
status=0
timeout 600 "$build/bin/train_step_bench" --gpus 2 --widths "$widths" --jsonl "$out/tandem.jsonl" \
  >"$out/tandem.log" 2>&1 || { echo "width_sweep: train_step_bench failed:" >&2; tail -5 "$out/tandem.log" >&2; status=1; }
PYTHONUNBUFFERED=1 timeout 600 python3 -m torch.distributed.run --standalone --nproc_per_node 2 \
  benchmarks/torch_ddp_bench.py --widths "$widths" --jsonl "$out/torch.jsonl" >"$out/torch.log" 2>&1 ||
  { echo "width_sweep: torch_ddp_bench.py failed:" >&2; tail -5 "$out/torch.log" >&2; status=1; }
python3 benchmarks/width_sweep.py --tandem "$out/tandem.jsonl" --torch "$out/torch.jsonl" \
  --svg "$out/step_time_vs_width.svg" --markdown "$out/width_sweep.md" || status=1
exit $status
