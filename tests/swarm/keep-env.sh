#!/usr/bin/env bash
# verbsim-swarm's reproducers carry the environment the runs had: every VERBSIM_* variable of
# the swarm's environment (but those it sets per run), and the program's own variables named by
# --keep-env or VERBSIM_KEEP_ENV (NAME, or PREFIX*), so that pasting the reproducer into a
# clean shell fails the same way. ctest's swarm_keep_env runs it.
#
#   tests/swarm/keep-env.sh VERBSIM_SWARM
set -euo pipefail
swarm=${1:?usage: keep-env.sh VERBSIM_SWARM}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "keep-env.sh: $*" >&2; cat "$work/out" >&2; exit 1; }

# Fails only with the program's own MYAPP_MODE=strict and the test's VERBSIM_DEMO_CHECK=1, and
# names the seed and plan it ran with.
program=(sh -c 'echo "seed $VERBSIM_SEED plan [${VERBSIM_FAULTS:-}] mode ${MYAPP_MODE:-} level ${MYAPP_LEVEL:-}"; [ "${MYAPP_MODE:-}" = strict ] && [ "${VERBSIM_DEMO_CHECK:-}" = 1 ] && exit 3; exit 0')
reproducer() {  # SEED: the reproducer the summary prints for it
  grep -A1 "^--- seed $1 failed" "$work/out" | tail -n 1
}
rerun() {  # COMMAND: run in a shell with only PATH set, as pasted into a new terminal
  env -i PATH="$PATH" bash -c "$1" 2>&1 || echo "exit status $?"
}

rc=0
VERBSIM_DEMO_CHECK=1 MYAPP_MODE=strict MYAPP_LEVEL=2 "$swarm" --seeds 2 --quiet --progress 0 \
  --faults 'drop nth=1' --keep-env MYAPP_MODE -- "${program[@]}" >"$work/out" 2>&1 || rc=$?
((rc == 1)) || fail "exit status $rc, not 1"
cmd=$(reproducer 1)
[[ $cmd == "VERBSIM_SEED=1 VERBSIM_FAULTS='drop nth=1' "*"VERBSIM_DEMO_CHECK=1 "* ]] ||
  fail "the reproducer lacks VERBSIM_DEMO_CHECK: $cmd"
[[ $cmd == *"MYAPP_MODE=strict "* ]] || fail "the reproducer lacks MYAPP_MODE (--keep-env): $cmd"
[[ $cmd != *MYAPP_LEVEL=* ]] || fail "the reproducer has MYAPP_LEVEL, not asked for: $cmd"
got=$(rerun "$cmd")
[[ $got == $'seed 1 plan [drop nth=1] mode strict level \nexit status 3' ]] ||
  fail "the reproducer ran otherwise: $got"
echo "keep-env.sh: VERBSIM_* and --keep-env's variable in the reproducer, which fails the same way"

# VERBSIM_KEEP_ENV with a prefix; the swarm's own VERBSIM_FAULTS, when it draws no plan, is the
# run's and stays in the command.
rc=0
VERBSIM_KEEP_ENV='MYAPP_*' VERBSIM_DEMO_CHECK=1 MYAPP_MODE=strict MYAPP_LEVEL=2 \
  VERBSIM_FAULTS='delay nth=2 by=1us' "$swarm" --seeds 1 --first 7 --quiet --progress 0 \
  -- "${program[@]}" >"$work/out" 2>&1 || rc=$?
((rc == 1)) || fail "exit status $rc, not 1"
cmd=$(reproducer 7)
for want in "VERBSIM_FAULTS='delay nth=2 by=1us' " "MYAPP_MODE=strict " "MYAPP_LEVEL=2 " \
            "VERBSIM_KEEP_ENV='MYAPP_*' "; do
  [[ $cmd == *"$want"* ]] || fail "the reproducer lacks $want: $cmd"
done
got=$(rerun "$cmd")
[[ $got == $'seed 7 plan [delay nth=2 by=1us] mode strict level 2\nexit status 3' ]] ||
  fail "the reproducer ran otherwise: $got"
echo "keep-env.sh: VERBSIM_KEEP_ENV='MYAPP_*' keeps both; the swarm's own plan stays"
