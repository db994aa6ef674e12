#!/usr/bin/env bash
# The steps of a CI job that runs a project's tests on verbsim's simulated fabric, and on
# Soft-RoCE (rxe) where the runner can load it: docs/CI.md's GitHub Actions and GitLab CI files
# run them, one step each. Copy it into your repository (docs/CI.md calls it
# ci/verbsim-job.sh). ctest's ci_job runs every step here, as the files do (tests/ci/ci-job.sh).
#
# Usage: verbsim-job.sh STEP     (or --help)
#   deps       the Debian 12 packages the steps need (apt-get; only those missing)
#   verbsim    installs verbsim's Debian package: VERBSIM_DEB, or one built from VERBSIM_SOURCE
#   build      configures and builds the project (find_package(verbsim))
#   test       runs the project's tests with ctest: every simulator profile (JUnit: junit.xml)
#   swarm      runs TEST_BINARY under SWARM_SEEDS seeds with fault plans (JUnit: swarm.xml)
#   rxe-setup  loads rdma_rxe (on Ubuntu, installing linux-modules-extra-<kernel> if need be)
#              and adds rxe0 on the default route's interface
#   rxe-test   runs the project's tests again on rxe0 (VERBSIM_BACKEND=ibverbs; junit-rxe.xml)
#
# Environment:
#   VERBSIM_DEB        the package to install: a path, or an https URL that curl fetches
#   VERBSIM_SOURCE     without VERBSIM_DEB: a verbsim source tree, built in VERBSIM_BUILD_DIR
#                      (default $VERBSIM_SOURCE/build; an existing build is only brought up to
#                      date) and packed with cpack -G DEB
#   VERBSIM_ROOT       unpack the package into this directory instead of installing it (no root
#                      needed); every step then finds verbsim there
#   BUILD_DIR          the project's build directory (default build)
#   TEST_BINARY        the test binary the swarm runs (default $BUILD_DIR/app_test)
#   SWARM_SEEDS        seeds of the swarm (default 200); SWARM_JOBS runs at a time (nproc)
#   RXE                auto (default): where the runner cannot load rdma_rxe (a container, a
#                      kernel without it) the rxe steps say so and pass; required: they fail
set -euo pipefail

step=${1:-}
BUILD_DIR=${BUILD_DIR:-build}
TEST_BINARY=${TEST_BINARY:-$BUILD_DIR/app_test}
RXE=${RXE:-auto}
sudo=()
((EUID == 0)) || sudo=(sudo)
say() { echo "verbsim-job: $step: $*"; }
if [[ -n ${VERBSIM_ROOT:-} ]]; then
  VERBSIM_ROOT=$(mkdir -p "$VERBSIM_ROOT" && cd "$VERBSIM_ROOT" && pwd)
  export PATH="$VERBSIM_ROOT/usr/bin:$PATH"
  export CMAKE_PREFIX_PATH="$VERBSIM_ROOT/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
fi

# The rxe steps on a runner that cannot have rxe: a note (auto) or a failure (required).
no_rxe() {
  if [[ $RXE == required ]]; then
    echo "verbsim-job: $step: $*" >&2
    exit 1
  fi
  say "$*; skipped (RXE=auto)"
  exit 0
}

case $step in
  deps)
    packages=(build-essential cmake ninja-build pkg-config dpkg-dev curl ca-certificates python3
              libboost-fiber-dev libibverbs-dev librdmacm-dev libgtest-dev libgmock-dev
              ibverbs-providers ibverbs-utils iproute2 kmod)
    [[ -n ${VERBSIM_SOURCE:-} && -z ${VERBSIM_DEB:-} ]] && packages+=(librange-v3-dev)
    missing=()
    for p in "${packages[@]}"; do
      [[ $(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null) == installed ]] || missing+=("$p")
    done
    if ((${#missing[@]} == 0)); then
      say "every package is installed"
      exit 0
    fi
    "${sudo[@]}" apt-get update -qq
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      "${missing[@]}"
    ;;
  verbsim)
    deb=${VERBSIM_DEB:-}
    if [[ -z $deb ]]; then
      src=${VERBSIM_SOURCE:?set VERBSIM_DEB or VERBSIM_SOURCE}
      dir=${VERBSIM_BUILD_DIR:-$src/build}
      if [[ ! -f $dir/CMakeCache.txt ]]; then
        cmake -S "$src" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DVERBSIM_BUILD_TESTS=OFF \
          -DVERBSIM_BUILD_EXAMPLES=OFF -DVERBSIM_BUILD_BENCHMARKS=OFF
      fi
      cmake --build "$dir"
      out=$(mktemp -d)
      (cd "$out" && cpack --config "$dir/CPackConfig.cmake" -G DEB -B "$out") >"$out/cpack.log" ||
        { cat "$out/cpack.log" >&2; exit 1; }
      deb=$(echo "$out"/verbsim_*.deb)
    elif [[ $deb == https://* ]]; then
      curl -fsSL -o verbsim.deb "$deb"
      deb=$PWD/verbsim.deb
    fi
    [[ -f $deb ]] || { echo "verbsim-job: verbsim: no package at '$deb'" >&2; exit 1; }
    if [[ -n ${VERBSIM_ROOT:-} ]]; then
      dpkg-deb -x "$deb" "$VERBSIM_ROOT"
      say "$(basename "$deb") unpacked into $VERBSIM_ROOT"
    else
      "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$(realpath "$deb")"
      say "$(basename "$deb") installed"
    fi
    verbsim-swarm --help | head -n 1
    ;;
  build)
    cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
    cmake --build "$BUILD_DIR"
    ;;
  test)
    ctest --test-dir "$BUILD_DIR" --output-on-failure --output-junit "$PWD/junit.xml"
    ;;
  swarm)
    verbsim-swarm --seeds "${SWARM_SEEDS:-200}" --jobs "${SWARM_JOBS:-$(nproc)}" \
      --fault-probability 0.05 --quiet --progress 60 --junit swarm.xml -- "$TEST_BINARY"
    ;;
  rxe-setup)
    if rdma link show 2>/dev/null | grep -q 'rxe0'; then
      say "rxe0 is there"
      exit 0
    fi
    if ! "${sudo[@]}" modprobe rdma_rxe 2>/dev/null; then
      # Ubuntu keeps rdma_rxe in linux-modules-extra-<kernel>.
      extra=linux-modules-extra-$(uname -r)
      if apt-cache show "$extra" >/dev/null 2>&1; then
        "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$extra" || true
      fi
      "${sudo[@]}" modprobe rdma_rxe 2>/dev/null || no_rxe "cannot load the rdma_rxe module"
    fi
    netdev=$(ip route show default 2>/dev/null | awk '{ for (i = 1; i < NF; i++) if ($i == "dev") { print $(i + 1); exit } }')
    [[ -n $netdev ]] || no_rxe "no interface with a default route"
    "${sudo[@]}" rdma link add rxe0 type rxe netdev "$netdev" || no_rxe "cannot add rxe0 on $netdev"
    ibv_devices
    ;;
  rxe-test)
    if ! ibv_devices 2>/dev/null | grep -q 'rxe0'; then
      no_rxe "no rxe0 device (rxe-setup did not add one)"
    fi
    VERBSIM_BACKEND=ibverbs VERBSIM_DEVICE=rxe0 \
      ctest --test-dir "$BUILD_DIR" --output-on-failure --output-junit "$PWD/junit-rxe.xml"
    ;;
  -h | --help)
    sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
    ;;
  *)
    sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
    exit 2
    ;;
esac
