#!/usr/bin/env bash
# The Debian package, from the outside: `cpack -G DEB` builds it from a build directory; its
# control fields name the Debian 12 packages it needs (each one installed here, at a version
# that satisfies it: what apt would bring to a fresh Debian 12); it holds the libraries,
# headers, test kit, drop-ins, profiles and at least 5 verbsim-* commands; installed into a
# scratch root (dpkg --root as root, dpkg-deb -x otherwise), it passes scripts/check-install.sh.
# ctest's package_deb runs it (label package).
#
#   tests/package/deb.sh BUILD_DIR
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=$(cd "${1:?usage: deb.sh BUILD_DIR}" && pwd)
for tool in cpack dpkg-deb dpkg-shlibdeps; do
  command -v "$tool" >/dev/null || { echo "deb.sh: $tool is not installed; skipped"; exit 77; }
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "deb.sh: $*" >&2; exit 1; }

echo "deb.sh: cpack -G DEB"
if ! (cd "$work" && cpack --config "$build/CPackConfig.cmake" -G DEB -B "$work/out") \
    >"$work/cpack.log" 2>&1; then
  cat "$work/cpack.log" >&2
  fail "cpack failed"
fi
debs=("$work"/out/*.deb)
[[ ${#debs[@]} == 1 && -f ${debs[0]} ]] || fail "not one .deb: ${debs[*]}"
deb=${debs[0]}
echo "deb.sh: $(basename "$deb"), $(du -k "$deb" | cut -f1) KiB"

# Its dependencies: each alternative list has a member installed at a version it accepts.
depends=$(dpkg-deb -f "$deb" Depends)
echo "deb.sh: Depends: $depends"
for want in libc6 libstdc++6 libboost-fiber-dev libibverbs-dev librdmacm-dev libgtest-dev python3; do
  [[ ", $depends," == *", $want "* || ", $depends," == *", $want,"* ]] ||
    fail "Depends lacks $want"
done
dependency='^ *([^ (]+) *(\(([<>=]+) *([^)]+)\))? *$'  # name (op version)
IFS=',' read -ra clauses <<<"$depends"
for clause in "${clauses[@]}"; do
  ok=
  IFS='|' read -ra alternatives <<<"$clause"
  for alt in "${alternatives[@]}"; do
    if [[ $alt =~ $dependency ]]; then
      name=${BASH_REMATCH[1]} op=${BASH_REMATCH[3]} version=${BASH_REMATCH[4]}
    else
      fail "cannot read the dependency '$alt'"
    fi
    have=$(dpkg-query -W -f='${db:Status-Status} ${Version}' "$name" 2>/dev/null || true)
    [[ $have == "installed "* ]] || continue
    if [[ -z $op ]] || dpkg --compare-versions "${have#installed }" "$op" "$version"; then
      ok=1
    fi
  done
  [[ -n $ok ]] || fail "no package here satisfies '$clause'"
done
echo "deb.sh: every dependency is a Debian package installed here at a version it accepts"

# What it holds.
dpkg-deb -c "$deb" | awk '{ print $6 }' | sed 's|^\./|/|' >"$work/files"  # symlinks: no target
has() { grep -qE "$1" "$work/files" || fail "the package holds no $2 ($1)"; }
has '^/usr/lib/.*libverbsim\.a$' "library"
has '^/usr/include/verbsim/sim/world\.hpp$' "headers"
has '^/usr/include/verbsim/testing/' "test kit headers"
has '^/usr/lib/.*libverbsim_gtest_main\.a$' "test kit main"
has '^/usr/lib/(.*/)?cmake/verbsim/verbsimConfig\.cmake$' "CMake package"
has '^/usr/lib/.*verbsim-dropin/libibverbs\.so\.1' "libibverbs drop-in"
has '^/usr/lib/.*verbsim-dropin/librdmacm\.so\.1' "librdmacm drop-in"
has '^/usr/share/verbsim/profiles/rxe\.profile$' "profiles"
commands=$(grep -cE '^/usr/bin/verbsim-[a-z-]+$' "$work/files" || true)
((commands >= 5)) || fail "$commands verbsim-* commands, not at least 5"
echo "deb.sh: library, headers, kit, drop-ins, profiles and $commands commands:" \
  "$(grep -oE 'verbsim-[a-z-]+$' "$work/files" | grep -E '^verbsim-[a-z-]+$' | sort | tr '\n' ' ')"

# Installed into a scratch root.
dest="$work/root"
if ((EUID == 0)); then
  mkdir -p "$dest/var/lib/dpkg/info" "$dest/var/lib/dpkg/updates"
  : >"$dest/var/lib/dpkg/status"
  : >"$dest/var/lib/dpkg/available"
  # The scratch root has no other package: its dependencies were checked above, against this
  # system's packages.
  dpkg --root="$dest" --force-depends --force-script-chrootless -i "$deb" >"$work/dpkg.log" 2>&1 ||
    { cat "$work/dpkg.log" >&2; fail "dpkg -i failed"; }
  status=$(dpkg --root="$dest" -s verbsim | sed -n 's/^Status: //p')
  [[ $status == "install ok installed" ]] || fail "dpkg says '$status'"
  echo "deb.sh: dpkg --root -i: $status"
else
  dpkg-deb -x "$deb" "$dest"
  echo "deb.sh: unpacked with dpkg-deb -x (not root)"
fi
"$root/scripts/check-install.sh" "$build" --installed "$dest/usr"
echo "deb.sh: the package installs and passes the install check"
