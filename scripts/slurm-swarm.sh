#!/usr/bin/env bash
# Runs a verbsim-swarm campaign on a Slurm cluster: a job array of N shards, each running
# `verbsim-swarm --shard K/N --junit DIR/shard-K.xml`, and a job that depends on the whole
# array (afterany: it runs however the shards end) and merges their files into DIR/summary.txt
# and DIR/campaign.xml. docs/CAMPAIGNS.md tells more.
#
#   scripts/slurm-swarm.sh --shards N --out DIR [--swarm PATH] [--wait] [--sbatch ARG]...
#                          -- [verbsim-swarm options] -- <binary> [args...]
#
# DIR, the swarm and the binary must be at the same paths on every node (a shared file
# system). --sbatch passes an option to both sbatch calls (--partition=..., --time=...);
# each shard asks for as many CPUs as its --jobs. Without --wait it prints the job ids and
# returns; with it, it waits for the merge and exits as `verbsim-swarm merge` does (0 all
# passed, 1 seeds failed, 2 the shards do not make the whole campaign).
set -euo pipefail

# Inside the jobs: the script runs again, as the array's task or as the merge.
if [[ ${1:-} == --run-shard ]]; then
  shift
  shards=$1 out=$2 swarm=$3
  shift 3
  k=${SLURM_ARRAY_TASK_ID:?a shard runs as a task of a Slurm job array}
  exec "$swarm" --shard "$k/$shards" --junit "$out/shard-$k.xml" --progress 60 "$@"
fi
if [[ ${1:-} == --run-merge ]]; then
  out=$2 swarm=$3
  shopt -s nullglob
  files=("$out"/shard-*.xml)
  rc=0
  if ((${#files[@]} == 0)); then
    echo "slurm-swarm.sh: no shard wrote its file in $out" >"$out/summary.txt"
    rc=2
  else
    "$swarm" merge --junit "$out/campaign.xml" "${files[@]}" >"$out/summary.txt" 2>&1 || rc=$?
  fi
  cat "$out/summary.txt"
  exit "$rc"
fi

usage() {
  sed -n '/^#   scripts/,/^#  *-- /p' "$0" | sed 's/^# *//' >&2
  echo "slurm-swarm.sh: $*" >&2
  exit 2
}
shards='' out='' swarm='' wait=0
sbatch_args=()
while (($# > 0)); do
  case $1 in
    --shards) shards=${2:?}; shift 2 ;;
    --out) out=${2:?}; shift 2 ;;
    --swarm) swarm=${2:?}; shift 2 ;;
    --wait) wait=1; shift ;;
    --sbatch) sbatch_args+=("${2:?}"); shift 2 ;;
    --) shift; break ;;
    *) usage "unknown option $1" ;;
  esac
done
(($# > 0)) || usage "no verbsim-swarm options and command after --"
[[ $shards =~ ^[1-9][0-9]*$ ]] || usage "--shards N with N >= 1"
[[ -n $out ]] || usage "--out DIR"
if [[ -z $swarm ]]; then
  swarm=$(command -v verbsim-swarm || true)
  [[ -n $swarm ]] || usage "verbsim-swarm is not on PATH: give --swarm PATH"
fi
swarm=$(realpath "$swarm")
mkdir -p "$out"
out=$(realpath "$out")
rm -f "$out"/shard-*.xml "$out"/shard-*.log "$out"/summary.txt "$out"/campaign.xml "$out"/merge.log

# The CPUs a shard asks for: its --jobs (2 when not given, as verbsim-swarm's default).
jobs=2
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
  [[ ${args[i]} == -- ]] && break
  [[ ${args[i]} == --jobs ]] && jobs=${args[i + 1]}
done

script=$(realpath "${BASH_SOURCE[0]}")
array=$(sbatch --parsable --job-name=verbsim-swarm --array="1-$shards" --cpus-per-task="$jobs" \
  --output="$out/shard-%a.log" "${sbatch_args[@]}" "$script" --run-shard "$shards" "$out" \
  "$swarm" "$@")
array=${array%%;*}
merge_args=(--parsable --job-name=verbsim-swarm-merge --dependency="afterany:$array"
            --output="$out/merge.log" "${sbatch_args[@]}")
if ((wait)); then
  echo "slurm-swarm.sh: array job $array ($shards shards); waiting for the merge"
  rc=0
  sbatch --wait "${merge_args[@]}" "$script" --run-merge "$out" "$swarm" >/dev/null || rc=$?
  cat "$out/summary.txt" 2>/dev/null || echo "slurm-swarm.sh: the merge wrote no summary" >&2
  exit "$rc"
fi
merge=$(sbatch "${merge_args[@]}" "$script" --run-merge "$out" "$swarm")
echo "slurm-swarm.sh: array job $array ($shards shards), merge job ${merge%%;*}"
echo "slurm-swarm.sh: the summary will be in $out/summary.txt, the JUnit file in $out/campaign.xml"
