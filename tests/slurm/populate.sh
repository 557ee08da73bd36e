#!/usr/bin/env bash
# Build a realistic, mostly deterministic queue on the cluster started by start.sh.
# Adapted from ../shared/recipes/slurm/populate.sh; addition: held jobs with hostile names
# (HTML, quotes, backslash, newline, ' Key=value', 1000 characters) for the exporter's tests.
# Creates Unix users alice bob carol dave erin if missing (recorded in $DIR/created-users so
# stop.sh GW_SLURM_DELUSERS=1 can remove them again).  Jobs only `sleep`; stdout -> /dev/null.
set -euo pipefail
# the state dir: GW_SLURM_DIR, else the one holding $SLURM_CONF (…/etc/slurm.conf), else the default
if [ -n "${GW_SLURM_DIR:-}" ]; then DIR=$GW_SLURM_DIR
elif [ -n "${SLURM_CONF:-}" ]; then DIR=$(dirname "$(dirname "$SLURM_CONF")")
else DIR=/tmp/gw-slurm; fi
# shellcheck disable=SC1091
. "$DIR/env.sh"
T0=$(date +%s.%N)
ts() { printf '[populate +%6.2fs] %s\n' "$(awk -v a="$(date +%s.%N)" -v b="$T0" 'BEGIN{print a-b}')" "$*"; }
die() { echo "populate.sh: $*" >&2; exit 1; }

DBD=0
case "$(scontrol show config)" in *"accounting_storage/slurmdbd"*) DBD=1 ;; esac

for u in alice bob carol dave erin; do
  if ! id "$u" >/dev/null 2>&1; then
    useradd -M -U -s /usr/sbin/nologin "$u"; echo "$u" >> "$DIR/created-users"
  fi
done

if [ "$DBD" = 1 ]; then
  sacctmgr -i add qos high Priority=1000 Description="deadline runs" >/dev/null
  sacctmgr -i add qos low Priority=0 MaxTRESPerUser=gres/gpu=4 Description="sweeps, preemptible" >/dev/null
  sacctmgr -i modify qos normal set Priority=100 >/dev/null
  sacctmgr -i add account ml-research Description="LLM research" Organization=research Fairshare=50 >/dev/null
  sacctmgr -i add account vision Description="vision team" Organization=research Fairshare=30 GrpTRES=gres/gpu=6 >/dev/null
  sacctmgr -i add account infra Description="platform/infra" Organization=ops Fairshare=20 >/dev/null
  sacctmgr -i add user alice,bob Account=ml-research QOS=normal,high DefaultQOS=normal >/dev/null
  sacctmgr -i add user carol Account=vision QOS=normal DefaultQOS=normal >/dev/null
  sacctmgr -i add user dave Account=vision QOS=normal,low DefaultQOS=low >/dev/null
  sacctmgr -i add user erin Account=infra QOS=normal DefaultQOS=normal >/dev/null
  ts "accounts/QOS/associations created"
fi

sub() { # sub <user> <name> <sbatch args...>  -> prints job id
  local u=$1 n=$2; shift 2
  sbatch --parsable --uid="$u" --gid="$u" --chdir=/tmp -o /dev/null -e /dev/null -J "$n" "$@" | cut -d';' -f1
}
wait_state() { # wait_state <jobid> <STATE> [timeout]
  local j=$1 want=$2 end=$(( $(date +%s) + ${3:-30} ))
  until [ "$(squeue -h -j "$j" -t all -o %T 2>/dev/null | head -1)" = "$want" ]; do
    [ "$(date +%s)" -lt "$end" ] || die "job $j not $want: $(squeue -h -j "$j" -t all -o '%T %r')"
    sleep 0.2
  done
}

# ------------------------------------------------------------------ running set
J_PRE=$(sub alice llm-pretrain-70b -p gpu -N 4 --ntasks-per-node=8 --cpus-per-task=6 \
          --gpus-per-node=8 --mem=480G -t 1-00:00:00 --comment="gang: 4x8 H100" --wrap 'sleep 86400')
