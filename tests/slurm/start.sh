#!/usr/bin/env bash
# Start a throw-away Slurm "cluster" of 8 GPU nodes on this one host, for gangwatch's tests.
# Adapted from the tested recipe in ../shared/recipes/slurm/start.sh; additions: simulated nodes
# without slurmd (GW_SLURM_SIM_NODES, for the benchmark) and MaxJobCount (GW_SLURM_MAXJOBS).
# No systemd: every daemon is started directly and its PID recorded under $DIR/run.
# Must run as root.  Idempotent start is NOT supported: run stop.sh first.
#
#   GW_SLURM_DIR=/tmp/gw-slurm   all state, configs, logs, sockets, pids (wiped by stop.sh)
#   GW_SLURM_PORT_BASE=17800     ctld=+17 dbd=+19 slurmd=+21..+28 mariadb=+6
#   GW_SLURM_DBD=0|1             1 = also start MariaDB + slurmdbd (needs mariadb-server,
#                                slurmdbd, slurm-wlm-mysql-plugin installed)
#   GW_SLURM_GPU_FILES=symlink|mknod   fake GPU device files $DIR/dev/nvidia[0-7]: symlinks to
#                                /dev/null (default, no privileges needed) or `mknod c 1 3`
#   GW_SLURM_JWT=0|1             1 = enable auth/jwt as AuthAltTypes (for slurmrestd over TCP)
#   GW_SLURM_SIM_NODES=0         extra nodes sim[0001-N] (no slurmd; DOWN) in partition gpu
#   GW_SLURM_MAXJOBS=10000       MaxJobCount
#   GW_SLURM_TOPOLOGY=FILE       copy FILE to $DIR/etc/topology.conf and set TopologyPlugin=topology/tree
#   GW_SLURM_SLURMD=1            0 = start no slurmd (slurmctld alone: nodes stay UNKNOWN; enough
#                                for `scontrol show topology` and the exporter's poll)
#
# Afterwards:  source $GW_SLURM_DIR/env.sh   (exports SLURM_CONF) and use squeue/sbatch/...
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
DIR=${GW_SLURM_DIR:-/tmp/gw-slurm}
PB=${GW_SLURM_PORT_BASE:-17800}
DBD=${GW_SLURM_DBD:-0}
GPU_FILES=${GW_SLURM_GPU_FILES:-symlink}
JWT=${GW_SLURM_JWT:-0}
SIM=${GW_SLURM_SIM_NODES:-0}
MAXJOBS=${GW_SLURM_MAXJOBS:-10000}
TOPOLOGY=${GW_SLURM_TOPOLOGY:-}
SLURMD=${GW_SLURM_SLURMD:-1}
P_MYSQL=$((PB + 6)); P_CTLD=$((PB + 17)); P_DBD=$((PB + 19)); P_SLURMD=$((PB + 18))
P_H100="$((PB + 21))-$((PB + 26))"; P_A100="$((PB + 27))-$((PB + 28))"
NODES=(gpu001 gpu002 gpu003 gpu004 gpu005 gpu006 gpu007 gpu008)

T0=$(date +%s.%N)
ts() { printf '[start.sh +%6.2fs] %s\n' "$(awk -v a="$(date +%s.%N)" -v b="$T0" 'BEGIN{print a-b}')" "$*"; }
die() { echo "start.sh: $*" >&2; exit 1; }
wait_for() { # wait_for <seconds> <description> <command...>   (GUARD_PID/GUARD_LOG: fail fast)
  local limit=$1 what=$2; shift 2
  local end=$(( $(date +%s) + limit ))
  until "$@" >/dev/null 2>&1; do
    if [ -n "${GUARD_PID:-}" ] && ! kill -0 "$GUARD_PID" 2>/dev/null; then
      tail -n 20 "${GUARD_LOG:-/dev/null}" >&2; die "$what: daemon (pid $GUARD_PID) died"; fi
    [ "$(date +%s)" -lt "$end" ] || { tail -n 20 "${GUARD_LOG:-/dev/null}" >&2; die "timeout (${limit}s) waiting for $what"; }
    sleep 0.2
  done
}

