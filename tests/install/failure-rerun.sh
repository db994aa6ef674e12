#!/usr/bin/env bash
# A consumer's failing seeded test, from the outside: KitDemo.ADeliberateFailure (consumer_test)
# fails under a fault plan given in VERBSIM_FAULTS; the command the test main prints must carry
# the plan and the seed and fail the same way (same digest).
#
#   tests/install/failure-rerun.sh CONSUMER_TEST
set -euo pipefail
bin=${1:?usage: failure-rerun.sh CONSUMER_TEST}
out=$(mktemp)
again=$(mktemp)
trap 'rm -f "$out" "$again" /tmp/KitDemo_ADeliberateFailure.*' EXIT
fail() { echo "failure-rerun.sh: $*" >&2; cat "$out" >&2; exit 1; }

plan='drop nth=3; delay p=0.5 by=2us'
if VERBSIM_KIT_DEMO_FAILURE=1 VERBSIM_FAULTS="$plan" "$bin" --gtest_filter='KitDemo.*' >"$out" 2>&1; then
  fail "the deliberate failure passed"
fi
grep -q "^\[  WORLD   \] seed 11, profile .*, fault plan '$plan'" "$out" ||
  fail "no world line with the seed and the plan"
want=$(grep -o 'deliberate failure, digest [0-9a-f]*' "$out") || fail "no failure message"
cmd=$(grep -A1 '^\[  RERUN   \]' "$out" | tail -n 1) || fail "no rerun command"
[[ $cmd == *"VERBSIM_FAULTS='$plan'"* && $cmd == *VERBSIM_SEED=11* &&
   $cmd == *"--gtest_filter='KitDemo.ADeliberateFailure'"* ]] ||
  fail "the command lacks the plan, the seed or the filter: $cmd"

# From another directory, as a user would paste it.
if (cd / && bash -c "$cmd") >"$again" 2>&1; then
  fail "the rerun command passed: $cmd"
fi
got=$(grep -o 'deliberate failure, digest [0-9a-f]*' "$again") || fail "rerun: no failure message"
[[ $got == "$want" ]] || fail "rerun failed otherwise: '$got' instead of '$want'"
# Without the plan the run differs: the plan did reach the world.
other=$(VERBSIM_KIT_DEMO_FAILURE=1 "$bin" --gtest_filter='KitDemo.*' 2>&1 |
        grep -o 'deliberate failure, digest [0-9a-f]*') || true
[[ $other != "$want" ]] || fail "the same digest without the fault plan ($want)"
echo "failure-rerun.sh: the printed command fails the same way ($want)"
