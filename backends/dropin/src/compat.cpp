// Entry points libibverbs exports that the simulator cannot back, kept so that every program
// and library linked against Debian's libibverbs.so.1 loads (they are bound at load time:
// Debian builds with -z now).
//
// - IBVERBS_1.0: the ABI libibverbs replaced in 2006 (version 1.1). Every binary linked since
//   uses the 1.1 entry points; these fail with ENOSYS.
// - IBVERBS_PRIVATE_34: rdma-core's interface between libibverbs and its providers (libmlx5,
//   libefa, ... which pyverbs links and which load beside us). Their constructors call
//   verbs_register_driver_34, a no-op here; the rest fails with EOPNOTSUPP: no provider drives
//   a simulated device.
// - Kernel-structure helpers librdmacm uses (ibv_copy_*_from_kern): no kernel, no-ops.
#include <sys/types.h>

#include <cerrno>
#include <cstdarg>
#include <cstddef>
#include <cstdint>
#include <cstdio>

#include "symver.hpp"
#include "sysfs.hpp"

namespace {
int enosys() noexcept {
  errno = ENOSYS;
  return ENOSYS;
}
void* enosys_null() noexcept {
  errno = ENOSYS;
  return nullptr;
}
}  // namespace

#define VERBSIM_COMPAT_1_0(name) VERBSIM_SYMVER(name##_1_0, name, "@IBVERBS_1.0")
#define VERBSIM_COMPAT_INT(name)         \
  int name##_1_0() { return enosys(); } \
  VERBSIM_COMPAT_1_0(name)
#define VERBSIM_COMPAT_PTR(name)               \
  void* name##_1_0() { return enosys_null(); } \
  VERBSIM_COMPAT_1_0(name)
#define VERBSIM_COMPAT_VOID(name) \
  void name##_1_0() {}            \
  VERBSIM_COMPAT_1_0(name)

