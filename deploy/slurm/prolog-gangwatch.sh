#!/bin/bash
# Slurm Prolog (runs as root on each node of a job): record which GPUs the job holds, so that
# `gangwatch agent` (and dcgm-exporter --hpc-job-mapping-dir) can label GPUs with job ids.
#
# Contract (dcgm-exporter's): one file per GPU index in $GANGWATCH_GPU_JOB_DIR, one job id a line.
# Each file is rewritten atomically (temp file + mv) under a lock, so a reader never sees half a
# file and concurrent prologs of jobs sharing a GPU do not lose each other's lines.
#
# Input comes from the environment Slurm sets and is validated, never evaluated:
#   SLURM_JOB_ID    digits only, else nothing is written
#   SLURM_JOB_GPUS  comma list of GPU indices (falls back to CUDA_VISIBLE_DEVICES); entries that are
#                   not indices (UUIDs, MIG ids, anything else) are skipped; "a-b" ranges are expanded
# A prolog that fails drains the node, so this script always exits 0 and reports problems on stderr.
#
# slurm.conf:  Prolog=/etc/slurm/prolog.d/*   (install this file there, mode 0755)
#              PrologFlags=Alloc              (optional: run at allocation, before the first step)
set -u
umask 022
DIR=${GANGWATCH_GPU_JOB_DIR:-/run/gangwatch/gpu-jobs}
MAX_GPU=1023

log() { echo "gangwatch prolog: $*" >&2; }

job=${SLURM_JOB_ID:-}
if [[ ! $job =~ ^[0-9]{1,20}$ ]]; then
  log "SLURM_JOB_ID is missing or not a number; nothing written"
  exit 0
fi
gpus=${SLURM_JOB_GPUS:-${CUDA_VISIBLE_DEVICES:-}}
[[ -n $gpus ]] || exit 0

mkdir -p -m 0755 -- "$DIR" 2>/dev/null || { log "cannot create $DIR"; exit 0; }
exec 9>>"$DIR/.lock" && flock -w 10 9 || { log "cannot lock $DIR/.lock"; exit 0; }

add_job() {  # $1: a validated GPU index
  local file="$DIR/$1" tmp
  tmp=$(mktemp -- "$DIR/.$1.XXXXXX") || { log "cannot write in $DIR"; return; }
  if [[ -f $file && ! -L $file ]]; then
    grep -vxF -- "$job" "$file" >"$tmp" 2>/dev/null
  fi
  printf '%s\n' "$job" >>"$tmp"
  chmod 0644 -- "$tmp"
  mv -f -- "$tmp" "$file" || { rm -f -- "$tmp"; log "cannot replace $file"; }
}

declare -A done_gpu=()
IFS=',' read -r -a entries <<<"$gpus"
for entry in "${entries[@]}"; do
  entry=${entry//[[:space:]]/}
  if [[ $entry =~ ^([0-9]{1,4})-([0-9]{1,4})$ ]]; then
    lo=$((10#${BASH_REMATCH[1]})) hi=$((10#${BASH_REMATCH[2]}))
  elif [[ $entry =~ ^[0-9]{1,4}$ ]]; then
    lo=$((10#$entry)) hi=$lo
  else
    [[ -z $entry ]] || log "skipping GPU entry that is not an index"
    continue
  fi
  if (( hi < lo || hi > MAX_GPU )); then
    log "skipping GPU range out of bounds"
    continue
  fi
  for ((g = lo; g <= hi; g++)); do
    [[ -n ${done_gpu[$g]:-} ]] && continue
    done_gpu[$g]=1
    add_job "$g"
  done
done
exit 0
