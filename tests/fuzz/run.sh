#!/usr/bin/env bash
# Builds the libFuzzer targets with clang, AddressSanitizer and UndefinedBehaviorSanitizer (in
# build-fuzz/) and runs each from its corpus in tests/fuzz/corpus/<name>/ for a bounded time.
# Exits non-zero when a fuzzer finds a crash, a sanitizer report or a leak; the input that did it
# is left in the work directory it prints (crash-*, leak-*, ...).
#
#   tests/fuzz/run.sh [--seconds N] [--build DIR] [--jobs J] [--merge] [name...]
#
# name: fault_plan, cm or verbs (default: all three). --seconds N: per fuzzer (default 30; CI
# uses 20). --merge: add the new inputs that cover new code to the corpus in the repository.
# A long run: tests/fuzz/run.sh --seconds 3600 verbs. Reproduce a finding:
# build-fuzz/tests/fuzz/verbsim-fuzz-verbs <crash file> (with VERBSIM_DROPIN_PROGRESS=0).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
seconds=30 build=build-fuzz jobs=${VERBSIM_JOBS:-2} merge=0 names=()
while (($#)); do
	case $1 in
	--seconds) seconds=${2:?}; shift 2 ;;
	--build) build=${2:?}; shift 2 ;;
	--jobs) jobs=${2:?}; shift 2 ;;
	--merge) merge=1; shift ;;
	fault_plan | cm | verbs) names+=("$1"); shift ;;
	*) echo "run.sh: unknown argument '$1'" >&2; exit 2 ;;
	esac
done
((${#names[@]})) || names=(fault_plan cm verbs)

if [[ ! -f $build/CMakeCache.txt ]]; then
	CC=clang CXX=clang++ cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Debug \
		-DCMAKE_C_FLAGS=-O1 -DCMAKE_CXX_FLAGS=-O1 \
		-DVERBSIM_FUZZ=ON -DVERBSIM_SANITIZE=address,undefined \
		-DVERBSIM_BUILD_TESTS=OFF -DVERBSIM_BUILD_EXAMPLES=OFF -DVERBSIM_BUILD_BENCHMARKS=OFF \
		-DVERBSIM_INSTALL=OFF >/dev/null
fi
targets=()
for n in "${names[@]}"; do targets+=("verbsim-fuzz-$n"); done
cmake --build "$build" -j "$jobs" --target "${targets[@]}" >/dev/null

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export VERBSIM_DROPIN_PROGRESS=0  # no background thread: each input runs as the fuzzer drives it
unset VERBSIM_FAULTS VERBSIM_SEED VERBSIM_BUDGET VERBSIM_PCAP VERBSIM_TIMELINE VERBSIM_VERB_LOG
status=0
for n in "${names[@]}"; do
	work=$(mktemp -d "${TMPDIR:-/tmp}/verbsim-fuzz-$n.XXXXXX")
	seeds=tests/fuzz/corpus/$n
	cp -r "$seeds/." "$work/corpus/" 2>/dev/null || mkdir -p "$work/corpus"
	log=$work/fuzz.log
	# -max_len: the harnesses read at most a few hundred bytes per input.
	if (cd "$work" && "$OLDPWD/$build/tests/fuzz/verbsim-fuzz-$n" -max_total_time="$seconds" \
		-max_len=2048 -timeout=10 -rss_limit_mb=4096 -print_final_stats=1 corpus) >"$log" 2>&1; then
		runs=$(grep -oE 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -oE '[0-9]+$' || echo '?')
		echo "fuzz $n: ${seconds} s, $runs inputs, corpus $(ls "$seeds" | wc -l) -> $(ls "$work/corpus" | wc -l), no finding"
		if ((merge)); then
			"$build/tests/fuzz/verbsim-fuzz-$n" -merge=1 -max_len=2048 "$seeds" "$work/corpus" >/dev/null 2>&1
		fi
		rm -rf "$work"
	else
		echo "fuzz $n: FINDING (work directory $work):" >&2
		grep -E 'ERROR|SUMMARY|runtime error|fuzz_|Test unit written' "$log" | head -n 20 >&2
		status=1
	fi
done
exit "$status"
