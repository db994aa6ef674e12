#!/bin/sh
# The differential check can fail: with --plant-difference the two-process requester misreports
# one byte_len, and datacheck --differential must fail naming the outcome that differs.
#   differential-planted.sh DATACHECK
out=$("$1" --differential --plant-difference --quiet 2>&1)
status=$?
printf '%s\n' "$out"
if [ "$status" -eq 0 ] || ! printf '%s\n' "$out" | grep -q 'differ at outcome'; then
  echo "differential-planted.sh: FAILED: a planted difference was not reported (exit $status)"
  exit 1
fi
echo "differential-planted.sh: the planted difference was found"
