#!/usr/bin/env bash
# What crossed the wire between two processes is captured as in one process (label multiproc):
# datacheck's workload (every opcode; READs of 1 byte to 9 MTUs; atomics) runs in one process
# and as a requester and a responder process, each with VERBSIM_PCAP set. Then, read with
# tshark:
# - every capture decodes cleanly with good ICRCs (tests/observe/check-pcap.sh);
# - the responder's own capture holds the READ responses (FIRST, MIDDLE, LAST, ONLY) and the
#   atomic ACKs it sent, with their payloads;
# - the two-process captures merged hold the same packets as the one-process capture: BTH
#   opcode, PSN, AETH syndrome and MSN, payload bytes, frame for frame (sorted: the two runs'
#   clocks differ).
# And once more with responses lost: each capture still decodes with good ICRCs.
#
#   tests/multiproc/capture.sh --dropin DIR -- DATACHECK
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
dropin=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --dropin) dropin=$2; shift 2 ;;
    --) shift; break ;;
    *) echo "capture.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
datacheck=${1:?usage: capture.sh --dropin DIR -- DATACHECK}
command -v tshark > /dev/null || { echo "capture.sh: tshark is not installed" >&2; exit 2; }
export LD_LIBRARY_PATH=$dropin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export VERBSIM_SEED=3 VERBSIM_PROFILE=rxe
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "capture.sh: FAILED: $*"; exit 1; }

fields() {  # the packets of a capture, one line each, sorted
  tshark -n -r "$1" --disable-protocol rpcordma --disable-protocol smb_direct \
      --disable-protocol iser --disable-protocol nvme-rdma -T fields \
      -e infiniband.bth.opcode -e infiniband.bth.psn -e infiniband.aeth.syndrome \
      -e infiniband.aeth.msn -e data.data 2> /dev/null | sort
}

VERBSIM_PCAP=$work/one.pcapng "$datacheck" --procs 1 --ops 150 --quiet > "$work/one.out" 2>&1 ||
  { cat "$work/one.out"; fail "datacheck in one process"; }
VERBSIM_PCAP=$work/two.pcapng "$datacheck" --procs 2 --ops 150 --quiet > "$work/two.out" 2>&1 ||
  { cat "$work/two.out"; fail "datacheck in two processes"; }
parts=("$work"/two.*.pcapng)
[[ ${#parts[@]} -eq 2 ]] || fail "expected a capture per process: $(ls "$work")"
for f in "$work/one.pcapng" "${parts[@]}"; do
  "$root/tests/observe/check-pcap.sh" "$f" || fail "$(basename "$f") does not read cleanly"
done

# The responder's capture is the one with READ responses in it.
responder=""
for f in "${parts[@]}"; do
  if [[ $(tshark -n -r "$f" -Y 'infiniband.bth.opcode == 16' 2> /dev/null | wc -l) -gt 0 ]]; then
    responder=$f
  fi
done
[[ -n $responder ]] || fail "no capture of the two processes holds a READ response"
for op in 13 14 15 16 18; do  # READ response FIRST MIDDLE LAST ONLY, ATOMIC ACKNOWLEDGE
  n=$(tshark -n -r "$responder" -Y "infiniband.bth.opcode == $op" 2> /dev/null | wc -l)
  [[ $n -gt 0 ]] || fail "the responder's capture has no frame of opcode $op"
done
empty=$(tshark -n -r "$responder" --disable-protocol rpcordma -Y \
    'infiniband.bth.opcode >= 13 && infiniband.bth.opcode <= 16 && !data' 2> /dev/null | wc -l)
[[ $empty -eq 0 ]] || fail "$empty READ responses without a payload"
zero_psns=$(tshark -n -r "$responder" -T fields -e infiniband.bth.psn \
    -Y 'infiniband.bth.opcode >= 13 && infiniband.bth.opcode <= 18' 2> /dev/null | grep -cx 0)
[[ $zero_psns -le 1 ]] || fail "$zero_psns responses carry PSN 0"

"$root/scripts/merge-fabric.py" --pcap "$work/fabric.pcapng" "${parts[@]}" ||
  fail "merging the captures"
fields "$work/one.pcapng" > "$work/one.txt"
fields "$work/fabric.pcapng" > "$work/two.txt"
if ! cmp -s "$work/one.txt" "$work/two.txt"; then
  diff "$work/one.txt" "$work/two.txt" | cut -c1-120 | head -20
  fail "the two processes' packets differ from one process's (opcode, PSN, AETH, payload)"
fi
frames=$(wc -l < "$work/one.txt")
reads=$(cut -f1 "$work/one.txt" | grep -cE '^1[3-6]$')

# Responses lost on the way: the captures still read cleanly.
rm -f "$work"/two.*.pcapng
VERBSIM_FAULTS='drop p=0.05 packets=responses' VERBSIM_PCAP=$work/two.pcapng \
  "$datacheck" --procs 2 --ops 150 --quiet > "$work/drop.out" 2>&1 ||
  { cat "$work/drop.out"; fail "datacheck in two processes, responses lost"; }
for f in "$work"/two.*.pcapng; do
  "$root/tests/observe/check-pcap.sh" "$f" > /dev/null || fail "$(basename "$f") (drops) does not read cleanly"
done
echo "capture.sh: $frames frames ($reads READ response packets) the same in one process and two"
