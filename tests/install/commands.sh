#!/usr/bin/env bash
# The installed commands: every bin/verbsim-* of an installed prefix answers --help with its
# usage on stdout and exit status 0, and the helpers the docs tell users to run are among them
# (verbsim-check-pcap, verbsim-check-timeline, verbsim-plot-timeline, verbsim-merge-fabric).
# scripts/check-install.sh runs it on the prefix it checks; ctest's installed_commands on a
# build installed into a temporary prefix (--build).
#
#   tests/install/commands.sh PREFIX
#   tests/install/commands.sh --build BUILD_DIR
set -euo pipefail
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [[ ${1:-} == --build ]]; then
  prefix=$tmp/prefix
  cmake --install "${2:?--build needs a build directory}" --prefix "$prefix" >"$tmp/install.log" 2>&1 ||
    { cat "$tmp/install.log" >&2; exit 1; }
else
  prefix=${1:?usage: commands.sh PREFIX | --build BUILD_DIR}
fi
fail() { echo "installed commands: $*" >&2; exit 1; }

for name in verbsim-swarm verbsim-check-pcap verbsim-check-timeline verbsim-plot-timeline \
            verbsim-merge-fabric; do
  [[ -x $prefix/bin/$name ]] || fail "no $name in $prefix/bin"
done
commands=("$prefix"/bin/verbsim-*)
for c in "${commands[@]}"; do
  if ! "$c" --help >"$tmp/help.txt" 2>"$tmp/help.err" || ! grep -qi usage "$tmp/help.txt"; then
    cat "$tmp/help.txt" "$tmp/help.err" >&2
    fail "'$(basename "$c") --help' does not print its usage and exit 0"
  fi
done
echo "installed commands: ${#commands[@]} answer --help: $(cd "$prefix/bin" && echo verbsim-*)"
