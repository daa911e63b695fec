#!/usr/bin/env bash
# Runs every fuzz target of a TANDEM_FUZZ=ON build for a while and says what each found.
# Usage: tests/fuzz/run_fuzzers.sh <build-dir> <seconds-per-target>
#
# Each fuzz_<target> runs on a work corpus in <build-dir>/fuzz/<target>/corpus (the seed corpus copied in, plus what
# earlier runs added), so nothing is written into the source tree; crashers, timeouts and out-of-memory inputs go to
# <build-dir>/fuzz/<target>/artifacts/. Prints the executions, speed and coverage of each target (libFuzzer's final
# stats) and exits 1 when any target found an input that breaks the contract, naming the artifact.
set -uo pipefail

if [ $# -ne 2 ]; then
  echo "usage: $0 <build-dir> <seconds-per-target>" >&2
  exit 2
fi
build_dir="$(cd "$1" && pwd)" || exit 2
seconds="$2"
source_dir="$(cd "$(dirname "$0")" && pwd)"

# The largest input per target: a few times the largest seed, so mutations can grow a file without wasting time.
declare -A max_len=([safetensors]=8192 [checkpoint]=8192 [csv]=4096)
default_max_len=4096

export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1}"

# final_stat LOG NAME: the value of libFuzzer's "stat::NAME:" line (-print_final_stats=1).
final_stat() { sed -n "s/^stat::$2: *//p" "$1" | tail -1; }

# fuzz_target NAME: runs fuzz_NAME and writes what it found to its work folder's report (report.txt), and its verdict
# (0 or 1) to status.
fuzz_target() {
  local target="$1"
  local fuzzer="$build_dir/bin/fuzz_$target"
  local work="$build_dir/fuzz/$target"
  mkdir -p "$work/corpus" "$work/artifacts"
  local report_file="$work/report.txt"
  if [ ! -x "$fuzzer" ]; then
    echo "$target: $fuzzer is missing (configure with -DTANDEM_FUZZ=ON and build tandem_fuzzers)" >"$report_file"
    echo 1 >"$work/status"
    return
  fi
  cp -n "$source_dir/corpus/$target/seed/"* "$work/corpus/"
  local dict=()
  [ -f "$source_dir/$target.dict" ] && dict=(-dict="$source_dir/$target.dict")

  local log="$work/fuzz.log"
  "$fuzzer" "$work/corpus" "${dict[@]}" -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 \
    -max_len="${max_len[$target]:-$default_max_len}" -artifact_prefix="$work/artifacts/" -print_final_stats=1 \
    >"$log" 2>&1
  local status=$?

  local coverage
  coverage="$(grep -o 'cov: [0-9]* ft: [0-9]* corp: [0-9]*' "$log" | tail -1)"
  {
    echo "== fuzz_$target for ${seconds} s (log: $log)"
    echo "$target: $(final_stat "$log" number_of_executed_units) executions," \
      "$(final_stat "$log" average_exec_per_sec)/s, ${coverage:-no coverage line}," \
      "peak rss $(final_stat "$log" peak_rss_mb) MB"
    if [ "$status" -ne 0 ]; then
      local artifact report='ERROR: |runtime error|terminate called'
      artifact="$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -1)"
      echo "$target: FAILED (exit $status): $(grep -m1 -E "$report" "$log")"
      echo "$target: input: ${artifact:-none written; see $log}"
      # The report, from its first line to the sanitizer's or libFuzzer's SUMMARY.
      sed -n -E "/$report/,/^SUMMARY/p" "$log" | head -n 60
    fi
  } >"$report_file"
  [ "$status" -eq 0 ] && echo 0 >"$work/status" || echo 1 >"$work/status"
}

# Each fuzzer runs on one core: as many run at once as there are cores, so the stage takes `seconds` per round of
# them rather than per target; the reports are printed in the targets' order once all have ended.
targets=()
for source in "$source_dir"/*_fuzz.cpp; do
  targets+=("$(basename "$source" _fuzz.cpp)")
done
jobs_at_once="$(nproc)"
for target in "${targets[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$jobs_at_once" ]; do
    wait -n
  done
  echo "== fuzz_$target: started for ${seconds} s"
  fuzz_target "$target" &
done
wait

failed=0
for target in "${targets[@]}"; do
  cat "$build_dir/fuzz/$target/report.txt"
  [ "$(cat "$build_dir/fuzz/$target/status")" = 0 ] || failed=1
done
exit "$failed"
