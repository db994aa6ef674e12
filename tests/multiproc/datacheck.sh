#!/usr/bin/env bash
# Runs datacheck (every opcode, every byte checked) in one process and in two on one fabric,
# under each fault kind on requests, on responses and on ACKs, and a link that goes down for a
# while, on one built-in profile; then the same workload with a planted error (REM_ACCESS_ERR,
# the rest flushed). Passes when every run passes. One line per run.
#
#   tests/multiproc/datacheck.sh --dropin DIR --profile strict|rxe|mlx5 [--ops N] -- DATACHECK
set -uo pipefail

dropin=""
profile=strict
ops=300
while [[ $# -gt 0 ]]; do
  case "$1" in
    --dropin) dropin=$2; shift 2 ;;
    --profile) profile=$2; shift 2 ;;
    --ops) ops=$2; shift 2 ;;
    --) shift; break ;;
    *) echo "datacheck.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
[[ $# -ge 1 ]] || { echo "usage: datacheck.sh --dropin DIR --profile P -- DATACHECK" >&2; exit 2; }
datacheck=$1
export LD_LIBRARY_PATH=$dropin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export VERBSIM_PROFILE=$profile

plans=("")
for kinds in requests responses acks; do
  plans+=("drop p=0.05 packets=$kinds"
          "duplicate p=0.05 packets=$kinds"
          "reorder p=0.05 by=5us packets=$kinds"
          "delay p=0.1 by=20us packets=$kinds")
done
# Down for 20 ms of virtual time, shorter than the retries last (timeout 14: 67 ms, 7 times).
plans+=("link_down dev=sim0 at=200us for=20ms")

failed=0
runs=0
run() {
  local what=$1
  shift
  local out
  runs=$((runs + 1))
  if out=$("$@" 2>&1) && grep -q '^PASS' <<<"$out" && ! grep -q '^FAIL' <<<"$out"; then
    printf 'ok   %s\n' "$what"
  else
    failed=$((failed + 1))
    printf 'FAIL %s\n%s\n' "$what" "$(sed 's/^/     /' <<<"$out")"
  fi
}

seed=1
for plan in "${plans[@]}"; do
  for procs in 1 2; do
    seed=$((seed + 1))
    run "$profile, $procs process(es), seed $seed, faults '${plan:-none}'" \
      env VERBSIM_SEED=$seed VERBSIM_FAULTS="$plan" "$datacheck" --procs $procs --ops "$ops" --quiet
  done
done
# The shape of the bug two processes had: a READ whose response was lost completed when the
# next READ's response came, its buffer never written.
for procs in 1 2; do
  run "$profile, $procs process(es), split READs, faults 'drop p=0.05 packets=responses'" \
    env VERBSIM_SEED=7 VERBSIM_FAULTS="drop p=0.05 packets=responses" "$datacheck" \
      --procs $procs --ops 200 --mix split-read --quiet
done
# An error in the middle: REM_ACCESS_ERR, then every later WR and receive flushed.
for procs in 1 2; do
  run "$profile, $procs process(es), REM_ACCESS_ERR at operation 120, faults 'drop p=0.02'" \
    env VERBSIM_SEED=11 VERBSIM_FAULTS="drop p=0.02" "$datacheck" --procs $procs --ops "$ops" \
      --error-at 120 --quiet
done
# A copy of a READ that reaches the responder after an error took it to ERR, while the READ's
# response is still on its way: the response keeps its data (two processes read zeros before).
for procs in 1 2; do
  run "$profile, $procs process(es), a READ's copy after the error, faults 'duplicate psn=22 by=1us'" \
    env VERBSIM_SEED=384 VERBSIM_FAULTS="duplicate psn=22 by=1us" "$datacheck" --procs $procs \
      --error-at 24 --quiet
done
echo "datacheck.sh: $((runs - failed)) of $runs runs passed ($profile)"
[[ $failed -eq 0 ]]
