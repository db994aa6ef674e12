#!/bin/sh
# Guest side of ibv-overhead.sh --rxe (runs under dash as the rxe VM's payload):
#   ibv-overhead-guest.sh <module.ko>... -- valgrind [args] <binary> [args]
# Loads the virtio-9p modules, mounts the host's root (shared read-only by QEMU as "hostroot"),
# runs the host's valgrind on the binary in a chroot of it, on the guest kernel's rxe0, then
# prints callgrind_annotate's inclusive counts after the program's output.
while [ $# -gt 0 ] && [ "$1" != -- ]; do
	insmod "$1" || { echo "ibv-overhead: insmod $1 failed" >&2; exit 125; }
	shift
done
[ "${1:-}" = -- ] && shift
mkdir -p /host
mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=262144,cache=loose hostroot /host ||
	{ echo "ibv-overhead: cannot mount the host's root over 9p" >&2; exit 125; }
for d in tmp run root; do
	mount -t tmpfs -o mode=1777 tmpfs "/host/$d" || exit 125
done
mount -o bind /dev /host/dev || exit 125
mount -t proc proc /host/proc || exit 125
mount -t sysfs sysfs /host/sys || exit 125
cd /
echo "kernel $(uname -r) (rxe VM)"
chroot /host /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LD_BIND_NOW=1 \
	VERBSIM_DEVICE=rxe0 "$@" 2>/host/tmp/valgrind.txt ||
	{ status=$?; cat /host/tmp/valgrind.txt >&2; exit "$status"; }
chroot /host callgrind_annotate --inclusive=yes --threshold=100 /tmp/ibv-overhead.cg
