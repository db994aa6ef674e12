#!/usr/bin/env bash
# verbsim-swarm --shrink: a failing seed of the random verb test under a seven-rule plan (verb
# faults the test does not expect among them) shrinks to at most two rules and fewer steps, and
# the shrunk command fails with the same signature; a seed that passes is reported as such;
# misuse is a usage error. ctest's swarm_shrink runs it.
#
#   tests/swarm/shrink.sh VERBSIM_SWARM SIM_RANDOM_VERBS_TEST
set -euo pipefail
swarm=${1:?usage: shrink.sh VERBSIM_SWARM SIM_RANDOM_VERBS_TEST}
test=${2:?usage: shrink.sh VERBSIM_SWARM SIM_RANDOM_VERBS_TEST}
# The failure shrunk here: the random verb test as it was before it accepted injected errnos (a
# refused post had to say ENOMEM or EINVAL, so `post_send ... errno=EAGAIN` failed it).
export VERBSIM_RANDOM_VERBS_PROVIDER_ERRNOS=1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "shrink.sh: $*" >&2; cat "$work/out" >&2; exit 1; }

# Seed 5's plan: drop, duplicate, reorder, delay, post_send EAGAIN, post_recv EAGAIN, cm_drop.
rc=0
"$swarm" --shrink 5 --steps 400 --fault-probability 0.05 --verb-faults -- "$test" \
  >"$work/out" 2>&1 || rc=$?
((rc == 1)) || fail "exit status $rc, not 1 (a failure that still fails)"
grep -qx -- '--- before: 7 fault rules, 400 steps' "$work/out" || fail "no seven-rule plan before"
after=$(grep -A1 -- '^--- after: ' "$work/out" | tail -1)
rules=$(grep -- '^--- after: ' "$work/out" | sed -E 's/^--- after: ([0-9]+) fault rules?.*/\1/')
((rules >= 1 && rules <= 2)) || fail "$rules rules after shrinking, not 1 or 2"
grep -q 'nth=' <<<"$after" || fail "no nth= trigger in '$after'"
grep -q 'p=' <<<"$after" && fail "a probabilistic rule is left in '$after'"
[[ $after =~ VERBSIM_STEPS=([0-9]+) ]] || fail "no shorter run in '$after'"
steps=${BASH_REMATCH[1]}
((steps < 400)) || fail "$steps steps, not fewer than 400"
[[ $after =~ VERBSIM_FAULTS=\'([^\']*)\' ]] || fail "no plan in '$after'"
plan=${BASH_REMATCH[1]}
signature=$(sed -n 's/^swarm shrink: seed 5, [0-9]* runs, fails with: //p' "$work/out")
[[ -n $signature ]] || fail "no signature"
echo "shrink.sh: seed 5: 7 rules, 400 steps -> '$plan', $steps steps"

# The shrunk command on its own: the same signature.
rc=0
VERBSIM_STEPS=$steps "$swarm" --seeds 1 --first 5 --faults "$plan" --quiet --progress 0 \
  -- "$test" >"$work/out" 2>&1 || rc=$?
((rc == 1)) || fail "the shrunk command: exit status $rc, not 1"
grep -qxF -- "    seed 5: $signature" "$work/out" ||
  fail "the shrunk command fails otherwise than with '$signature'"
echo "shrink.sh: the shrunk command fails the same way"

# A seed that passes (no plan: the test expects ENOMEM and EINVAL only).
rc=0
"$swarm" --shrink 5 --steps 400 -- "$test" >"$work/out" 2>&1 || rc=$?
((rc == 0)) || fail "a passing seed: exit status $rc, not 0"
grep -qx 'swarm shrink: seed 5 did not fail; nothing to shrink' "$work/out" ||
  fail "a passing seed not reported as such"
echo "shrink.sh: a seed that passes is not shrunk"

# Usage errors.
for args in "--shrink 0" "--shrink 5 --steps 0" "--steps 10"; do
  rc=0
  # shellcheck disable=SC2086
  "$swarm" $args -- "$test" >"$work/out" 2>&1 || rc=$?
  ((rc == 2)) || fail "'$args': exit status $rc, not 2"
done
echo "shrink.sh: usage errors exit 2"
