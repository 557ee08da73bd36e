#!/usr/bin/env bash
# Capture verbatim Slurm command outputs (and slurmrestd responses) into a fixture directory.
# Adapted from ../shared/recipes/slurm/capture.sh; adds the exact commands the exporter runs.
#   capture.sh <outdir>        e.g. tests/data/slurm-live
# Run after start.sh + populate.sh.  Each file is the unmodified stdout (stderr, if any, goes to
# <file>.stderr).  commands.txt lists the exact command line for every file.
set -uo pipefail
OUT=${1:?usage: capture.sh <outdir>}
# the state dir: GW_SLURM_DIR, else the one holding $SLURM_CONF (…/etc/slurm.conf), else the default
if [ -n "${GW_SLURM_DIR:-}" ]; then DIR=$GW_SLURM_DIR
elif [ -n "${SLURM_CONF:-}" ]; then DIR=$(dirname "$(dirname "$SLURM_CONF")")
else DIR=/tmp/gw-slurm; fi
# shellcheck disable=SC1091
. "$DIR/env.sh"
mkdir -p "$OUT"
: > "$OUT/commands.txt"

cap() { # cap <file> <command...>
  local f=$1; shift
  "$@" > "$OUT/$f" 2> "$OUT/$f.stderr"
  local rc=$?
  [ -s "$OUT/$f.stderr" ] || rm -f "$OUT/$f.stderr"
  printf '%s\trc=%s\t%s\n' "$f" "$rc" "$(printf '%q ' "$@")" >> "$OUT/commands.txt"
}

SQ_FMT='%.10i %.11F %.6K %.9P %.28j %.7u %.12a %.7q %.10T %.10M %.11l %.5D %.5C %.8m %.18b %.20S %.20e %.9Q %.20V %.30E %.14N %R'
SQ_PIPE='%i|%F|%K|%P|%j|%u|%a|%q|%T|%r|%M|%l|%D|%C|%m|%b|%S|%e|%Q|%V|%E|%N|%Y|%k'
SQ_O='JobID:|,ArrayJobID:|,ArrayTaskID:|,Partition:|,Name:|,UserName:|,Account:|,QOS:|,State:|,Reason:|,TimeUsed:|,TimeLimit:|,NumNodes:|,NumCPUs:|,MinMemory:|,tres-per-node:|,tres-per-job:|,tres-alloc:|,Priority:|,SubmitTime:|,StartTime:|,EndTime:|,Dependency:|,NodeList:|,SchedNodes:|,Comment:|'
SI_N='NodeList:|,Partition:|,StateLong:|,CPUsState:|,CPUsLoad:|,Memory:|,FreeMem:|,AllocMem:|,Gres:|,GresUsed:|,Features:|,Reason:|,Timestamp:|,User:|,Weight:|'
TODAY=$(date +%Y-%m-%dT00:00:00)

