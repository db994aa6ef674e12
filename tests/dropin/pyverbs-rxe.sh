#!/usr/bin/env bash
# Runs Debian's pyverbs test suite (python3-pyverbs) on real Soft-RoCE in the project's rxe VM,
# for the rxe column of docs/FIDELITY.md; prints the same tally as pyverbs.sh.
#
#   tests/dropin/pyverbs-rxe.sh [--out FILE] [-- extra run_tests.py args]
#
# The guest has no Python: QEMU shares the host's root read-only over virtio-9p and the guest
# runs the host's /usr/bin/python3 in a chroot of it (tests/rxe/rxe-run with
# VERBSIM_RXE_QEMU_ARGS; the 9p modules come from the kernel package rxe-run cached).
# The VM needs the whole machine: do not run it beside a build. Exit status: 0 when the suite
# ran (whatever its results), rxe-run's status otherwise (77: no VM on this host).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
out=
while (($#)); do
	case $1 in
	--out) out=${2:?--out needs a file}; shift 2 ;;
	--) shift; break ;;
	*) echo "pyverbs-rxe.sh: unknown option $1" >&2; exit 2 ;;
	esac
done

suite=/usr/share/doc/rdma-core/tests
[[ -d $suite ]] || { echo "pyverbs-rxe.sh: $suite missing: apt-get install python3-pyverbs" >&2; exit 77; }
# Not under /tmp: the guest mounts a tmpfs there.
work=$(mktemp -d "${VERBSIM_PYVERBS_WORK:-/var/tmp}/verbsim-pyverbs-rxe.XXXXXX")
trap 'rm -rf "$work"' EXIT
cp -r "$suite" "$work/tests"
find "$work/tests" -name '*.gz' -exec gunzip -f {} +
cp "$here/pyverbs_run.py" "$work/"

source "$root/tests/rxe/hostroot.sh"
hostroot_prepare "$work"
set +e
"$root/tests/rxe/rxe-run" --timeout "${VERBSIM_RXE_TIMEOUT:-1200}" \
	--script "$here/pyverbs-rxe-guest.sh" "${hostroot_withs[@]}" \
	-- "$work/tests" "$work/pyverbs_run.py" "${hostroot_modules[@]}" -- --dev rxe0 -v \
	>"$work/results.txt"
rc=$?
set -e
grep '^PYVERBS-RESULT ' "$work/results.txt" | sed 's/^PYVERBS-RESULT //' >"$work/outcomes.txt" || true
if [[ ! -s $work/outcomes.txt ]]; then
	echo "pyverbs-rxe.sh: the suite did not run (rxe-run exit status $rc)" >&2
	exit $((rc == 0 ? 125 : rc))
fi
[[ -n $out ]] && cp "$work/outcomes.txt" "$out"
/usr/bin/python3 "$here/pyverbs_tally.py" "$work/outcomes.txt"
