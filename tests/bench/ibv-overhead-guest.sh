#!/bin/sh
# Guest side of ibv-overhead.sh --rxe (runs under dash as the rxe VM's payload):
#   ibv-overhead-guest.sh <module.ko>... -- valgrind [args] <binary> [args]
# Mounts the host's root (tests/rxe/guest-hostroot.sh), runs the host's valgrind on the binary
# in a chroot of it, on the guest kernel's rxe0, then prints callgrind_annotate's inclusive
# counts after the program's output.
# shellcheck source=/dev/null
. "$VERBSIM_HOSTROOT_SH"
echo "kernel $(uname -r) (rxe VM)"
chroot /host /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LD_BIND_NOW=1 \
	VERBSIM_DEVICE=rxe0 "$@" 2>/host/tmp/valgrind.txt ||
	{ status=$?; cat /host/tmp/valgrind.txt >&2; exit "$status"; }
chroot /host callgrind_annotate --inclusive=yes --threshold=100 /tmp/ibv-overhead.cg
