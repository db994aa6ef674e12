#!/usr/bin/env bash
# scripts/plot-timeline.py's packet panel counts the packets each device sent, not those it
# received: --rows prints the panel's rows, checked here against a made-up timeline where a
# responder's ACK leaves on the track and at the time its request arrives (what the simulator
# writes for a responder that answers at once), and against the port counters of real runs
# (VERBSIM_STATS). ctest's plot_timeline_rows runs it.
#
#   tests/observe/plot-rows.sh BUILD_DIR
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
plot=$here/../../scripts/plot-timeline.py
build=${1:?usage: plot-rows.sh BUILD_DIR}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "plot-rows.sh: $*" >&2; exit 1; }

# sim0 sends SEND psn 100, which arrives at sim1 at 2 us, where sim1's ACK leaves at once; then
# a SEND that the fabric drops, and one that is duplicated. Each slice is followed by its end
# of the flow, as the simulator writes them.
cat >"$work/made-up.json" <<'JSON'
{"displayTimeUnit":"ns","traceEvents":[
{"name":"process_name","ph":"M","pid":0,"tid":0,"args":{"name":"sim0"}},
{"name":"process_name","ph":"M","pid":1,"tid":0,"args":{"name":"sim1"}},
{"name":"thread_name","ph":"M","pid":0,"tid":3,"args":{"name":"QP 17 packets"}},
{"name":"thread_name","ph":"M","pid":1,"tid":3,"args":{"name":"QP 17 packets"}},
{"name":"SEND psn 100","cat":"packet","ph":"X","dur":0.001,"pid":0,"tid":3,"args":{"fate":"delivered","length":64,"wr_id":1},"ts":1.000},
{"name":"packet","cat":"packet","ph":"s","id":1,"pid":0,"tid":3,"ts":1.000},
{"name":"SEND psn 100","cat":"packet","ph":"X","dur":0.001,"pid":1,"tid":3,"args":{"fate":"delivered","length":64,"wr_id":1},"ts":2.000},
{"name":"packet","cat":"packet","ph":"f","bp":"e","id":1,"pid":1,"tid":3,"ts":2.000},
{"name":"ACK psn 100","cat":"packet","ph":"X","dur":0.001,"pid":1,"tid":3,"args":{"fate":"delivered","length":0,"wr_id":1},"ts":2.000},
{"name":"packet","cat":"packet","ph":"s","id":2,"pid":1,"tid":3,"ts":2.000},
{"name":"ACK psn 100","cat":"packet","ph":"X","dur":0.001,"pid":0,"tid":3,"args":{"fate":"delivered","length":0,"wr_id":1},"ts":3.000},
{"name":"packet","cat":"packet","ph":"f","bp":"e","id":2,"pid":0,"tid":3,"ts":3.000},
{"name":"SEND psn 101 (dropped)","cat":"packet","ph":"X","dur":0.001,"pid":0,"tid":3,"args":{"fate":"dropped","length":64,"wr_id":2},"ts":4.000},
{"name":"SEND psn 102 (duplicated)","cat":"packet","ph":"X","dur":0.001,"pid":0,"tid":3,"args":{"fate":"duplicated","length":64,"wr_id":3},"ts":5.000},
{"name":"packet","cat":"packet","ph":"s","id":3,"pid":0,"tid":3,"ts":5.000},
{"name":"packet","cat":"packet","ph":"s","id":4,"pid":0,"tid":3,"ts":5.000},
{"name":"SEND psn 102","cat":"packet","ph":"X","dur":0.001,"pid":1,"tid":3,"args":{"fate":"duplicated","length":64,"wr_id":3},"ts":6.000},
{"name":"packet","cat":"packet","ph":"f","bp":"e","id":3,"pid":1,"tid":3,"ts":6.000},
{"name":"SEND psn 102","cat":"packet","ph":"X","dur":0.001,"pid":1,"tid":3,"args":{"fate":"duplicated","length":64,"wr_id":3},"ts":7.000},
{"name":"packet","cat":"packet","ph":"f","bp":"e","id":4,"pid":1,"tid":3,"ts":7.000}
]}
JSON
rows=$("$plot" "$work/made-up.json" --rows) || fail "--rows failed"
want=$'sim0\tSEND\t3\t1\nsim1\tACK\t1\t0'
[[ $rows == "$want" ]] || fail "made-up timeline: rows"$'\n'"$rows"$'\n'"instead of"$'\n'"$want"
echo "plot-rows.sh: a made-up timeline: a packet counts where it leaves, not where it arrives"

# Real runs: each device's rows add up to the packets its port sent (messages shorter than the
# MTU: one packet each).
check_run() {  # NAME FAULTS COMMAND...
  local name=$1 faults=$2
  shift 2
  VERBSIM_TIMELINE="$work/$name.json" VERBSIM_STATS=1 VERBSIM_FAULTS="$faults" "$@" \
    >/dev/null 2>"$work/$name.stats" || fail "$name failed"
  "$plot" "$work/$name.json" --rows >"$work/$name.rows" || fail "$name: --rows failed"
  local dev sent drawn
  while read -r dev sent; do
    drawn=$(awk -F'\t' -v d="$dev" '$1 == d { n += $3 } END { print n + 0 }' "$work/$name.rows")
    [[ $drawn == "$sent" ]] ||
      fail "$name: $dev's port sent $sent packets, its rows hold $drawn:"$'\n'"$(cat "$work/$name.rows")"
  done < <(sed -n 's/^  \(sim[0-9]*\) port [0-9]*: sent \([0-9]*\) packets.*/\1 \2/p' "$work/$name.stats")
  grep -q ' port .*: sent ' "$work/$name.stats" || fail "$name: no port counters"
}
ex=$build/examples
check_run pingpong "" "$ex/pingpong" --iters 50
check_run pingpong_drop "drop p=0.05; duplicate p=0.05" "$ex/pingpong" --iters 50
check_run send_bw "" "$ex/verbsim-perf" --test send_bw -n 100
echo "plot-rows.sh: real runs: each device's rows add up to the packets its port sent"
