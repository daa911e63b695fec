#!/usr/bin/env bash
# Usage: tandem_train_setups.sh TANDEM_TRAIN DATA WORKDIR RUN_MPI MPIEXEC
# tandem-train in 2 processes under mpirun whose flags differ (an MPMD launch: one set of flags per rank). A
# difference in the setup (--lr, --batch-size, --features order, --test-fraction) ends both processes non-zero within
# 30 s with a message that names it (Note [Setups compared across processes] in trainers/trainer.h); an output flag
# given to rank 0 alone (--summary-json) trains normally.
set -uo pipefail
train="$1" data="$2" work="$3/tandem_train_setups_$$" run_mpi="$4" mpiexec="$5"
mkdir -p "$work"
trap 'rm -rf "$work"' EXIT
common=(--data "$data" --epochs 2 --quiet --devices cpu:0 --timeout 60)

fail() { echo "tandem_train_setups: $*" >&2; exit 1; }

# expect_refusal PATTERN "RANK0 FLAGS" "RANK1 FLAGS"
expect_refusal() {
  local pattern="$1" status
  read -r -a first <<<"$2"
  read -r -a second <<<"$3"
  timeout --kill-after=5 30 "$run_mpi" "$mpiexec" -np 1 "$train" "${common[@]}" "${first[@]}" : \
    -np 1 "$train" "${common[@]}" "${second[@]}" >"$work/out" 2>&1
  status=$?
  [ "$status" -ne 0 ] || fail "ranks with flags '$2' and '$3' trained together: $(cat "$work/out")"
  [ "$status" -ne 124 ] && [ "$status" -ne 137 ] || fail "ranks with flags '$2' and '$3' did not end within 30 s"
  grep -Eq "$pattern" "$work/out" || fail "expected /$pattern/ in: $(cat "$work/out")"
  echo "refused: $2 | $3"
}

differ="tandem-train: Trainer::fit: the processes' setups differ:"
expect_refusal "$differ lr is 0.01 on rank 0 but 0.02 on rank 1" "--lr 0.01" "--lr 0.02"
expect_refusal "$differ batch_size is 50 on rank 0 but 60 on rank 1" "--batch-size 50" "--batch-size 60"
expect_refusal "$differ features is age,sex,bmi on rank 0 but sex,age,bmi on rank 1" \
  "--features age,sex,bmi" "--features sex,age,bmi"
expect_refusal "$differ test_fraction is 0.2 on rank 0 but 0.3 on rank 1" "--test-fraction 0.2" "--test-fraction 0.3"

timeout --kill-after=5 30 "$run_mpi" "$mpiexec" -np 1 "$train" "${common[@]}" --summary-json "$work/summary.json" : \
  -np 1 "$train" "${common[@]}" >"$work/out" 2>&1 || fail "--summary-json on rank 0 alone: $(cat "$work/out")"
[ -s "$work/summary.json" ] || fail "--summary-json on rank 0 alone wrote nothing"
echo "tandem_train_setups: every difference refused; an output flag on rank 0 alone trains"
