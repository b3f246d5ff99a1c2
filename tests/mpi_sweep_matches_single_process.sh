#!/usr/bin/env bash
# The union of the MPI ranks' shares equals the single-process sweep, byte for byte.
# Exits 77 (CTest: skipped) when the MPI launcher found at configure time is gone.
# usage: mpi_sweep_matches_single_process.sh MPIEXEC TRAINSIM MPI_SWEEP SWEEP.json WORKDIR
set -euo pipefail
mpiexec=$1 trainsim=$2 mpi_sweep=$3 sweep=$4 work=$5
if [[ ! -x $mpiexec ]]; then
  echo "$mpiexec not found: nothing checked, skipped"
  exit 77
fi
mkdir -p "$work"
root_flag=()
[ "$(id -u)" -eq 0 ] && root_flag=(--allow-run-as-root)
"$trainsim" sweep "$sweep" -j 1 --out "$work/single.jsonl" >/dev/null 2>&1
"$mpiexec" "${root_flag[@]}" --oversubscribe -n 2 "$mpi_sweep" "$sweep" --out "$work/mpi.jsonl"
cmp "$work/single.jsonl" "$work/mpi.jsonl"
echo "mpi sweep matches the single-process sweep ($(wc -l < "$work/single.jsonl") rows)"
