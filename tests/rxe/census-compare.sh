#!/usr/bin/env bash
# Compares the kinds of completions the random verb test polls on real rxe (in the VM) and on
# the simulator's rxe profile, over the same seeds: each line is a kind (side, status, opcode,
# flags, non-zero fields) with its count on the simulator and on rxe. A kind only one side
# produces points at a difference to probe with a conformance case; counts differ anyway
# (the simulator's virtual time runs RNR and ACK timers out faster than real time).
#
#   tests/rxe/census-compare.sh [--seeds N] [--pace lazy|eager] BUILD_DIR
#
# BUILD_DIR holds tests/unit/sim_random_verbs_test. Needs the VM (tests/rxe/rxe-run): about
# 10 s per seed. Exits 1 when a kind appears on one side only.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
seeds=8
pace=eager
usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0" >&2; exit "${1:-2}"; }
while (($# > 0)); do
  case $1 in
    --seeds) [[ $# -ge 2 && $2 =~ ^[1-9][0-9]*$ ]] || usage; seeds=$2; shift 2 ;;
    --pace) [[ $# -ge 2 && ($2 == lazy || $2 == eager) ]] || usage; pace=$2; shift 2 ;;
    -h|--help) usage 0 ;;
    -*) echo "census-compare.sh: unknown option '$1'" >&2; usage ;;
    *) break ;;
  esac
done
(($# == 1)) || usage
bin=$(cd "$1" && pwd)/tests/unit/sim_random_verbs_test
[[ -x $bin ]] || { echo "census-compare.sh: no $bin" >&2; exit 2; }
filter=Profiles/RandomVerbs.NothingCrashesAndEveryWrEndsOnce/rxe
[[ $pace == eager ]] && filter+=_eager
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tally() { sed -n 's/^census \(.*\): \([0-9]*\)$/\1\t\2/p' | awk -F'\t' '{n[$1] += $2} END {for (k in n) print k "\t" n[k]}' | sort; }
for ((s = 1; s <= seeds; ++s)); do
  VERBSIM_CENSUS=1 VERBSIM_SEED=$s "$bin" --gtest_filter="$filter" >>"$work/sim.log" 2>&1 || true
  tests/rxe/rxe-run --timeout 300 --env VERBSIM_CENSUS=1 --env VERBSIM_SEED=$s -- "$bin" \
    --gtest_filter='RandomVerbsOnDevice.*' >>"$work/rxe.log" 2>&1 || true
done
tally <"$work/sim.log" >"$work/sim"
tally <"$work/rxe.log" >"$work/rxe"
printf '%-60s %8s %8s\n' kind simulator rxe
join -t $'\t' -a1 -a2 -e0 -o 0,1.2,2.2 "$work/sim" "$work/rxe" |
  awk -F'\t' '{printf "%-60s %8d %8d%s\n", $1, $2, $3, ($2 == 0 || $3 == 0) ? "   <- one side only" : ""}' |
  tee "$work/table"
! grep -q 'one side only' "$work/table"
