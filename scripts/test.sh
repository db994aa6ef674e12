#!/usr/bin/env bash
# Builds everything with AddressSanitizer + UndefinedBehaviorSanitizer and -Werror (Debug, in
# build-asan/), runs the whole test suite with ctest, then checks that the installed package
# works from a separate CMake project (scripts/check-install.sh), then the Release determinism
# and instruction guards, the fuzzers (tests/fuzz/run.sh, 20 s each) and a ThreadSanitizer
# stage (build-tsan/). Exits non-zero on any failure.
# Environment: VERBSIM_JOBS (parallel build and test jobs, default 2),
#              VERBSIM_BUILD_DIR (build directory, default build-asan),
#              VERBSIM_TEST_TIMEOUT (seconds for a test without its own TIMEOUT, default 300),
#              VERBSIM_FUZZ_SECONDS (each fuzzer's run, default 20).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

jobs=${VERBSIM_JOBS:-2}
build=${VERBSIM_BUILD_DIR:-build-asan}
timeout=${VERBSIM_TEST_TIMEOUT:-300}

# Leak checking is on: LeakSanitizer works on the target machine (Debian 12, not under ptrace).
# Where it cannot run (e.g. under strace or gdb it dies with "LeakSanitizer has encountered a
# fatal error"), run with ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 set beforehand.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

scripts/setup.sh

generator=()
[[ -f "$build/CMakeCache.txt" ]] || generator=(-G Ninja)
cmake -S . -B "$build" "${generator[@]}" \
  -DCMAKE_BUILD_TYPE=Debug \
  -DVERBSIM_SANITIZE=address,undefined \
  -DVERBSIM_WERROR=ON
cmake --build "$build" -j "$jobs"

log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
flaky=
ctest --test-dir "$build" --output-on-failure -j "$jobs" --timeout "$timeout" 2>&1 | tee "$log" ||
  status=$?
if ((status != 0)); then
  # The whole outputs are above; a summary and a few lines on each failure come next.
  grep -E '^[0-9]+% tests passed' "$log" | tail -n 1 || true
  scripts/failure-digest.sh "$build" || true
  # Tests on real rxe run a kernel driver in a VM that QEMU emulates on a shared machine, at a
  # speed nobody controls: when only those failed, they get one more run. A failure that comes
  # back fails CI; one that does not is reported above and here, never passed over in silence.
  failed=$(cut -d: -f2 "$build/Testing/Temporary/LastTestsFailed.log" 2>/dev/null | sort)
  rxe=$(ctest --test-dir "$build" -N -L '^rxe$' | sed -n 's/^ *Test *#[0-9]*: //p' | sort)
  if [[ -z $failed || -n $(comm -23 <(echo "$failed") <(echo "$rxe")) ]]; then
    exit "$status"
  fi
  echo "Only tests on rxe failed ($(echo $failed)): running them once more"
  ctest --test-dir "$build" --rerun-failed --output-on-failure --timeout "$timeout" 2>&1 |
    tee -a "$log" || { scripts/failure-digest.sh "$build" || true; exit 1; }
  flaky="FLAKY on rxe (failed once, then passed; the first failure is described above): $(echo $failed)"
  echo "$flaky"
fi

scripts/check-install.sh "$build"

# A seed's history must not depend on the build type: build the golden-digest test and the
# example once more in Release and compare with the sanitized Debug build.
release=${VERBSIM_RELEASE_DIR:-build-release}
generator=()
[[ -f "$release/CMakeCache.txt" ]] || generator=(-G Ninja)
cmake -S . -B "$release" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DVERBSIM_WERROR=ON \
  -DVERBSIM_BUILD_BENCHMARKS=ON >/dev/null
cmake --build "$release" -j "$jobs" --target sim_golden_test pingpong >/dev/null
"$release/tests/unit/sim_golden_test" --gtest_brief=1
debug_digest=$("$build/examples/pingpong" --seed 42 --iters 300 | tail -n 1)
release_digest=$("$release/examples/pingpong" --seed 42 --iters 300 | tail -n 1)
if [[ "$debug_digest" != "$release_digest" ]]; then
  echo "pingpong --seed 42: Debug says '$debug_digest', Release says '$release_digest'" >&2
  exit 1
fi
echo "determinism: pingpong --seed 42 ends in '$release_digest' on Debug+ASan and Release"

# Instruction counts need an optimised build without sanitizers: the guards on what the ibverbs
# layer adds per call (callgrind on the drop-in; docs/IBV_OVERHEAD.md) and on what a SEND costs
# the simulator (docs/PERFORMANCE.md) run here.
cmake --build "$release" -j "$jobs" --target verbsim-ibv-overhead verbsim_dropin verbsim-bench \
  >/dev/null
if ! ctest --test-dir "$release" -R '^(ibv_overhead_dropin|sim_instructions)$' \
    --output-on-failure >"$release/instructions.log" 2>&1; then
  cat "$release/instructions.log" >&2
  exit 1
fi
echo "ibv_overhead_dropin, sim_instructions (Release): $(grep -E \
  'tests passed|No tests were found' "$release/instructions.log" | tail -n 1)"

# The fuzzers (tests/fuzz: libFuzzer from Debian's clang, ASan+UBSan), each for a bounded time
# from its corpus in the repository: the fault-plan parser, CM call sequences, verb sequences
# through the drop-in's C ABI.
tests/fuzz/run.sh --seconds "${VERBSIM_FUZZ_SECONDS:-20}" --build "${VERBSIM_FUZZ_DIR:-build-fuzz}" \
  --jobs "$jobs"

# ThreadSanitizer: the drop-in's multithreaded C programs (threads.c: posters, a poller, a
# waiter blocked in ibv_get_cq_event, resources created and destroyed meanwhile; cm.c: librdmacm
# with its event threads), the drop-ins instrumented too. Any report fails the stage.
tsan=${VERBSIM_TSAN_DIR:-build-tsan}
generator=()
[[ -f "$tsan/CMakeCache.txt" ]] || generator=(-G Ninja)
cmake -S . -B "$tsan" "${generator[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DVERBSIM_SANITIZE=thread -DVERBSIM_WERROR=ON -DVERBSIM_BUILD_EXAMPLES=OFF \
  -DVERBSIM_BUILD_BENCHMARKS=OFF -DVERBSIM_INSTALL=OFF >/dev/null
cmake --build "$tsan" -j "$jobs" --target dropin_threads dropin_cm >/dev/null
if ! TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 ctest --test-dir "$tsan" -L threads \
    --output-on-failure >"$tsan/tsan.log" 2>&1; then
  cat "$tsan/tsan.log" >&2
  exit 1
fi
echo "ThreadSanitizer: $(grep -E 'tests passed' "$tsan/tsan.log" | tail -n 1)"

# Repeat ctest's summary so that it is the last thing this script prints.
grep -E '^[0-9]+% tests passed' "$log" | head -n 1 || true
[[ -z $flaky ]] || echo "$flaky"
