#!/usr/bin/env bash
# Regenerates the "## pyverbs suite" section at the end of docs/FIDELITY.md: runs the pyverbs
# suite through the drop-in in the rxe and strict profiles and puts it beside the measured rxe
# results (pyverbs-rxe-results.txt; re-measure those with pyverbs-rxe.sh --out).
#
#   tests/dropin/pyverbs-fidelity.sh <dir of the drop-in libibverbs.so.1>
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
lib=${1:?usage: pyverbs-fidelity.sh <drop-in dir>}
work=$(mktemp -d "${TMPDIR:-/tmp}/verbsim-pyverbs-fid.XXXXXX")
trap 'rm -rf "$work"' EXIT
for profile in rxe strict; do
	VERBSIM_PROFILE=$profile "$here/pyverbs.sh" --lib "$lib" --out "$work/$profile.txt" >/dev/null 2>&1 ||
		[[ -s $work/$profile.txt ]] || { echo "pyverbs-fidelity.sh: the $profile run failed" >&2; exit 1; }
done
/usr/bin/env python3 "$here/pyverbs_fidelity.py" "$here/../../docs/FIDELITY.md" \
	"$here/pyverbs-rxe-results.txt" "$work/rxe.txt" "$work/strict.txt"
echo "docs/FIDELITY.md: pyverbs section updated"