extern "C" {

VERBSIM_COMPAT_VOID(ibv_ack_async_event);
VERBSIM_COMPAT_VOID(ibv_ack_cq_events);
VERBSIM_COMPAT_PTR(ibv_alloc_pd);
VERBSIM_COMPAT_INT(ibv_attach_mcast);
VERBSIM_COMPAT_INT(ibv_close_device);
VERBSIM_COMPAT_PTR(ibv_create_ah);
VERBSIM_COMPAT_PTR(ibv_create_cq);
VERBSIM_COMPAT_PTR(ibv_create_qp);
VERBSIM_COMPAT_PTR(ibv_create_srq);
VERBSIM_COMPAT_INT(ibv_dealloc_pd);
VERBSIM_COMPAT_INT(ibv_dereg_mr);
VERBSIM_COMPAT_INT(ibv_destroy_ah);
VERBSIM_COMPAT_INT(ibv_destroy_cq);
VERBSIM_COMPAT_INT(ibv_destroy_qp);
VERBSIM_COMPAT_INT(ibv_destroy_srq);
VERBSIM_COMPAT_INT(ibv_detach_mcast);
VERBSIM_COMPAT_VOID(ibv_free_device_list);
VERBSIM_COMPAT_INT(ibv_get_async_event);
VERBSIM_COMPAT_INT(ibv_get_cq_event);
std::uint64_t ibv_get_device_guid_1_0() { return 0; }
VERBSIM_COMPAT_1_0(ibv_get_device_guid);
VERBSIM_COMPAT_PTR(ibv_get_device_list);
VERBSIM_COMPAT_PTR(ibv_get_device_name);
VERBSIM_COMPAT_INT(ibv_modify_qp);
VERBSIM_COMPAT_INT(ibv_modify_srq);
VERBSIM_COMPAT_PTR(ibv_open_device);
VERBSIM_COMPAT_INT(ibv_query_device);
VERBSIM_COMPAT_INT(ibv_query_gid);
VERBSIM_COMPAT_INT(ibv_query_pkey);
VERBSIM_COMPAT_INT(ibv_query_port);
VERBSIM_COMPAT_INT(ibv_query_qp);
VERBSIM_COMPAT_INT(ibv_query_srq);
VERBSIM_COMPAT_PTR(ibv_reg_mr);
VERBSIM_COMPAT_INT(ibv_resize_cq);

// ibv_register_driver@IBVERBS_1.1 (no default version): the pre-rdma-core provider interface.
void ibv_register_driver_1_1(const char*, void*) {}
VERBSIM_SYMVER(ibv_register_driver_1_1, ibv_register_driver, "@IBVERBS_1.1");

// Kernel-structure conversions (librdmacm).
void ibv_copy_qp_attr_from_kern(void*, const void*) {}
void ibv_copy_ah_attr_from_kern(void*, const void*) {}
void ibv_copy_path_rec_from_kern(void*, const void*) {}
void ibv_copy_path_rec_to_kern(void*, const void*) {}

// The Ethernet L2 address of a GID's neighbour (providers use it to build RoCE headers).
int ibv_resolve_eth_l2_from_gid(void*, void*, std::uint8_t*, std::uint16_t*) { return EOPNOTSUPP; }

// ---------------------------------------------------------------------------------------------
// IBVERBS_PRIVATE_34

bool verbs_allow_disassociate_destroy = false;

void verbs_register_driver_34(const void*) {}
void verbs_set_ops(void*, const void*) {}
void verbs_init_cq(void*, void*, void*, void*) {}
void verbs_uninit_context(void*) {}
void __verbs_log(void*, std::uint32_t, const char*, ...) {}
unsigned int __ioctl_final_num_attrs(unsigned int num_attrs, void*) { return num_attrs; }
void* _verbs_init_and_alloc_context(void*, int, std::size_t, void*, std::uint32_t) {
  errno = EOPNOTSUPP;
  return nullptr;
}
void* verbs_open_device(void*, void*) {
  errno = EOPNOTSUPP;
  return nullptr;
}
int execute_ioctl(void*, void*) { return EOPNOTSUPP; }
// A provider's read of a file of its device: `sysfs_dev` is rdma-core's verbs_sysfs_dev
// (driver.h), whose ibdev_path is read only when it names a simulated device.
int ibv_read_ibdev_sysfs_file(char* buf, std::size_t size, void* sysfs_dev, const char* fnfmt,
                              ...) {
  // The head of rdma-core's struct verbs_sysfs_dev, up to ibdev_path.
  struct SysfsDevHead {
    void* entry[2];
    void* provider_data;
    const void* match;
    unsigned int flags;
    char sysfs_name[64];
    dev_t sysfs_cdev;
    char ibdev_name[64];
    char ibdev_path[256];
  };
  static_assert(offsetof(SysfsDevHead, ibdev_path) == 176);
  const auto* head = static_cast<const SysfsDevHead*>(sysfs_dev);
  char file[256];
  va_list args;
  va_start(args, fnfmt);
  const int n = std::vsnprintf(file, sizeof file, fnfmt, args);
  va_end(args);
  if (head == nullptr || n < 0 || static_cast<std::size_t>(n) >= sizeof file) {
    errno = ENOENT;
    return -1;
  }
  return verbsim::dropin::read_device_file(head->ibdev_path, sizeof head->ibdev_path, file, buf,
                                           size);
}

#define VERBSIM_NO_CMD(name) \
  int name() { return EOPNOTSUPP; }
VERBSIM_NO_CMD(ibv_cmd_advise_mr)
VERBSIM_NO_CMD(ibv_cmd_alloc_dm)
VERBSIM_NO_CMD(ibv_cmd_alloc_mw)
VERBSIM_NO_CMD(ibv_cmd_alloc_pd)
VERBSIM_NO_CMD(ibv_cmd_attach_mcast)
VERBSIM_NO_CMD(ibv_cmd_close_xrcd)
VERBSIM_NO_CMD(ibv_cmd_create_ah)
VERBSIM_NO_CMD(ibv_cmd_create_counters)
VERBSIM_NO_CMD(ibv_cmd_create_cq)
VERBSIM_NO_CMD(ibv_cmd_create_cq_ex)
VERBSIM_NO_CMD(ibv_cmd_create_flow)
VERBSIM_NO_CMD(ibv_cmd_create_flow_action_esp)
VERBSIM_NO_CMD(ibv_cmd_create_qp)
VERBSIM_NO_CMD(ibv_cmd_create_qp_ex)
VERBSIM_NO_CMD(ibv_cmd_create_qp_ex2)
VERBSIM_NO_CMD(ibv_cmd_create_rwq_ind_table)
VERBSIM_NO_CMD(ibv_cmd_create_srq)
VERBSIM_NO_CMD(ibv_cmd_create_srq_ex)
VERBSIM_NO_CMD(ibv_cmd_create_wq)
VERBSIM_NO_CMD(ibv_cmd_dealloc_mw)
VERBSIM_NO_CMD(ibv_cmd_dealloc_pd)
VERBSIM_NO_CMD(ibv_cmd_dereg_mr)
VERBSIM_NO_CMD(ibv_cmd_destroy_ah)
VERBSIM_NO_CMD(ibv_cmd_destroy_counters)
VERBSIM_NO_CMD(ibv_cmd_destroy_cq)
VERBSIM_NO_CMD(ibv_cmd_destroy_flow)
VERBSIM_NO_CMD(ibv_cmd_destroy_flow_action)
VERBSIM_NO_CMD(ibv_cmd_destroy_qp)
VERBSIM_NO_CMD(ibv_cmd_destroy_rwq_ind_table)
VERBSIM_NO_CMD(ibv_cmd_destroy_srq)
VERBSIM_NO_CMD(ibv_cmd_destroy_wq)
VERBSIM_NO_CMD(ibv_cmd_detach_mcast)
VERBSIM_NO_CMD(ibv_cmd_free_dm)
VERBSIM_NO_CMD(ibv_cmd_get_context)
VERBSIM_NO_CMD(ibv_cmd_modify_cq)
VERBSIM_NO_CMD(ibv_cmd_modify_flow_action_esp)
VERBSIM_NO_CMD(ibv_cmd_modify_qp)
VERBSIM_NO_CMD(ibv_cmd_modify_qp_ex)
VERBSIM_NO_CMD(ibv_cmd_modify_srq)
VERBSIM_NO_CMD(ibv_cmd_modify_wq)
VERBSIM_NO_CMD(ibv_cmd_open_qp)
VERBSIM_NO_CMD(ibv_cmd_open_xrcd)
VERBSIM_NO_CMD(ibv_cmd_poll_cq)
VERBSIM_NO_CMD(ibv_cmd_post_recv)
VERBSIM_NO_CMD(ibv_cmd_post_send)
VERBSIM_NO_CMD(ibv_cmd_post_srq_recv)
VERBSIM_NO_CMD(ibv_cmd_query_context)
VERBSIM_NO_CMD(ibv_cmd_query_device_any)
VERBSIM_NO_CMD(ibv_cmd_query_mr)
VERBSIM_NO_CMD(ibv_cmd_query_port)
VERBSIM_NO_CMD(ibv_cmd_query_qp)
VERBSIM_NO_CMD(ibv_cmd_query_srq)
VERBSIM_NO_CMD(ibv_cmd_read_counters)
VERBSIM_NO_CMD(ibv_cmd_reg_dm_mr)
VERBSIM_NO_CMD(ibv_cmd_reg_dmabuf_mr)
VERBSIM_NO_CMD(ibv_cmd_reg_mr)
VERBSIM_NO_CMD(ibv_cmd_req_notify_cq)
VERBSIM_NO_CMD(ibv_cmd_rereg_mr)
VERBSIM_NO_CMD(ibv_cmd_resize_cq)

}  // extern "C"
