# shellcheck shell=bash
# Sourced by bash scripts that run host programs (python3, valgrind) in the rxe VM: QEMU shares
# the host's root read-only over virtio-9p, and the guest mounts it and chroots into it.
#
#   source tests/rxe/hostroot.sh
#   hostroot_prepare WORK_DIR
#
# hostroot_prepare fills the array `hostroot_modules` with the guest kernel's 9p and virtio-pci
# modules (.ko, decompressed under WORK_DIR, in load order) and `hostroot_withs` with the
# matching `--with` options for rxe-run, and exports VERBSIM_RXE_QEMU_ARGS for the share. The
# modules come from the kernel package rxe-run caches; a first run populates that cache.
# `hostroot_withs` also carries tests/rxe/guest-hostroot.sh into the guest, with its path in
# VERBSIM_HOSTROOT_SH: the guest script sources it to load the modules and mount the share
# (see tests/dropin/pyverbs-rxe-guest.sh), then runs host programs with `chroot /host`.

hostroot_prepare() {
	local work=$1
	local dir rxe_run
	dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
	rxe_run=$dir/rxe-run
	local cache=${VERBSIM_RXE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/verbsim-rxe}
	if ! compgen -G "$cache/debs/linux-image-*.deb" >/dev/null; then
		"$rxe_run" -- /bin/true || return $?
	fi
	local deb kver
	deb=$(compgen -G "$cache/debs/linux-image-*.deb" | tail -n 1)
	mkdir -p "$work/k"
	dpkg-deb -x "$deb" "$work/k"
	kver=$(ls "$work/k/lib/modules")
	depmod -b "$work/k" "$kver"
	hostroot_modules=()
	hostroot_withs=(--with "$dir/guest-hostroot.sh" --env "VERBSIM_HOSTROOT_SH=$dir/guest-hostroot.sh")
	local -A seen=()
	local m verb ko _
	for m in 9p 9pnet_virtio virtio_pci; do
		while read -r verb ko _; do
			[[ $verb == insmod && -z ${seen[$ko]:-} ]] || continue
			seen[$ko]=1
			case $ko in
			*.xz) xz -dc "$ko" >"${ko%.xz}"; ko=${ko%.xz} ;;
			*.zst) zstd -qdc "$ko" >"${ko%.zst}"; ko=${ko%.zst} ;;
			esac
			hostroot_modules+=("$ko")
			hostroot_withs+=(--with "$ko")
		done < <(modprobe -C /dev/null -d "$work/k" -S "$kver" --show-depends "$m")
	done
	export VERBSIM_RXE_QEMU_ARGS="-virtfs local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap"
}
