#!/usr/bin/env bash
# Instructions the ibverbs backend's C++ layer adds per post and per poll over raw libibverbs
# calls: runs verbsim-ibv-overhead under callgrind and prints, per measured call, the inclusive
# instructions of the raw function and of the layer function over their call counts, and the
# difference, against the target.
#
#   tests/bench/ibv-overhead.sh [--dropin DIR | --rxe] [--max N] [--limit CALL=N]... [--keep FILE]
#                               BINARY [-- ARGS]
#
#   (no mode)     on this host's libibverbs and device
#   --dropin DIR  on the simulator-backed libibverbs.so.1 in DIR (LD_LIBRARY_PATH; rxe profile)
#   --rxe         on real Soft-RoCE in the rxe VM (tests/rxe/rxe-run): QEMU shares the host's root
#                 read-only over virtio-9p and the guest runs the host's valgrind in a chroot of
#                 it (as tests/dropin/pyverbs-rxe.sh runs python). Needs the machine to itself.
#   --max N       target in instructions per call (default 20); exit 1 when a difference exceeds it
#   --limit CALL=N  another limit for one call (post_send, post_recv, poll_one, poll_empty), e.g.
#                 to guard against regressions where the target is not met yet
#   --keep FILE   also write callgrind_annotate's output (and the program's) to FILE
#   ARGS          for the binary, e.g. -n 500 (default 2000 iterations per loop)
#
# Exit status: 0 within the target, 1 above it, 2 usage, 77 valgrind or the VM unavailable,
# otherwise the run's (rxe-run's codes with --rxe).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)

mode=host
dropin=
max=20
limits=
keep=
while (($#)); do
	case $1 in
	--dropin) mode=dropin; dropin=$(cd "${2:?--dropin needs a directory}" && pwd); shift 2 ;;
	--rxe) mode=rxe; shift ;;
	--max) max=${2:?--max needs a number}; shift 2 ;;
	--limit)
		[[ ${2:-} =~ ^(post_send|post_recv|poll_one|poll_empty)=[0-9]+$ ]] ||
			{ echo "ibv-overhead.sh: --limit wants CALL=N, CALL one of post_send post_recv poll_one poll_empty" >&2; exit 2; }
		limits+=" $2"; shift 2 ;;
	--keep) keep=${2:?--keep needs a file}; shift 2 ;;
	-h | --help) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; exit 0 ;;
	-*) echo "ibv-overhead.sh: unknown option $1" >&2; exit 2 ;;
	*) break ;;
	esac
done
binary=${1:?usage: ibv-overhead.sh [--dropin DIR | --rxe] [--max N] BINARY [-- ARGS]}
binary=$(cd "$(dirname "$binary")" && pwd)/$(basename "$binary")
shift
[[ ${1:-} == -- ]] && shift
[[ $max =~ ^[0-9]+$ ]] || { echo "ibv-overhead.sh: --max wants a number" >&2; exit 2; }
command -v valgrind >/dev/null && command -v callgrind_annotate >/dev/null ||
	{ echo "ibv-overhead.sh: SKIPPED: valgrind is not installed (scripts/setup.sh)" >&2; exit 77; }

# Only measured_pass() is collected: the warm-up before it takes the first-call costs.
valgrind_args=(valgrind --tool=callgrind --collect-atstart=no '--toggle-collect=*measured_pass*')

work=$(mktemp -d "${TMPDIR:-/tmp}/verbsim-ibv-overhead.XXXXXX")
trap 'rm -rf "$work"' EXIT
out=$work/out.txt

case $mode in
host | dropin)
	env=(LD_BIND_NOW=1)
	# Without its progress thread the drop-in runs on the program's thread alone, so the counts
	# are the same on every run: the thread takes the world's lock on a wall-clock tick, and
	# how often the measured calls then wait for it depends on the machine (a CI run on
	# another machine measured post_send 5 instructions dearer with it on). The bench's blocking
	# ibv_get_cq_event drives the world itself.
	[[ $mode == dropin ]] && env+=("LD_LIBRARY_PATH=$dropin" VERBSIM_PROFILE=rxe VERBSIM_DROPIN_PROGRESS=0)
	env "${env[@]}" "${valgrind_args[@]}" --callgrind-out-file="$work/cg.out" "$binary" "$@" \
		>"$work/program.txt" 2>"$work/valgrind.txt" ||
		{ rc=$?; cat "$work/valgrind.txt" >&2; exit "$rc"; }
	{
		cat "$work/program.txt"
		callgrind_annotate --inclusive=yes --threshold=100 "$work/cg.out"
	} >"$out"
	;;
rxe)
	case $binary in
	/tmp/* | /run/* | /root/*)
		echo "ibv-overhead.sh: the guest mounts a tmpfs over $binary's directory: copy it elsewhere" >&2
		exit 2 ;;
	esac
	# The guest mounts the host's root over 9p and runs the host's valgrind in a chroot.
	source "$root/tests/rxe/hostroot.sh"
	hostroot_prepare "$work"
	"$root/tests/rxe/rxe-run" --timeout "${VERBSIM_RXE_TIMEOUT:-900}" \
		--script "$here/ibv-overhead-guest.sh" "${hostroot_withs[@]}" \
		-- "${hostroot_modules[@]}" -- "${valgrind_args[@]}" --callgrind-out-file=/tmp/ibv-overhead.cg \
		"$binary" "$@" >"$out"
	;;
esac
[[ -n $keep ]] && cp "$out" "$keep"

# "calls NAME COUNT" lines from the program, then callgrind_annotate's inclusive counts.
awk -v max="$max" -v limits="$limits" '
	$1 == "kernel" { kernel = $0; next }
	$1 == "calls" && NF == 3 { calls[$2] = $3; next }
	/^verbsim-ibv-overhead:/ { header = $0; next }
	$1 ~ /^[0-9,]+$/ && $2 ~ /^\(/ {
		for (fn in calls) {
			if (index($0, "::" fn "(") || index($0, ":" fn "(")) {
				n = $1; gsub(",", "", n); incl[fn] = n
			}
		}
	}
	END {
		if (header == "") { print "ibv-overhead.sh: the program printed nothing" > "/dev/stderr"; exit 3 }
		print header; if (kernel != "") print kernel
		n = split(limits, pairs, " ")
		for (i = 1; i <= n; ++i) { split(pairs[i], kv, "="); limit[kv[1]] = kv[2] }
		printf "%-12s %12s %12s %12s   %s\n", "call", "raw", "layer", "difference", "(instructions per call, target <= " max ")"
		split("post_send post_recv poll_one poll_empty", what, " ")
		over = 0
		for (i = 1; i <= 4; ++i) {
			r = "raw_" what[i]; l = "layer_" what[i]
			if (!(r in incl) || !(l in incl) || calls[r] == 0 || calls[l] == 0) {
				printf "ibv-overhead.sh: no callgrind count for %s or %s\n", r, l > "/dev/stderr"; exit 3
			}
			rc = incl[r] / calls[r]; lc = incl[l] / calls[l]; d = lc - rc
			m = what[i] in limit ? limit[what[i]] : max
			printf "%-12s %12.1f %12.1f %12.1f   %s\n", what[i], rc, lc, d, (d <= m ? "ok" : "OVER") (what[i] in limit ? " (limit " m ")" : "")
			if (d > m) over = 1
		}
		exit over
	}' "$out"
