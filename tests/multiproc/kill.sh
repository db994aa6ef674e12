#!/usr/bin/env bash
# A process of a shared fabric killed with SIGKILL vanishes like a host that lost power, and
# the fabric goes on (label multiproc, docs/MULTIPROCESS.md):
#  1. ib_send_bw server and client run; the server is killed in the middle; the client
#     reports the failure (its retries run out: status 12) and exits by itself;
#  2. a new pair on the same fabric name runs to the end and exits 0;
#  3. a fabric whose processes were all killed is left in /dev/shm as a stale file; the next
#     process to join any fabric removes it, and one that joins it by name starts it afresh.
#
#   tests/multiproc/kill.sh --dropin DIR
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
dropin=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --dropin) dropin=$2; shift 2 ;;
    *) echo "kill.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
command -v ib_send_bw > /dev/null || { echo "kill.sh: ib_send_bw is not installed" >&2; exit 2; }
export LD_LIBRARY_PATH=$dropin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fabric="kill-$$-$RANDOM"
file=/dev/shm/verbsim-fabric-$(id -u)-$fabric
export VERBSIM_FABRIC=$fabric
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "kill.sh: FAILED: $*"; for f in "$work"/*.out; do echo "--- $f"; cat "$f"; done; exit 1; }

# 1. Kill the server of a running ib_send_bw.
stdbuf -oL ib_send_bw -d sim0 -x 1 -n 100000000 -p "$port" > "$work/server.out" 2>&1 &
spid=$!
sleep 0.3
timeout 60 stdbuf -oL ib_send_bw -d sim0 -x 1 -n 100000000 -p "$port" 127.0.0.1 > "$work/client.out" 2>&1 &
cpid=$!
# Until the traffic runs (the client has printed its header and the peer's address).
for _ in $(seq 100); do grep -q "remote address" "$work/client.out" && break; sleep 0.1; done
sleep 0.5
kill -0 $cpid 2> /dev/null || fail "the client ended before the kill"
kill -KILL $spid
wait $spid 2> /dev/null
start=$(date +%s.%N)
wait $cpid
crc=$?
took=$(python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" "$start" "$(date +%s.%N)")
[[ $crc -ne 0 && $crc -ne 124 ]] || fail "the client exited $crc after the server was killed"
grep -q "Failed status 12" "$work/client.out" || fail "the client did not report status 12"
echo "kill.sh: server killed; the client reported status 12 and exited $crc after ${took} s"
[[ -e "$file" ]] && fail "the fabric's file is left after the client left"

# 2. A new pair on the same fabric name.
"$here/pair.sh" --dropin "$dropin" --fabric "$fabric" \
    -- ib_send_bw -d sim0 -x 1 -n 2000 -p @PORT@ -- ib_send_bw -d sim0 -x 1 -n 2000 -p @PORT@ @HOST@ \
    > "$work/pair.out" 2>&1 || fail "the next pair on $fabric"
echo "kill.sh: the next pair on the same fabric ran and exited 0"

# 3. A stale fabric: both processes killed while it is in use.
stale="$fabric-stale"
VERBSIM_FABRIC=$stale stdbuf -oL ib_send_bw -d sim0 -x 1 -n 100000000 -p "$port" > "$work/s2.out" 2>&1 &
s2=$!
sleep 0.3
VERBSIM_FABRIC=$stale stdbuf -oL ib_send_bw -d sim0 -x 1 -n 100000000 -p "$port" 127.0.0.1 > "$work/c2.out" 2>&1 &
c2=$!
for _ in $(seq 100); do grep -q "remote address" "$work/c2.out" && break; sleep 0.1; done
kill -KILL $s2 $c2
wait $s2 $c2 2> /dev/null
stale_file=/dev/shm/verbsim-fabric-$(id -u)-$stale
[[ -e "$stale_file" ]] || fail "no stale file after SIGKILL (nothing to test)"
"$here/pair.sh" --dropin "$dropin" --fabric "$fabric" \
    -- ib_send_bw -d sim0 -x 1 -n 1000 -p @PORT@ -- ib_send_bw -d sim0 -x 1 -n 1000 -p @PORT@ @HOST@ \
    > "$work/pair2.out" 2>&1 || fail "a pair after the stale fabric"
[[ -e "$stale_file" ]] && fail "the stale fabric $stale_file was not removed"
echo "kill.sh: the stale fabric of two killed processes was removed by the next one to join"
"$here/pair.sh" --dropin "$dropin" --fabric "$stale" \
    -- ib_send_bw -d sim0 -x 1 -n 1000 -p @PORT@ -- ib_send_bw -d sim0 -x 1 -n 1000 -p @PORT@ @HOST@ \
    > "$work/pair3.out" 2>&1 || fail "a pair on the stale fabric's name"
echo "kill.sh: a pair on the stale fabric's name ran and exited 0"
