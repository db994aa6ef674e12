#!/usr/bin/env bash
# Runs Debian's pyverbs test suite (package python3-pyverbs, tests in
# /usr/share/doc/rdma-core/tests) unmodified against the libibverbs drop-in, and prints the
# tally per module.
#
#   tests/dropin/pyverbs.sh --lib <dir of the drop-in libibverbs.so.1> [--dev sim0]
#                           [--must-pass FILE] [--min-pass N] [--out FILE]
#                           [-- extra run_tests.py args]
#
# --must-pass FILE: exit 1 when a test listed in FILE (one id per line) fails, errors or is
# skipped; the list here is pyverbs-rxe-pass.txt, the tests that pass on real rxe. --min-pass N: exit 1
# with fewer passes. --out FILE: keep the outcomes ("<outcome> <test id>" per line).
# Exit 77 when python3-pyverbs is not installed.
# The simulated world comes from the usual variables (VERBSIM_PROFILE, VERBSIM_SEED, ...).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
lib= dev=sim0 must= min= out=
while (($#)); do
	case $1 in
	--lib) lib=${2:?}; shift 2 ;;
	--dev) dev=${2:?}; shift 2 ;;
	--must-pass) must=${2:?}; shift 2 ;;
	--min-pass) min=${2:?}; shift 2 ;;
	--out) out=${2:?}; shift 2 ;;
	--) shift; break ;;
	*) echo "pyverbs.sh: unknown option $1" >&2; exit 2 ;;
	esac
done
[[ -n $lib && -e $lib/libibverbs.so.1 ]] || { echo "pyverbs.sh: --lib <dir with libibverbs.so.1>" >&2; exit 2; }
lib=$(cd "$lib" && pwd)
suite=/usr/share/doc/rdma-core/tests
# Only Debian's interpreter has pyverbs (another python3 may come first in PATH).
python=/usr/bin/python3
if [[ ! -d $suite ]] || ! "$python" -c 'import pyverbs' 2>/dev/null; then
	echo "pyverbs.sh: SKIPPED: python3-pyverbs is not installed (apt-get install python3-pyverbs)" >&2
	exit 77
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/verbsim-pyverbs.XXXXXX")
trap 'rm -rf "$work"' EXIT
cp -r "$suite" "$work/tests"
find "$work/tests" -name '*.gz' -exec gunzip -f {} +

set +e
(cd "$work" && LD_LIBRARY_PATH=$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} PYTHONDONTWRITEBYTECODE=1 \
	"$python" "$here/pyverbs_run.py" "$work/tests" --dev "$dev" -v "$@") >"$work/stdout.txt"
rc=$?
set -e
sed -n 's/^PYVERBS-RESULT //p' "$work/stdout.txt" >"$work/outcomes.txt"
if [[ ! -s $work/outcomes.txt ]]; then
	echo "pyverbs.sh: the suite did not run (python exit status $rc)" >&2
	cat "$work/stdout.txt" >&2
	exit 1
fi
[[ -n $out ]] && cp "$work/outcomes.txt" "$out"
args=("$work/outcomes.txt")
[[ -n $must ]] && args+=(--must-pass "$must")
[[ -n $min ]] && args+=(--min-pass "$min")
"$python" "$here/pyverbs_tally.py" "${args[@]}"