[ "$(id -u)" = 0 ] || die "must run as root"
for b in munged slurmctld slurmd sinfo; do command -v $b >/dev/null || die "$b not installed"; done
if ls "$DIR"/run/*.pid >/dev/null 2>&1; then die "$DIR/run has pid files; run stop.sh first"; fi

mkdir -p "$DIR"/{etc,spool/ctld,log,run,dev,munge/etc,munge/run,munge/log,munge/lib}
chmod 755 "$DIR"

# ---------------------------------------------------------------- munge (private socket)
M=$DIR/munge
if command -v mungekey >/dev/null; then
  [ -s $M/etc/munge.key ] || mungekey --create --keyfile=$M/etc/munge.key
else
  dd if=/dev/urandom of=$M/etc/munge.key bs=1 count=1024 2>/dev/null
fi
chown -R munge:munge $M
chmod 755 $M $M/run            # clients (root, job users) must reach the socket
chmod 700 $M/etc $M/log $M/lib
chmod 400 $M/etc/munge.key
runuser -u munge -- /usr/sbin/munged --socket=$M/run/munge.socket.2 \
  --key-file=$M/etc/munge.key --pid-file=$M/run/munged.pid \
  --log-file=$M/log/munged.log --seed-file=$M/lib/munged.seed
wait_for 10 "munged" sh -c "munge -n -S $M/run/munge.socket.2 | unmunge -S $M/run/munge.socket.2"
cp $M/run/munged.pid "$DIR"/run/munged.pid
ts "munged up (pid $(cat $M/run/munged.pid))"

# ---------------------------------------------------------------- configs
if [ "$DBD" = 1 ]; then
  ACCT="AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort=$P_DBD
# for the slurmdbd connection AuthInfo is NOT used; the munge socket comes from here:
AccountingStoragePass=$M/run/munge.socket.2
AccountingStorageEnforce=associations,limits,qos"
  JOBACCT=jobacct_gather/linux      # feeds sacct/sstat; reads /proc, no cgroups needed
  # gres/gpu as a TRES is only allowed with slurmdbd ("fatal: slurmdbd is required to run with
  # TRES gres/gpu") -> GPU-aware billing / TRES priority only in DBD mode
  ACCT="$ACCT
AccountingStorageTRES=gres/gpu,gres/gpu:h100,gres/gpu:a100"
  TRES_PRIO="PriorityWeightTRES=CPU=100,GRES/gpu=1000"
  BILLING="CPU=1.0,Mem=0.25G,GRES/gpu=16.0"
else
  ACCT="AccountingStorageType=accounting_storage/none"
  JOBACCT=jobacct_gather/none
  TRES_PRIO="PriorityWeightTRES=CPU=100"
  BILLING="CPU=1.0,Mem=0.25G"
fi
AUTHALT=""
if [ "$JWT" = 1 ]; then
  dd if=/dev/urandom of="$DIR"/etc/jwt_hs256.key bs=32 count=1 2>/dev/null
  chmod 600 "$DIR"/etc/jwt_hs256.key
  AUTHALT="AuthAltTypes=auth/jwt
AuthAltParameters=jwt_key=$DIR/etc/jwt_hs256.key"
fi
SIM_NODES=""; SIM_PART=""
if [ "$SIM" -gt 0 ]; then
  # no slurmd behind these: they are declared DOWN so nothing is scheduled there
  SIM_NODES="NodeName=sim[0001-$(printf %04d "$SIM")] NodeHostname=localhost NodeAddr=127.0.0.1 Port=$((PB + 100))-$((PB + 99 + SIM)) Gres=gpu:h100:8 Feature=h100,sim Weight=50 State=DOWN Reason=simulated"
  SIM_PART=",sim[0001-$(printf %04d "$SIM")]"
fi
export ACCT AUTHALT SIM_NODES SIM_PART
python3 - "$HERE/slurm.conf.in" "$DIR/etc/slurm.conf" <<PY
import os, sys
s = open(sys.argv[1]).read()
for k, v in {"@DIR@": "$DIR", "@P_CTLD@": "$P_CTLD", "@P_SLURMD@": "$P_SLURMD",
             "@P_NODES_H100@": "$P_H100", "@P_NODES_A100@": "$P_A100",
             "@ACCT@": os.environ["ACCT"], "@JOBACCT@": "$JOBACCT", "@TRES_PRIO@": "$TRES_PRIO", "@BILLING@": "$BILLING", "@AUTHALT@": os.environ["AUTHALT"], "@SIM_NODES@": os.environ["SIM_NODES"], "@SIM_PART@": os.environ["SIM_PART"], "@MAXJOBS@": "$MAXJOBS"}.items():
    s = s.replace(k, v)
open(sys.argv[2], "w").write(s)
PY

# Fake GPU device files. Slurm 22.05 DISCARDS GPUs without File= ("Discarding the following
# config-only GPU due to lack of File specification" -> node INVAL "gres/gpu count reported lower
# than configured (0 < 8)"), and File= must stat() as a char/block device (plain files are
# rejected). Symlinks to /dev/null pass (stat follows links) and need no CAP_MKNOD.
for i in 0 1 2 3 4 5 6 7; do
  case "$GPU_FILES" in
    mknod)   [ -c "$DIR"/dev/nvidia$i ] || mknod "$DIR"/dev/nvidia$i c 1 3 || die "mknod failed (try GW_SLURM_GPU_FILES=symlink)" ;;
    symlink) ln -sfn /dev/null "$DIR"/dev/nvidia$i ;;
    *) die "GW_SLURM_GPU_FILES must be symlink or mknod" ;;
  esac
done
sed "s#@DIR@#$DIR#g" "$HERE/gres.conf.in" > "$DIR"/etc/gres.conf
if [ -n "$TOPOLOGY" ]; then  # slurmctld reads topology.conf from beside slurm.conf
  cp "$TOPOLOGY" "$DIR"/etc/topology.conf
  echo "TopologyPlugin=topology/tree" >> "$DIR"/etc/slurm.conf
fi
cat > "$DIR"/env.sh <<EOF
export SLURM_CONF=$DIR/etc/slurm.conf
export GW_SLURM_DIR=$DIR
EOF
export SLURM_CONF=$DIR/etc/slurm.conf
ts "configs rendered in $DIR/etc"

# ---------------------------------------------------------------- optional MariaDB + slurmdbd
if [ "$DBD" = 1 ]; then
  for b in mariadbd mariadb-install-db slurmdbd; do command -v $b >/dev/null || die "$b not installed"; done
  DB=$DIR/mysql; mkdir -p $DB/data $DB/run $DB/log; chown -R mysql:mysql $DB
  mariadb-install-db --user=mysql --datadir=$DB/data --auth-root-authentication-method=socket \
    --skip-test-db > $DB/log/install.log 2>&1 || { cat $DB/log/install.log; die "mariadb-install-db failed"; }
  ts "mariadb datadir initialised"
  nohup mariadbd --no-defaults --user=mysql --datadir=$DB/data --socket=$DB/run/mysqld.sock \
    --port=$P_MYSQL --bind-address=127.0.0.1 --skip-name-resolve --pid-file=$DB/run/mariadbd.pid \
    --log-error=$DB/log/mariadbd.err --innodb-buffer-pool-size=128M \
    --innodb-lock-wait-timeout=900 > $DB/log/mariadbd.out 2>&1 &
  echo $! > "$DIR"/run/mariadbd.pid
  wait_for 60 "mariadbd" mariadb --socket=$DB/run/mysqld.sock -e 'select 1'
  mariadb --socket=$DB/run/mysqld.sock <<SQL
CREATE USER 'slurm'@'127.0.0.1' IDENTIFIED BY 'gangwatch';
CREATE USER 'slurm'@'localhost' IDENTIFIED BY 'gangwatch';
GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';
GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';
SQL
  ts "mariadbd up (pid $(cat "$DIR"/run/mariadbd.pid))"
  cat > "$DIR"/etc/slurmdbd.conf <<EOF
AuthType=auth/munge
AuthInfo=socket=$M/run/munge.socket.2
DbdHost=localhost
DbdPort=$P_DBD
SlurmUser=root
DebugLevel=info
LogFile=$DIR/log/slurmdbd.log
PidFile=$DIR/run/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$P_MYSQL
StorageUser=slurm
StoragePass=gangwatch
StorageLoc=slurm_acct_db
EOF
  chmod 600 "$DIR"/etc/slurmdbd.conf
  # slurmdbd finds slurmdbd.conf next to $SLURM_CONF
  slurmdbd || { tail -n 20 "$DIR"/log/slurmdbd.log >&2; die "slurmdbd failed to start"; }
  wait_for 10 "slurmdbd pid file" test -s "$DIR"/run/slurmdbd.pid
  GUARD_PID=$(cat "$DIR"/run/slurmdbd.pid) GUARD_LOG=$DIR/log/slurmdbd.log wait_for 60 "slurmdbd" sacctmgr -n -P list cluster
  ts "slurmdbd up (pid $(cat "$DIR"/run/slurmdbd.pid))"
  sacctmgr -i add cluster gangwatch >/dev/null
  ts "cluster registered in slurmdbd"
fi

# ---------------------------------------------------------------- slurmctld + 8 slurmd
slurmctld || { tail -n 20 "$DIR"/log/slurmctld.log >&2; die "slurmctld failed to start"; }
wait_for 10 "slurmctld pid file" test -s "$DIR"/run/slurmctld.pid
GUARD_PID=$(cat "$DIR"/run/slurmctld.pid) GUARD_LOG=$DIR/log/slurmctld.log wait_for 30 "slurmctld" scontrol ping
ts "slurmctld up (pid $(cat "$DIR"/run/slurmctld.pid))"
if [ "$SLURMD" = 1 ]; then
  for n in "${NODES[@]}"; do
    mkdir -p "$DIR"/spool/slurmd-$n
    slurmd -N $n          # one slurmd per simulated node; needs MULTIPLE_SLURMD (Debian: yes)
  done
  all_idle() { [ "$(sinfo -h -N -p gpu -t idle -o %N | sort -u | wc -l)" = ${#NODES[@]} ]; }
  wait_for 60 "all nodes idle" all_idle
  ts "all ${#NODES[@]} nodes idle"
fi
sinfo
