#!/bin/sh
# Runs a test program and passes only if it exits 0, printed a line starting with PASS and none
# starting with FAIL. ctest's PASS_REGULAR_EXPRESSION alone ignores the exit status, so a crash
# after an earlier PASS (a loop over seeds, a program that fails while tearing down) would pass.
#   expect-pass.sh <program> [args...]
out=$("$@")
status=$?
printf '%s\n' "$out"
if [ "$status" -ne 0 ]; then
  echo "expect-pass.sh: $1 exited with status $status" >&2
  exit 1
fi
if ! printf '%s\n' "$out" | grep -q '^PASS' || printf '%s\n' "$out" | grep -q '^FAIL'; then
  echo "expect-pass.sh: $1 exited 0 without a PASS line, or with a FAIL line" >&2
  exit 1
fi
