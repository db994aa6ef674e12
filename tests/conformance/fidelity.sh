#!/usr/bin/env bash
# Regenerates the "## Conformance suite" section of docs/FIDELITY.md: runs the conformance
# suite's simulator instantiations on this host and its Ibverbs instantiation on real Soft-RoCE
# in the VM (tests/rxe/rxe-run), compares what every case observed, and writes the table case by
# case with the agreement figure as the document's last line.
#
#   tests/conformance/fidelity.sh [--build DIR] [--no-vm | --rxe-log FILE] [--check]
#
#   --build DIR     build directory with tests/conformance/conformance_test (default: build)
#   --no-vm         take the rxe side from tests/conformance/rxe-results.tsv (the last VM run)
#   --rxe-log FILE  take the rxe side from FILE (lines as VERBSIM_CONFORMANCE_LOG writes them)
#   --check         write nothing: compare what would be written with docs/FIDELITY.md, print
#                   the differences and exit 1 if there are any (ctest fidelity_doc, with --no-vm)
#
# A VM run saves its log as tests/conformance/rxe-results.tsv. Everything above the section
# (and any "## " section after it) is kept; the section's text besides the table comes from
# fidelity-notes.md (the rxe facts) and deviations.tsv (why a case deviates): edit those, not the
# document. Exit status: 0, 1 on error (or, with --check, a difference), 77 when the VM cannot
# run on this host (then use --no-vm).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
build=$root/build
rxe_log=
use_vm=1
check=0
doc=$root/docs/FIDELITY.md
heading='## Conformance suite'

die() {
	echo "fidelity.sh: $*" >&2
	exit 1
}
while (($#)); do
	case $1 in
	--build) build=${2:?--build needs a directory}; shift 2 ;;
	--no-vm) use_vm=0; rxe_log=$here/rxe-results.tsv; shift ;;
	--rxe-log) use_vm=0; rxe_log=${2:?--rxe-log needs a file}; shift 2 ;;
	--check) check=1; shift ;;
	-h | --help) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; exit 0 ;;
	*) die "unknown argument '$1' (see --help)" ;;
	esac
done
bin=$build/tests/conformance/conformance_test
[[ -x $bin ]] || die "no $bin: build the conformance_test target (or pass --build DIR)"
work=$(mktemp -d "${TMPDIR:-/tmp}/verbsim-fidelity.XXXXXX")
trap 'rm -rf "$work"' EXIT

# The simulator, every profile (VERBSIM_BACKEND=ibverbs would make these skip themselves).
env -u VERBSIM_BACKEND -u VERBSIM_PROFILE VERBSIM_CONFORMANCE_LOG="$work/sim.log" \
	"$bin" --gtest_filter='Sim*' >"$work/sim.out" 2>&1 || true
[[ -s $work/sim.log ]] || { tail -n 30 "$work/sim.out" >&2; die "the simulator run logged nothing"; }

# Real rxe: the guest prints each log line on stdout behind a VERBSIM-CONFORMANCE tab.
((check && use_vm)) && die "--check compares saved results: add --no-vm or --rxe-log FILE"
if ((use_vm)); then
	echo "fidelity.sh: running the Ibverbs instantiation on rxe in the VM" >&2
	set +e
	VERBSIM_CONFORMANCE_LOG=- "$root/tests/rxe/rxe-run" --timeout 900 -- "$bin" \
		--gtest_filter='Ibverbs/*' >"$work/vm.out" 2>"$work/vm.err"
	rc=$?
	set -e
	if ((rc == 77)); then
		cat "$work/vm.err" >&2
		echo "fidelity.sh: the rxe VM cannot run here; --no-vm reuses the last rxe results" >&2
		exit 77
	fi
	grep -a $'^VERBSIM-CONFORMANCE\t' "$work/vm.out" | cut -f2- >"$work/rxe.lines" || true
	[[ -s $work/rxe.lines ]] || { tail -n 30 "$work/vm.err" >&2; die "the VM run logged nothing (exit $rc)"; }
	kernel=$(cat "${VERBSIM_RXE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/verbsim-rxe}/kernel.current" 2>/dev/null || echo unknown)
	rdma=$(dpkg-query -W -f='${Version}' libibverbs1 2>/dev/null || echo unknown)
	{
		echo "# rxe0 in the VM: $kernel, libibverbs $rdma, measured $(date -u +%Y-%m-%d)"
		cat "$work/rxe.lines"
	} >"$here/rxe-results.tsv"
	rxe_log=$here/rxe-results.tsv
fi
[[ -s $rxe_log ]] || die "no rxe results in $rxe_log"

