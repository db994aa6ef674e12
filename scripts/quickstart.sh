#!/usr/bin/env bash
# Quick start: installs what is missing, builds the ping-pong example, the libraries, tools and
# drop-ins (Release, in build/: the target verbsim_libraries, what `cmake --install build`
# installs) and runs the example on the simulator. Extra arguments go to the example, e.g.
#   scripts/quickstart.sh --iters 1000 --size 4096 --seed 7
# Environment: VERBSIM_JOBS (parallel build jobs, default 2).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

jobs=${VERBSIM_JOBS:-2}
build=build

scripts/setup.sh

generator=()
[[ -f "$build/CMakeCache.txt" ]] || generator=(-G Ninja)
cmake -S . -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release
cmake --build "$build" --target pingpong verbsim_libraries -j "$jobs"

echo "+ $build/examples/pingpong --backend sim${*:+ $*}"
"$build/examples/pingpong" --backend sim "$@"
