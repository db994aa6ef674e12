#!/usr/bin/env bash
# Probes the simulator in a profile with verbsim-probe and checks that the profile it writes is
# the one simulated: every rule reads its case right, on every profile.
#
#   tests/conformance/probe-check.sh PROBE strict|rxe|mlx5|mixed [--dropin DIR | --read FILE]
#
# --dropin: probe the simulator behind the libibverbs drop-in in DIR instead (the cases run
# through the ibverbs backend and the C ABI; VERBSIM_PROFILE names the profile, a file too).
# --read: derive the profile from observations saved on a device (tests/conformance/
# rxe-results.tsv: real rxe) with the profile as base; it must be that profile.
#
# "mixed" is a file: rxe with six keys of other stacks, so that a probe that wrote its base
# back without reading the cases would fail.
set -euo pipefail
probe=${1:?usage: probe-check.sh PROBE PROFILE}
profile=${2:?usage: probe-check.sh PROBE PROFILE}
dropin=
read=
[[ ${3:-} == --dropin ]] && dropin=${4:?--dropin needs a directory}
[[ ${3:-} == --read ]] && read=${4:?--read needs a file}
work=$(mktemp -d)
base=()
trap 'rm -rf "$work"' EXIT
if [[ $profile == mixed ]]; then
	cat >"$work/mixed.profile" <<'PROFILE'
base = rxe
name = mixed
retire_on_poll = true
local_mr_rkey_zero = false
pkey_index_checked = true
comm_est_event = true
send_limit_errno = ENOMEM
max_cqe = 1023
PROFILE
	profile=$work/mixed.profile
	base=(--base rxe)  # the six keys must come from the cases, not from the base
fi
if [[ -n $read ]]; then
	run=("$probe" --read "$read" --base "$profile")
elif [[ -n $dropin ]]; then
	run=(env LD_LIBRARY_PATH="$dropin" VERBSIM_PROFILE="$profile" VERBSIM_DROPIN_PROGRESS=0
		"$probe" --device sim0)
else
	run=("$probe" --sim "$profile")
fi
"${run[@]}" "${base[@]}" --out "$work/probed.profile" 2>"$work/probe.err" || {
	cat "$work/probe.err" >&2
	exit 1
}
if ! "$probe" --compare "$work/probed.profile" "$profile"; then
	echo "probe-check.sh: the probe of the simulator in '$2' wrote another profile" >&2
	cat "$work/probe.err" >&2
	exit 1
fi
tail -n 1 "$work/probe.err"
