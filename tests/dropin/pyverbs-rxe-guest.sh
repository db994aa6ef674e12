#!/bin/sh
# Guest side of pyverbs-rxe.sh (runs under dash as the rxe VM's payload):
#   pyverbs-rxe-guest.sh <tests dir> <runner> <module.ko>... -- <runner args>
# Mounts the host's root (tests/rxe/guest-hostroot.sh, which also puts tmpfs over the
# directories Python writes to) and runs the suite with the host's own /usr/bin/python3 (and
# its pyverbs) in a chroot, on the guest kernel's rxe0.
tests=$1
runner=$2
shift 2
# shellcheck source=/dev/null
. "$VERBSIM_HOSTROOT_SH"
exec chroot /host /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root \
	PYTHONDONTWRITEBYTECODE=1 /usr/bin/python3 "$runner" "$tests" "$@"
