#!/usr/bin/env bash
# Installs a verbsim build into a temporary prefix, then configures, builds and runs the
# consumer project in tests/install against it (find_package(verbsim) -> verbsim::verbsim, and
# the test kit verbsim::testing + verbsim::gtest_main): runs its program and its tests, then
# makes one of its tests fail on purpose and checks that the printed rerun command reproduces
# the failure (tests/install/failure-rerun.sh). Every installed command (bin/verbsim-*) must
# answer --help with its usage on stdout and exit status 0.
# Usage: scripts/check-install.sh [BUILD_DIR] [--installed PREFIX]
#   BUILD_DIR  default: build; relative to the repo root
#   --installed PREFIX  check a package installed there (e.g. a .deb unpacked into a directory:
#              PREFIX is its usr/) instead of installing BUILD_DIR into a temporary prefix
# The consumer is compiled like the build it checks (compiler, build type, sanitizers), since a
# sanitized static library only links into a sanitized program.
# Environment: VERBSIM_JOBS (parallel build jobs, default 2).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
root=$PWD

jobs=${VERBSIM_JOBS:-2}
build=build
installed=
while (($# > 0)); do
  case $1 in
    --installed) installed=${2:?--installed needs a directory}; shift 2 ;;
    -*) echo "check-install.sh: unknown option $1" >&2; exit 2 ;;
    *) build=$1; shift ;;
  esac
done
cache="$build/CMakeCache.txt"
if [[ ! -f "$cache" ]]; then
  echo "check-install.sh: $build is not a configured build directory" >&2
  exit 1
fi
cache_value() { sed -n "s/^$1:[A-Z]*=//p" "$cache" | head -n 1; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [[ -n $installed ]]; then
  prefix=$(cd "$installed" && pwd)
  echo "install check: the package installed in $prefix"
else
  prefix="$tmp/prefix"
  echo "install check: installing $build into a temporary prefix"
  if ! cmake --install "$build" --prefix "$prefix" >"$tmp/install.log" 2>&1; then
    cat "$tmp/install.log" >&2
    exit 1
  fi
fi

# Every installed command answers --help: its usage on stdout, exit status 0.
tests/install/commands.sh "$prefix"

# The installed package must not point back into the source or build tree.
if grep -rlF -e "$root" "$prefix/lib"*/cmake/verbsim >"$tmp/leaks.txt"; then
  echo "install check: the installed CMake package refers to $root:" >&2
  cat "$tmp/leaks.txt" >&2
  exit 1
fi

args=(-G Ninja -DCMAKE_PREFIX_PATH="$prefix"
      -DCMAKE_BUILD_TYPE="$(cache_value CMAKE_BUILD_TYPE)"
      -DCMAKE_CXX_COMPILER="$(cache_value CMAKE_CXX_COMPILER)")
sanitize=$(cache_value VERBSIM_SANITIZE)
if [[ -n "$sanitize" ]]; then
  args+=(-DCMAKE_CXX_FLAGS="-fsanitize=$sanitize -fno-omit-frame-pointer"
         -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=$sanitize")
fi

echo "install check: building tests/install against it"
if ! { cmake -S tests/install -B "$tmp/consumer" "${args[@]}" &&
       cmake --build "$tmp/consumer" -j "$jobs"; } >"$tmp/consumer.log" 2>&1; then
  cat "$tmp/consumer.log" >&2
  exit 1
fi

"$tmp/consumer/consumer"
echo "install check: running the consumer's tests (the test kit)"
if ! "$tmp/consumer/consumer_test" >"$tmp/test.log" 2>&1; then
  cat "$tmp/test.log" >&2
  exit 1
fi
grep -E '^\[  (PASSED|SKIPPED) ' "$tmp/test.log"
tests/install/failure-rerun.sh "$tmp/consumer/consumer_test"
echo "install check: OK"
