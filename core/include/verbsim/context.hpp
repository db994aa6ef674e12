#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <system_error>

#include "verbsim/clock.hpp"
#include "verbsim/completion_channel.hpp"
#include "verbsim/resource.hpp"
#include "verbsim/types.hpp"

namespace verbsim {

class CompletionQueue;
class ProtectionDomain;

// An open device (ibv_open_device). Control-path calls throw VerbError naming the verb.
class Context : public Resource {
 public:
  virtual const DeviceInfo& info() const noexcept = 0;
  virtual DeviceAttr query_device() const = 0;
  // EINVAL for a port number outside 1..phys_port_cnt.
  virtual PortAttr query_port(std::uint8_t port_num) const = 0;
  virtual Gid query_gid(std::uint8_t port_num, int index) const = 0;

  virtual std::unique_ptr<ProtectionDomain> alloc_pd() = 0;
  virtual std::unique_ptr<CompletionChannel> create_comp_channel() = 0;
  // ibv_create_cq (ibv_create_cq_ex when `flags` are given): EINVAL when cqe < 1 or above
  // max_cqe; EOPNOTSUPP for flags the provider lacks.
  virtual std::unique_ptr<CompletionQueue> create_cq(int cqe, CompletionChannel* channel = nullptr,
                                                     int comp_vector = 0,
                                                     CqCreateFlags flags = CqCreateFlags::none) = 0;

  // ibv_get_async_event. The event is acknowledged when it is returned. EAGAIN with
  // Wait::nonblocking and none pending; EDEADLK on the simulator when waiting could never end.
  [[nodiscard]] virtual std::error_code get_async_event(AsyncEvent& event,
                                                        Wait wait = Wait::blocking) = 0;
  // File descriptor that polls readable while an async event is pending, or -1.
  virtual int async_fd() const noexcept = 0;

  // The device's clock: steady_clock on hardware, virtual time on the simulator. Lives as long
  // as the context.
  virtual const Clock& clock() const noexcept = 0;
};

}  // namespace verbsim
