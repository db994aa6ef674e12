#!/usr/bin/env bash
# Smoke test of the rxe VM: boots it three times and checks that
#   1. a trivial payload (/bin/true) runs: the boot-to-exit cost of one VM run;
#   2. `ibv_devinfo -v` lists rxe0 with its port PORT_ACTIVE and GID 1 = ::ffff:10.0.0.1;
#   3. ibv_rc_pingpong server and client talk over rxe0 in one guest (rc-pingpong.sh).
# Prints the wall time of each run. Exit 0 all good, 1 a check failed, 77 the VM cannot run here.
#   tests/rxe/guest-smoke.sh [--iters N]        (ibv_rc_pingpong iterations, default 100)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
rxe_run=$here/rxe-run
iters=100
if [[ ${1:-} == --iters ]]; then iters=${2:?--iters needs a number}; fi

# ibv_devinfo and ibv_rc_pingpong come with ibverbs-utils.
if ! command -v ibv_devinfo >/dev/null || ! command -v ibv_rc_pingpong >/dev/null; then
	if ((EUID == 0)) && command -v apt-get >/dev/null; then
		echo "guest-smoke: installing ibverbs-utils" >&2
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends ibverbs-utils >&2 ||
			{ apt-get update -qq >&2 &&
				DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends ibverbs-utils >&2; } ||
			{ echo "guest-smoke: SKIPPED: cannot install ibverbs-utils" >&2; exit 77; }
	else
		echo "guest-smoke: SKIPPED: needs ibv_devinfo and ibv_rc_pingpong (apt-get install ibverbs-utils)" >&2
		exit 77
	fi
fi

failed=0
now_ms() { echo $(($(date +%s%N) / 1000000)); }
secs() { printf '%d.%02d' $(($1 / 1000)) $(($1 % 1000 / 10)); }

# run NAME CMD...: run CMD, keep its output in $out and its status in $rc, print the wall time.
run() {
	local name=$1 start
	shift
	start=$(now_ms)
	set +e
	out=$("$@" 2>&1)
	rc=$?
	set -e
	echo "guest-smoke: $name: exit $rc, $(secs $(($(now_ms) - start))) s wall"
	if ((rc == 77)); then
		echo "$out"
		exit 77
	fi
}

check() { # check DESCRIPTION GREP-ARGS...: grep $out
	local what=$1
	shift
	if grep -q "$@" <<<"$out"; then
		echo "  ok: $what"
	else
		echo "  FAILED: $what"
		failed=1
	fi
}

run "trivial payload (/bin/true)" "$rxe_run" -- /bin/true
((rc == 0)) || { echo "$out"; failed=1; }

run "ibv_devinfo -v" "$rxe_run" -- ibv_devinfo -v
((rc == 0)) || failed=1
check "hca_id rxe0" -E '^hca_id:[[:space:]]+rxe0$'
check "port 1 PORT_ACTIVE" -E 'state:[[:space:]]+PORT_ACTIVE'
check "GID[1] ::ffff:10.0.0.1 (RoCE v2)" -E 'GID\[ *1\]:[[:space:]]+::ffff:10\.0\.0\.1, RoCE v2'
grep -E 'hca_id|transport|state:|link_layer|active_mtu|GID\[' <<<"$out" | sed 's/^/    /'

run "ibv_rc_pingpong server + client, $iters iterations" \
	"$rxe_run" --script "$here/rc-pingpong.sh" --with ibv_rc_pingpong -- -n "$iters"
((rc == 0)) || failed=1
if [[ $(grep -c "^$iters iters in" <<<"$out") == 2 ]]; then
	echo "  ok: client and server both finished $iters iterations"
else
	echo "  FAILED: client and server did not both finish $iters iterations"
	failed=1
fi
printf '    %s\n' "${out//$'\n'/$'\n'    }"

if ((failed)); then
	echo "guest-smoke: FAILED"
	exit 1
fi
echo "guest-smoke: all checks passed"
