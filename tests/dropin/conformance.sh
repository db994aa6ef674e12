#!/usr/bin/env bash
# The conformance suite through the drop-in: conformance_test's Ibverbs instantiation (C++ API
# -> ibverbs backend -> libibverbs.so.1 = the drop-in -> simulator) against its simulator
# instantiation of the same profile (C++ API -> sim backend), compared case by case on what each
# test observed (VERBSIM_CONFORMANCE_LOG), not on pass/fail.
#
#   tests/dropin/conformance.sh <conformance_test> <drop-in dir> <profile: strict|rxe|mlx5>
#                               [--known FILE]
#
# --known FILE: cases listed there (first word of each line) may differ; any other difference
# fails the test, and a listed case that now agrees is reported so the list can shrink.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
bin=${1:?conformance_test} lib=$(cd "${2:?drop-in dir}" && pwd) profile=${3:?profile}
shift 3
known=
[[ ${1:-} == --known ]] && known=${2:?}
case $profile in
strict) sim=SimStrict ;; rxe) sim=SimRxe ;; mlx5) sim=SimMlx5 ;;
*) echo "conformance.sh: unknown profile $profile" >&2; exit 2 ;;
esac
work=$(mktemp -d "${TMPDIR:-/tmp}/verbsim-dropin-conf.XXXXXX")
trap 'rm -rf "$work"' EXIT

# Through the drop-in: one simulated device, like the simulator instantiation's world. The
# connection manager's cases (Cm, CmUd) are left out: the drop-in is libibverbs only, and librdmacm
# talks to the kernel's rdma_cm, which the drop-in's simulator is not.
LD_LIBRARY_PATH=$lib VERBSIM_BACKEND=ibverbs VERBSIM_DEVICE=sim0 VERBSIM_PROFILE=$profile \
	VERBSIM_SIM_DEVICES=1 VERBSIM_CONFORMANCE_LOG=$work/dropin.log \
	"$bin" --gtest_filter='Ibverbs/*:-*/Cm.*:*/CmUd.*' >"$work/dropin.out" 2>&1 || true
env -u VERBSIM_BACKEND -u VERBSIM_PROFILE VERBSIM_CONFORMANCE_LOG=$work/sim.log \
	"$bin" --gtest_filter="$sim/*:-*/Cm.*:*/CmUd.*" >"$work/sim.out" 2>&1 || true
for f in dropin sim; do
	if [[ ! -s $work/$f.log ]]; then
		echo "conformance.sh: the $f run wrote no log:" >&2
		tail -n 30 "$work/$f.out" >&2
		exit 1
	fi
done
echo "Ibverbs through the drop-in ($profile): $(grep -cP '\tpass\t' "$work/dropin.log") passed," \
	"$(grep -cP '\tfail\t' "$work/dropin.log") failed; $sim: $(grep -cP '\tpass\t' "$work/sim.log") passed," \
	"$(grep -cP '\tfail\t' "$work/sim.log") failed"
# The comparer exits 1 when cases differ (judged below, case by case, against --known) and
# otherwise only on an error of its own, which fails the test: it must have printed its tally.
compared=0
/usr/bin/env python3 "$here/conformance-compare.py" "$work/dropin.log" "$work/sim.log" \
	>"$work/diff.txt" || compared=$?
cat "$work/diff.txt"
if ((compared > 1)) || ! grep -qE '^[0-9]+ of [0-9]+ cases agree, [0-9]+ differ$' "$work/diff.txt"; then
	echo "conformance.sh: conformance-compare.py failed (exit status $compared)" >&2
	exit 1
fi
status=0
declare -A allowed=()
if [[ -n $known ]]; then
	while read -r name _; do
		[[ -n $name && $name != \#* ]] && allowed[$name]=1
	done <"$known"
fi
declare -A seen=()
while IFS=: read -r name _; do
	[[ $name == *.* && $name != *' '* && -z ${seen[$name]:-} ]] || continue
	seen[$name]=1
	if [[ -z ${allowed[$name]:-} ]]; then
		echo "DIFFERS: $name"
		status=1
	fi
done <"$work/diff.txt"
for name in "${!allowed[@]}"; do
	[[ -n ${seen[$name]:-} ]] || echo "note: $name agrees now; remove it from $known"
done
exit "$status"
