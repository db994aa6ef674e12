#!/bin/sh
# /init of the rxe test VM built by tests/rxe/rxe-run. Runs as PID 1 under dash.
#
# Contract with the host side (rxe-run):
#   /verbsim/modules   kernel modules to load, in order, one per line: "<path.ko> [params...]"
#   /verbsim/modules.extra  (optional, per run) more modules to load after those, one path a line
#   /verbsim/run.env   sourced: sets rxe_* settings, exports the payload's environment and sets the
#                      payload command line with "set -- ..."
#   ttyS0 (console)    diagnostics; if the kernel warned, "VERBSIM-RXE-KERNEL-WARNED", each
#                      warning as "VERBSIM-RXE-KERNEL: <line>" and the messages around them;
#                      and last the line "VERBSIM-RXE-EXIT: <status>"
#   ttyS1 / ttyS2      the payload's stdout / stderr, byte for byte
# A setup failure prints "VERBSIM-RXE-SETUP-FAILED: <reason>" instead of the exit line.

PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
HOME=/root
export PATH HOME

# The initramfs has no /dev/console node, so the kernel started us without stdin/stdout/stderr.
mount -t devtmpfs devtmpfs /dev
exec </dev/null >/dev/console 2>&1
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs -o mode=1777 tmpfs /dev/shm
chmod 1777 /tmp

# By default the tty layer turns "\n" into "\r\n": pass the payload's output through unchanged.
for tty in /dev/console /dev/ttyS1 /dev/ttyS2; do
	stty -F "$tty" -opost 2>/dev/null
done

rxe_ready_timeout=60
rxe_cwd=/root
# shellcheck disable=SC1091 # written by the host for each run
if ! . /verbsim/run.env; then
	echo "VERBSIM-RXE-SETUP-FAILED: cannot read /verbsim/run.env"
	poweroff -f
fi

# Milestones on the console (the host shows it with -v or on failure).
say() {
	read -r up _ </proc/uptime
	echo "verbsim-rxe: [${up}s] $*"
}

power_off() {
	# stty sets the terminal with TCSADRAIN: it returns only once everything written has left the
	# UART, so nothing is lost when the machine stops right after.
	for tty in /dev/ttyS1 /dev/ttyS2 /dev/console; do
		stty -F "$tty" -opost 2>/dev/null
	done
	poweroff -f
	sleep 60
}

fail() {
	echo "VERBSIM-RXE-SETUP-FAILED: $*"
	echo "--- last kernel messages ---"
	dmesg | tail -n 25
	power_off
}

say "booted, loading modules"
while read -r ko params; do
	[ -n "$ko" ] || continue
	# shellcheck disable=SC2086 # params are separate words on purpose
	insmod "$ko" $params || fail "insmod $ko $params failed"
done </verbsim/modules
# Modules the run asked for (rxe-run --modules), after rxe's.
if [ -f /verbsim/modules.extra ]; then
	while read -r ko; do
		insmod "$ko" || fail "insmod $ko failed"
	done </verbsim/modules.extra
fi

say "creating rxe0"
ip link set lo up || fail "ip link set lo up"
ip link add rxenet0 type dummy || fail "ip link add rxenet0 type dummy"
ip addr add 10.0.0.1/24 dev rxenet0 || fail "ip addr add 10.0.0.1/24 dev rxenet0"
ip link set rxenet0 up || fail "ip link set rxenet0 up"
rdma link add rxe0 type rxe netdev rxenet0 || fail "rdma link add rxe0 type rxe netdev rxenet0"

# RoCE v2 GID of 10.0.0.1 (sysfs prints the long form).
gid_file=/sys/class/infiniband/rxe0/ports/1/gids/1
tries=$((rxe_ready_timeout * 10))
while :; do
	gid=$(cat "$gid_file" 2>/dev/null)
	case "$gid" in
	::ffff:10.0.0.1 | 0000:0000:0000:0000:0000:ffff:0a00:0001) break ;;
	esac
	tries=$((tries - 1))
	if [ "$tries" -le 0 ]; then
		fail "rxe0 not ready after ${rxe_ready_timeout}s: $gid_file reads '${gid:-<missing>}'," \
			"expected ::ffff:10.0.0.1"
	fi
	sleep 0.1
done
say "rxe0 ready (gid 1 = $gid), starting payload: $*"

mkdir -p "$rxe_cwd" && cd "$rxe_cwd" || cd /root || cd /
"$@" </dev/null >/dev/ttyS1 2>/dev/ttyS2
status=$?
say "payload exited with status $status"
# A kernel warning (the console shows only the urgent messages, the ring buffer has them all):
# rxe-run fails the run on it, unless it is one rxe-run knows.
trouble='(WARNING:|BUG:|refcount_t:|general protection fault)'
kmsg=$(dmesg)
if printf '%s\n' "$kmsg" | grep -qE "$trouble"; then
	echo "VERBSIM-RXE-KERNEL-WARNED"
	printf '%s\n' "$kmsg" | grep -E "$trouble" | sed 's/^/VERBSIM-RXE-KERNEL: /'
	echo "--- kernel messages from the first warning on ---"
	printf '%s\n' "$kmsg" | sed -n -E "/$trouble/,\$p" | head -n 80
fi
echo "VERBSIM-RXE-EXIT: $status"
power_off
