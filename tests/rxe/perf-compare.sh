#!/bin/sh
# Guest payload for rxe-run --script: perftest and verbsim-perf on the one rxe0 device, and the
# simulator and a CPU-bound reference in the same VM (docs/PERFORMANCE.md).
#   tests/rxe/rxe-run --script tests/rxe/perf-compare.sh --with /usr/bin/ib_send_bw \
#     --with /usr/bin/ib_write_lat --with /usr/bin/ib_read_bw --with build/examples/verbsim-perf \
#     --env VERBSIM_PERF=$PWD/build/examples/verbsim-perf \
#     -- pt:send_bw:4096:1000 vp:send_bw:4096:1000 sim:write_lat:2:20000 ref
# Each argument is one run:
#   pt:TEST:SIZE:ITERS   perftest's ib_TEST, server and client over 10.0.0.1 (-d rxe0 -x 1)
#   vp:TEST:SIZE:ITERS   verbsim-perf --backend ibverbs:rxe0
#   sim:TEST:SIZE:ITERS  verbsim-perf --backend sim (the simulator's speed inside the VM)
#   ref                  the CPU-bound reference: sha256 of 64 MiB of zeros (busybox)
# Runs on the host too (sh tests/rxe/perf-compare.sh sim:... ref) for the emulation factor.
# verbsim-perf is copied in at its host path: pass it with --env VERBSIM_PERF=/abs/path.
vp=${VERBSIM_PERF:-verbsim-perf}
port=18515
status=0
# Milliseconds from /proc/uptime (10 ms resolution; busybox date has no %N).
now() { read -r up _ </proc/uptime; echo $((${up%.*} * 1000 + 1${up#*.} * 10 - 1000)); }
ms_since() { echo $(($(now) - $1)); }

perftest() {
	# perftest's latency tests inline small messages by default; -I 0 makes them post from the
	# MR like verbsim-perf. -F: the VM's CPU frequency is not trustworthy.
	extra=
	case $1 in *_lat) extra="-I 0" ;; esac
	# shellcheck disable=SC2086
	"ib_$1" -d rxe0 -x 1 -F -p "$port" -s "$2" -n "$3" $extra >/tmp/server.out 2>&1 &
	server=$!
	hexport=$(printf '%04X' "$port")
	tries=200
	until cat /proc/net/tcp /proc/net/tcp6 2>/dev/null | grep -q ":$hexport [0-9A-F:]* 0A "; do
		tries=$((tries - 1))
		if [ "$tries" -le 0 ] || ! kill -0 "$server" 2>/dev/null; then
			echo "perf-compare: the ib_$1 server never listened" >&2
			cat /tmp/server.out >&2
			return 1
		fi
		sleep 0.1
	done
	t0=$(now)
	# shellcheck disable=SC2086
	"ib_$1" -d rxe0 -x 1 -F -p "$port" -s "$2" -n "$3" $extra 10.0.0.1
	rc=$?
	echo "client wall ms: $(ms_since "$t0")"
	wait "$server" || rc=1
	port=$((port + 1))
	return $rc
}

for run in "$@"; do
	echo "=== $run"
	IFS=: read -r tool test size iters <<EOF
$run
EOF
	t0=$(now)
	case $tool in
	pt) perftest "$test" "$size" "$iters" || status=1 ;;
	vp) "$vp" --backend ibverbs:rxe0 --test "$test" -s "$size" -n "$iters" || status=1 ;;
	sim) "$vp" --backend sim --test "$test" -s "$size" -n "$iters" || status=1 ;;
	ref) dd if=/dev/zero bs=1048576 count=64 2>/dev/null | sha256sum ;;
	*) echo "perf-compare: unknown run '$run'" >&2; status=1 ;;
	esac
	echo "=== $run: $(ms_since "$t0") ms wall"
done
exit $status
