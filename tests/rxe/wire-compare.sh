#!/usr/bin/env bash
# wire-compare.sh: the packets of one program on real rxe (tcpdump in the VM) against the
# simulator's capture of the same binary through the drop-in (VERBSIM_PROFILE=rxe,
# VERBSIM_PCAP): per frame the BTH opcode, the AETH syndrome, the payload length and the AETH's
# MSN, in order (PSNs, QPNs and addresses aside).
#
#   tests/rxe/wire-compare.sh BUILD_DIR [rxe-run options...]
#   tests/rxe/wire-compare.sh BUILD_DIR --saved   # rxe's side from wire-rxe.txt, no VM
#
# The program is tests/dropin/wire.c (BUILD_DIR/tests/dropin/dropin_wire); wire-guest.sh says
# how the VM puts rxe's packets on a wire. The differences found are in wire-known.txt, each with
# its reason: the test fails when the difference between the two sequences is not exactly those.
# WIRE_COMPARE_SAVE=DIR keeps both captures and sequences there. wire-rxe.txt is rxe's sequence
# from the last VM run (kernel 6.1.0-57), for --saved (ctest wire_compare_saved, no VM).
#
# Exit status: 0 the sequences agree but for the known differences; 1 they differ otherwise;
# 2 a run failed; 77 the VM cannot run here (rxe-run's skip), or tshark or tcpdump is missing.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build=$(cd "${1:?usage: wire-compare.sh BUILD_DIR [rxe-run options...]}" && pwd)
shift
prog=$build/tests/dropin/dropin_wire
dropin=$build/dropin
skip() {
	echo "wire-compare: SKIPPED: $*" >&2
	exit 77
}
command -v tshark >/dev/null || skip "no tshark (apt-get install tshark)"
command -v python3 >/dev/null || skip "no python3"
if [[ ${1:-} != --saved ]]; then
	tcpdump=$(command -v tcpdump || true)
	[[ -n $tcpdump ]] || skip "no tcpdump on the host to copy into the VM (apt-get install tcpdump)"
	tc=$(command -v tc || true)
	[[ -n $tc ]] || skip "no tc on the host (iproute2)"
fi
[[ -x $prog && -d $dropin ]] || { echo "wire-compare: not built: $prog or $dropin" >&2; exit 2; }
prog=$(cd "$(dirname "$prog")" && pwd)/${prog##*/}

work=$(mktemp -d "${TMPDIR:-/tmp}/wire-compare.XXXXXX")
trap 'rm -rf "$work"' EXIT

# opcode, AETH syndrome, payload bytes, MSN (- for no AETH); one line a frame.
fields() {
	tshark -r "$1" -T fields -e infiniband.bth.opcode -e infiniband.aeth.syndrome -e data.len \
		-e infiniband.aeth.msn 2>/dev/null |
		awk -F'\t' '{ printf "%s %s %s %s\n", $1, ($2 == "" ? "-" : $2), ($3 == "" ? 0 : $3),
			($4 == "" ? "-" : $4) }'
}

# The simulator, through the drop-in.
if ! (cd "$work" && LD_LIBRARY_PATH=$dropin VERBSIM_PROFILE=rxe VERBSIM_PCAP=$work/sim.pcapng \
	"$prog" >"$work/sim.out" 2>&1); then
	echo "wire-compare: the program failed on the simulator:" >&2
	cat "$work/sim.out" >&2
	exit 2
fi

if [[ ${1:-} == --saved ]]; then
	cp "$here/wire-rxe.txt" "$work/rxe.txt"
else
	# Real rxe.
	set +e
	"$here/rxe-run" "$@" --modules "veth act_pedit act_mirred cls_matchall sch_ingress" \
		--script "$here/wire-guest.sh" --with "$tcpdump" --with "$tc" --with "$prog" -- "$prog" \
		>"$work/rxe.out"
	rc=$?
	set -e
	((rc != 77)) || exit 77
	if ((rc != 0)); then
		echo "wire-compare: the program on rxe failed with status $rc:" >&2
		sed '/^== pcap/,$d' "$work/rxe.out" >&2
		exit 2
	fi
	sed -n '/^== pcap/{n;p;}' "$work/rxe.out" |
		python3 -c 'import sys; sys.stdout.buffer.write(bytes.fromhex(sys.stdin.read().strip()))' \
			>"$work/rxe.pcap"
	fields "$work/rxe.pcap" >"$work/rxe.txt"
fi
fields "$work/sim.pcapng" >"$work/sim.txt"
if [[ -n ${WIRE_COMPARE_SAVE:-} ]]; then
	mkdir -p "$WIRE_COMPARE_SAVE"
	cp "$work"/*.pcap* "$work"/*.txt "$work"/*.out "$WIRE_COMPARE_SAVE/" 2>/dev/null || true
fi
echo "wire-compare: $(wc -l <"$work/sim.txt") frames on the simulator, $(wc -l <"$work/rxe.txt") on rxe"
echo "opcode syndrome payload msn: simulator | rxe"
diff -y -W 60 "$work/sim.txt" "$work/rxe.txt" || true
diff "$work/sim.txt" "$work/rxe.txt" >"$work/diff.txt" || true
grep -v '^#' "$here/wire-known.txt" >"$work/known.txt" || true
if cmp -s "$work/diff.txt" "$work/known.txt"; then
	if [[ -s $work/diff.txt ]]; then
		echo "wire-compare: the sequences differ only as wire-known.txt explains:"
		grep '^#' "$here/wire-known.txt" | sed 's/^#/ /'
	fi
	echo "wire-compare: PASS"
	exit 0
fi
echo "wire-compare: FAIL: the difference (diff simulator rxe) is not the known one:"
cat "$work/diff.txt"
echo "wire-compare: known (wire-known.txt):"
cat "$work/known.txt"
exit 1
