#!/usr/bin/env bash
# run_env.sh N PROGRAM [ARGS...]: starts N processes of PROGRAM on this machine the way torchrun does, with RANK,
# WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, TANDEM_INIT_METHOD=file://<fresh directory> and a TANDEM_JOB_ID of its
# own set, waits for every one and exits 1 when any of them failed (naming each with its status). The rendezvous directory is a new path under
# ${TMPDIR:-/tmp} (the processes create it and remove it when they end cleanly; after a failed job the script removes
# what is left). Interrupted, it ends the processes.
set -u

if [ "$#" -lt 2 ] || ! [[ "$1" =~ ^[1-9][0-9]*$ ]]; then
  echo "usage: run_env.sh N PROGRAM [ARGS...] (N a positive number of processes)" >&2
  exit 2
fi
size="$1"
shift

job="run_env_$$_$(date +%s%N)"
rendezvous="${TMPDIR:-/tmp}/tandem_$job"
pids=()
end_processes() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null; done
}
trap 'end_processes; exit 1' INT TERM

for ((rank = 0; rank < size; ++rank)); do
  RANK="$rank" WORLD_SIZE="$size" LOCAL_RANK="$rank" LOCAL_WORLD_SIZE="$size" \
    TANDEM_INIT_METHOD="file://$rendezvous" TANDEM_JOB_ID="$job" "$@" &
  pids+=("$!")
done

failed=0
# The processes remove the rendezvous directory when they end cleanly; after an aborted job its files stay (the
# ranks end with _exit), and this launcher, which chose the path for this launch alone, removes them.
trap 'end_processes; rm -rf "$rendezvous"; exit 1' INT TERM
for ((rank = 0; rank < size; ++rank)); do
  wait "${pids[$rank]}"
  status=$?
  if [ "$status" -ne 0 ]; then
    echo "run_env: rank $rank exited with status $status" >&2
    failed=$((failed + 1))
  fi
done
rm -rf "$rendezvous"
if [ "$failed" -ne 0 ]; then
  echo "run_env: $failed of $size processes failed" >&2
  exit 1
fi
