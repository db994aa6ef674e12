// What the libibverbs drop-in (backends/dropin/) needs of the simulator beyond the core API.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "verbsim/memory_window.hpp"
#include "verbsim/queue_pair.hpp"
#include "verbsim/shared_receive_queue.hpp"
#include "verbsim/sim/world.hpp"
#include "verbsim/verb_log.hpp"

namespace verbsim::sim {

// The key a C program believes a memory window has (its ibv_mw.rkey), which the next bind
// names: the device refuses a bind (MW_BIND_ERR) that names another key than the window's
// current one, as rxe does. The core API keeps it current itself; libibverbs programs keep it
// in ibv_mw.rkey, which a type 2 bind (IBV_WR_BIND_MW) does not update. False for a window
// that is not the simulator's.
bool set_window_key(MemoryWindow& mw, std::uint32_t rkey) noexcept;

// What qp.post_send(wrs) would refuse, checked without posting anything: {wrs.size(), 0}, or
// the first WR it would refuse with its errno and reason. ibv_wr_complete posts a batch whole
// or not at all (rxe and mlx5 check each WR as it is built): the drop-in checks the batch first.
// {0, EINVAL} for a QP that is not the simulator's.
PostResult check_post_send(QueuePair& qp, std::span<const SendWr> wrs) noexcept;

// Whether the refusal `r` of a post leaves its error in errno too for a C program: where the
// provider got it from a system call. Only rxe's post_send does, when the kernel refuses the
// doorbell of a QP in RESET, INIT or RTR; a full queue, too many SGEs and every refusal of a
// receive are the provider's own, in user space, and leave errno alone, as does every post on
// the strict and mlx5 profiles (mlx5's posts never enter the kernel).
bool post_error_in_errno(const PostResult& r) noexcept;

// ibv_modify_srq with IBV_SRQ_MAX_WR: the SRQ holds `max_wr` receives from now on (rounded as at
// creation), keeping those posted, on the rxe profile (rxe has IBV_DEVICE_SRQ_RESIZE). EINVAL
// on the other profiles (mlx5 has no SRQ resize), for max_wr out of range, below an armed limit
// or too small for the receives it holds. The core API refuses resizing on every device
// (SharedReceiveQueue::modify), so that programs behave alike; C programs get rxe's.
void resize_srq(SharedReceiveQueue& srq, std::uint32_t max_wr);
// Whether the world's devices can resize an SRQ (IBV_DEVICE_SRQ_RESIZE).
bool can_resize_srq(const World& world) noexcept;

// What the drop-in's own verbs (those of the C ABI that the core API lacks) do differently on
// the world's profile; all of it comes from the profile's table, as every provider difference.
struct DropinTraits {
  bool parent_domain;  // ibv_alloc_parent_domain is supported (rxe: EOPNOTSUPP)
  bool import_device;  // ibv_import_device is supported (rxe: EOPNOTSUPP)
  bool create_reports_requested;  // ibv_create_srq leaves the requested max_wr and max_sge in
                                  // its init attributes (rxe), instead of what was given
  int builder_limit_errno;  // what ibv_wr_complete returns for a WR past the QP's SGE or inline
                            // limits: ENOSPC on rxe (librxe), ENOMEM on mlx5
};
DropinTraits dropin_traits(const World& world) noexcept;

// Which provider's kernel crossings the verb log counts for the world's profile (rxe for rxe,
// mlx5 for strict and mlx5), and a name for where that came from ("sim profile rxe").
ProviderModel verb_log_model(const World& world) noexcept;
std::string verb_log_model_source(const World& world);

}  // namespace verbsim::sim
