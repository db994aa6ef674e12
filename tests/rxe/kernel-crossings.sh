#!/usr/bin/env bash
# kernel-crossings.sh: holds the verb log's estimate of kernel crossings (its summary's
# kernel_crossings, from the rxe model of VERBSIM_VERB_TABLE) against strace on real rxe.
#
#   tests/rxe/kernel-crossings.sh BUILD_DIR [rxe-run options...]
#   tests/rxe/kernel-crossings.sh --from FILE      # analyse a saved guest output again
# (KERNEL_CROSSINGS_SAVE=FILE keeps the guest's output for --from.)
#
# In one rxe VM (rxe-run, with strace copied in), runs pingpong (busy polling) and event_server
# (completion channel, req_notify_cq) on rxe0 under `strace -f -yy` with VERBSIM_VERB_LOG on
# stderr, then prints per verb: the calls, the model's crossing, how many calls the estimate
# says enter the kernel, how many made an RDMA syscall, the uverbs commands (ioctl or write on
# /dev/infiniband/uverbs*) and other RDMA syscalls (mmap, open, close of the device, sysfs,
# netlink, the completion channel's fd). kernel-crossings.py explains the attribution.
#
# Exit status: 0 the estimate agrees verb by verb; 1 it differs for some verb; 2 a program
# failed or the output could not be read; 77 the VM cannot run here (rxe-run's skip), or
# strace or python3 is missing on the host.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

command -v python3 >/dev/null || { echo "kernel-crossings: SKIPPED: no python3" >&2; exit 77; }
if [[ ${1:-} == --from ]]; then
	exec python3 "$here/kernel-crossings.py" "${2:?--from needs a file}"
fi
build=${1:?usage: kernel-crossings.sh BUILD_DIR [rxe-run options...]}
shift
strace=$(command -v strace || true)
[[ -n $strace ]] || {
	echo "kernel-crossings: SKIPPED: no strace on the host to copy into the VM (apt-get install strace)" >&2
	exit 77
}
programs=(
	"$build/examples/pingpong --backend ibverbs:rxe0 --iters 100"
	"$build/examples/event_server --backend ibverbs:rxe0 --messages 40"
)

work=$(mktemp -d "${TMPDIR:-/tmp}/kernel-crossings.XXXXXX")
trap 'rm -rf "$work"' EXIT
cp "$here/kernel-crossings-guest.sh" "$work/guest.sh"
withs=(--with "$strace")
for p in "${programs[@]}"; do
	read -r -a words <<<"$p"
	[[ -x ${words[0]} ]] || { echo "kernel-crossings: not built: ${words[0]}" >&2; exit 2; }
	withs+=(--with "$(cd "$(dirname "${words[0]}")" && pwd)/${words[0]##*/}")
	printf 'kc_run' >>"$work/guest.sh"
	printf " '%s'" "$(cd "$(dirname "${words[0]}")" && pwd)/${words[0]##*/}" "${words[@]:1}" \
		>>"$work/guest.sh"
	echo >>"$work/guest.sh"
done
echo 'exit "$status"' >>"$work/guest.sh"

set +e
"$here/rxe-run" "$@" --script "$work/guest.sh" "${withs[@]}" >"$work/guest.out"
rc=$?
set -e
[[ -z ${KERNEL_CROSSINGS_SAVE:-} ]] || cp "$work/guest.out" "$KERNEL_CROSSINGS_SAVE"
((rc != 77)) || exit 77
if ((rc != 0)); then
	echo "kernel-crossings: the VM run failed with status $rc" >&2
	exit 2
fi
python3 "$here/kernel-crossings.py" "$work/guest.out"
