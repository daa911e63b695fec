#!/usr/bin/env bash
# Usage: run_mpi.sh MPIEXEC ARGS...: runs MPIEXEC ARGS..., allowing root (OpenMPI refuses it otherwise; CI runs as
# root).
set -euo pipefail
mpiexec="$1"
shift
extra=()
if [ "$(id -u)" -eq 0 ]; then
  extra+=(--allow-run-as-root)
fi
exec "$mpiexec" "${extra[@]}" "$@"
