#!/usr/bin/env bash
# How fast two processes on one simulated fabric go, against the same traffic in one process,
# in alternating rounds of one invocation (docs/PERFORMANCE.md, "Two processes on one fabric").
# Each round runs, through the drop-ins:
#   1. ib_send_bw -s 64 -n N as server and client, two processes on one fabric (pair.sh);
#   2. the same traffic in one process: tests/dropin/send_bw.c (dropin_send_bw) -n N;
#   3. ib_write_lat -s 2 -n L as server and client, two processes on one fabric.
# It prints each round's message rates (perftest's MsgRate, the client's) and their ratio, the
# write_lat t_typical, and the medians. A measurement, not a test: nothing is asserted.
# Before and after each two-process ib_send_bw it prints how long a cache line takes from CPU 0
# to CPU 1 and back (multiproc_line_rtt, ns; the median is of the befores): the two processes exchange everything through shared
# memory, and on a virtual machine that figure changes with where the host runs its CPUs
# (about 55 or about 320 ns on the machine of docs/PERFORMANCE.md, from one minute to the next).
#
#   tests/multiproc/speed.sh [--build DIR] [--rounds R] [-n N] [--lat-n L] [--wait-idle S]
#   defaults: build-rel, 5 rounds, N = 1000000, L = 20000
#
# Use N >= 1000000: a shorter run gives a lower rate (0.58 Mpps at 200000 where 1000000 gives
# 1.0). Two spinning processes need a core each: the machine must be otherwise idle. Each run
# is followed, in brackets, by the CPU seconds that other processes used meanwhile (the busy
# time of /proc/stat less the run's own user and system time); --wait-idle S waits up to S
# seconds before each run for 2 s in which the machine was at least 95 % idle.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
build=build-rel
rounds=5
iters=1000000
lat_iters=20000
wait_idle=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) build=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    -n) iters=$2; shift 2 ;;
    --lat-n) lat_iters=$2; shift 2 ;;
    --wait-idle) wait_idle=$2; shift 2 ;;
    *) echo "speed.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
dropin=$build/dropin
one_prog=$build/tests/dropin/dropin_send_bw
line_rtt=$build/tests/multiproc/multiproc_line_rtt
for f in "$dropin/libibverbs.so.1" "$one_prog" "$line_rtt" /usr/bin/time; do
  [[ -e $f ]] || { echo "speed.sh: $f is missing (build $build first)" >&2; exit 2; }
done
for tool in ib_send_bw ib_write_lat; do
  command -v $tool > /dev/null || { echo "speed.sh: $tool is not installed (perftest)" >&2; exit 2; }
done
unset VERBSIM_FABRIC VERBSIM_FAULTS
hz=$(getconf CLK_TCK)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

busy() { awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 + $9 }' /proc/stat; }  # jiffies
idle_for_2s() {
  local b0 b1
  b0=$(busy)
  sleep 2
  b1=$(busy)
  (( (b1 - b0) * 100 <= 5 * 2 * hz * $(nproc) ))
}
settle() { (( wait_idle > 0 )) && wait_for_idle; return 0; }
wait_for_idle() {
  local end=$((SECONDS + wait_idle))
  while (( SECONDS < end )); do idle_for_2s && return; done
}

# Runs a command; `out` gets its output, `others` the CPU seconds others used meanwhile.
# (Callers wait for an idle machine first, if asked: settle.)
timed() {
  local b0 b1
  b0=$(busy)
  out=$(/usr/bin/time -f '%U %S' -o "$work/time" "$@")
  b1=$(busy)
  others=$(awk -v d=$((b1 - b0)) -v hz="$hz" '{ v = d / hz - $1 - $2; printf "%.2f", v < 0 ? 0 : v }' \
           "$work/time")
}

# The client's result line of a pair.sh run: the line after "--- client" that starts with SIZE.
client_result() {  # SIZE ITERS FIELD
  awk -v size="$1" -v iters="$2" -v field="$3" \
    '/^--- client/ { c = 1 } c && $1 == size && $2 == iters { print $field; exit }' <<< "$out"
}

median() {  # numbers, one a line
  sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print "-"; else if (NR % 2) print v[(NR + 1) / 2];
                                      else printf "%.6g\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

pair=("$here/pair.sh" --dropin "$dropin" --timeout 300 --)

echo "speed.sh: $rounds rounds, ib_send_bw -s 64 -n $iters, ib_write_lat -s 2 -n $lat_iters;" \
     "$(nproc) cores; load average $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-6s %11s %24s %24s %8s %24s\n' round "line [ns]" "two processes [Mpps]" \
       "one process [Mpps]" ratio "write_lat t_typ [us]"
two_all=()
one_all=()
ratio_all=()
lat_all=()
line_all=()
for r in $(seq 1 "$rounds"); do
  settle
  line=$("$line_rtt" 2> /dev/null || echo -)
  timed "${pair[@]}" ib_send_bw -d sim0 -x 1 -s 64 -n "$iters" -p @PORT@ \
                  -- ib_send_bw -d sim0 -x 1 -s 64 -n "$iters" -p @PORT@ @HOST@
  two=$(client_result 64 "$iters" 5)
  two_cell="$two (${others}s)"
  line="$line/$("$line_rtt" 2> /dev/null || echo -)"
  settle
  timed env LD_LIBRARY_PATH="$dropin" "$one_prog" -s 64 -n "$iters"
  one=$(awk -v n="$iters" '$1 == 64 && $2 == n { print $4 }' <<< "$out")
  one_cell="$one (${others}s)"
  settle
  timed "${pair[@]}" ib_write_lat -d sim0 -x 1 -s 2 -n "$lat_iters" -p @PORT@ \
                  -- ib_write_lat -d sim0 -x 1 -s 2 -n "$lat_iters" -p @PORT@ @HOST@
  lat=$(client_result 2 "$lat_iters" 5)
  lat_cell="$lat (${others}s)"
  if [[ -z $two || -z $one || -z $lat ]]; then
    echo "speed.sh: round $r: a run failed (two '$two', one '$one', lat '$lat')" >&2
    exit 1
  fi
  ratio=$(awk -v a="$two" -v b="$one" 'BEGIN { printf "%.3f", a / b }')
  printf '%-6s %11s %24s %24s %8s %24s\n' "$r" "$line" "$two_cell" "$one_cell" "$ratio" "$lat_cell"
  line_all+=("${line%/*}")
  two_all+=("$two")
  one_all+=("$one")
  ratio_all+=("$ratio")
  lat_all+=("$lat")
done
printf '%-6s %11s %24s %24s %8s %24s\n' median "$(printf '%s\n' "${line_all[@]}" | median)" \
  "$(printf '%s\n' "${two_all[@]}" | median)" "$(printf '%s\n' "${one_all[@]}" | median)" \
  "$(printf '%s\n' "${ratio_all[@]}" | median)" "$(printf '%s\n' "${lat_all[@]}" | median)"
echo "speed.sh: (in brackets: CPU seconds other processes used during the run)"
