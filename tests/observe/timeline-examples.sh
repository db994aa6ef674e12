#!/usr/bin/env bash
# Runs the examples with VERBSIM_TIMELINE (with and without a fault plan) and checks every
# timeline they write (check-timeline.py). ctest's timeline_examples runs it.
#
#   tests/observe/timeline-examples.sh BUILD_DIR
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build=${1:?usage: timeline-examples.sh BUILD_DIR}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
run() {  # NAME FAULTS COMMAND...
  local name=$1 faults=$2
  shift 2
  VERBSIM_TIMELINE="$out/$name.json" VERBSIM_FAULTS="$faults" "$@" >/dev/null
}
ex=$build/examples
run pingpong "" "$ex/pingpong" --iters 100 --size 3000
run pingpong_drop "drop p=0.05" "$ex/pingpong" --iters 100
run pingpong_faults "duplicate p=0.1; reorder p=0.1 by=3us" "$ex/pingpong" --iters 100
for t in send_bw write_bw read_bw send_lat write_lat read_lat; do
  run "perf_$t" "" "$ex/verbsim-perf" --test "$t" -n 200
done
run perf_send_bw_drop "drop p=0.02" "$ex/verbsim-perf" --test send_bw -n 300 -q 2
run event_server "" "$ex/event_server" --messages 50
run windows "" "$ex/windows" --requests 8
run cm_echo "" "$ex/cm_echo" --messages 16
run cm_echo_lost "cm_drop msg=rep nth=1; cm_drop msg=dreq nth=1" "$ex/cm_echo" --messages 16
python3 "$here/check-timeline.py" "$out"/*.json
