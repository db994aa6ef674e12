// librdmacm's rsockets (rdma/rsocket.h), which the drop-in librdmacm does not simulate: each
// call fails with ENOSYS, so that a program linked against them still loads and learns why.
#include <rdma/rsocket.h>

#include <cerrno>

namespace {
int not_simulated() noexcept {
  errno = ENOSYS;
  return -1;
}
}  // namespace

extern "C" {

int rsocket(int, int, int) { return not_simulated(); }
int rbind(int, const struct sockaddr*, socklen_t) { return not_simulated(); }
int rlisten(int, int) { return not_simulated(); }
int raccept(int, struct sockaddr*, socklen_t*) { return not_simulated(); }
int rconnect(int, const struct sockaddr*, socklen_t) { return not_simulated(); }
int rshutdown(int, int) { return not_simulated(); }
int rclose(int) { return not_simulated(); }
ssize_t rrecv(int, void*, size_t, int) { return not_simulated(); }
ssize_t rrecvfrom(int, void*, size_t, int, struct sockaddr*, socklen_t*) { return not_simulated(); }
ssize_t rrecvmsg(int, struct msghdr*, int) { return not_simulated(); }
ssize_t rsend(int, const void*, size_t, int) { return not_simulated(); }
ssize_t rsendto(int, const void*, size_t, int, const struct sockaddr*, socklen_t) {
  return not_simulated();
}
ssize_t rsendmsg(int, const struct msghdr*, int) { return not_simulated(); }
ssize_t rread(int, void*, size_t) { return not_simulated(); }
ssize_t rreadv(int, const struct iovec*, int) { return not_simulated(); }
ssize_t rwrite(int, const void*, size_t) { return not_simulated(); }
ssize_t rwritev(int, const struct iovec*, int) { return not_simulated(); }
int rpoll(struct pollfd*, nfds_t, int) { return not_simulated(); }
int rselect(int, fd_set*, fd_set*, fd_set*, struct timeval*) { return not_simulated(); }
int rgetpeername(int, struct sockaddr*, socklen_t*) { return not_simulated(); }
int rgetsockname(int, struct sockaddr*, socklen_t*) { return not_simulated(); }
int rsetsockopt(int, int, int, const void*, socklen_t) { return not_simulated(); }
int rgetsockopt(int, int, int, void*, socklen_t*) { return not_simulated(); }
int rfcntl(int, int, ...) { return not_simulated(); }
off_t riomap(int, void*, size_t, int, int, off_t) { return not_simulated(); }
int riounmap(int, void*, size_t) { return not_simulated(); }
size_t riowrite(int, const void*, size_t, off_t, int) {
  errno = ENOSYS;
  return 0;
}

}  // extern "C"
