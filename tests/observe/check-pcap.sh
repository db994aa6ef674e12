#!/usr/bin/env bash
# Checks a packet capture the simulator wrote (VERBSIM_PCAP, pcapng, RoCE v2) with tshark.
# Installed as verbsim-check-pcap; in the source tree tests/observe/check-pcap.sh.
#
# - every frame decodes as eth / IPv4 / UDP / InfiniBand (RoCE v2 on UDP 4791), its payload
#   as plain data (the heuristic dissectors of InfiniBand payloads are switched off: a run's
#   bytes are not RPC-over-RDMA, SMB Direct, ...);
# - nothing malformed, no expert info of severity warning or error;
# - the ICRC of every frame is right: CRC-32 (zlib's) over 8 bytes of ones and the frame from
#   the IPv4 header on, with TOS, TTL, IP checksum, UDP checksum and BTH byte 4 as ones
#   (IBTA Annex A17), little-endian in the last 4 bytes; and tshark's Invariant CRC field is
#   those 4 bytes (so the dissector found the ICRC where the headers say it is). Needs python3;
#   tshark itself does not verify ICRCs;
# - a frame to QP 1 is a connection manager MAD (management class 0x07) that Wireshark
#   decodes; CM MADs are counted by attribute (REQ, REP, RTU, REJ, DREQ, DREP, SIDR_REQ,
#   SIDR_REP), apart from the per-opcode counts;
# - optionally, the number of frames per BTH opcode (decimal or 0x hex), from arguments
#   OPCODE=COUNT or from a file of "OPCODE COUNT" lines ('#' starts a comment), the number of
#   CM MADs per attribute (cm.REQ=1, ...), and the number of frames (total=N, CM MADs
#   included). Opcodes and attributes not named must not occur when any count of their kind
#   is given.
#
# Usage:
#   verbsim-check-pcap FILE [OPCODE=COUNT | cm.ATTRIBUTE=COUNT | total=N]...
#   verbsim-check-pcap FILE --expect COUNTS_FILE
#   verbsim-check-pcap --tshark-options   the options that read a capture cleanly, for
#                                         tshark or wireshark: tshark -r FILE $(... --tshark-options)
#   verbsim-check-pcap --help
#
# Exit 0 when everything holds (a summary on stdout), 1 naming what does not, 77 (ctest's
# SKIP_RETURN_CODE) when tshark is not installed, 2 on bad usage.
set -euo pipefail

usage() {  # [EXIT_STATUS]: 0 prints to stdout
  local status=${1:-2}
  if ((status == 0)); then
    sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
  else
    sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
  fi
  exit "$status"
}

# Wireshark's heuristic dissectors of InfiniBand payloads, switched off: a run's payload bytes
# are not RPC-over-RDMA, SMB Direct, ... (with them on, RPC-over-RDMA's heuristic takes some
# SENDs for its own and marks them malformed). docs/OBSERVABILITY.md quotes this list.
heuristics=(rpcordma smb_direct smc nvme-rdma lnet iser infiniband_sdp fcoib infiniband.eoib drbd)
tshark_options=()
for p in "${heuristics[@]}"; do
  tshark_options+=(--disable-protocol "$p")
done

[[ $# -ge 1 ]] || usage
case $1 in
  -h | --help) usage 0 ;;
  --tshark-options)
    echo "${tshark_options[*]}"
    exit 0
    ;;
esac
file=$1
shift
[[ -r $file ]] || { echo "check-pcap: cannot read $file" >&2; exit 2; }
if ! command -v tshark >/dev/null 2>&1; then
  echo "check-pcap: SKIP: tshark is not on PATH (apt-get install tshark)"
  exit 77
fi

