#!/usr/bin/env bash
# docs/CI.md's CI job, checked here: the GitHub Actions and GitLab CI files of that page run the
# same steps of tests/ci/verbsim-job.sh in each job, every step is one the script knows, and
# every step runs, in order, in a copy of tests/install/ (the project whose CI it is): verbsim
# built from this tree and packed, unpacked into a scratch root, the project built, its tests
# and a swarm run; then the rxe steps, with modprobe and rdma standing in as failing commands
# (a test must not load a module into this machine's kernel): they pass saying why with
# RXE=auto and fail with RXE=required. ctest's ci_job runs it.
#
#   tests/ci/ci-job.sh BUILD_DIR
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=$(cd "${1:?usage: ci-job.sh BUILD_DIR}" && pwd)
for tool in cpack dpkg-deb; do
  command -v "$tool" >/dev/null || { echo "ci-job: $tool is not installed; skipped"; exit 77; }
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "ci-job: $*" >&2; exit 1; }
doc=$root/docs/CI.md
job=$root/tests/ci/verbsim-job.sh

# The steps of each job in each file, "job step" lines in file order.
steps_of() {  # HEADING
  awk -v h="$1" '
    $0 == h { in_section = 1; next }
    in_section && /^## / { exit }
    in_section && /^```yaml/ { in_yaml = 1; next }
    in_yaml && /^```/ { exit }
    in_yaml && /^[a-z][a-z0-9_-]*:$/ { job = substr($0, 1, length($0) - 1) }
    in_yaml && /^  [a-z][a-z0-9_-]*:$/ && jobs { job = substr($0, 3, length($0) - 3) }
    in_yaml && /^jobs:$/ { jobs = 1 }
    in_yaml && match($0, /ci\/verbsim-job\.sh [a-z-]+/) {
      print job, substr($0, RSTART + 18, RLENGTH - 18)
    }' "$doc"
}
github=$(steps_of "## GitHub Actions")
gitlab=$(steps_of "## GitLab CI")
[[ -n $github ]] || fail "docs/CI.md: no GitHub Actions steps"
[[ $github == "$gitlab" ]] ||
  fail "GitHub Actions and GitLab CI run other steps:"$'\n'"$github"$'\n'"---"$'\n'"$gitlab"
for step in $(awk '{ print $2 }' <<<"$github" | sort -u); do
  "$job" --help | grep -qE "^  $step  " || fail "verbsim-job.sh has no step '$step'"
done
echo "ci-job: both files run:" $(tr '\n' ',' <<<"$github" | sed 's/,$//')

# The project, as a checkout with the script where docs/CI.md puts it.
cp -r "$root/tests/install" "$work/project"
mkdir -p "$work/project/ci" "$work/bin"
cp "$job" "$work/project/ci/verbsim-job.sh"
# What the rxe steps call and must not really do here.
for tool in modprobe rdma; do
  printf '#!/bin/sh\necho "%s: not in this test" >&2\nexit 1\n' "$tool" >"$work/bin/$tool"
  chmod +x "$work/bin/$tool"
done
export VERBSIM_SOURCE=$root VERBSIM_BUILD_DIR=$build VERBSIM_ROOT=$work/root
export TEST_BINARY=build/consumer_test SWARM_SEEDS=20 SWARM_JOBS=2 RXE=auto
export PATH="$work/bin:$PATH"
unset VERBSIM_DEB VERBSIM_FAULTS VERBSIM_SEED
# The project is compiled like the verbsim build it links (sanitizers), as check-install.sh does.
sanitize=$(sed -n 's/^VERBSIM_SANITIZE:[A-Z]*=//p' "$build/CMakeCache.txt")
if [[ -n $sanitize ]]; then
  export CXXFLAGS="-fsanitize=$sanitize -fno-omit-frame-pointer" LDFLAGS="-fsanitize=$sanitize"
fi
export CXX=$(sed -n 's/^CMAKE_CXX_COMPILER:[A-Z]*=//p' "$build/CMakeCache.txt")

cd "$work/project"
declare -A done=()
while read -r name step; do
  [[ -n ${done[$step]:-} ]] && continue  # a later job's deps, verbsim, build: done already
  done[$step]=1
  echo "ci-job: $name: ci/verbsim-job.sh $step"
  if ! ci/verbsim-job.sh "$step" >"$work/$step.log" 2>&1; then
    cat "$work/$step.log" >&2
    fail "step $step failed"
  fi
  tail -n 3 "$work/$step.log" | sed 's/^/  /'
done <<<"$github"

# What the steps left.
grep -q '<testcase ' junit.xml || fail "test: junit.xml has no test case"
grep -q '^swarm: 20 seeds, 0 failed' "$work/swarm.log" || fail "swarm: not 20 seeds passed"
grep -q '<testcase name="seed 20"' swarm.xml || fail "swarm: swarm.xml lacks seed 20"
grep -q 'rxe-setup: cannot load the rdma_rxe module; skipped (RXE=auto)' "$work/rxe-setup.log" ||
  fail "rxe-setup did not say why it skipped"
grep -q 'rxe-test: no rxe0 device' "$work/rxe-test.log" || fail "rxe-test did not say why it skipped"
for step in rxe-setup rxe-test; do
  if RXE=required ci/verbsim-job.sh "$step" >"$work/required.log" 2>&1; then
    fail "$step passed with RXE=required and no rxe"
  fi
done
echo "ci-job: every step ran; the rxe steps skip with RXE=auto and fail with RXE=required here"
