#!/usr/bin/env bash
# verbsim-swarm --shard K/N: the N slices of a seed range are contiguous, differ in size by at
# most one, are disjoint and cover the range exactly, for ranges that divide evenly, that do
# not, and that are smaller than N; each shard's closing line names its slice; a bad K/N is
# refused. ctest's swarm_shards runs it.
#
#   tests/swarm/shards.sh VERBSIM_SWARM
set -euo pipefail
swarm=${1:?usage: shards.sh VERBSIM_SWARM}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "shards.sh: $*" >&2; exit 1; }

# cover FIRST SEEDS N: runs the N shards, each seed appending itself to its shard's file.
cover() {
  local first=$1 seeds=$2 n=$3 k
  rm -f "$work"/ran.*
  for ((k = 1; k <= n; k++)); do
    : >"$work/ran.$k"
    "$swarm" --quiet --progress 0 --jobs 2 --first "$first" --seeds "$seeds" --shard "$k/$n" \
      -- sh -c 'echo "$VERBSIM_SEED" >>"$0"' "$work/ran.$k" >"$work/out" 2>&1 ||
      fail "shard $k/$n of $seeds seeds failed: $(cat "$work/out")"
    local got lo hi
    got=$(wc -l <"$work/ran.$k")
    lo=$((seeds * (k - 1) / n)) hi=$((seeds * k / n))
    ((got == hi - lo)) || fail "shard $k/$n of $seeds seeds ran $got seeds, not $((hi - lo))"
    if ((got > 0)); then
      # Contiguous: the slice's seeds are exactly its first to its last.
      diff <(seq $((first + lo)) $((first + hi - 1))) <(sort -n "$work/ran.$k") >/dev/null ||
        fail "shard $k/$n ran $(sort -n "$work/ran.$k" | tr '\n' ' '), not seeds $((first + lo)) to $((first + hi - 1))"
    fi
    if ((n == 1)); then
      grep -q "^swarm: $got seeds, 0 failed\$" "$work/out" || fail "1/1: $(tail -n 1 "$work/out")"
    elif ((got > 0)); then
      grep -q "^swarm: $got seeds, 0 failed (shard $k/$n: seeds $((first + lo)) to $((first + hi - 1)) of $first to $((first + seeds - 1)))\$" "$work/out" ||
        fail "shard $k/$n: closing line: $(tail -n 1 "$work/out")"
    else
      grep -q "^swarm: 0 seeds, 0 failed (shard $k/$n: no seeds of " "$work/out" ||
        fail "empty shard $k/$n: closing line: $(tail -n 1 "$work/out")"
    fi
  done
  # Disjoint and covering: every seed of the range exactly once over all the shards.
  cat "$work"/ran.* | sort -n >"$work/all"
  local twice
  twice=$(uniq -d "$work/all" | tr '\n' ' ')
  [[ -z $twice ]] || fail "$n shards of $seeds seeds: ran twice: $twice"
  diff <(seq "$first" $((first + seeds - 1))) "$work/all" >"$work/diff" ||
    fail "$n shards of seeds $first to $((first + seeds - 1)) do not cover them: $(cat "$work/diff")"
  echo "shards.sh: $n shards of seeds $first to $((first + seeds - 1)): each seed once"
}

cover 17 203 8  # uneven: 25 or 26 seeds a shard
cover 1 24 8    # even
cover 1 5 8     # fewer seeds than shards: three empty shards
cover 1 10 1    # one shard is the whole range

for bad in 0/8 9/8 3/0 3 3/8x -1/8; do
  rc=0
  "$swarm" --shard "$bad" -- true >"$work/out" 2>&1 || rc=$?
  ((rc == 2)) || fail "--shard $bad: exit status $rc, not 2"
  grep -q -- "--shard is K/N" "$work/out" || fail "--shard $bad: no reason given"
done
echo "shards.sh: bad K/N refused"
