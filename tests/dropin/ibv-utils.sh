#!/usr/bin/env bash
# Debian's own ibv_devices and ibv_devinfo -v (package ibverbs-utils), unmodified, list and
# describe the simulated devices through the drop-in.
#
#   tests/dropin/ibv-utils.sh <dir of the drop-in libibverbs.so.1>
#
# Exit 77 when ibverbs-utils is not installed.
set -euo pipefail
lib=$(cd "${1:?usage: ibv-utils.sh <drop-in dir>}" && pwd)
for tool in ibv_devices ibv_devinfo; do
	command -v "$tool" >/dev/null || { echo "ibv-utils.sh: SKIPPED: $tool missing (ibverbs-utils)"; exit 77; }
done
export LD_LIBRARY_PATH=$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
status=0
expect() { # TEXT LABEL REGEX...
	local text=$1 label=$2
	shift 2
	for re in "$@"; do
		if ! grep -Eq -- "$re" <<<"$text"; then
			echo "FAIL: $label does not show /$re/"
			status=1
		fi
	done
}
devices=$(ibv_devices)
echo "$devices"
expect "$devices" ibv_devices '^[[:space:]]+sim0[[:space:]]+02005efffe000001$' '^[[:space:]]+sim1[[:space:]]'
devinfo=$(ibv_devinfo -v)
echo "$devinfo"
expect "$devinfo" "ibv_devinfo -v" $'^hca_id:\tsim0$' $'^hca_id:\tsim1$' 'fw_ver:[[:space:]]+verbsim' \
	'node_guid:[[:space:]]+0200:5eff:fe00:0001' 'state:[[:space:]]+PORT_ACTIVE \(4\)' \
	'link_layer:[[:space:]]+Ethernet' 'GID\[  1\]:[[:space:]]+::ffff:10\.0\.0\.1, RoCE v2'
# One device through its name, as ibv_devinfo -d does it.
one=$(ibv_devinfo -d sim1)
expect "$one" "ibv_devinfo -d sim1" $'^hca_id:\tsim1$'
[[ $status == 0 ]] && echo PASS
exit "$status"
