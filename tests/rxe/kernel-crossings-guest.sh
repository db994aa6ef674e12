#!/bin/sh
# Guest part of kernel-crossings.sh: kernel-crossings.sh appends one "kc_run PROGRAM ARGS..."
# line per program and runs the result with rxe-run --script.
#
# kc_run runs the program under strace with the verb log on stderr and prints its command,
# strace's lines and the log. stderr is unbuffered, so each record is its own write(2, "t=...")
# in the trace, right after the syscalls of the call it records (a record is written when its
# call returns): the trace itself says which verb made which syscall.
status=0
kc_run() {
	echo "== kernel-crossings run: $*"
	# -yy names each fd (the uverbs device, sysfs files, netlink sockets); -s keeps the verb.
	# LeakSanitizer cannot run under ptrace (in a sanitizer build it would fail the program at
	# exit): leak checking off for the traced run only.
	ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0" \
	VERBSIM_VERB_LOG=stderr strace -f -yy -qq -s 160 -o /tmp/strace.txt "$@" \
		>/tmp/stdout.txt 2>/tmp/stderr.txt
	rc=$?
	echo "== exit $rc"
	[ "$rc" -eq 0 ] || status=$rc
	echo "== strace"
	cat /tmp/strace.txt
	echo "== end"
	if [ "$rc" -ne 0 ]; then
		echo "kernel-crossings: $1 exited with status $rc; its output:" >&2
		cat /tmp/stdout.txt /tmp/stderr.txt >&2
	fi
}
