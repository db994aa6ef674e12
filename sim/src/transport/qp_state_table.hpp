// Which QP state transitions modify_qp accepts, and with which attributes, for RC, UC and UD.
//
// Same answers as the Linux kernel's ib_modify_qp_is_ok() (drivers/infiniband/core/verbs.c),
// which rxe, mlx4 and mlx5 apply before touching the hardware, so a mask the simulator accepts
// is one a real device accepts. The one deliberate difference: SQE->RTS is invalid for RC
// (an RC QP never enters SQE; the kernel lets it through with no attributes).
#pragma once

#include "verbsim/types.hpp"

namespace verbsim::sim {

// `reason` is "" when ok, else a static string naming the first problem found, e.g.
// "RESET->RTR is not a valid transition" or "attribute TIMEOUT not allowed in INIT->RTR".
struct TransitionCheck {
  bool ok;
  const char* reason;
};

// Checks a modify_qp request. `cur` is the QP's state, or attr.cur_qp_state when the mask has
// CUR_STATE (as the kernel drivers do); `next` is attr.qp_state, or `cur` when the mask has no
// STATE bit. The STATE bit itself is always allowed; CUR_STATE only where a rule lists it as
// optional (transitions to RTS from RTR, RTS, SQD or SQE).
TransitionCheck check_transition(QpType type, QpState cur, QpState next,
                                 QpAttrMask mask) noexcept;

// The attributes one transition needs (`required`) and may change (`optional`), neither
// including STATE. `valid` is false, with empty masks, for a transition that does not exist
// or an out-of-range argument.
struct TransitionRule {
  bool valid;
  QpAttrMask required;
  QpAttrMask optional;
};

TransitionRule transition_rule(QpType type, QpState cur, QpState next) noexcept;

}  // namespace verbsim::sim
