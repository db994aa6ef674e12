#!/usr/bin/env bash
# The test main's failure report, from the outside: a deliberately failing seeded test
# (FailureReport.ADeliberateFailure in sim_observe_test) prints its world's seed, profile and
# fault plan, its last records and counters, and a command; running that command gives the
# same failure, and writes the capture and timeline it names. ctest's failure_report runs it.
#
#   tests/observe/failure-report.sh SIM_OBSERVE_TEST
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
bin=${1:?usage: failure-report.sh SIM_OBSERVE_TEST}
out=$(mktemp)
again=$(mktemp)
trap 'rm -f "$out" "$again" /tmp/FailureReport_ADeliberateFailure.*' EXIT
fail() { echo "failure-report.sh: $*" >&2; cat "$out" >&2; exit 1; }

if VERBSIM_DEMO_FAILURE=1 "$bin" --gtest_filter='FailureReport.*' >"$out" 2>&1; then
  fail "the deliberate failure passed"
fi
grep -q "^\[  WORLD   \] seed 7, profile strict, fault plan 'drop nth=2; delay p=0.5 by=1us'" "$out" ||
  fail "no world line with seed, profile and plan"
grep -q '^last [0-9]* records of the run:' "$out" || fail "no records"
grep -q 'packet sim1 qp 17 -> sim0 qp 17 ack psn 100 0 B \[dropped\]' "$out" || fail "no dropped packet"
grep -q '^counters of the QPs involved:' "$out" || fail "no counters"
grep -q 'retransmissions 1' "$out" || fail "no retransmission counted"
want=$(grep -o 'deliberate failure, digest [0-9a-f]*' "$out") || fail "no failure message"
cmd=$(grep -A1 '^\[  RERUN   \]' "$out" | tail -n 1) || fail "no rerun command"
[[ $cmd == *VERBSIM_DEMO_FAILURE=* && $cmd == *VERBSIM_SEED=7* ]] || fail "command lacks the environment: $cmd"

if bash -c "$cmd" >"$again" 2>&1; then
  fail "the rerun command passed: $cmd"
fi
got=$(grep -o 'deliberate failure, digest [0-9a-f]*' "$again") || fail "rerun: no failure message"
[[ $got == "$want" ]] || fail "rerun failed otherwise: '$got' instead of '$want'"
[[ -s /tmp/FailureReport_ADeliberateFailure.json ]] || fail "rerun wrote no timeline"
python3 "$here/check-timeline.py" /tmp/FailureReport_ADeliberateFailure.json >/dev/null

# The test's own variable (OBSERVE_DEMO_SENDS, not VERBSIM_*) goes into the command when
# VERBSIM_KEEP_ENV names it (here as a prefix), and the rerun makes as many SENDs.
if VERBSIM_DEMO_FAILURE=1 VERBSIM_KEEP_ENV='OBSERVE_DEMO_*' OBSERVE_DEMO_SENDS=7 \
    "$bin" --gtest_filter='FailureReport.*' >"$out" 2>&1; then
  fail "the deliberate failure passed"
fi
want7=$(grep -o 'deliberate failure, digest [0-9a-f]*' "$out") || fail "no failure message"
[[ $want7 != "$want" ]] || fail "OBSERVE_DEMO_SENDS=7 changed nothing"
cmd=$(grep -A1 '^\[  RERUN   \]' "$out" | tail -n 1) || fail "no rerun command"
[[ $cmd == *"OBSERVE_DEMO_SENDS='7'"* ]] || fail "the command lacks OBSERVE_DEMO_SENDS: $cmd"
if env -u OBSERVE_DEMO_SENDS bash -c "$cmd" >"$again" 2>&1; then
  fail "the rerun command passed: $cmd"
fi
got=$(grep -o 'deliberate failure, digest [0-9a-f]*' "$again") || fail "rerun: no failure message"
[[ $got == "$want7" ]] || fail "rerun with the kept variable failed otherwise: '$got' instead of '$want7'"
echo "failure-report.sh: report printed; the rerun command fails the same way ($want), with the" \
  "test's own variable kept too ($want7)"
