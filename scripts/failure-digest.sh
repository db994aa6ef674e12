#!/usr/bin/env bash
# failure-digest.sh BUILD_DIR [MAX_LINES]: after a failed ctest run, print why each test failed in
# a few lines: gtest's failure locations and failed test names, sanitizer summaries, rxe-run's
# own messages and the last line of output. ctest's --output-on-failure prints whole outputs
# (a conformance run on rxe is ~10,000 lines); this is what to read first, printed last.
set -euo pipefail
build=${1:?usage: failure-digest.sh BUILD_DIR [MAX_LINES]}
max=${2:-40}
log=$build/Testing/Temporary/LastTest.log
[[ -f $log ]] || exit 0

awk -v max="$max" -v file="$log" '
  # Sections of LastTest.log: "N/M Test: name", "Output:", the output, "<end of output>",
  # "Test time = ...", then "Test Passed." or "Test Failed." (a timeout too: see its time).
  function flush(status,   i) {
    if (name == "" || status ~ /Passed/) return
    if (!said++) print "=== why the tests failed (from " file ") ==="
    print "--- " name ": " status " after " secs " s"
    for (i = 1; i <= n && shown < max; ++i) { print "  " kept[i]; ++shown }
    if (last != "" && last != kept[n] && shown < max) { print "  last line: " last; ++shown }
  }
  function keep(line) { if (n < 24) kept[++n] = substr(line, 1, 200) }
  /^[0-9]+\/[0-9]+ Test: / {
    name = $0; sub(/^[0-9]+\/[0-9]+ Test: /, "", name); n = 0; last = ""; out = 0; after = 0; next
  }
  /^Output:$/ { out = 1; getline; if ($0 !~ /^-+$/) { last = $0 }; next }
  /^<end of output>$/ { out = 0; next }
  out {
    if ($0 != "") last = $0
    if ($0 ~ /^\[/) after = 0
    if (after > 0) { keep($0); --after; next }
    if ($0 ~ /: Failure$/) { keep($0); after = 3; next }
    # gtest names a failed test twice: when it ends (with its time) and in the summary.
    if (($0 ~ /^\[  FAILED  \] / && $0 ~ / ms\)$/) || $0 ~ /^SUMMARY: / ||
        $0 ~ /ERROR: [A-Za-z]+Sanitizer/ || $0 ~ /^rxe-run: / || $0 ~ /runtime error: /)
      keep($0)
    next
  }
  /^Test time = / { secs = $4; next }
  /^Test (Passed|Failed)|^\*\*\*/ { flush($0); name = "" }
' "$log"
