#!/usr/bin/env bash
# Runs an unmodified server and client, two processes, on one simulated fabric through the
# libibverbs and librdmacm drop-ins, and passes when both exit 0 and the fabric is gone after.
#
#   tests/multiproc/pair.sh [--dropin DIR] [--timeout S] [--env NAME=VALUE]... \
#       [--expect-fail REGEX] [--fabric NAME] -- SERVER COMMAND... -- CLIENT COMMAND...
#
# --expect-fail: pass instead when both exit non-zero on their own (neither is killed by the
# timeout) and the output of each matches REGEX (grep -E): a fault both ends must report.
# In the commands, @PORT@ becomes a free TCP port (the one they exchange endpoints on) and
# @HOST@ 127.0.0.1. VERBSIM_FABRIC is a name of its own per run, or --fabric's.
set -uo pipefail

dropin=""
timeout_s=60
envs=()
expect_fail=""
fabric="pair-$$-$RANDOM"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --dropin) dropin=$2; shift 2 ;;
    --timeout) timeout_s=$2; shift 2 ;;
    --env) envs+=("$2"); shift 2 ;;
    --expect-fail) expect_fail=$2; shift 2 ;;
    --fabric) fabric=$2; shift 2 ;;
    --) shift; break ;;
    *) echo "pair.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
server=()
while [[ $# -gt 0 && "$1" != "--" ]]; do server+=("$1"); shift; done
shift || true
client=("$@")
if [[ ${#server[@]} -eq 0 || ${#client[@]} -eq 0 ]]; then
  echo "usage: pair.sh [--dropin DIR] [--timeout S] [--env N=V]... -- SERVER... -- CLIENT..." >&2
  exit 2
fi
for tool in "${server[0]}" "${client[0]}"; do
  if ! command -v "$tool" > /dev/null; then
    echo "pair.sh: $tool is not installed (scripts/setup.sh installs it)" >&2
    exit 2
  fi
done

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
subst() {
  local out=()
  for a in "$@"; do a=${a//@PORT@/$port}; out+=("${a//@HOST@/127.0.0.1}"); done
  printf '%s\0' "${out[@]}"
}
mapfile -d '' server < <(subst "${server[@]}")
mapfile -d '' client < <(subst "${client[@]}")

export VERBSIM_FABRIC=$fabric
[[ -n "$dropin" ]] && export LD_LIBRARY_PATH=$dropin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
for e in "${envs[@]}"; do export "${e?}"; done

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
timeout "$timeout_s" "${server[@]}" > "$work/server.out" 2>&1 &
spid=$!
# The server listens once it has made its device's objects; the client retries its connect.
sleep 0.3
crc=0
for attempt in 1 2 3 4 5; do
  timeout "$timeout_s" "${client[@]}" > "$work/client.out" 2>&1
  crc=$?
  # A client that found no listener yet tries again.
  if [[ $crc -ne 0 ]] && grep -qiE "couldn't connect|connection refused|unable to connect|connect.*fail|REJECTED" "$work/client.out" \
      && kill -0 $spid 2> /dev/null; then
    sleep 0.5
    continue
  fi
  break
done
wait $spid
src=$?
echo "--- server (exit $src): ${server[*]}"
cat "$work/server.out"
echo "--- client (exit $crc): ${client[*]}"
cat "$work/client.out"
if [[ -e "/dev/shm/verbsim-fabric-$(id -u)-$fabric" ]]; then
  echo "pair.sh: the fabric's file is left in /dev/shm"
  exit 1
fi
if [[ -n "$expect_fail" ]]; then
  for side in server client; do
    rc=$src
    [[ $side == client ]] && rc=$crc
    if [[ $rc -eq 0 || $rc -eq 124 || $rc -eq 137 ]]; then
      echo "pair.sh: FAILED: the $side exited $rc (expected to fail by itself)"
      exit 1
    fi
    if ! grep -qE "$expect_fail" "$work/$side.out"; then
      echo "pair.sh: FAILED: the $side did not report /$expect_fail/"
      exit 1
    fi
  done
  echo "pair.sh: both failed as expected (server $src, client $crc)"
  exit 0
fi
if [[ $src -ne 0 || $crc -ne 0 ]]; then
  echo "pair.sh: FAILED (server $src, client $crc)"
  exit 1
fi
echo "pair.sh: both exited 0"
