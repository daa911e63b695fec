#!/usr/bin/env bash
# Usage: tandem_train_lm_np2.sh TANDEM_TRAIN WORKDIR RUN_MPI MPIEXEC
# The issue's device-count invariance for tandem-train --task language-model: a tiny GPT (dropout 0) trained 50 steps
# on a small text written here, in 2 processes under mpirun on cpu:0 each, in one process on cpu:0 and in one on
# cpu:0,cpu:1: the summaries' train_loss and val_loss agree within 1e-5 relative. The launched run stops at step 25
# with a checkpoint (rank 0 alone writes it) and a second launch resumes it to 50. Then ranks of different setups
# (--n-layer 1 and 2) both end non-zero within 30 s, with a message naming the fact and the rank.
set -uo pipefail
train="$1" work="$2/tandem_train_lm_np2_$$" run_mpi="$3" mpiexec="$4"
mkdir -p "$work"
trap 'rm -rf "$work"' EXIT

fail() { echo "tandem_train_lm_np2: $*" >&2; exit 1; }

# 400 verses of one pattern with varying words (the C++ tests' text).
awk 'BEGIN { split("cat dog owl fox bee", w, " ");
             for (i = 0; i < 400; ++i) printf "the %s sat on the %s.\n", w[i % 5 + 1], w[(i * 3) % 5 + 1] }' \
  > "$work/verses.txt"
common=(--task language-model --data "$work/verses.txt" --n-head 2 --n-embd 16 --block-size 16
        --batch-size 8 --eval-every 25 --eval-batches 2 --warmup-steps 5 --dropout 0 --lr-decay-steps 50 --quiet
        --timeout 60)
launch() { timeout --kill-after=5 60 "$run_mpi" "$mpiexec" -np 2 "$train" "${common[@]}" --devices cpu:0 --n-layer 1 "$@"; }

launch --steps 25 --checkpoint "$work/lm.ckpt" > "$work/first.out" 2>&1 || fail "launched run: $(cat "$work/first.out")"
launch --steps 50 --resume "$work/lm.ckpt" --summary-json "$work/launched.json" > "$work/launched.out" 2>&1 ||
  fail "launched resume: $(cat "$work/launched.out")"
"$train" "${common[@]}" --devices cpu:0 --n-layer 1 --steps 50 --summary-json "$work/one.json" > "$work/one.out" 2>&1 ||
  fail "cpu:0: $(cat "$work/one.out")"
"$train" "${common[@]}" --n-layer 1 --steps 50 --devices cpu:0,cpu:1 --summary-json "$work/two.json" > "$work/two.out" 2>&1 ||
  fail "cpu:0,cpu:1: $(cat "$work/two.out")"

# One number of a summary file: its top-level line '  "key": value,'.
value() { sed -n "s/^  \"$2\": \\([^,]*\\),\\{0,1\\}$/\\1/p" "$1"; }
close() { awk -v a="$1" -v b="$2" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 1e-5 * b) }'; }
for key in train_loss val_loss; do
  launched=$(value "$work/launched.json" $key) one=$(value "$work/one.json" $key) two=$(value "$work/two.json" $key)
  [ -n "$launched" ] && [ -n "$one" ] && [ -n "$two" ] || fail "no $key in the summaries"
  close "$launched" "$one" || fail "$key $launched in 2 processes x cpu:0 but $one on cpu:0"
  close "$two" "$one" || fail "$key $two on cpu:0,cpu:1 but $one on cpu:0"
  echo "$key: $launched (2 processes x cpu:0, resumed at 25) == $one (cpu:0) == $two (cpu:0,cpu:1)"
done
[ "$(value "$work/launched.json" world_size)" = 2 ] || fail "world_size is not 2 in $(cat "$work/launched.json")"

timeout --kill-after=5 30 "$run_mpi" "$mpiexec" -np 1 "$train" "${common[@]}" --steps 5 --devices cpu:0 --n-layer 1 : \
  -np 1 "$train" "${common[@]}" --steps 5 --devices cpu:0 --n-layer 2 > "$work/setups.out" 2>&1
status=$?
[ "$status" -ne 0 ] || fail "ranks of --n-layer 1 and 2 trained together: $(cat "$work/setups.out")"
[ "$status" -ne 124 ] && [ "$status" -ne 137 ] || fail "ranks of --n-layer 1 and 2 did not end within 30 s"
pattern="LanguageModelTrainer: the processes' setups differ: n_layer is 1 on rank 0 but 2 on rank 1"
grep -q "$pattern" "$work/setups.out" || fail "expected '$pattern' in: $(cat "$work/setups.out")"
echo "tandem_train_lm_np2: ranks of --n-layer 1 and 2 refused: $(grep -m1 "$pattern" "$work/setups.out")"
