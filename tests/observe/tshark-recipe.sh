#!/usr/bin/env bash
# docs/OBSERVABILITY.md's recipe for reading a capture cleanly ("Reading a capture cleanly"), run
# as the document writes it: on a capture of `verbsim-perf --test send_lat`, whose SENDs
# RPC-over-RDMA's heuristic takes for its own, the recipe's tshark command finds no frame
# malformed; its options are those check-pcap.sh (verbsim-check-pcap) reads captures with.
# ctest's tshark_recipe runs it.
#
#   tests/observe/tshark-recipe.sh BUILD_DIR
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build=$(cd "${1:?usage: tshark-recipe.sh BUILD_DIR}" && pwd)
command -v tshark >/dev/null || { echo "tshark-recipe: tshark is not installed; skipped"; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "tshark-recipe: $*" >&2; exit 1; }

recipe=$(grep -m1 '^tshark -r run.pcapng --disable-protocol ' "$here/../../docs/OBSERVABILITY.md") ||
  fail "docs/OBSERVABILITY.md has no line 'tshark -r run.pcapng --disable-protocol ...'"
options=${recipe#tshark -r run.pcapng }
[[ $options == "$("$here/check-pcap.sh" --tshark-options)" ]] ||
  fail "the docs' options are not check-pcap.sh --tshark-options: $options"

cd "$work"
VERBSIM_PCAP=run.pcapng "$build/examples/verbsim-perf" --test send_lat -n 100 >/dev/null
sends=$(tshark -r run.pcapng -Y 'infiniband.bth.opcode == 4' 2>/dev/null | wc -l)
((sends > 0)) || fail "no SEND in the capture"
bare=$(tshark -r run.pcapng -Y _ws.malformed 2>/dev/null | wc -l)
bash -c "$recipe -Y _ws.malformed" >malformed.txt 2>/dev/null || fail "the recipe failed: $recipe"
[[ ! -s malformed.txt ]] || fail "the recipe shows malformed frames:"$'\n'"$(head malformed.txt)"
bash -c "$recipe" >all.txt 2>/dev/null
[[ $(wc -l <all.txt) -gt $sends ]] || fail "the recipe shows $(wc -l <all.txt) frames"
echo "tshark-recipe: $sends SENDs; the docs' recipe: none malformed (plain tshark: $bare malformed)"
