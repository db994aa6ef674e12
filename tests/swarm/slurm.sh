#!/usr/bin/env bash
# A campaign on a real Slurm cluster of one node, started here: munged, slurmctld and slurmd run
# as plain processes with a private configuration in a temporary directory (no systemd, ports
# picked free), scripts/slurm-swarm.sh submits 40 seeds as an array of 4 shards and a merge that
# depends on it, and the merged report must count what the seeds did. The daemons and any job
# left are stopped at the end, failure or not. ctest's swarm_slurm (label cluster) runs it; it
# skips (77) when not root or without Slurm and munge (scripts/setup.sh installs slurm-wlm and
# munge).
#
#   tests/swarm/slurm.sh VERBSIM_SWARM
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
swarm=$(realpath "${1:?usage: slurm.sh VERBSIM_SWARM}")
skip() { echo "slurm.sh: SKIP: $*"; exit 77; }
((EUID == 0)) || skip "needs root (slurmd starts jobs as their user)"
for tool in munged slurmctld slurmd sbatch squeue scontrol scancel sinfo; do
  command -v "$tool" >/dev/null || skip "$tool not found (Debian: slurm-wlm, munge; scripts/setup.sh)"
done

work=$(mktemp -d /tmp/verbsim-slurm.XXXXXX)
chmod 700 "$work"
pids=()
cleanup() {
  local rc=$?
  if [[ -f $work/slurm.conf ]]; then
    SLURM_CONF=$work/slurm.conf scancel --quiet --user=root 2>/dev/null || true
  fi
  # slurmd, slurmctld, munged: in the reverse order of their start, each by its process id.
  local i
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
    kill "${pids[i]}" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "${pids[i]}" 2>/dev/null || break; sleep 0.1; done
    kill -9 "${pids[i]}" 2>/dev/null || true
    wait "${pids[i]}" 2>/dev/null || true
  done
  if ((rc != 0 && rc != 77)); then
    for log in "$work"/*.log "$work"/campaign/*.log; do
      [[ -f $log ]] && { echo "--- $log"; tail -n 30 "$log"; }
    done >&2
  fi
  rm -rf "$work"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 1' INT TERM
fail() { echo "slurm.sh: $*" >&2; exit 1; }

# Two free TCP ports next to each other, for slurmctld and slurmd.
port=0
for try in $(seq 200); do
  p=$((20000 + RANDOM % 20000))
  if ! ss -Hltn "( sport = :$p or sport = :$((p + 1)) )" | grep -q .; then
    port=$p
    break
  fi
done
((port > 0)) || skip "no free pair of TCP ports"

# munge: a key of our own and a socket in the work directory.
mkdir -p "$work/munge" "$work/state" "$work/spool" "$work/campaign"
chmod 700 "$work/munge"
dd if=/dev/urandom of="$work/munge/munge.key" bs=1024 count=1 status=none
chmod 400 "$work/munge/munge.key"
munged --foreground --force --socket="$work/munge/munge.socket" --key-file="$work/munge/munge.key" \
  --pid-file="$work/munge/munged.pid" --seed-file="$work/munge/munged.seed" \
  --log-file="$work/munged.log" >>"$work/munged.log" 2>&1 &
pids+=($!)
for _ in $(seq 50); do [[ -S $work/munge/munge.socket ]] && break; sleep 0.1; done
[[ -S $work/munge/munge.socket ]] || fail "munged did not start"

host=$(hostname -s 2>/dev/null || hostname)
cpus=$(nproc)
cat >"$work/slurm.conf" <<CONF
ClusterName=verbsim-test
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$port
SlurmdPort=$((port + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$work/munge/munge.socket
StateSaveLocation=$work/state
SlurmdSpoolDir=$work/spool/slurmd-%n
SlurmctldPidFile=$work/slurmctld.pid
SlurmdPidFile=$work/slurmd-%n.pid
SlurmctldLogFile=$work/slurmctld.log
SlurmdLogFile=$work/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SwitchType=switch/none
MpiDefault=none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
MailProg=/bin/true
SlurmctldTimeout=30
SlurmdTimeout=30
NodeName=verbsim-node NodeHostname=$host NodeAddr=127.0.0.1 CPUs=$cpus State=UNKNOWN
PartitionName=campaign Nodes=verbsim-node Default=YES MaxTime=INFINITE State=UP
CONF
export SLURM_CONF=$work/slurm.conf
slurmctld -D -i -f "$SLURM_CONF" >>"$work/slurmctld.log" 2>&1 &
pids+=($!)
slurmd -D -N verbsim-node -f "$SLURM_CONF" >>"$work/slurmd.log" 2>&1 &
pids+=($!)
state=''
for _ in $(seq 100); do
  state=$(sinfo -h -n verbsim-node -o %T 2>/dev/null || true)
  [[ $state == idle ]] && break
  sleep 0.2
done
[[ $state == idle ]] || fail "the node is '${state:-unknown}', not idle, after 20 s"
echo "slurm.sh: slurmctld, slurmd and munged up (node idle, $cpus CPUs)"

# The campaign: seeds 1 to 40, multiples of 7 fail one way, other multiples of 5 another.
script='s=$VERBSIM_SEED; if [ $((s % 7)) -eq 0 ]; then echo "boom at $s"; exit 3; fi; test $((s % 5)) -ne 0'
started=$SECONDS
rc=0
timeout 240 "$here/../../scripts/slurm-swarm.sh" --shards 4 --out "$work/campaign" \
  --swarm "$swarm" --wait -- --seeds 40 --jobs 1 --quiet -- sh -c "$script" \
  >"$work/submit.log" 2>&1 || rc=$?
cat "$work/submit.log"
((rc == 1)) || fail "slurm-swarm.sh exited $rc, not 1 (seeds failed)"
summary=$work/campaign/summary.txt
expect() { grep -qxF -- "$1" "$summary" || fail "the summary lacks the line '$1'"; }
expect "swarm: 40 seeds, 12 failed, 2 groups (merged from 4 files; a campaign of 4 shards, seeds 1 to 40)"
expect "=== 7 of 12 failed seeds: exit status 1"
expect "    seeds 5, 10, 15, 20, 25, 30, 40"
expect "=== 5 of 12 failed seeds: exit status 3: boom at #"
expect "    seeds 7, 14, 21, 28, 35"
grep -q '^swarm merge:' "$summary" && fail "the merge reports problems"
# Each shard ran as its own array task and ran its slice.
for k in 1 2 3 4; do
  grep -q "^swarm: 10 seeds, [0-9]* failed.* (shard $k/4: seeds $((10 * k - 9)) to $((10 * k)) of 1 to 40)\$" \
    "$work/campaign/shard-$k.log" || fail "shard $k's log: $(tail -n 1 "$work/campaign/shard-$k.log")"
done
grep -q 'tests="40" failures="12"' "$work/campaign/campaign.xml" || fail "campaign.xml counts"
if command -v xmllint >/dev/null; then
  xmllint --noout --schema "$here/junit.xsd" "$work/campaign/campaign.xml" 2>/dev/null ||
    fail "campaign.xml does not validate"
fi
echo "slurm.sh: 4 array tasks and the merge ran in $((SECONDS - started)) s; 40 seeds, 12 failed, 2 groups"
