#!/usr/bin/env bash
# The round trip of a captured profile: verbsim-probe on real rxe in the VM writes rxe0's
# profile (and keeps what every conformance case observed there); the simulator then runs the
# whole conformance suite in that profile (SimFile) on the host, and every case must observe
# what it observed on rxe0. Last, where the captured profile differs from the built-in rxe one
# (ideally nowhere: then the built-in profile is what rxe does, as far as the cases can tell).
#
#   tests/conformance/probe-rxe.sh BUILD_DIR [rxe-run options...]
#   tests/conformance/probe-rxe.sh --from FILE BUILD_DIR   # a saved guest output again
# (PROBE_RXE_SAVE=FILE keeps the guest's output; PROBE_RXE_PROFILE=FILE keeps the profile.)
#
# Exit status: 0 every case agrees and the profile is the built-in rxe one; 1 a case disagrees
# or the profile differs; 2 the probe failed; 77 the VM cannot run here (rxe-run's skip).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
from=
if [[ ${1:-} == --from ]]; then
	from=${2:?--from needs a file}
	shift 2
fi
build=$(cd "${1:?usage: probe-rxe.sh BUILD_DIR [rxe-run options...]}" && pwd)
shift
probe=$build/tests/conformance/verbsim-probe
suite=$build/tests/conformance/conformance_test
for b in "$probe" "$suite"; do
	[[ -x $b ]] || { echo "probe-rxe: not built: $b" >&2; exit 2; }
done
work=$(mktemp -d "${TMPDIR:-/tmp}/probe-rxe.XXXXXX")
trap 'rm -rf "$work"' EXIT

if [[ -n $from ]]; then
	cp "$from" "$work/guest.out"
else
	cat >"$work/guest.sh" <<GUEST
#!/bin/sh
'$probe' --device rxe0 --all-cases --name 'rxe0 in the VM' --out /tmp/rxe0.profile \
	--observations /tmp/observations.tsv
rc=\$?
sed 's/^/VERBSIM-PROFILE\t/' /tmp/rxe0.profile
sed 's/^/VERBSIM-CONFORMANCE\t/' /tmp/observations.tsv
exit \$rc
GUEST
	set +e
	"$here/../rxe/rxe-run" "$@" --script "$work/guest.sh" --with "$probe" >"$work/guest.out"
	rc=$?
	set -e
	[[ -z ${PROBE_RXE_SAVE:-} ]] || cp "$work/guest.out" "$PROBE_RXE_SAVE"
	((rc != 77)) || exit 77
	if ((rc != 0)); then
		echo "probe-rxe: verbsim-probe in the VM failed with status $rc" >&2
		tail -n 30 "$work/guest.out" >&2
		exit 2
	fi
fi
grep -a $'^VERBSIM-PROFILE\t' "$work/guest.out" | cut -f2- >"$work/rxe0.profile" || true
grep -a $'^VERBSIM-CONFORMANCE\t' "$work/guest.out" | cut -f2- >"$work/rxe.log" || true
[[ -s $work/rxe0.profile && -s $work/rxe.log ]] || {
	echo "probe-rxe: the VM run wrote no profile or no observations" >&2
	exit 2
}
[[ -z ${PROBE_RXE_PROFILE:-} ]] || cp "$work/rxe0.profile" "$PROBE_RXE_PROFILE"

# The simulator in the captured profile, every case.
env -u VERBSIM_BACKEND VERBSIM_PROFILE="$work/rxe0.profile" VERBSIM_CONFORMANCE_LOG="$work/sim.log" \
	"$suite" --gtest_filter='SimFile/*' >"$work/sim.out" 2>&1 || true
[[ -s $work/sim.log ]] || { tail -n 30 "$work/sim.out" >&2; echo "probe-rxe: the simulator logged nothing" >&2; exit 2; }

status=0
awk -F'\t' '
FILENAME == ARGV[1] { c = $1; sub(/^[^\/]*\//, "", c); if ($2 != "skip") { n++; order[n] = c; rxe[c] = $3 } next }
{ c = $1; sub(/^[^\/]*\//, "", c); sim[c] = $3; ran[c] = $2 }
END {
	for (i = 1; i <= n; i++) {
		c = order[i]
		if ((c in ran) && ran[c] != "skip" && sim[c] == rxe[c]) { agree++; continue }
		print "  differs: " c "\n    rxe0: " rxe[c] "\n    sim:  " (c in ran ? sim[c] : "(did not run)")
	}
	printf "probe-rxe: the simulator in the captured profile agrees with rxe0 on %d of %d cases\n", agree, n
	exit agree == n ? 0 : 1
}' "$work/rxe.log" "$work/sim.log" || status=1

echo "probe-rxe: the captured profile against the built-in rxe profile:"
"$probe" --compare "$work/rxe0.profile" rxe | sed 's/^/  /' || status=1
exit $status
