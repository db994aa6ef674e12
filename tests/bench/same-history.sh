#!/usr/bin/env bash
# Checks that two builds of the simulator produce the same histories: for a pure speed-up, the
# virtual-time figures of verbsim-perf and the digests of pingpong must not change. Runs both
# builds' examples/verbsim-perf (five tests) and examples/pingpong over seeds and fault plans
# (drops, reorders, duplicates, delays, verb faults, psn=/nth=/every=/qp=/dev= rules) and
# compares what they print, wall-clock figures left out.
#
#   tests/bench/same-history.sh [--seeds N] OLD_BUILD_DIR NEW_BUILD_DIR
#
# e.g. with the previous commit built in a worktree:
#   git worktree add /tmp/base HEAD~1
#   cmake -S /tmp/base -B /tmp/base/b -DCMAKE_BUILD_TYPE=Release
#   cmake --build /tmp/base/b --target verbsim-perf pingpong
#   tests/bench/same-history.sh /tmp/base/b build-release
#
# Exits 1 and names the runs that differ. About a minute with the default 8 seeds.
set -euo pipefail

seeds=8
usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0" >&2; exit "${1:-2}"; }
while (($# > 0)); do
  case $1 in
    --seeds) [[ $# -ge 2 && $2 =~ ^[1-9][0-9]*$ ]] || usage; seeds=$2; shift 2 ;;
    -h|--help) usage 0 ;;
    -*) echo "same-history.sh: unknown option '$1'" >&2; usage ;;
    *) break ;;
  esac
done
(($# == 2)) || usage
for dir in "$1" "$2"; do
  for bin in examples/verbsim-perf examples/pingpong; do
    if [[ ! -x $dir/$bin ]]; then
      echo "same-history.sh: no $dir/$bin (build verbsim-perf and pingpong)" >&2
      exit 2
    fi
  done
done

plans=(
  ""
  "drop p=0.01; reorder p=0.1 by=2us; duplicate p=0.02"
  "delay p=0.2 by=1us; post_send p=0.02 errno=ENOMEM"
  "drop psn=5; drop nth=3; duplicate every=7; delay qp=17 p=0.3 by=1us;
   reorder dev=sim1 p=0.2 by=3us"
  "poll_cq every=5 errno=EAGAIN; drop dev=sim0 every=11; duplicate qp=18 nth=4"
)
tests=("send_bw -s 64 -n 3000 -q 3" "write_bw -s 4096 -n 2000 -q 2" "read_bw -s 1024 -n 1000 -q 2"
       "send_lat -n 500" "write_lat -n 300")

# What a run prints that depends only on the simulated history.
perf() { VERBSIM_SEED=$2 VERBSIM_FAULTS=$3 "$1/examples/verbsim-perf" --test $4 2>&1 |
           grep -E '^ *virtual |rror|fail|plan' | sed 's/, wall time.*//' || true; }
ping() { VERBSIM_SEED=$2 VERBSIM_FAULTS=$3 "$1/examples/pingpong" --iters 200 2>&1 | tail -n 1; }

runs=0
differ=0
for ((seed = 1; seed <= seeds; ++seed)); do
  for plan in "${plans[@]}"; do
    for t in "${tests[@]}"; do
      runs=$((runs + 1))
      if [[ $(perf "$1" "$seed" "$plan" "$t") != $(perf "$2" "$seed" "$plan" "$t") ]]; then
        differ=$((differ + 1))
        echo "differs: VERBSIM_SEED=$seed VERBSIM_FAULTS='$plan' verbsim-perf --test $t"
      fi
    done
    runs=$((runs + 1))
    if [[ $(ping "$1" "$seed" "$plan") != $(ping "$2" "$seed" "$plan") ]]; then
      differ=$((differ + 1))
      echo "differs: VERBSIM_SEED=$seed VERBSIM_FAULTS='$plan' pingpong --iters 200"
    fi
  done
done
echo "same-history.sh: $runs runs, $differ differ"
((differ == 0))
