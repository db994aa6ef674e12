#!/usr/bin/env bash
# Installs the Debian 12 packages verbsim needs to build, test and run its examples.
# Idempotent: prints nothing and changes nothing when everything is already installed.
# Run as root, or as a user who may use sudo.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config ccache
  libibverbs-dev librdmacm-dev ibverbs-utils ibverbs-providers rdma-core
  libboost-fiber-dev librange-v3-dev
  libgtest-dev libgmock-dev googletest libbenchmark-dev
  valgrind  # instruction-count guards (ibv_overhead_dropin, sim_instructions)
  python3  # sim-instructions.sh and report.sh read callgrind's and benchmark's output with it
  python3-pyverbs  # rdma-core's pyverbs test suite, run against the libibverbs drop-in
  tshark  # reads the simulator's packet captures back (capture_examples, sim_pcap_test)
  python3-matplotlib  # scripts/plot-timeline.py draws timelines (worked_example, docs/img)
  strace  # copied into the rxe VM: the verb log's kernel crossings against it (rxe_kernel_crossings)
  tcpdump  # copied into the rxe VM: rxe's packets against the simulator's capture (rxe_wire_compare)
  clang libclang-rt-14-dev  # the libFuzzer targets (tests/fuzz/run.sh): clang and its fuzzer runtime
  libxml2-utils  # xmllint validates verbsim-swarm's JUnit files (swarm_junit)
  slurm-wlm munge  # a one-node Slurm cluster for scripts/slurm-swarm.sh (swarm_slurm, label cluster)
  perftest rdmacm-utils  # client and server in two processes on one fabric (label multiproc)
  dpkg-dev  # dpkg-shlibdeps, which cpack -G DEB runs (package_deb)
  curl ca-certificates iproute2 kmod  # the deps step of docs/CI.md's job (ci_job)
)

missing=()
for pkg in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${db:Status-Status}' "$pkg" 2>/dev/null || true)
  if [[ "$status" != "installed" ]]; then
    missing+=("$pkg")
  fi
done

if ((${#missing[@]} == 0)); then
  exit 0
fi

sudo=()
if ((EUID != 0)); then
  if ! command -v sudo >/dev/null 2>&1; then
    echo "setup.sh: missing packages: ${missing[*]}" >&2
    echo "setup.sh: run this script as root (sudo is not installed)" >&2
    exit 1
  fi
  sudo=(sudo)
fi

echo "setup.sh: installing ${missing[*]}"
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
  apt-get install -y -qq -o Dpkg::Use-Pty=0 --no-install-recommends "${missing[@]}"
