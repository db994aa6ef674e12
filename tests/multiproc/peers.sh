#!/usr/bin/env bash
# A shared fabric survives sick peers (label multiproc, docs/MULTIPROCESS.md, "What a peer's
# failure costs the others"). One scenario per run:
#
#   zombie  the server of a running ib_send_bw is killed and left unreaped (a zombie, as a test
#           driver that waits for the client first leaves it): the client's retries run out
#           (status 12) and it exits by itself;
#   stop    two pairs share a fabric; one pair's server is stopped (SIGSTOP): the other pair
#           runs to the end, and the stopped server's client fails with status 12; the
#           stopped process, continued, runs on, and a new pair on the fabric runs;
#   lock    a process holds the fabric file's lock and never lets go (as one stopped inside
#           it): a pair already running ends normally; a process that wants to join fails
#           within seconds, naming the lock;
#   rping   an rping server killed in the middle of its pings, five times at moments drawn at
#           random: each time the client is told (DISCONNECTED, as rdma_cm reports a lost
#           connection, or its retries run out) and ends by itself;
#   pidns   the server runs in a PID namespace of its own (a container sharing /dev/shm): the
#           pair runs to the end, and neither takes the other for dead (skipped where
#           unshare --pid is not allowed).
#
#   tests/multiproc/peers.sh --dropin DIR SCENARIO
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
dropin=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --dropin) dropin=$2; shift 2 ;;
    -*) echo "peers.sh: unknown option $1" >&2; exit 2 ;;
    *) break ;;
  esac