wait_state "$J_PRE" RUNNING
T_SUB=$(date +%s.%N)
J_SFT=$(sub bob sft-lora -N 2 --ntasks-per-node=4 --gres=gpu:h100:4 --cpus-per-task=4 --mem=200G \
          -t 04:00:00 --wrap 'sleep 14400')
J_NB=$(sub carol jupyter -N 1 --gpus=1 -c 8 --mem=64G -t 08:00:00 --wrap 'sleep 28800')
if [ "$DBD" = 1 ]; then
  J_ARR=$(sub dave hparam-sweep --array=0-5 --gpus=1 -c 4 --mem=32G -t 00:45:00 --qos=low --wrap 'sleep 2700')
else
  J_ARR=$(sub dave hparam-sweep --array=0-5%4 --gpus=1 -c 4 --mem=32G -t 00:45:00 --wrap 'sleep 2700')
fi
J_CPU=$(sub erin preprocess-shards -N 1 -n 16 --mem=64G -t 02:00:00 --wrap 'sleep 7200')
J_PREP=$(sub alice data-prep -N 1 -c 4 --mem=16G -t 00:30:00 --wrap 'sleep 1800')
wait_state "$J_SFT" RUNNING; wait_state "$J_NB" RUNNING; wait_state "$J_CPU" RUNNING; wait_state "$J_PREP" RUNNING
ts "submission -> RUNNING: $(awk -v a="$(date +%s.%N)" -v b="$T_SUB" 'BEGIN{printf "%.2f", a-b}')s for 5 jobs (+array)"

# finished jobs (stay visible for MinJobAge=600s): completed, failed, cancelled
J_OK=$(sub erin smoke-test -N 1 -c 1 --mem=1G -t 00:05:00 --wrap 'true')
J_BAD=$(sub alice tokenizer-build -N 1 -c 2 --mem=4G -t 00:10:00 --wrap 'echo boom; exit 3')
J_CAN=$(sub bob oops-wrong-config -N 1 --gpus=1 -t 00:10:00 --begin=now+1hour --wrap 'sleep 60')
scancel "$J_CAN"
wait_state "$J_OK" COMPLETED; wait_state "$J_BAD" FAILED

# ------------------------------------------------------------------ node trouble + reservations
scontrol update NodeName=gpu006 State=DRAIN Reason="Xid 79: GPU has fallen off the bus (GPU 3)"
scontrol update NodeName=gpu008 State=DOWN Reason="NHC: ib0 link down"
scontrol create reservation ReservationName=maint-gpu007 StartTime=now+1hour Duration=04:00:00 \
  Nodes=gpu007 Flags=MAINT Users=root >/dev/null
scontrol create reservation ReservationName=vision-demo StartTime=now+1day Duration=08:00:00 \
  Nodes=gpu005 Users=carol,dave >/dev/null

# ------------------------------------------------------------------ pending set
J_BIG=$(sub alice llm-pretrain-405b -N 5 --ntasks-per-node=8 --gpus-per-node=8 --exclusive \
          -t 2-00:00:00 --comment="gang: 5x8 GPUs" --wrap 'sleep 172800')            # -> Resources
J_HUGE=$(sub erin full-cluster-nccl-bench -N 8 --gpus-per-node=8 --exclusive -t 01:00:00 --nice=1000 \
          --wrap 'sleep 3600')  # -> "Nodes required for job are DOWN, DRAINED or reserved ..."
J_BIG2=$(sub bob rlhf-ppo -N 4 --gpus-per-node=8 -t 12:00:00 --nice=100 --wrap 'sleep 43200') # -> Priority
J_DBG=$(sub erin debug-nccl -p debug -N 2 --gpus-per-node=2 -t 00:15:00 --wrap 'sleep 900')
J_LIM=$(sub dave too-long-for-debug -p debug -N 1 --gpus=1 -t 02:00:00 --wrap 'sleep 60')  # -> PartitionTimeLimit
J_TRAIN=$(sub alice train-after-prep -N 2 --gpus-per-node=8 -t 06:00:00 \
           --dependency=afterok:"$J_PREP" --wrap 'sleep 21600')                          # -> Dependency
