#!/usr/bin/env bash
# Plots what one SEND work request costs on the simulator against the number of connected QP
# pairs: runs BM_SimSend of verbsim-bench, turns its wr_per_s counter (WRs per CPU second)
# into ns of CPU per WR, and draws docs/img/cost_per_wr.png.
#
#   tests/bench/plot_scaling.sh [VERBSIM_BENCH] [OUTPUT.png]
#
# VERBSIM_BENCH defaults to build-release/tests/bench/verbsim-bench (build it Release);
# OUTPUT defaults to docs/img/cost_per_wr.png. Each QP count runs 5 times for at least 1 s
# and the median is plotted (the machine may be shared); $BENCH_ARGS replaces those flags
# (default: --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
# --benchmark_min_time=1). The table plotted is printed. A run takes about a minute.
#
# Needs gnuplot and awk. It installs nothing; on Debian: apt-get install gnuplot-nox.
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
bench=${1:-$root/build-release/tests/bench/verbsim-bench}
out=${2:-$root/docs/img/cost_per_wr.png}

if ! command -v gnuplot >/dev/null; then
  echo "plot_scaling.sh: gnuplot not found (Debian: apt-get install gnuplot-nox)" >&2
  exit 1
fi
if ! command -v awk >/dev/null; then
  echo "plot_scaling.sh: awk not found (Debian: apt-get install mawk)" >&2
  exit 1
fi
if [[ ! -x $bench ]]; then
  echo "plot_scaling.sh: no $bench; build verbsim-bench first, e.g." >&2
  echo "  cmake -B build-release -DCMAKE_BUILD_TYPE=Release && cmake --build build-release --target verbsim-bench" >&2
  exit 1
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
json=$tmp/run.json
table=$tmp/cost_per_wr.tsv
mkdir -p "$(dirname "$out")"

args=${BENCH_ARGS:---benchmark_repetitions=5 --benchmark_report_aggregates_only=true --benchmark_min_time=1}
# shellcheck disable=SC2086  # a list of flags
"$bench" --benchmark_filter='^BM_SimSend/' --benchmark_format=json $args >"$json"

# Google Benchmark's JSON has one key per line: take qps from each run's name and its
# wr_per_s; with repetitions only the median (BM_SimSend/qps:N_median) is taken.
awk '
  /"name": "BM_SimSend\/qps:[0-9]+(_median)?"/ { match($0, /qps:[0-9]+/); qps = substr($0, RSTART + 4, RLENGTH - 4); next }
  /"name":/ { qps = "" }
  /"wr_per_s":/ && qps != "" {
    v = $2; sub(/,$/, "", v)
    printf "%s\t%.1f\n", qps, 1e9 / v
    qps = ""
  }
' "$json" >"$table"

if [[ ! -s $table ]]; then
  echo "plot_scaling.sh: no BM_SimSend results in $json" >&2
  exit 1
fi
echo "QP pairs	ns per WR"
cat "$table"

gnuplot <<EOF
set terminal pngcairo size 800,480 font "sans,11"
set output "$out"
set title "BM\\\\_SimSend: CPU time per 64-byte RC SEND (post, wire, both completions)"
set xlabel "connected QP pairs (round robin, 16 WRs per post)"
set ylabel "ns per WR"
set logscale x 10
set format x "10^{%L}"
set xrange [0.5:*]
set yrange [0:*]
set offsets 0, 0, graph 0.12, 0
set grid
set key off
plot "$table" using 1:2 with linespoints lw 2 pt 7, \
     "" using 1:2:(sprintf("%.0f", \$2)) with labels offset 0,1
EOF
echo "wrote $out"
