#!/usr/bin/env bash
# verbsim-swarm merge: four shards' JUnit files make the summary the unsharded campaign makes
# (the same groups, counts and reproducers), exit 1 for failures; a shard missing, a shard given
# twice or a file of another campaign make it exit 2 and say so. ctest's swarm_merge runs it.
#
#   tests/swarm/merge.sh VERBSIM_SWARM
set -euo pipefail
swarm=${1:?usage: merge.sh VERBSIM_SWARM}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "merge.sh: $*" >&2; exit 1; }

# Seeds 1 to 40: multiples of 7 fail one way (5 seeds), other multiples of 5 another (7 seeds).
script='s=$VERBSIM_SEED; if [ $((s % 7)) -eq 0 ]; then echo "boom at $s"; exit 3; fi; test $((s % 5)) -ne 0'
test_cmd=(sh -c "$script")
for k in 1 2 3 4; do
  rc=0
  "$swarm" --seeds 40 --shard "$k/4" --jobs 2 --quiet --progress 0 --junit "$work/shard-$k.xml" \
    -- "${test_cmd[@]}" >"$work/shard-$k.txt" 2>&1 || rc=$?
  ((rc == 1)) || fail "shard $k/4 exited $rc, not 1: $(cat "$work/shard-$k.txt")"
done
rc=0
"$swarm" merge --junit "$work/merged.xml" "$work"/shard-{1,2,3,4}.xml >"$work/merged.txt" || rc=$?
((rc == 1)) || fail "merge exited $rc, not 1: $(cat "$work/merged.txt")"
expect() {
  grep -qxF -- "$2" "$work/$1" || { cat "$work/$1" >&2; fail "$1 lacks the line '$2'"; }
}
expect merged.txt "swarm: 40 seeds, 12 failed, 2 groups (merged from 4 files; a campaign of 4 shards, seeds 1 to 40)"
expect merged.txt "=== 7 of 12 failed seeds: exit status 1"
expect merged.txt "    seeds 5, 10, 15, 20, 25, 30, 40"
expect merged.txt "=== 5 of 12 failed seeds: exit status 3: boom at #"
expect merged.txt "    seeds 7, 14, 21, 28, 35"
expect merged.txt "VERBSIM_SEED=5 sh -c '$script'"
expect merged.txt "boom at 7"
grep -q '^swarm merge:' "$work/merged.txt" && fail "problems reported: $(grep '^swarm merge:' "$work/merged.txt")"
grep -q 'tests="40" failures="12"' "$work/merged.xml" || fail "merged.xml does not count 40 tests, 12 failures"

# The same campaign unsharded: the same summary, the closing line aside.
rc=0
"$swarm" --seeds 40 --jobs 2 --quiet --progress 0 -- "${test_cmd[@]}" >"$work/whole.txt" 2>&1 || rc=$?
((rc == 1)) || fail "the unsharded campaign exited $rc"
diff <(sed -n '/^===/,/^swarm:/p' "$work/whole.txt" | sed '$d') \
     <(sed -n '/^===/,/^swarm:/p' "$work/merged.txt" | sed '$d') >"$work/diff" ||
  fail "merged summary differs from the unsharded one: $(cat "$work/diff")"
expect whole.txt "swarm: 40 seeds, 12 failed, 2 groups"
echo "merge.sh: 4 shards merge into the unsharded campaign's summary (40 seeds, 12 failed, 2 groups)"

# problem FILES... -- LINES...: merge exits 2 and prints each line.
problem() {
  local files=() rc=0
  while [[ $1 != -- ]]; do files+=("$1"); shift; done
  shift
  "$swarm" merge "${files[@]}" >"$work/problem.txt" 2>&1 || rc=$?
  ((rc == 2)) || fail "merge of ${files[*]##*/} exited $rc, not 2"
  for line; do expect problem.txt "swarm merge: $line"; done
}
problem "$work"/shard-{1,2,4}.xml -- "shard 3/4 missing" "seeds 21 to 30 missing"
expect problem.txt "swarm: 30 seeds, 8 failed, 2 groups (merged from 3 files; a campaign of 4 shards, seeds 1 to 40)"
problem "$work"/shard-{1,2,3,4,4}.xml -- "shard 4/4 given twice" "seed 31 ran more than once" "seed 40 ran more than once"
"$swarm" --seeds 40 --shard 4/4 --quiet --progress 0 --junit "$work/other.xml" -- true >/dev/null
problem "$work"/shard-{1,2,3}.xml "$work/other.xml" -- \
  "not one campaign: shard 4/4 of seeds 1 to 40 runs true; shard 1/4 of seeds 1 to 40 runs sh -c '$script'"
echo "merge.sh: a missing shard, a repeated shard and another campaign's file are reported (exit 2)"
