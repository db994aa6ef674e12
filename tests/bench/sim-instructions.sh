#!/usr/bin/env bash
# Instructions per 64-byte RC SEND on the simulator, counted by callgrind: BM_SimSend/qps:64
# without and with a fault plan (BM_SimSendUnderFaultPlan). Only the timed iterations are
# counted (--toggle-collect on one_batch, tests/bench/sim_send_bench.cpp): everything one batch
# of 16 SENDs does, post_send, the polls that run the simulated world, the benchmark's polling
# loop and post_recv, divided by 16 per batch; the setup of the QPs is not counted. Instruction
# counts repeat from run to run where wall time does not (docs/PERFORMANCE.md).
#
#   tests/bench/sim-instructions.sh [--max N] [--max-ratio R] VERBSIM_BENCH
#
#   --max N        exit 1 if a WR takes more than N instructions without a fault plan
#   --max-ratio R  exit 1 if the fault plan makes a WR more than R times as costly
#
# Prints "plain N", "faulty N" and "ratio R". ctest's sim_instructions runs it as a regression
# guard and tests/bench/report.sh takes its figures from it. Exits 77 (skipped) without
# valgrind. Counts depend on the compiler and its flags: use an optimised build without
# sanitizers. Needs python3. About 20 s.
set -euo pipefail

max=
max_ratio=
usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0" >&2; exit "${1:-2}"; }
while (($# > 0)); do
  case $1 in
    --max) [[ $# -ge 2 ]] || usage; max=$2; shift 2 ;;
    --max-ratio) [[ $# -ge 2 ]] || usage; max_ratio=$2; shift 2 ;;
    -h|--help) usage 0 ;;
    -*) echo "sim-instructions.sh: unknown option '$1'" >&2; usage ;;
    *) break ;;
  esac
done
(($# == 1)) || usage
bench=$1
if [[ ! -x $bench ]]; then
  echo "sim-instructions.sh: no executable $bench" >&2
  exit 2
fi
if ! command -v valgrind >/dev/null; then
  echo "sim-instructions.sh: valgrind not found (Debian: apt-get install valgrind)" >&2
  exit 77
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for run in plain:BM_SimSend faulty:BM_SimSendUnderFaultPlan; do
  valgrind --tool=callgrind --callgrind-out-file="$tmp/${run%%:*}.cg" \
    --toggle-collect='*one_batch*' "$bench" --benchmark_filter="^${run#*:}/qps:64\$" \
    --benchmark_min_time=0.1 >/dev/null 2>&1
done

python3 - "$tmp/plain.cg" "$tmp/faulty.cg" "$max" "$max_ratio" <<'PY'
import re
import sys

def instructions_per_wr(path):
    """Instructions collected (inside one_batch) per WR, 16 per call of one_batch, from
    callgrind's output file: its totals line and the calls= lines of the calls to one_batch."""
    names, calls, total, callee = {}, 0, None, None
    with open(path) as f:
        for line in f:
            m = re.match(r"(c?)fn=\((\d+)\)(?: (.*))?", line)
            if m:
                if m.group(3):
                    names[m.group(2)] = m.group(3)
                callee = names.get(m.group(2), "") if m.group(1) else None
            elif line.startswith("calls=") and callee is not None and "one_batch" in callee:
                calls += int(line.split("=")[1].split()[0])
            elif line.startswith(("summary:", "totals:")):
                total = int(line.split()[1])
    if not calls or total is None:
        sys.exit(f"sim-instructions.sh: no call of one_batch in {path}")
    return total / (16 * calls)

plain = instructions_per_wr(sys.argv[1])
faulty = instructions_per_wr(sys.argv[2])
ratio = faulty / plain
print(f"plain {plain:.0f}")
print(f"faulty {faulty:.0f}")
print(f"ratio {ratio:.3f}")
failed = False
if sys.argv[3] and plain > float(sys.argv[3]):
    print(f"sim-instructions.sh: {plain:.0f} instructions per WR, more than {sys.argv[3]}",
          file=sys.stderr)
    failed = True
if sys.argv[4] and ratio > float(sys.argv[4]):
    print(f"sim-instructions.sh: the fault plan costs {ratio:.3f}x, more than {sys.argv[4]}x",
          file=sys.stderr)
    failed = True
sys.exit(1 if failed else 0)
PY
