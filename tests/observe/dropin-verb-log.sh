#!/usr/bin/env bash
# The verb log under the libibverbs drop-in: a C program's verbs, one record per call, and the
# summary with the kernel-crossing model of the profile. ctest's dropin_verb_log runs it.
#
#   tests/observe/dropin-verb-log.sh DROPIN_DIR FIVE_STEPS_BINARY
set -euo pipefail
dir=${1:?usage: dropin-verb-log.sh DROPIN_DIR FIVE_STEPS_BINARY}
bin=${2:?usage: dropin-verb-log.sh DROPIN_DIR FIVE_STEPS_BINARY}
log=$(mktemp)
trap 'rm -f "$log"' EXIT
fail() { echo "dropin-verb-log.sh: $*" >&2; cat "$log" >&2; exit 1; }
for profile in strict rxe; do
  LD_LIBRARY_PATH=$dir VERBSIM_DROPIN_PROGRESS=0 VERBSIM_PROFILE=$profile \
    VERBSIM_VERB_LOG=$log "$bin" >/dev/null || fail "five_steps failed on $profile"
  grep -Eq '^t=[0-9]+ns wall=[0-9.]+us control ibv_create_qp' "$log" || fail "no ibv_create_qp record"
  grep -Eq ' data ibv_post_send dev=[a-z0-9]+ qp=[0-9]+ n=1 \[wr_id=' "$log" || fail "no ibv_post_send record"
  grep -Eq ' data ibv_poll_cq ' "$log" || fail "no ibv_poll_cq record"
  model=$([[ $profile == rxe ]] && echo rxe || echo mlx5)
  grep -Eq "^summary total calls=[0-9]+ kernel_crossings=[0-9]+ .* model=$model\$" "$log" ||
    fail "no summary with model $model on $profile"
done
echo "dropin-verb-log.sh: records and summaries on strict (mlx5 model) and rxe"
