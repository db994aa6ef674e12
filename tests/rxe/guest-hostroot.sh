# shellcheck shell=sh
# Guest side of hostroot.sh, sourced (". $VERBSIM_HOSTROOT_SH") by a guest script whose
# arguments start with the module files hostroot_prepare listed, then "--": loads them, shifts
# them and the "--" off the script's arguments, mounts the host's root (shared read-only by
# QEMU as "hostroot") on /host with tmpfs over /host/tmp, /host/run and /host/root, and binds
# /dev, /proc and /sys into it. The script then runs host programs with `chroot /host ...`.
# Failures exit 125 (the harness's own failure).
while [ $# -gt 0 ] && [ "$1" != -- ]; do
	insmod "$1" || { echo "guest-hostroot: insmod $1 failed" >&2; exit 125; }
	shift
done
[ "${1:-}" = -- ] && shift
mkdir -p /host
mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=262144,cache=loose hostroot /host ||
	{ echo "guest-hostroot: cannot mount the host's root over 9p" >&2; exit 125; }
for d in tmp run root; do
	mount -t tmpfs -o mode=1777 tmpfs "/host/$d" || exit 125
done
mount -o bind /dev /host/dev || exit 125
mount -t proc proc /host/proc || exit 125
mount -t sysfs sysfs /host/sys || exit 125
cd /
