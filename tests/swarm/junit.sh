#!/usr/bin/env bash
# verbsim-swarm --junit: the file validates against tests/swarm/junit.xsd (the JUnit structure
# CI systems read) with xmllint, holds a test case per seed and a failure per failed seed with
# its reproducer, and survives output that XML cannot hold as it is (markup, a terminal's
# escapes, bytes that are not UTF-8). A file broken on purpose must fail validation.
# ctest's swarm_junit runs it; it skips (77) without xmllint (Debian: libxml2-utils).
#
#   tests/swarm/junit.sh VERBSIM_SWARM
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
swarm=${1:?usage: junit.sh VERBSIM_SWARM}
if ! command -v xmllint >/dev/null; then
  echo "junit.sh: SKIP: xmllint not found (Debian: libxml2-utils; scripts/setup.sh installs it)"
  exit 77
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "junit.sh: $*" >&2; exit 1; }
xpath() { xmllint --xpath "$1" "$2"; }

# Seeds 3, 6 and 9 of 1 to 10 fail, printing what XML must escape or cannot hold.
"$swarm" --seeds 10 --jobs 2 --quiet --progress 0 --fault-probability 0.05 --junit "$work/a.xml" \
  -- sh -c 'printf "a < b & \"c\" \033[31mred\033[0m \377\376 seed %s\n" "$VERBSIM_SEED";
            test $((VERBSIM_SEED % 3)) -ne 0' >"$work/out" 2>&1 && fail "the swarm passed"
xmllint --noout --schema "$here/junit.xsd" "$work/a.xml" 2>"$work/lint" ||
  fail "does not validate: $(cat "$work/lint")"

[[ $(xpath 'count(//testsuite)' "$work/a.xml") == 1 ]] || fail "not one testsuite"
[[ $(xpath 'string(//testsuite/@tests)' "$work/a.xml") == 10 ]] || fail "tests is not 10"
[[ $(xpath 'string(//testsuite/@failures)' "$work/a.xml") == 3 ]] || fail "failures is not 3"
[[ $(xpath 'count(//testcase)' "$work/a.xml") == 10 ]] || fail "not 10 testcases"
[[ $(xpath 'count(//testcase/failure)' "$work/a.xml") == 3 ]] || fail "not 3 failures"
failed=$(xpath '//testcase[failure]/@name' "$work/a.xml" | tr -d ' "' | tr '\n' ' ')
[[ $failed == "name=seed3 name=seed6 name=seed9 " ]] || fail "failed test cases: $failed"
for i in $(seq 1 10); do
  [[ $(xpath "count(//testcase[@name='seed $i'])" "$work/a.xml") == 1 ]] || fail "no testcase 'seed $i'"
done
text=$(xpath 'string(//testcase[@name="seed 6"]/failure)' "$work/a.xml")
[[ $text == *"VERBSIM_SEED=6 VERBSIM_FAULTS='drop p="* ]] || fail "seed 6: no reproducer in: $text"
[[ $text == *'a < b & "c" ?[31mred?[0m ?? seed 6'* ]] || fail "seed 6: output not kept: $text"
[[ $(xpath 'string(//testcase[@name="seed 6"]/failure/@type)' "$work/a.xml") == "exit status 1" ]] ||
  fail "seed 6: failure type"
[[ $(xpath 'string(//property[@name="shard"]/@value)' "$work/a.xml") == 1/1 ]] || fail "shard property"
echo "junit.sh: 10 test cases, 3 failures with their reproducers; validates"

# The schema checks what it says: a test case without its time, or a failure without its type,
# does not validate.
sed '0,/<testcase name="seed 1"[^>]*time="[^"]*"/s/ time="[^"]*"//' "$work/a.xml" >"$work/bad1.xml"
sed '0,/ type="exit status 1"/s/ type="exit status 1"//' "$work/a.xml" >"$work/bad2.xml"
for bad in bad1 bad2; do
  ! cmp -s "$work/a.xml" "$work/$bad.xml" || fail "$bad: the edit changed nothing"
  if xmllint --noout --schema "$here/junit.xsd" "$work/$bad.xml" 2>/dev/null; then
    fail "$bad.xml validates"
  fi
done

# A shard's file and a merged file validate too.
"$swarm" --seeds 10 --shard 2/3 --quiet --progress 0 --junit "$work/s2.xml" -- true >/dev/null
[[ $(xpath 'string(//property[@name="shard"]/@value)' "$work/s2.xml") == 2/3 ]] || fail "shard 2/3"
[[ $(xpath 'string(//testsuite/@tests)' "$work/s2.xml") == 3 ]] || fail "shard 2/3: tests"
"$swarm" merge --junit "$work/m.xml" "$work/a.xml" >/dev/null && fail "merge passed a failed campaign"
xmllint --noout --schema "$here/junit.xsd" "$work/s2.xml" "$work/m.xml" 2>"$work/lint" ||
  fail "does not validate: $(cat "$work/lint")"
echo "junit.sh: broken files fail validation; shard and merged files validate"
