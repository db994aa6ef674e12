#!/usr/bin/env bash
# verbsim-swarm's groups for GoogleTest binaries: by the test that failed and its first failure
# site, whatever the message and the last record say; a seed that fails two tests is in the
# group of each and counts under both in the table of failed tests; --check-without-faults says
# whether a group's smallest seed fails without its fault plan; a JUnit file keeps every
# failure of a seed, so merge groups the same way; --help answers on stdout. ctest's
# swarm_groups runs it.
#
#   tests/swarm/groups.sh VERBSIM_SWARM
set -euo pipefail
swarm=${1:?usage: groups.sh VERBSIM_SWARM}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "groups.sh: $*" >&2; cat "$work/out" >&2; exit 1; }
expect() { grep -qxF -- "$1" "$work/out" || fail "no line '$1'"; }

# GoogleTest output of one bug: Suite.Send fails at x_test.cpp:42 on every even seed, its
# message and the flight recorder's last record naming another status from seed to seed (as
# one bug's failures do). Seeds that are multiples of 4 fail Suite.Other too, at y_test.cpp:9;
# multiples of 6 fail Suite.Send first at x_test.cpp:57. Without a fault plan (VERBSIM_FAULTS
# empty) Suite.Send fails at x_test.cpp:77 instead, and Suite.Other passes.
cat >"$work/test.sh" <<'SH'
s=$VERBSIM_SEED
statuses="SUCCESS RNR_RETRY_EXC_ERR RETRY_EXC_ERR REM_ACCESS_ERR WR_FLUSH_ERR"
status=$(echo $statuses | cut -d' ' -f$((s % 5 + 1)))
line=42; [ $((s % 6)) -eq 0 ] && line=57; [ -n "$VERBSIM_FAULTS" ] || line=77
echo "[ RUN      ] Suite.Pass"
echo "[       OK ] Suite.Pass (0 ms)"
echo "[ RUN      ] Suite.Send"
if [ $((s % 2)) -eq 0 ]; then
  echo "/src/tests/x_test.cpp:$line: Failure"
  echo "Expected: SUCCESS, got $status"
  echo
  echo "[  WORLD   ] seed $s, profile strict, fault plan '$VERBSIM_FAULTS'"
  echo "last 3 records of the run:"
  echo "  t=$((s * 10)) ns completion sim0 qp 17 send wr_id=$s $status 64 B (cq 1)"
  echo "[  FAILED  ] Suite.Send ($s ms)"
else
  echo "[       OK ] Suite.Send (0 ms)"
fi
echo "[ RUN      ] Suite.Other/0"
if [ $((s % 4)) -eq 0 ] && [ -n "$VERBSIM_FAULTS" ]; then
  echo "/src/tests/y_test.cpp:9: Failure"
  echo "Value of: done_$status"
  echo "[  FAILED  ] Suite.Other/0, where GetParam() = 4 (1 ms)"
else
  echo "[       OK ] Suite.Other/0 (0 ms)"
fi
[ $((s % 2)) -eq 0 ] && exit 1
exit 0
SH

rc=0
"$swarm" --seeds 24 --jobs 2 --quiet --progress 0 --fault-probability 0.05 --check-without-faults \
  --junit "$work/campaign.xml" -- sh "$work/test.sh" >"$work/out" 2>&1 || rc=$?
((rc == 1)) || fail "exit status $rc, not 1"
cp "$work/out" "$work/campaign.txt"
expect "=== 8 of 12 failed seeds: Suite.Send at x_test.cpp:42"
expect "    seeds 2, 4, 8, 10, 14, 16, 20, 22"
expect "=== 6 of 12 failed seeds: Suite.Other/0 at y_test.cpp:9"
expect "    seeds 4, 8, 12, 16, 20, 24"
expect "=== 4 of 12 failed seeds: Suite.Send at x_test.cpp:57"
expect "    seeds 6, 12, 18, 24"
expect "    (5 different messages or last records in the group)"
expect "    (4 different messages or last records in the group)"
expect "    seed 2: x_test.cpp:42: Expected: SUCCESS, got RETRY_EXC_ERR | last: completion sim# qp # send wr_id=# RETRY_EXC_ERR # B (cq #)"
expect "    without faults: seed 2 fails otherwise (exit status 1): Suite.Send at x_test.cpp:77"
expect "    without faults: seed 4 fails otherwise (exit status 1): Suite.Send at x_test.cpp:77"
expect "failed tests (a seed that failed two counts under both):"
expect "  seeds  sites  test"
expect "     12      2  Suite.Send"
expect "      6      1  Suite.Other/0"
expect "swarm: 24 seeds, 12 failed, 3 groups"
[[ $(grep -c '^--- seed .* reproduce with:' "$work/out") == 3 ]] || fail "not one reproducer per group"
echo "groups.sh: one bug with 5 messages and last records: one group per test and site (3 groups)"

# The JUnit file keeps each seed's failures: merge prints the same groups and table.
"$swarm" merge "$work/campaign.xml" >"$work/out" 2>&1 || rc=$?
for line in "=== 8 of 12 failed seeds: Suite.Send at x_test.cpp:42" \
            "=== 6 of 12 failed seeds: Suite.Other/0 at y_test.cpp:9" \
            "     12      2  Suite.Send" "      6      1  Suite.Other/0"; do
  expect "$line"
done
grep -q '^swarm: 24 seeds, 12 failed, 3 groups (merged from 1 files' "$work/out" ||
  fail "merge: another closing line"
echo "groups.sh: the JUnit file merges into the same groups"

# A seed that passes without faults says so; a seed that ran without a plan is not run again.
"$swarm" --seeds 4 --first 4 --quiet --progress 0 --faults 'drop nth=1' --check-without-faults \
  -- sh -c '[ -z "$VERBSIM_FAULTS" ] && exit 0; printf "[ RUN      ] A.b\nz_test.cpp:3: Failure\n"; exit 1' \
  >"$work/out" 2>&1 || true
expect "    without faults: seed 4 passes"
env -u VERBSIM_FAULTS "$swarm" --seeds 2 --quiet --progress 0 --check-without-faults \
  -- sh -c 'printf "[ RUN      ] A.b\nz_test.cpp:3: Failure\n"; exit 1' >"$work/out" 2>&1 || true
expect "=== 2 of 2 failed seeds: A.b at z_test.cpp:3"
expect "    without faults: the seed ran without a fault plan"
echo "groups.sh: --check-without-faults: fails otherwise, passes, or had no plan"

# --help: the usage on stdout, exit status 0; merge --help too.
"$swarm" --help >"$work/out" 2>"$work/err" || fail "--help: exit status $?"
grep -q '^usage: verbsim-swarm ' "$work/out" || fail "--help: no usage on stdout"
grep -q -- '--check-without-faults' "$work/out" || fail "--help: no --check-without-faults"
"$swarm" merge --help >"$work/out" 2>&1 || fail "merge --help: exit status $?"
grep -q 'verbsim-swarm merge' "$work/out" || fail "merge --help: no usage"
echo "groups.sh: --help prints the usage and exits 0"