done
scenario=${1:?usage: peers.sh --dropin DIR zombie|stop|lock|rping|pidns}
command -v ib_send_bw > /dev/null || { echo "peers.sh: perftest is not installed" >&2; exit 2; }
export LD_LIBRARY_PATH=$dropin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fabric="peers-$scenario-$$-$RANDOM"
file=/dev/shm/verbsim-fabric-$(id -u)-$fabric
export VERBSIM_FABRIC=$fabric
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -CONT "$p" 2> /dev/null; kill -KILL "$p" 2> /dev/null; done
  rm -rf "$work"
}
trap cleanup EXIT
fail() {
  echo "peers.sh $scenario: FAILED: $*"
  ps -o pid,stat,time,args -p "$(IFS=,; echo "${pids[*]:-1}")" 2> /dev/null
  for f in "$work"/*.out; do echo "--- $f"; cat "$f"; done
  exit 1
}
seconds_since() { python3 -c "import sys,time; print(f'{time.time() - float(sys.argv[1]):.1f}')" "$1"; }
# Waits for the client's traffic to run (it printed the peer's address), then a little more.
running() {
  for _ in $(seq 100); do grep -q "remote address" "$1" && break; sleep 0.1; done
  grep -q "remote address" "$1" || fail "$1 never ran"
  sleep 0.5
}
# Waits up to $2 seconds for pid $1 to end; its exit status, or 255 after the time.
wait_for() {
  local pid=$1 limit=$2 t=0
  while kill -0 "$pid" 2> /dev/null && [[ $(ps -o stat= -p "$pid" 2> /dev/null) != Z* ]]; do
    sleep 0.1
    t=$((t + 1))
    ((t < limit * 10)) || return 255
  done
  wait "$pid"
}

case $scenario in
zombie)
  # bash reaps its children as they end: a python parent that does not is the test driver.
  port=$(free_port)
  python3 - "$port" "$work" << 'PY' || fail "see above"
import os, signal, subprocess, sys, time
port, work = sys.argv[1], sys.argv[2]
server = subprocess.Popen(["stdbuf", "-oL", "ib_send_bw", "-d", "sim0", "-x", "1", "-n",
                           "100000000", "-p", port], stdout=open(work + "/server.out", "w"),
                          stderr=subprocess.STDOUT)
time.sleep(0.3)
client = subprocess.Popen(["stdbuf", "-oL", "ib_send_bw", "-d", "sim0", "-x", "1", "-n",
                           "100000000", "-p", port, "127.0.0.1"],
                          stdout=open(work + "/client.out", "w"), stderr=subprocess.STDOUT)
for _ in range(100):
    if "remote address" in open(work + "/client.out").read(): break
    time.sleep(0.1)
time.sleep(0.5)
os.kill(server.pid, signal.SIGKILL)  # and not reaped until the client is done
start = time.time()
try:
    rc = client.wait(timeout=30)
except subprocess.TimeoutExpired:
    client.kill()
    print("peers.sh zombie: FAILED: the client still runs 30 s after its server died (a zombie)")
    sys.exit(1)
state = open(f"/proc/{server.pid}/stat").read().rsplit(")", 1)[1].split()[0]
if state != "Z":
    print(f"peers.sh zombie: FAILED: the server was not a zombie (state {state})")
    sys.exit(1)
if rc == 0 or "Failed status 12" not in open(work + "/client.out").read():
    print(f"peers.sh zombie: FAILED: the client exited {rc} without reporting status 12")
    sys.exit(1)
print(f"peers.sh zombie: the client reported status 12 and exited {rc} after "
      f"{time.time() - start:.1f} s; its server a zombie all along")
server.wait()
PY
  ;;
stop)
  port_a=$(free_port)
  port_b=$(free_port)
  stdbuf -oL ib_send_bw -d sim0 -x 1 -n 100000000 -p "$port_a" > "$work/a-server.out" 2>&1 &
  a_s=$!
  pids+=("$a_s")
  sleep 0.3
  stdbuf -oL ib_send_bw -d sim0 -x 1 -n 100000000 -p "$port_a" 127.0.0.1 > "$work/a-client.out" 2>&1 &
  a_c=$!
  pids+=("$a_c")
  running "$work/a-client.out"
  kill -STOP "$a_s"
  start=$(date +%s.%N)
  ib_write_bw -d sim0 -x 1 -n 1000 -p "$port_b" > "$work/b-server.out" 2>&1 &
  b_s=$!
  pids+=("$b_s")
  sleep 0.3
  ib_write_bw -d sim0 -x 1 -n 1000 -p "$port_b" 127.0.0.1 > "$work/b-client.out" 2>&1 &
  b_c=$!
  pids+=("$b_c")
  # The bound is generous: three processes poll on two cores, and a sanitized build on a
  # loaded machine has taken more than a minute (8 s unsanitized on an idle one).
  wait_for "$b_c" 150
  bc=$?
  wait_for "$b_s" 10
  bs=$?
  [[ $bc -eq 0 && $bs -eq 0 ]] || fail "the other pair: server $bs, client $bc (255: still running) with a stopped process on the fabric"
  echo "peers.sh stop: another pair ran to the end in $(seconds_since "$start") s while a process of the fabric was stopped"
  wait_for "$a_c" 60
  ac=$?
  [[ $ac -ne 0 && $ac -ne 255 ]] || fail "the stopped server's client exited $ac"
  grep -q "Failed status 12" "$work/a-client.out" || fail "the stopped server's client did not report status 12"
  echo "peers.sh stop: the stopped server's client reported status 12 and exited $ac after $(seconds_since "$start") s"
  # Continued, the server waits for messages its dead client will never send, as it would on
  # a device; it must still be there (not crashed), and the fabric must still serve.
  kill -CONT "$a_s"
  sleep 1
  kill -0 "$a_s" 2> /dev/null || fail "the server, continued, died"
  kill -TERM "$a_s"
  wait "$a_s" 2> /dev/null
  "$here/pair.sh" --dropin "$dropin" --fabric "$fabric" \
      -- ib_send_bw -d sim0 -x 1 -n 500 -p @PORT@ -- ib_send_bw -d sim0 -x 1 -n 500 -p @PORT@ @HOST@ \
      > "$work/pair.out" 2>&1 || fail "a pair on the fabric after the stopped process"
  echo "peers.sh stop: the server, continued, ran on; a new pair on the fabric ran"
  ;;
lock)
  port=$(free_port)
  ib_write_bw -d sim0 -x 1 -n 20000 -p "$port" > "$work/server.out" 2>&1 &
  spid=$!
  pids+=("$spid")
  sleep 0.3
  stdbuf -oL ib_write_bw -d sim0 -x 1 -n 20000 -p "$port" 127.0.0.1 > "$work/client.out" 2>&1 &
  cpid=$!
  pids+=("$cpid")
  running "$work/client.out"
  python3 -c 'import fcntl, sys, time
f = open(sys.argv[1])
fcntl.flock(f, fcntl.LOCK_EX)
time.sleep(20)' "$file" &
  holder=$!
  pids+=("$holder")
  for _ in $(seq 50); do flock -n "$file" true || break; sleep 0.1; done  # until it holds it
  start=$(date +%s.%N)
  timeout 30 ibv_devices > "$work/joiner.out" 2>&1
  jrc=$?
  took=$(seconds_since "$start")
  [[ $jrc -ne 124 ]] || fail "a process joining hung on the held lock"
  grep -q "lock" "$work/joiner.out" || fail "the joiner did not name the lock"
  echo "peers.sh lock: a process that wanted to join gave up after $took s (exit $jrc), naming the lock"
  wait_for "$cpid" 60
  crc=$?
  wait_for "$spid" 20
  src=$?
  [[ $crc -eq 0 && $src -eq 0 ]] || fail "the pair: server $src, client $crc (255: still running) with the lock held"
  echo "peers.sh lock: the running pair ended normally while the lock was held"
  kill "$holder" 2> /dev/null
  wait "$holder" 2> /dev/null
  "$here/pair.sh" --dropin "$dropin" --fabric "$fabric" \
      -- ib_send_bw -d sim0 -x 1 -n 500 -p @PORT@ -- ib_send_bw -d sim0 -x 1 -n 500 -p @PORT@ @HOST@ \
      > "$work/pair.out" 2>&1 || fail "a pair on the fabric once the lock was let go"
  echo "peers.sh lock: a pair on the fabric ran once the lock was let go"
  ;;
rping)
  command -v rping > /dev/null || { echo "peers.sh: rping is not installed" >&2; exit 2; }
  for round in 1 2 3 4 5; do
    export VERBSIM_FABRIC=$fabric-$round
    rping -s -a 10.0.0.1 -C 1000000 -V > "$work/server.out" 2>&1 &
    spid=$!
    pids+=("$spid")
    sleep 0.3
    rping -c -a 10.0.0.1 -C 1000000 -V > "$work/client.out" 2>&1 &
    cpid=$!
    pids+=("$cpid")
    sleep "0.$((RANDOM % 9 + 1))"
    kill -KILL "$spid"
    wait "$spid" 2> /dev/null
    start=$(date +%s.%N)
    wait_for "$cpid" 20
    crc=$?
    [[ $crc -ne 255 ]] || fail "round $round: the client still waits 20 s after its server was killed"
    grep -qE 'DISCONNECT EVENT|status 12' "$work/client.out" ||
      fail "round $round: the client did not report the lost connection"
    echo "peers.sh rping: round $round: the client ended (exit $crc) $(seconds_since "$start") s after its server was killed: $(grep -m1 -oE 'DISCONNECT EVENT|status 12' "$work/client.out")"
  done
  ;;
pidns)
  if ! unshare --pid --fork --mount-proc true 2> /dev/null; then
    echo "peers.sh pidns: SKIP: unshare --pid is not allowed here"
    exit 77
  fi
  port=$(free_port)
  unshare --pid --fork --mount-proc env LD_LIBRARY_PATH="$LD_LIBRARY_PATH" \
      VERBSIM_FABRIC="$fabric" ib_send_bw -d sim0 -x 1 -n 3000 -p "$port" > "$work/server.out" 2>&1 &
  spid=$!
  pids+=("$spid")
  sleep 0.5
  ib_send_bw -d sim0 -x 1 -n 3000 -p "$port" 127.0.0.1 > "$work/client.out" 2>&1 &
  cpid=$!
  pids+=("$cpid")
  wait_for "$cpid" 60
  crc=$?
  wait_for "$spid" 20
  src=$?
  [[ $crc -eq 0 && $src -eq 0 ]] || fail "server (own PID namespace) $src, client $crc"
  [[ -e "$file" ]] && fail "the fabric's file is left"
  echo "peers.sh pidns: a server in a PID namespace of its own and a client outside it ran to the end"
  ;;
*)
  echo "peers.sh: unknown scenario $scenario" >&2
  exit 2
  ;;
esac
