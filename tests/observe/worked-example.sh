#!/usr/bin/env bash
# The worked example of docs/OBSERVABILITY.md, run end to end and checked: a swarm finds the
# seeds on which examples/forgetful_server fails, the first one is run again with the verb log,
# the capture and the timeline on, and each shows its part of the bug.
#
#   tests/observe/worked-example.sh BUILD_DIR [--png FILE]
#
# --png FILE  also draw the timeline (scripts/plot-timeline.py; docs/img/ holds the result).
# Exits 1 when a step does not show what the document says; 77 when tshark is missing.
set -euo pipefail

build=${1:?usage: worked-example.sh BUILD_DIR [--png FILE]}
png=
[[ "${2:-}" == --png ]] && png=${3:?--png needs a file}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
command -v tshark >/dev/null || { echo "worked-example: tshark is not installed; skipped"; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "worked-example: $*" >&2; exit 1; }

# 1. The swarm: 40 seeds, each with a fault plan drawn from it, verb faults included.
"$build/sim/verbsim-swarm" --seeds 40 --jobs 2 --fault-probability 0.05 --verb-faults --quiet \
  -- "$build/examples/forgetful_server" >"$work/swarm.txt" 2>&1 || true
grep -E '^FAIL|^swarm:' "$work/swarm.txt"
seed=$(awk '/^FAIL seed/ { print $3 }' "$work/swarm.txt" | sort -n | head -n 1)
[[ -n "$seed" ]] || fail "the swarm found no failing seed"
repro=$(grep -m1 "^VERBSIM_SEED=$seed " "$work/swarm.txt")
faults=$(sed -E "s/.*VERBSIM_FAULTS='([^']*)'.*/\1/" <<<"$repro")
echo "rerun: $repro"

# 2. The same run with the verb log, the capture and the timeline on.
status=0
VERBSIM_SEED=$seed VERBSIM_FAULTS=$faults VERBSIM_VERB_LOG="$work/verbs.log" \
  VERBSIM_PCAP="$work/run.pcapng" VERBSIM_TIMELINE="$work/run.json" \
  "$build/examples/forgetful_server" >"$work/out.txt" 2>&1 || status=$?
cat "$work/out.txt"
((status == 1)) || fail "seed $seed exited $status on its rerun, not 1"
grep -q 'completed with RNR_RETRY_EXC_ERR' "$work/out.txt" ||
  fail "seed $seed did not fail with RNR_RETRY_EXC_ERR"

# 3. The verb log: the server's (sim1) refused post_recv calls.
refused=$(grep -c 'data ibv_post_recv dev=sim1 .* -> EAGAIN' "$work/verbs.log" || true)
echo "verb log: the server's post_recv refused $refused times"
grep -m2 'data ibv_post_recv dev=sim1 .* -> EAGAIN' "$work/verbs.log"
((refused > 0)) || fail "the verb log shows no refused post_recv on sim1"

# 4. The capture: RNR NAKs (AETH syndrome 001 in its top bits: 0x20-0x3f) from the server.
tshark -r "$work/run.pcapng" -Y 'infiniband.aeth.syndrome >= 0x20 && infiniband.aeth.syndrome < 0x40' \
  -T fields -e frame.time_relative -e ip.src -e ip.dst -e infiniband.bth.psn \
  -e infiniband.aeth.syndrome >"$work/rnr.txt"
echo "capture: $(wc -l <"$work/rnr.txt") RNR NAKs"
head -n 3 "$work/rnr.txt"
[[ -s "$work/rnr.txt" ]] || fail "the capture has no RNR NAK"
awk '$2 != "10.0.1.1" { exit 1 }' "$work/rnr.txt" || fail "an RNR NAK not from the server (10.0.1.1)"

# 5. The timeline: the receives outstanding on the server's QP fall as post_recv is refused.
/usr/bin/python3 - "$work/run.json" <<'EOF'
import json, sys
events = json.load(open(sys.argv[1]))["traceEvents"]
procs = {e["pid"]: e["args"]["name"] for e in events
         if e.get("ph") == "M" and e["name"] == "process_name"}
names = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
         if e.get("ph") == "M" and e["name"] == "thread_name"}
recvs = [e for e in events if e.get("ph") == "X" and e.get("cat") == "wr"
         and procs.get(e["pid"]) == "sim1" and " recv" in names[(e["pid"], e["tid"])]]
end = max(e["ts"] for e in events)
steps = sorted([(e["ts"], 1) for e in recvs] + [(e["ts"] + e["dur"], -1) for e in recvs])
level, low = 0, None
for ts, d in steps:
    level += d
    if ts < end * 0.99:
        low = level if low is None else min(low, level)
print("timeline: the server's QP had %d receives posted at the start, %s at the lowest"
      % (sum(1 for e in recvs if e["ts"] == 0), low))
sys.exit(0 if low == 0 else 1)
EOF

if [[ -n "$png" ]]; then
  "$here/../../scripts/plot-timeline.py" "$work/run.json" "$png" \
    --title "forgetful_server, seed $seed: receives run out on the server (sim1)"
fi
echo "worked-example: seed $seed shows the bug in the verb log, the capture and the timeline"
