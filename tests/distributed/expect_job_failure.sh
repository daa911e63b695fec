#!/usr/bin/env bash
# Usage: expect_job_failure.sh SECONDS PATTERN COMMAND...: runs COMMAND (an MPI job of the failure probe) and passes
# when the job ends non-zero within SECONDS, its output matches PATTERN (grep -E), and no rank reports a normal finish.
set -uo pipefail
limit="$1"
pattern="$2"
shift 2
output="$(mktemp)"
trap 'rm -f "$output"' EXIT
start=$(date +%s)
timeout --kill-after=5 "$limit" "$@" >"$output" 2>&1
status=$?
elapsed=$(($(date +%s) - start))
cat "$output"
echo "-- exit status $status after ${elapsed} s"
fail() {
  echo "FAILED: $*"
  exit 1
}
[ "$status" -ne 124 ] && [ "$status" -ne 137 ] || fail "the job did not end within $limit s"
[ "$status" -ne 0 ] || fail "the job exited 0"
grep -qE -- "$pattern" "$output" || fail "the output does not match: $pattern"
if grep -q "finished normally" "$output"; then fail "a rank finished normally"; fi
echo "PASSED: the job ended with status $status in ${elapsed} s, naming the rank"