# --- queue
cap 'squeue_--json.json'                 squeue --json
cap 'squeue_--start.txt'                 squeue --start
cap 'squeue_-t_all_-o_rich.txt'          squeue -t all -o "$SQ_FMT"
cap 'squeue_-t_all_-h_-o_pipe.txt'       squeue -t all -h -o "$SQ_PIPE"
cap 'squeue_-t_all_-O_pipe.txt'          squeue -t all -O "$SQ_O"
cap 'squeue_-r_-t_all.txt'               squeue -r -t all
# --- jobs (scontrol has no --json in 22.05: "scontrol: unrecognized option '--json'")
cap 'scontrol_show_job_-d.txt'           scontrol show job -d
cap 'scontrol_-o_show_job_-d.txt'        scontrol -o show job -d
# --- nodes / partitions / reservations
cap 'sinfo_--json.json'                  sinfo --json
cap 'sinfo.txt'                          sinfo
cap 'sinfo_-R.txt'                       sinfo -R
cap 'sinfo_-N_-O_pipe.txt'               sinfo -N -O "$SI_N"
cap 'scontrol_show_node_-d.txt'          scontrol show node -d
cap 'scontrol_-o_show_node_-d.txt'       scontrol -o show node -d
cap 'scontrol_show_partition.txt'        scontrol show partition
cap 'scontrol_show_reservation.txt'      scontrol show reservation
cap 'scontrol_-o_show_reservation.txt'   scontrol -o show reservation
# --- priority / fairshare / scheduler
cap 'sprio_-h_-o_gangwatch.txt'         sprio -h -o '%i|%r|%u|%Y|%S|%A|%B|%F|%J|%P|%Q|%N|%T'
cap 'squeue_--version.txt'               squeue --version
cap 'sprio_-l.txt'                       sprio -l
cap 'sprio_-w.txt'                       sprio -w
cap 'sshare_-l_-a.txt'                   sshare -l -a
cap 'sshare_-l_-a_-P.txt'                sshare -l -a -P
cap 'sdiag.txt'                          sdiag
cap 'scontrol_show_config.txt'           scontrol show config
# --- accounting (works only with slurmdbd; otherwise "Slurm accounting storage is disabled")
cap 'sacct_--json.json'                  sacct --json -a -S "$TODAY"
cap 'sacct_-a_-P_-X.txt'                 sacct -a -P -X -S "$TODAY" -o JobID,JobIDRaw,JobName,User,Account,QOS,Partition,State,ExitCode,Reason,Submit,Eligible,Start,End,Elapsed,Timelimit,NNodes,NCPUS,ReqTRES,AllocTRES,NodeList,Priority
cap 'sacctmgr_show_assoc_-P.txt'         sacctmgr -n -P show assoc format=Cluster,Account,User,Partition,Share,GrpTRES,MaxTRES,QOS,DefaultQOS
cap 'sacctmgr_show_qos_-P.txt'           sacctmgr -P show qos format=Name,Priority,MaxTRESPU,GrpTRES,MaxWall,Preempt,Flags

# --- slurmrestd over a unix socket (rest_auth/local). Must not run as root -> -u <user>.
if command -v slurmrestd >/dev/null && id "${GW_RESTD_USER:-alice}" >/dev/null 2>&1; then
  RU=${GW_RESTD_USER:-alice}
  mkdir -p "$DIR/restd"; chown "$RU" "$DIR/restd"; rm -f "$DIR/restd/slurmrestd.sock"
  EPS="slurm/v0.0.38/jobs slurm/v0.0.38/nodes slurm/v0.0.38/partitions slurm/v0.0.38/reservations"
  EPS="$EPS slurm/v0.0.38/diag slurm/v0.0.38/ping"
  case "$(scontrol show config)" in
    *accounting_storage/slurmdbd*) PLUGINS=openapi/v0.0.38,openapi/dbv0.0.38; EPS="$EPS slurmdb/v0.0.38/jobs" ;;
    # without slurmdbd the default plugin set is fatal:
    # "slurmrestd: fatal: slurm_openapi_p_init: slurm not configured with slurmdbd"
    *) PLUGINS=openapi/v0.0.38 ;;
  esac
  slurmrestd -u "$RU" -g "$(id -gn "$RU")" -a rest_auth/local -s "$PLUGINS" \
    "unix:$DIR/restd/slurmrestd.sock" > "$DIR/log/slurmrestd.log" 2>&1 &
  echo $! > "$DIR/run/slurmrestd.pid"
  for _ in $(seq 1 50); do [ -S "$DIR/restd/slurmrestd.sock" ] && break; sleep 0.1; done
  [ -S "$DIR/restd/slurmrestd.sock" ] || { echo "capture.sh: slurmrestd did not start:" >&2; cat "$DIR/log/slurmrestd.log" >&2; }
  for ep in $EPS; do
    cap "slurmrestd_GET_$(echo "$ep" | tr '/' '_').json" \
      curl -sS --unix-socket "$DIR/restd/slurmrestd.sock" "http://localhost/$ep"
  done
  kill "$(cat "$DIR/run/slurmrestd.pid")"; rm -f "$DIR/run/slurmrestd.pid"
fi
ls -la "$OUT"; du -sh "$OUT"
