#!/usr/bin/env bash
# Builds tandem on a GPU machine and runs, in one go, the test suites, the examples and the benchmarks, keeping
# every log under $OUT (default: out/). Stages to run are arguments (default: all):
#   build  tests  examples  comm_bench  linear_bench  step_bench  torch  libtorch  ddp  width  sanitize
# Usage on a machine with two GPUs: benchmarks/gpu_suite.sh build tests examples comm_bench
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-out}"
mkdir -p "$out"
stages=("$@")
[ ${#stages[@]} -gt 0 ] || stages=(build tests examples comm_bench linear_bench step_bench torch libtorch ddp width sanitize)
build="${TANDEM_BUILD_DIR:-build-gpu}"
export NCCL_NVLS_ENABLE=0  # never use NVLink multicast on shared machines
nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader

run_stage() {
  case "$1" in
    build)
      cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 >"$out/build.log" 2>&1 &&
        cmake --build "$build" --parallel >>"$out/build.log" 2>&1 ||
        { grep -E "error|FAILED" -A4 "$out/build.log" | head -80; return 1; } ;;
    tests)
      ctest --test-dir "$build" --output-on-failure --parallel 4 --timeout 600 >"$out/tests.log" 2>&1
      grep -E "tests passed|tests failed|Failed|\(Failed\)|\*\*\*" "$out/tests.log" | tail -40 ;;
    examples)
      for example in comm_tour seed_training_loop custom_layer classifier tandem-train; do
        echo "== $example" >>"$out/examples.log"
        timeout 300 "$build/bin/$example" >>"$out/examples.log" 2>&1
        echo "exit status $?" >>"$out/examples.log"
      done
      # The main job on one GPU, two GPUs and one CPU device: the summaries must agree to 1e-5.
      for devices in cuda:0 cuda:0,cuda:1 cpu:0; do
        echo "== tandem-train --devices $devices" >>"$out/examples.log"
        timeout 300 "$build/bin/tandem-train" --devices "$devices" --quiet --summary-json "$out/summary.json" \
          >>"$out/examples.log" 2>&1
        cat "$out/summary.json" >>"$out/examples.log" && rm -f "$out/summary.json"
        echo >>"$out/examples.log"
      done
      # Classification on digits, both GPUs.
      echo "== tandem-train digits --devices cuda:0,cuda:1" >>"$out/examples.log"
      timeout 300 "$build/bin/tandem-train" --data data/digits.csv --task classification --devices cuda:0,cuda:1 \
        --quiet >>"$out/examples.log" 2>&1
      echo "exit status $?" >>"$out/examples.log"
      tail -60 "$out/examples.log" ;;
    comm_bench)
      timeout 400 "$build/bin/comm_bench" >"$out/comm_bench.log" 2>&1
      cat "$out/comm_bench.log" | tail -60 ;;
    linear_bench)
      timeout 300 "$build/bin/linear_bench" >"$out/linear_bench.log" 2>&1
      tail -20 "$out/linear_bench.log" ;;
    step_bench)
      timeout 400 "$build/bin/train_step_bench" >"$out/step_bench.log" 2>&1
      tail -40 "$out/step_bench.log" ;;
    torch)
      PYTHONUNBUFFERED=1 timeout 400 python3 benchmarks/torch_train_step.py >"$out/torch.log" 2>&1
      PYTHONUNBUFFERED=1 timeout 200 python3 benchmarks/torch_comm_bench.py >>"$out/torch.log" 2>&1
      tail -40 "$out/torch.log" ;;
    libtorch)
      cmake -S benchmarks/libtorch_step -B build-libtorch -G Ninja -DCMAKE_BUILD_TYPE=Release \
        -DCMAKE_PREFIX_PATH="$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')" >"$out/libtorch.log" 2>&1 &&
        cmake --build build-libtorch >>"$out/libtorch.log" 2>&1 &&
        timeout 300 build-libtorch/libtorch_step >>"$out/libtorch.log" 2>&1
      tail -20 "$out/libtorch.log" ;;
    ddp)  # multi-process DDP against PyTorch's DDP under torchrun, and all_reduce against raw NCCL
      TANDEM_BUILD_DIR="$build" benchmarks/ddp_suite.sh "$out/ddp" ;;
    sanitize)  # compute-sanitizer's memcheck and synccheck on every suite's GPU tests, racecheck on the one-GPU ones
      # --report-api-errors no: NCCL's start-up probes fail cudaFuncGetAttributes on purpose. racecheck serializes
      # kernels, and a collective's kernels on two GPUs must run together, so it takes the one-GPU cases only, each
      # suite in three shards (it is the slowest tool). Every suite, tool and shard runs in its own process, side by
      # side: first memcheck and synccheck, then racecheck. Every log is kept.
      local gpu='*CUDA*:*Cuda*:*Gpu*:*GPU*:*Captured*' suites=(core comm nn parallel trainers distributed) shards=3
      sanitize_suite() {  # tool suite filter [shard]: one process in the background, its log named after its part
        local log="$out/sanitize_$1_$2${4:+_$4}.log" sharding=()
        [ -n "${4:-}" ] && sharding=(GTEST_TOTAL_SHARDS="$shards" GTEST_SHARD_INDEX="$4")
        env "${sharding[@]}" timeout 380 compute-sanitizer --tool "$1" --report-api-errors no --error-exitcode 3 \
          "$build/bin/tandem_$2_tests" --gtest_filter="$3" >"$log" 2>&1 &
      }
      for suite in "${suites[@]}"; do
        for tool in memcheck synccheck; do sanitize_suite "$tool" "$suite" "$gpu"; done
      done
      wait
      for suite in "${suites[@]}"; do
        [ "$suite" = distributed ] && continue  # its collectives span processes
        for ((shard = 0; shard < shards; ++shard)); do sanitize_suite racecheck "$suite" "$gpu-*Multi*" "$shard"; done
      done
      wait
      for log in "$out"/sanitize_*.log; do
        echo "$(basename "$log" .log): $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$log" | tail -1);" \
          "$(grep -E '^\[  PASSED|^\[  FAILED|^\[  SKIPPED' "$log" | head -3 | tr '\n' ' ')"
      done ;;
    width)  # step time against model width: tandem eager and captured beside PyTorch's DDP, with an SVG plot
      TANDEM_BUILD_DIR="$build" benchmarks/width_sweep.sh "$out/width" ;;
    *) echo "unknown stage $1"; return 2 ;;
  esac
}

status=0
for stage in "${stages[@]}"; do
  echo "=== $stage"
  run_stage "$stage" || { status=1; [ "$stage" = build ] && break; }
done
exit $status
