#!/usr/bin/env bash
# run_env.sh N PROGRAM [ARGS...]: starts N processes of PROGRAM on this machine the way torchrun does, with RANK,
# WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE and TANDEM_INIT_METHOD=file://<fresh directory> set, waits for every one
# and exits 1 when any of them failed (naming each with its status). The rendezvous directory is a new path under
# ${TMPDIR:-/tmp} (the processes create it and remove it when they end cleanly). Interrupted, it ends the processes.
set -u

if [ "$#" -lt 2 ] || ! [[ "$1" =~ ^[1-9][0-9]*$ ]]; then
  echo "usage: run_env.sh N PROGRAM [ARGS...] (N a positive number of processes)" >&2
  exit 2
fi
size="$1"
shift

rendezvous="${TMPDIR:-/tmp}/tandem_run_env_$$_$(date +%s%N)"
pids=()
end_processes() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null; done
}
trap 'end_processes; exit 1' INT TERM

for ((rank = 0; rank < size; ++rank)); do
  RANK="$rank" WORLD_SIZE="$size" LOCAL_RANK="$rank" LOCAL_WORLD_SIZE="$size" \
    TANDEM_INIT_METHOD="file://$rendezvous" "$@" &
  pids+=("$!")
done

failed=0
for ((rank = 0; rank < size; ++rank)); do
  wait "${pids[$rank]}"
  status=$?
  if [ "$status" -ne 0 ]; then
    echo "run_env: rank $rank exited with status $status" >&2
    failed=$((failed + 1))
  fi
done
if [ "$failed" -ne 0 ]; then
  echo "run_env: $failed of $size processes failed" >&2
  exit 1
fi
