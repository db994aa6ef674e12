#!/bin/sh
# Guest side of pyverbs-rxe.sh (runs under dash as the rxe VM's payload):
#   pyverbs-rxe-guest.sh <tests dir> <runner> <module.ko>... -- <runner args>
# Loads the virtio-9p modules, mounts the host's root (shared read-only by QEMU as "hostroot"),
# puts tmpfs over the directories Python writes to, and runs the suite with the host's own
# /usr/bin/python3 (and its pyverbs) in a chroot, on the guest kernel's rxe0.
tests=$1
runner=$2
shift 2
while [ $# -gt 0 ] && [ "$1" != -- ]; do
	insmod "$1" || { echo "pyverbs-rxe: insmod $1 failed" >&2; exit 125; }
	shift
done
[ "${1:-}" = -- ] && shift
mkdir -p /host
mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=262144,cache=loose hostroot /host ||
	{ echo "pyverbs-rxe: cannot mount the host's root over 9p" >&2; exit 125; }
for d in tmp run root; do
	mount -t tmpfs -o mode=1777 tmpfs "/host/$d" || exit 125
done
mount -o bind /dev /host/dev || exit 125
mount -t proc proc /host/proc || exit 125
mount -t sysfs sysfs /host/sys || exit 125
cd /
exec chroot /host /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root \
	PYTHONDONTWRITEBYTECODE=1 /usr/bin/python3 "$runner" "$tests" "$@"
