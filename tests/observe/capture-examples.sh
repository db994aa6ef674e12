#!/usr/bin/env bash
# Captures the examples and a drop-in C program with VERBSIM_PCAP and checks each capture with
# tshark (check-pcap.sh: every frame decodes as RoCE v2, nothing malformed, no expert
# warnings, every ICRC right), then holds the frame counts against the simulator's own
# counters (VERBSIM_STATS=1): frames == packets the ports sent, and frames of the ACK family
# (ACK, READ response ONLY, atomic ACK) == ACKs and NAKs the QPs sent. Messages here fit the
# 1024-byte MTU, so a packet of the simulator is one frame. Connection manager MADs are not QP
# traffic: they are counted apart, and cm_echo's, by attribute, held against its rdma_cm events
# in its timeline. ctest's capture_examples runs it.
#
#   tests/observe/capture-examples.sh BUILD_DIR
# Exits 77 (skipped) without tshark.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build=${1:?usage: capture-examples.sh BUILD_DIR}
command -v tshark >/dev/null 2>&1 || { echo "capture-examples.sh: SKIP: no tshark"; exit 77; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
checked=0
run() {  # NAME FAULTS COMMAND...
  local name=$1 faults=$2
  shift 2
  VERBSIM_PCAP="$out/$name.pcapng" VERBSIM_STATS=1 VERBSIM_FAULTS="$faults" "$@" \
    >/dev/null 2>"$out/$name.err" || { cat "$out/$name.err" >&2; echo "$name failed" >&2; exit 1; }
  local sent acks summary frames cms acked
  sent=$(awk '/^  sim[0-9]+ port [0-9]+: sent / { n += $5 } END { print n + 0 }' "$out/$name.err")
  acks=$(sed -n 's/.*; acks \([0-9]*\)\/[0-9]* naks \([0-9]*\)\/.*/\1 \2/p' "$out/$name.err" |
         awk '{ n += $1 + $2 } END { print n + 0 }')
  summary=$("$here/check-pcap.sh" "$out/$name.pcapng") || { echo "$name: $summary" >&2; exit 1; }
  frames=$(sed -n 's/.*: \([0-9]*\) frames,.*/\1/p' <<<"$summary")
  cms=$(sed -n 's/.*; \([0-9]*\) CM MADs.*/\1/p' <<<"$summary")
  frames=$((frames - ${cms:-0}))
  acked=$(grep -o ' 1[678]=[0-9]*' <<<"$summary" | cut -d= -f2 | awk '{ n += $1 } END { print n + 0 }')
  if [[ $frames != "$sent" || $acked != "$acks" ]]; then
    echo "$name: $frames QP frames and $acked of the ACK family, but the counters say $sent packets" \
         "sent and $acks ACKs and NAKs ($summary)" >&2
    exit 1
  fi
  echo "$name: $summary"
  checked=$((checked + 1))
}
ex=$build/examples
run pingpong "" "$ex/pingpong" --iters 100
run pingpong_drop "drop p=0.05" "$ex/pingpong" --iters 100
for t in send_bw write_bw read_bw send_lat write_lat read_lat; do
  run "perf_$t" "drop p=0.01" "$ex/verbsim-perf" --test "$t" -n 200 -s 64
done
# cm_echo: a REQ per CONNECT_REQUEST the server got, a REP and an RTU per pair of ESTABLISHED
# (the client's after the REP, the server's after the RTU), a REJ per REJECTED, a DREQ and a
# DREP per pair of DISCONNECTED (one each side).
VERBSIM_TIMELINE="$out/cm_echo.json" run cm_echo "" "$ex/cm_echo"
events() { { grep -o "\"name\":\"cm: RDMA_CM_EVENT_$1\"" "$out/cm_echo.json" || true; } | wc -l; }
established=$(events ESTABLISHED)
disconnected=$(events DISCONNECTED)
cm_expect=(cm.REQ="$(events CONNECT_REQUEST)" cm.REP=$((established / 2))
  cm.RTU=$((established / 2)) cm.REJ="$(events REJECTED)" cm.DREQ=$((disconnected / 2))
  cm.DREP=$((disconnected / 2)))
summary=$("$here/check-pcap.sh" "$out/cm_echo.pcapng" "${cm_expect[@]}") ||
  { echo "cm_echo: CM MADs are not what its events say (${cm_expect[*]})" >&2; exit 1; }
echo "cm_echo: ${cm_expect[*]}"
if [[ -x $build/tests/dropin/dropin_five_steps ]]; then
  LD_LIBRARY_PATH=$build/dropin VERBSIM_DROPIN_PROGRESS=0 \
    run dropin_five_steps "" "$build/tests/dropin/dropin_five_steps"
fi
echo "capture-examples.sh: $checked captures decode cleanly and match the counters"