awk -F'\t' -v heading="$heading" -v source="$(sed -n '1s/^# //p' "$rxe_log")" '
function esc(s) { gsub(/\|/, "\\|", s); return s }
function cell(status, obs) {
	if (status == "") return "(missing)"
	return (status == "pass" ? "" : "**" status "** ") "`" (obs == "" ? "-" : esc(obs)) "`"
}
FILENAME == ARGV[1] { if ($0 !~ /^#/ && NF >= 2) why[$1] = $2; next }
FILENAME == ARGV[2] {
	if ($0 ~ /^#/) next
	split($1, p, "/"); c = substr($1, length(p[1]) + 2)
	st[p[1], c] = $2; ob[p[1], c] = $3
	next
}
FILENAME == ARGV[3] {
	if ($0 ~ /^#/) next
	split($1, p, "/"); c = substr($1, length(p[1]) + 2)
	if ($2 == "skip") next
	order[++n] = c; rst[c] = $2; rob[c] = $3
	next
}
FILENAME == ARGV[4] { notes = notes $0 "\n"; next }
END {
	agree = 0
	for (i = 1; i <= n; i++) {
		c = order[i]
		same[c] = (("SimRxe", c) in st) && st["SimRxe", c] != "skip" && ob["SimRxe", c] == rob[c]
		if (same[c]) agree++
		else dev[++ndev] = c
		if (rst[c] == "pass" && st["SimRxe", c] == "pass") passes++
	}
	print heading
	print ""
	print "`tests/conformance` is one GoogleTest suite written against the core API and instantiated"
	print "per backend. Every case records the values it asserted (`key=value`, errno names, completions"
	print "as `STATUS/OPCODE/byte_len`). **sim** is its `SimRxe` instantiation (the simulator in its rxe"
	print "profile, on the host); **rxe** is its `Ibverbs` instantiation on real Soft-RoCE in the VM"
	print "(" source ")."
	print "A cell shows the observations, marked **fail** when the case failed its own expectations."
	print "Two cases agree when their observations are identical. The last"
	print "column shows what the simulator'"'"'s strict and mlx5 profiles observe where that differs from"
	print "its rxe profile (their expectations come from the same per-backend tables, `expect.cpp`)."
	print "Regenerate with `tests/conformance/fidelity.sh` (see `tests/conformance/README.md`)."
	print ""
	printf "%s", notes
	print ""
	print "### Case by case"
	print ""
	print "| case | sim (rxe profile) | rxe (VM) | agree | strict / mlx5 profiles |"
	print "| --- | --- | --- | --- | --- |"
	for (i = 1; i <= n; i++) {
		c = order[i]
		s = ob["SimStrict", c]; m = ob["SimMlx5", c]; r = ob["SimRxe", c]
		if (s == r && m == r) other = "same"
		else if (s == m) other = "strict, mlx5: `" esc(s) "`"
		else {
			other = ""
			if (s != r) other = "strict: `" esc(s) "`"
			if (m != r) other = other (other == "" ? "" : "; ") "mlx5: `" esc(m) "`"
		}
		printf "| %s | %s | %s | %s | %s |\n", c, cell(st["SimRxe", c], r), cell(rst[c], rob[c]),
			(same[c] ? "yes" : "**no**"), other
	}
	print ""
	print "### Deviations"
	print ""
	if (ndev == 0) print "None: the simulator'"'"'s rxe profile observes what real rxe does in every case."
	for (i = 1; i <= ndev; i++) {
		c = dev[i]
		print "- `" c "`: " (c in why ? why[c] : "(not analysed yet)")
	}
	print ""
	printf "%d of %d cases pass on both sides.\n", passes, n
	print ""
	printf "agreement: %d/%d cases (%.1f%%)\n", agree, n, (n ? 100 * agree / n : 0)
}' "$here/deviations.tsv" "$work/sim.log" "$rxe_log" "$here/fidelity-notes.md" >"$work/section.md"

# Keep what comes before the section and any other "## " section after it; the section (and
# with it the agreement line) goes last.
if [[ -f $doc ]]; then
	awk -v heading="$heading" '
		$0 == heading { skip = 1; next }
		skip && /^## / { skip = 0 }
		!skip { print }' "$doc" | sed -e :a -e '/^\n*$/{$d;N;ba' -e '}' >"$work/rest.md"
else
	printf '# Fidelity\n' >"$work/rest.md"
fi
{
	cat "$work/rest.md"
	echo
	cat "$work/section.md"
} >"$work/doc.md"
if ((check)); then
	if ! diff -u "$doc" "$work/doc.md" >"$work/doc.diff"; then
		cat "$work/doc.diff"
		echo "fidelity.sh: $doc is not what the saved rxe results and this build give;" \
			"regenerate it (tests/conformance/fidelity.sh --no-vm) and move any hand edit into" \
			"fidelity-notes.md or deviations.tsv" >&2
		exit 1
	fi
	echo "fidelity.sh: $doc is what the saved results give ($(tail -n 1 "$doc"))" >&2
	exit 0
fi
cp "$work/doc.md" "$doc"
echo "fidelity.sh: wrote $doc ($(tail -n 1 "$doc"))" >&2
