// The ibverbs Backend: device discovery and ibv_open_device, plus helpers all wrappers share.
#include "verbsim/ibverbs/backend.hpp"

#include <fcntl.h>
#include <infiniband/verbs.h>
#include <poll.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "objects.hpp"
#include "verbsim/abi/translate.hpp"
#include "verbsim/error.hpp"

namespace verbsim::ibverbs {

void warn_leak(const char* verb, int err, const char* what) noexcept {
  std::fprintf(stderr, "verbsim: %s: %s; leaking the %s\n", verb, std::strerror(err), what);
}

int set_nonblocking(int fd) noexcept {
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) return errno;
  return 0;
}

int wait_readable(int fd) noexcept {
  pollfd p{fd, POLLIN, 0};
  for (;;) {
    const int ret = ::poll(&p, 1, -1);
    if (ret > 0) return 0;
    if (ret < 0 && errno != EINTR) return errno;
  }
}

namespace {

// ibv_get_device_list's result, freed on scope exit. `error` is set when the call itself failed
// (ENOSYS without kernel RDMA support, EPERM, ENOMEM); an empty list is not an error.
class DeviceList {
 public:
  DeviceList() {
    errno = 0;
    list_ = ::ibv_get_device_list(&count_);
    if (list_ == nullptr) {
      error = errno != 0 ? errno : ENODEV;
      count_ = 0;
    }
  }
  ~DeviceList() {
    if (list_ != nullptr) ::ibv_free_device_list(list_);
  }
  DeviceList(const DeviceList&) = delete;
  DeviceList& operator=(const DeviceList&) = delete;

  std::span<ibv_device* const> devices() const noexcept {
    return {list_, static_cast<std::size_t>(count_ < 0 ? 0 : count_)};
  }

  int error = 0;

 private:
  ibv_device** list_ = nullptr;
  int count_ = 0;
};

DeviceInfo describe(ibv_device* dev) {
  const char* name = ::ibv_get_device_name(dev);
  return {"ibverbs", name != nullptr ? name : "", abi::guid_from_ibv(::ibv_get_device_guid(dev))};
}

std::string no_device_message(int list_error) {
  std::string msg = "no RDMA device found";
  if (list_error != 0) {
    msg += ", listing failed with '";
    msg += std::strerror(list_error);
    msg += '\'';
  }
  msg +=
      "; create a Soft-RoCE device with `modprobe rdma_rxe && rdma link add rxe0 type rxe "
      "netdev <ifname>`, or use the simulator: VERBSIM_BACKEND=sim";
  return msg;
}

struct CloseDevice {
  void operator()(ibv_context* ctx) const noexcept { ::ibv_close_device(ctx); }
};

class IbvBackend final : public Backend {
 public:
  std::string_view name() const noexcept override { return "ibverbs"; }

  std::vector<DeviceInfo> devices() override {
    const DeviceList list;
    std::vector<DeviceInfo> out;
    out.reserve(list.devices().size());
    for (ibv_device* dev : list.devices()) out.push_back(describe(dev));
    return out;
  }

  std::unique_ptr<Context> open(std::string_view device) override {
    const DeviceList list;
    if (list.devices().empty()) {
      throw VerbError("ibv_get_device_list", ENODEV, no_device_message(list.error));
    }
    ibv_device* found = nullptr;
    for (ibv_device* dev : list.devices()) {
      const char* name = ::ibv_get_device_name(dev);
      if (device.empty() || (name != nullptr && device == name)) {
        found = dev;
        break;
      }
    }
    if (found == nullptr) {
      std::string msg = "no RDMA device named '" + std::string(device) + "'; devices:";
      for (ibv_device* dev : list.devices()) {
        const char* name = ::ibv_get_device_name(dev);
        msg += ' ';
        msg += name != nullptr ? name : "?";
      }
      throw VerbError("ibv_open_device", ENODEV, msg);
    }

    DeviceInfo info = describe(found);
    errno = 0;
    std::unique_ptr<ibv_context, CloseDevice> ctx(::ibv_open_device(found));
    if (!ctx) throw VerbError("ibv_open_device", creator_errno(), info.name);
    auto out = std::make_unique<IbvContext>(ctx.get(), std::move(info));
    ctx.release();  // now owned by `out`
    return out;
  }

  // rdma_create_event_channel (cm.cpp).
  std::unique_ptr<CmEventChannel> create_cm_channel() override { return make_cm_channel(); }
};

}  // namespace

std::unique_ptr<verbsim::Backend> make_backend() { return std::make_unique<IbvBackend>(); }

}  // namespace verbsim::ibverbs