declare -A want=() want_cm=()
want_total=
add_expect() {  # KEY COUNT
  local key=$1 count=$2
  [[ $count =~ ^[0-9]+$ ]] || { echo "check-pcap: bad count '$count' for $key" >&2; exit 2; }
  if [[ $key == total ]]; then
    want_total=$count
  elif [[ ${key^^} =~ ^CM\.(REQ|REP|RTU|REJ|DREQ|DREP|SIDR_REQ|SIDR_REP)$ ]]; then
    want_cm[${BASH_REMATCH[1]}]=$count
  elif [[ $key =~ ^(0x[0-9a-fA-F]+|[0-9]+)$ ]]; then
    want[$((key))]=$count
  else
    echo "check-pcap: bad opcode '$key' (a number, decimal or 0x hex, or cm.REQ, ...)" >&2
    exit 2
  fi
}
while [[ $# -gt 0 ]]; do
  case $1 in
    --expect)
      [[ $# -ge 2 ]] || usage
      while read -r key count _; do
        [[ -z ${key:-} || $key == \#* ]] && continue
        add_expect "$key" "${count:-}"
      done <"$2"
      shift 2
      ;;
    *=*) add_expect "${1%%=*}" "${1#*=}"; shift ;;
    *) usage ;;
  esac
done

# Payloads as data, not as whatever protocol a heuristic thinks the bytes look like.
ts=(tshark -n -r "$file" "${tshark_options[@]}")

errors=0
fail() {
  echo "check-pcap: $file: $*" >&2
  errors=$((errors + 1))
}

fields=$("${ts[@]}" -T fields -E separator=/t -e frame.number -e frame.protocols \
  -e infiniband.bth.opcode -e infiniband.invariant.crc -e infiniband.bth.destqp \
  -e infiniband.mad.mgmtclass -e infiniband.mad.attributeid 2>/dev/null) ||
  { echo "check-pcap: tshark cannot read $file" >&2; exit 1; }
frames=0
cm_frames=0
declare -A got=() got_cm=()
declare -A cm_names=([0x0010]=REQ [0x0012]=REJ [0x0013]=REP [0x0014]=RTU [0x0015]=DREQ
  [0x0016]=DREP [0x0017]=SIDR_REQ [0x0018]=SIDR_REP)
crcs=()
while IFS=$'\t' read -r num protocols opcode crc qp class attribute; do
  [[ -z $num ]] && continue
  frames=$((frames + 1))
  case $protocols in
    eth:ethertype:ip:udp:infiniband | eth:ethertype:ip:udp:infiniband:data) ;;
    *) fail "frame $num is '$protocols', not eth:ethertype:ip:udp:infiniband" ;;
  esac
  if [[ -z $opcode ]]; then
    fail "frame $num has no BTH opcode"
    opcode=none
  fi
  crcs+=("$num ${crc:-none}")
  if [[ $qp == 0x000001 || -n $class ]]; then  # a MAD to QP 1
    if [[ $qp != 0x000001 || $class != 0x07 || -z ${cm_names[$attribute]:-} ]]; then
      fail "frame $num: to QP $qp, management class '$class', attribute '$attribute':" \
        "not a CM MAD to QP 1"
      continue
    fi
    cm_frames=$((cm_frames + 1))
    got_cm[${cm_names[$attribute]}]=$((${got_cm[${cm_names[$attribute]}]:-0} + 1))
    continue
  fi
  got[$opcode]=$((${got[$opcode]:-0} + 1))
done <<<"$fields"

bad=$("${ts[@]}" -Y '_ws.malformed || _ws.expert.severity >= "Warning"' 2>/dev/null || true)
if [[ -n $bad ]]; then
  fail "malformed frames or expert warnings/errors:"
  echo "$bad" | head -20 >&2
fi

# The ICRCs, computed here, and tshark's Invariant CRC field against the frames' last bytes.
if command -v python3 >/dev/null 2>&1; then
  icrc_report=$(printf '%s\n' "${crcs[@]}" | python3 -c '
import struct, sys, zlib
path = sys.argv[1]
tshark = {}
for line in sys.stdin:
    parts = line.split()
    if len(parts) == 2:
        tshark[int(parts[0])] = parts[1]
b = open(path, "rb").read()
at, n, bad = 0, 0, []
while at + 12 <= len(b):
    kind, size = struct.unpack_from("<II", b, at)
    if size < 12:
        bad.append(f"a block of {size} bytes at offset {at}")
        break
    if kind == 6:
        n += 1
        cap = struct.unpack_from("<I", b, at + 20)[0]
        f = b[at + 28:at + 28 + cap]
        if len(f) < 14 + 20 + 8 + 12 + 4 or f[12:14] != b"\x08\x00" or f[14] != 0x45:
            bad.append(f"frame {n}: not Ethernet/IPv4 without options")
        else:
            p = bytearray(b"\xff" * 8) + bytearray(f[14:-4])
            for o in (1, 8, 10, 11, 20 + 6, 20 + 7, 28 + 4):
                p[8 + o] = 0xff
            want = zlib.crc32(bytes(p))
            have = struct.unpack("<I", f[-4:])[0]
            if want != have:
                bad.append(f"frame {n}: ICRC {have:#010x}, should be {want:#010x}")
            shown = tshark.get(n, "none")
            if shown == "none" or int(shown, 16) != struct.unpack(">I", f[-4:])[0]:
                bad.append(f"frame {n}: tshark reads Invariant CRC {shown}, not the last 4 bytes")
    at += size
print(n)
for line in bad[:20]:
    print(line)
' "$file")
  icrc_frames=$(head -1 <<<"$icrc_report")
  icrc_bad=$(tail -n +2 <<<"$icrc_report")
  [[ -n $icrc_bad ]] && fail "ICRC:"$'\n'"$icrc_bad"
  [[ $icrc_frames == "$frames" ]] ||
    fail "$icrc_frames frames in the file, tshark decoded $frames"
  icrc_note="ICRC good on $icrc_frames"
else
  icrc_note="ICRC not checked (no python3)"
fi

if [[ -n $want_total && $want_total != "$frames" ]]; then
  fail "$frames frames, expected $want_total"
fi
if [[ ${#want[@]} -gt 0 ]]; then
  for op in $(printf '%s\n' "${!want[@]}" | sort -n); do
    [[ ${got[$op]:-0} == "${want[$op]}" ]] ||
      fail "opcode $op ($(printf '0x%02x' "$op")): ${got[$op]:-0} frames, expected ${want[$op]}"
  done
  for op in $(printf '%s\n' "${!got[@]}" | sort -n); do
    [[ -n ${want[$op]:-} ]] || fail "opcode $op: ${got[$op]} frames, expected none"
  done
fi

if [[ ${#want_cm[@]} -gt 0 ]]; then
  for a in "${!want_cm[@]}"; do
    [[ ${got_cm[$a]:-0} == "${want_cm[$a]}" ]] ||
      fail "CM $a: ${got_cm[$a]:-0} MADs, expected ${want_cm[$a]}"
  done
  for a in "${!got_cm[@]}"; do
    [[ -n ${want_cm[$a]:-} ]] || fail "CM $a: ${got_cm[$a]} MADs, expected none"
  done
fi

summary=""
for op in $(printf '%s\n' "${!got[@]}" | sort -n); do
  summary+=" $op=${got[$op]}"
done
if [[ $cm_frames -gt 0 ]]; then
  summary+="; $cm_frames CM MADs by attribute:"
  for a in REQ REP RTU REJ DREQ DREP SIDR_REQ SIDR_REP; do
    [[ -n ${got_cm[$a]:-} ]] && summary+=" $a=${got_cm[$a]}"
  done
fi
if [[ $errors -gt 0 ]]; then
  echo "check-pcap: $file: FAILED ($errors problems); frames by opcode:$summary" >&2
  exit 1
fi
echo "check-pcap: $file: $frames frames, none malformed, no expert warnings, $icrc_note;" \
  "frames by opcode:$summary"
