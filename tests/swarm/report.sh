#!/usr/bin/env bash
# verbsim-swarm's report: failures grouped by test and first failure site, with the signature
# of the smallest seed (the failing check, numbers normalised, and the flight recorder's last
# record), one reproducer per group; progress lines on stderr,
# plain where stderr is not a terminal and redrawn in place where it is. ctest's swarm_report
# runs it.
#
#   tests/swarm/report.sh VERBSIM_SWARM SIM_OBSERVE_TEST
set -euo pipefail
swarm=${1:?usage: report.sh VERBSIM_SWARM SIM_OBSERVE_TEST}
observe=${2:?usage: report.sh VERBSIM_SWARM SIM_OBSERVE_TEST}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "report.sh: $*" >&2; cat "$work/out" >&2; exit 1; }
expect() { grep -qxF -- "$1" "$work/out" || fail "no line '$1'"; }

# A real failing test under 4 seeds: every seed's digest differs, its check and last record
# (numbers aside) do not.
rc=0
VERBSIM_DEMO_FAILURE=1 "$swarm" --seeds 4 --jobs 2 --quiet --progress 0 \
  -- "$observe" --gtest_filter='FailureReport.*' >"$work/out" 2>&1 || rc=$?
((rc == 1)) || fail "exit status $rc, not 1"
line=$(grep -n 'ADD_FAILURE() << "deliberate failure' "$(dirname "$0")/../unit/sim_observe_test.cpp" |
  cut -d: -f1)
expect "=== 4 of 4 failed seeds: FailureReport.ADeliberateFailure at sim_observe_test.cpp:$line"
expect "    seeds 1, 2, 3, 4"
expect "    seed 1: sim_observe_test.cpp:$line: Failed; deliberate failure, digest # | last: completion sim# qp # send wr_id=# SUCCESS # B (cq #)"
expect "swarm: 4 seeds, 4 failed, 1 group"
[[ $(grep -c '^--- seed .* reproduce with:' "$work/out") == 1 ]] || fail "not one reproducer"
echo "report.sh: 4 seeds of a failing gtest: one group, one reproducer"

# GoogleTest-shaped output from a script: two checks; the values differ from seed to seed.
rc=0
"$swarm" --seeds 12 --jobs 2 --quiet --progress 0 -- sh -c '
  s=$VERBSIM_SEED
  line=42; [ $((s % 3)) -eq 0 ] && line=57
  printf "[ RUN      ] T.t\n/some/where/x_test.cpp:%s: Failure\nExpected equality of these values:\n  n\n    Which is: %s\n  0x%x\n\n" $line $((s * 7)) $((s * 4099))
  [ $((s % 2)) -eq 0 ] || exit 0; exit 1' >"$work/out" 2>&1 || rc=$?
((rc == 1)) || fail "exit status $rc, not 1"
expect "=== 4 of 6 failed seeds: T.t at x_test.cpp:42"
expect "    seeds 2, 4, 8, 10"
expect "    seed 2: x_test.cpp:42: Expected equality of these values:; n; Which is: #"
expect "=== 2 of 6 failed seeds: T.t at x_test.cpp:57"
expect "    seeds 6, 12"
expect "swarm: 12 seeds, 6 failed, 2 groups"
echo "report.sh: two checks, two groups of 4 and 2 seeds"

# Plain progress lines when stderr is not a terminal (one at least, with --progress 0.05).
"$swarm" --seeds 6 --jobs 2 --quiet --progress 0.05 -- sh -c 'sleep 0.2' >"$work/out" 2>&1
grep -qE '^swarm progress: [1-6]/6 seeds \([0-9]+%\), [0-9.]+ seeds/s, 0 failed, ETA [0-9]+s$' \
  "$work/out" || fail "no plain progress line"
grep -q $'\033' "$work/out" && fail "terminal escapes in plain output"
# None with --progress 0.
"$swarm" --seeds 3 --quiet --progress 0 -- sh -c 'sleep 0.2' >"$work/out" 2>&1
grep -q 'swarm progress' "$work/out" && fail "progress with --progress 0"
# On a terminal (script(1) gives one): one line redrawn in place, taken away at the end.
if command -v script >/dev/null; then
  script -qec "$swarm --seeds 4 --jobs 2 --quiet -- sh -c 'sleep 0.3'" /dev/null >"$work/out" 2>&1
  grep -q $'\r\033\\[Kswarm progress: [0-9]/4 seeds' "$work/out" || fail "no redrawn progress line"
  tr -d '\r' <"$work/out" | grep -q '^swarm: 4 seeds, 0 failed$' || fail "no closing line on the terminal"
fi
echo "report.sh: progress plain off a terminal, redrawn on one"