J_EVAL=$(sub alice eval-after-train -N 1 --gpus=2 -t 01:00:00 \
           --dependency=afterok:"$J_TRAIN" --wrap 'sleep 3600')                          # -> Dependency
J_NEVER=$(sub alice train-on-bad-tokenizer -N 1 --gpus=4 -t 03:00:00 \
           --dependency=afterok:"$J_BAD" --wrap 'sleep 60')                              # -> DependencyNeverSatisfied
J_HOLDU=$(sub carol held-by-user -N 1 --gpus=2 -t 01:00:00 --hold --wrap 'sleep 60')  # -> JobHeldUser
J_HOLDA=$(sub bob held-by-admin -N 1 --gpus=2 -t 01:00:00 --wrap 'sleep 60')
scontrol hold "$J_HOLDA"                                                                 # -> JobHeldAdmin
J_BEGIN=$(sub erin nightly-report -N 1 -c 2 --mem=4G -t 00:30:00 --begin=now+6hours --wrap 'sleep 60') # -> BeginTime
if [ "$DBD" = 1 ]; then
  J_GRP=$(sub carol vision-big -N 1 --gpus=6 -t 02:00:00 --wrap 'sleep 7200')            # -> AssocGrpGRES
  J_HIGH=$(sub bob deadline-eval -N 1 --gpus=8 -t 03:00:00 --qos=high --wrap 'sleep 10800')
fi
# backfill candidate: small + short, submitted after the big pending gang job
J_BF=$(sub erin quick-eval -N 1 --gpus=1 -c 4 --mem=16G -t 00:20:00 --wrap 'sleep 1200')
ts "pending set submitted; waiting for a backfill cycle (bf_interval=5)"
end=$(( $(date +%s) + 40 ))
until scontrol show job "$J_BF" | grep -q 'JobState=RUNNING'; do
  [ "$(date +%s)" -lt "$end" ] || { echo "quick-eval not started: $(squeue -h -j "$J_BF" -o '%T %r')"; break; }
  sleep 1
done
scontrol show job "$J_BF" | grep -o 'Scheduler=[A-Za-z]*' | sed "s/^/quick-eval $J_BF /" || true
# hostile names: data that must travel as data (HTML, quotes, backslash, newline, a fake key=value)
EVIL_NAME=$'<script>alert("x")</script> \'q\' "dq" \\back\nnewline {a="b"} Evil=1'
J_EVIL=$(sub carol "$EVIL_NAME" -N 2 --gpus-per-node=1 -t 00:10:00 --hold --comment="$(printf '<b>%.0s' $(seq 1 250))" --wrap 'sleep 60')
J_LONG=$(sub dave "$(printf 'n%.0s' $(seq 1 1000))" -N 1 -t 00:10:00 --hold --wrap 'sleep 60')
sleep 6   # let the backfill loop set pending reasons / expected start times
cat > "$DIR/jobs.env" <<EOF
J_PRE=$J_PRE J_SFT=$J_SFT J_NB=$J_NB J_ARR=$J_ARR J_CPU=$J_CPU J_PREP=$J_PREP
J_OK=$J_OK J_BAD=$J_BAD J_CAN=$J_CAN J_BIG=$J_BIG J_HUGE=$J_HUGE J_BIG2=$J_BIG2 J_DBG=$J_DBG J_LIM=$J_LIM
J_TRAIN=$J_TRAIN J_EVAL=$J_EVAL J_NEVER=$J_NEVER J_HOLDU=$J_HOLDU J_HOLDA=$J_HOLDA
J_BEGIN=$J_BEGIN J_BF=$J_BF J_EVIL=$J_EVIL J_LONG=$J_LONG J_GRP=${J_GRP:-} J_HIGH=${J_HIGH:-}
EOF
ts "done"
squeue -t all -o '%.10i %.9P %.24j %.6u %.9T %.10M %.10l %.5D %.12b %R'
