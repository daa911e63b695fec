#!/usr/bin/env bash
# Usage: expect_job_failure.sh SECONDS PATTERN COMMAND...: runs COMMAND (an MPI job of the failure probe) and passes
# when the job ends non-zero within SECONDS, its output matches PATTERN (grep -E), and no rank reports a normal finish.
# A job that exits 0 after a probe printed "failure_probe: skipped: <reason>" (hardware it needs is missing) is
# skipped: exit status 77 (ctest's SKIP_RETURN_CODE for these tests).
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
if [ "$status" -eq 0 ] && grep -q "^failure_probe: skipped: " "$output"; then
  echo "SKIPPED: $(grep -m1 "^failure_probe: skipped: " "$output")"
  exit 77
fi
[ "$status" -ne 0 ] || fail "the job exited 0"
grep -qE -- "$pattern" "$output" || fail "the output does not match: $pattern"
if grep -q "finished normally" "$output"; then fail "a rank finished normally"; fi
echo "PASSED: the job ended with status $status in ${elapsed} s, naming the rank"
