#!/usr/bin/env bash
# One capture and one timeline of a whole shared fabric (label multiproc, docs/MULTIPROCESS.md):
# cm_echo's server and client run as two processes with VERBSIM_PCAP and VERBSIM_TIMELINE set;
# each writes its own file (run.<pid>.pcapng, run.<pid>.json), scripts/merge-fabric.py merges
# them by virtual time, and the merged files are checked: tshark decodes every frame as
# InfiniBand over UDP with no malformed frame and no expert warning, the fabric's CM exchange
# appears once (REQ, REP, RTU, DREQ, DREP), every SEND once with its ACK; the timeline passes
# tests/observe/check-timeline.py.
#
#   tests/multiproc/observe.sh CM_ECHO
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
cm_echo=$1
messages=50
command -v tshark > /dev/null || { echo "observe.sh: tshark is not installed" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "observe.sh: FAILED: $*"; exit 1; }

VERBSIM_PCAP=$work/run.pcapng VERBSIM_TIMELINE=$work/run.json "$here/pair.sh" \
    -- "$cm_echo" --role server --messages $messages -- "$cm_echo" --role client --messages $messages \
    > "$work/pair.out" 2>&1 || { cat "$work/pair.out"; fail "the pair"; }
pcaps=("$work"/run.*.pcapng)
jsons=("$work"/run.*.json)
[[ ${#pcaps[@]} -eq 2 && ${#jsons[@]} -eq 2 ]] || fail "expected a capture and a timeline per process: $(ls "$work")"
"$root/scripts/merge-fabric.py" --pcap "$work/fabric.pcapng" "${pcaps[@]}" || fail "merging the captures"
"$root/scripts/merge-fabric.py" --timeline "$work/fabric.json" "${jsons[@]}" || fail "merging the timelines"

count() { tshark -r "$work/fabric.pcapng" -Y "$1" 2> /dev/null | wc -l; }
total=$(tshark -r "$work/fabric.pcapng" 2> /dev/null | wc -l)
ib=$(count "infiniband")
bad=$(count "_ws.malformed || _ws.expert.severity >= warning")
[[ $total -gt 0 && $ib -eq $total ]] || fail "$ib of $total frames decode as InfiniBand"
[[ $bad -eq 0 ]] || fail "$bad malformed frames or expert warnings"
for attr in 0x0010 0x0013 0x0014 0x0015 0x0016; do  # REQ REP RTU DREQ DREP (IBTA 12.6)
  n=$(count "infiniband.mad.attributeid == $attr")
  [[ $n -eq 1 ]] || fail "CM attribute $attr appears $n times (want 1)"
done
sends=$(count "infiniband.bth.opcode == 4")  # RC SEND Only
acks=$(count "infiniband.bth.opcode == 17")  # RC Acknowledge
[[ $sends -eq $((2 * messages)) ]] || fail "$sends SENDs (want $((2 * messages)): each message and its echo)"
[[ $acks -ge 1 && $acks -le $sends ]] || fail "$acks ACKs for $sends SENDs"
# Virtual time never runs backwards in the merged capture.
tshark -r "$work/fabric.pcapng" -T fields -e frame.time_epoch 2> /dev/null |
  python3 -c 'import sys; t=[float(x) for x in sys.stdin]; sys.exit(0 if t == sorted(t) else 1)' ||
  fail "the merged capture's times run backwards"
python3 "$root/tests/observe/check-timeline.py" "$work/fabric.json" || fail "the merged timeline"
echo "observe.sh: $total frames from two processes in one capture ($sends SENDs, $acks ACKs, one CM exchange); one timeline"
