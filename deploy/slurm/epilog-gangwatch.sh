#!/bin/bash
# Slurm Epilog (runs as root on each node of a job): remove the job from the GPU->job mapping
# files that prolog-gangwatch.sh wrote. It does not trust the GPU list in the environment (Slurm
# versions differ in what the epilog sees): it drops the job's line from every mapping file and
# deletes files left empty. Each file is rewritten atomically (temp file + mv) under the same lock
# as the prolog. Always exits 0: a failing epilog drains the node.
#
# slurm.conf:  Epilog=/etc/slurm/epilog.d/*   (install this file there, mode 0755)
set -u
umask 022
DIR=${GANGWATCH_GPU_JOB_DIR:-/run/gangwatch/gpu-jobs}

log() { echo "gangwatch epilog: $*" >&2; }

job=${SLURM_JOB_ID:-}
if [[ ! $job =~ ^[0-9]{1,20}$ ]]; then
  log "SLURM_JOB_ID is missing or not a number; nothing removed"
  exit 0
fi
[[ -d $DIR && ! -L $DIR ]] || exit 0
exec 9>>"$DIR/.lock" && flock -w 10 9 || { log "cannot lock $DIR/.lock"; exit 0; }

shopt -s nullglob
for file in "$DIR"/[0-9]*; do
  name=${file##*/}
  [[ $name =~ ^[0-9]{1,4}$ && -f $file && ! -L $file ]] || continue
  grep -qxF -- "$job" "$file" || continue
  tmp=$(mktemp -- "$DIR/.$name.XXXXXX") || { log "cannot write in $DIR"; continue; }
  grep -vxF -- "$job" "$file" >"$tmp"
  if [[ -s $tmp ]]; then
    chmod 0644 -- "$tmp"
    mv -f -- "$tmp" "$file" || { rm -f -- "$tmp"; log "cannot replace $file"; }
  else
    rm -f -- "$tmp" "$file"
  fi
done
exit 0
