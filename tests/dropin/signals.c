/* Signals and the drop-in (backends/dropin/README.md, "Signals").
 *
 * 1. The drop-in's threads take no signal: after ibv_open_device (which starts the progress
 *    thread) every thread but main blocks every signal but the synchronous ones
 *    (/proc/self/task/N/status, SigBlk), so a SIGTERM the program blocks in order to take it
 *    with sigtimedwait() is taken there (before the fix the progress thread took it, and its
 *    default action killed the process).
 * 2. A verb called from a signal handler that interrupted the same thread inside the library:
 *    the main thread posts a SEND between two QPs of its own and polls CQ A until it completes,
 *    over and over, while a thread of the program sends it SIGUSR1 every 20 us (3000 signals).
 *    The handler polls CQ B (the receives). Where it interrupted a verb (the thread holds the
 *    world's lock) the poll returns -EDEADLK and touches nothing; elsewhere it polls as any
 *    call does. Checked: refusals happen (the main thread is inside the library most of the
 *    time), every failure is -EDEADLK, nothing crashes or hangs, and every receive completes
 *    exactly once, in order, whether the handler or the main thread took it. Before the fix no
 *    poll was refused: the handler's polls ran inside the interrupted verb (the lock is
 *    recursive), on a world half way through a change, until one interrupted the thread inside
 *    pthread_mutex_lock, after it took the lock's word and before it wrote itself down as the
 *    owner: the handler waited for that lock for good.
 * SIGNALS_ONLY=masks, sigwait or handler runs one part. Exit status 0 and "PASS" when every
 * check held. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "rc.h"

enum { kSignals = 3000, kMaxRecv = 64 };

/* The blocked-signal mask of thread `tid`, from /proc. */
static unsigned long long blocked_of(const char *tid) {
  char path[300], line[256];
  snprintf(path, sizeof path, "/proc/self/task/%s/status", tid);
  FILE *f = fopen(path, "r");
  CHECK(f, "%s: %s", path, strerror(errno));
  unsigned long long mask = 0;
  while (fgets(line, sizeof line, f)) {
    if (sscanf(line, "SigBlk: %llx", &mask) == 1) break;
  }
  fclose(f);
  return mask;
}

static unsigned long long bit(int sig) { return 1ull << (sig - 1); }

/* Whether every thread but this one blocks the asynchronous signals and not the synchronous
 * ones; if not, why, in `why`. */
static int threads_block_signals(char *why, size_t size, int *others) {
  char self[32];
  snprintf(self, sizeof self, "%d", (int)gettid());
  DIR *d = opendir("/proc/self/task");
  CHECK(d, "/proc/self/task");
  const int wanted[] = {SIGTERM, SIGINT,  SIGHUP,  SIGQUIT, SIGUSR1,  SIGUSR2,
                        SIGALRM, SIGCHLD, SIGPIPE, SIGIO,   SIGRTMIN, SIGRTMAX};
  int ok = 1;
  *others = 0;
  for (struct dirent *e; ok && (e = readdir(d)) != NULL;) {
    if (e->d_name[0] == '.' || strcmp(e->d_name, self) == 0) continue;
    ++*others;
    const unsigned long long mask = blocked_of(e->d_name);
    for (size_t i = 0; ok && i < sizeof wanted / sizeof wanted[0]; ++i) {
      if (!(mask & bit(wanted[i]))) {
        snprintf(why, size, "thread %s of the drop-in takes signal %d (SigBlk %llx)", e->d_name,
                 wanted[i], mask);
        ok = 0;
      }
    }
    /* A fault in the thread is its own: blocked, it would kill the process at once. */
    if (ok && ((mask & bit(SIGSEGV)) || (mask & bit(SIGBUS)))) {
      snprintf(why, size, "thread %s blocks SIGSEGV or SIGBUS (SigBlk %llx)", e->d_name, mask);
      ok = 0;
    }
  }
  closedir(d);
  return ok;
}

static void drop_in_threads_block_signals(void) {
  /* A thread just created blocks everything until it sets its own mask: look again a while. */
  char why[512] = "";
  int others = 0, ok = 0;
  for (int tries = 0; !ok && tries < 200; ++tries) {
    ok = threads_block_signals(why, sizeof why, &others);
    if (!ok) usleep(10000);
  }
  CHECK(ok, "%s", why);
  CHECK(others >= 1, "no thread of the drop-in (progress thread off?)");
  printf("%d thread(s) of the drop-in block every asynchronous signal\n", others);
}

/* Until every other thread has left the mask a new thread starts with (all blocked). */
static void wait_threads_started(void) {
  char self[32];
  snprintf(self, sizeof self, "%d", (int)gettid());
  for (int tries = 0; tries < 200; ++tries) {
    int starting = 0;
    DIR *d = opendir("/proc/self/task");
    CHECK(d, "/proc/self/task");
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
      if (e->d_name[0] == '.' || strcmp(e->d_name, self) == 0) continue;
      starting += (blocked_of(e->d_name) & bit(SIGSEGV)) != 0;
    }
    closedir(d);
    if (!starting) return;
    usleep(10000);
  }
}

static void sigterm_is_taken_by_sigwait(void) {
  wait_threads_started();
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  CHECK(pthread_sigmask(SIG_BLOCK, &set, NULL) == 0, "pthread_sigmask");
  CHECK(kill(getpid(), SIGTERM) == 0, "kill");
  const struct timespec wait = {5, 0};
  const int sig = sigtimedwait(&set, NULL, &wait);
  CHECK(sig == SIGTERM, "sigtimedwait: %d (%s)", sig, strerror(errno));
  CHECK(pthread_sigmask(SIG_UNBLOCK, &set, NULL) == 0, "pthread_sigmask");
  printf("SIGTERM blocked by main and taken by sigtimedwait\n");
}

/* Part 2. */
static struct ibv_cq *g_cq_b;
static volatile sig_atomic_t g_in_verb; /* the main thread is in a verb of its loop */
static atomic_long g_signals, g_refused, g_polled, g_other, g_polled_in_verb;
static long g_recv_taken; /* receives taken, by the handler or the main thread */
static atomic_int g_stop;
static pthread_t g_main;

/* Every receive completes once, in order: wr_id is its number. */
static void take(const struct ibv_wc *wc, int n) {
  for (int i = 0; i < n; ++i) {
    CHECK(wc[i].status == IBV_WC_SUCCESS, "receive %llu: %s", (unsigned long long)wc[i].wr_id,
          ibv_wc_status_str(wc[i].status));
    CHECK(wc[i].wr_id == (uint64_t)g_recv_taken, "receive %ld completed as %llu", g_recv_taken,
          (unsigned long long)wc[i].wr_id);
    ++g_recv_taken;
  }
}

static void on_usr1(int sig) {
  (void)sig;
  const int saved = errno;
  atomic_fetch_add(&g_signals, 1);
  struct ibv_wc wc[4];
  const int n = ibv_poll_cq(g_cq_b, 4, wc);
  if (n == -EDEADLK) {
    atomic_fetch_add(&g_refused, 1);
  } else if (n >= 0) {
    atomic_fetch_add(&g_polled, 1);
    if (g_in_verb) atomic_fetch_add(&g_polled_in_verb, 1);
    take(wc, n);
  } else {
    atomic_fetch_add(&g_other, 1);
  }
  errno = saved;
}

/* Sends the main thread SIGUSR1 every 20 us until it stops; fails the test if it has not
 * stopped 15 s after it began (a handler waits for a lock its thread holds). */
static void *signaller(void *arg) {
  (void)arg;
  const struct timespec gap = {0, 20000};
  const time_t hung = time(NULL) + 15;
  while (!atomic_load(&g_stop)) {
    pthread_kill(g_main, SIGUSR1);
    nanosleep(&gap, NULL);
    if (time(NULL) > hung) {
      fprintf(stderr,
              "FAIL: the main thread is stuck after %ld signals (%ld refused, %ld "
              "polled): a handler waits for the lock its own thread holds\n",
              atomic_load(&g_signals), atomic_load(&g_refused), atomic_load(&g_polled));
      printf("FAIL: hung\n");
      _exit(1);
    }
  }
  return NULL;
}

static void handler_polls_another_cq(struct ibv_context *ctx) {
  struct ibv_pd *pd = ibv_alloc_pd(ctx);
  CHECK(pd, "ibv_alloc_pd");
  struct ibv_cq *cq_a = ibv_create_cq(ctx, 16, NULL, NULL, 0);
  g_cq_b = ibv_create_cq(ctx, kMaxRecv * 2, NULL, NULL, 0);
  CHECK(cq_a && g_cq_b, "ibv_create_cq");
  struct ibv_qp *sender = rc_qp(pd, cq_a, NULL);
  struct ibv_qp_init_attr init = {
      .send_cq = cq_a,
      .recv_cq = g_cq_b,
      .cap = {.max_send_wr = 4, .max_recv_wr = kMaxRecv, .max_send_sge = 1, .max_recv_sge = 1},
      .qp_type = IBV_QPT_RC};
  struct ibv_qp *receiver = ibv_create_qp(pd, &init);
  CHECK(receiver, "ibv_create_qp");
  static uint8_t buf[64];
  struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE);
  CHECK(mr, "ibv_reg_mr");
  union ibv_gid gid;
  CHECK(ibv_query_gid(ctx, 1, 1, &gid) == 0, "ibv_query_gid");
  rc_connect(sender, receiver->qp_num, &gid, IBV_ACCESS_LOCAL_WRITE, 7, 12);
  rc_connect(receiver, sender->qp_num, &gid, IBV_ACCESS_LOCAL_WRITE, 7, 12);

  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_usr1;
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  CHECK(sigaction(SIGUSR1, &sa, NULL) == 0, "sigaction");
  g_main = pthread_self();
  pthread_t t;
  CHECK(pthread_create(&t, NULL, signaller, NULL) == 0, "pthread_create");

  sigset_t usr1, old;
  sigemptyset(&usr1);
  sigaddset(&usr1, SIGUSR1);
  struct ibv_sge sge = {(uintptr_t)buf, 8, mr->lkey};
  long round = 0, posted_recv = 0;
  const time_t deadline = time(NULL) + 10;
  while (atomic_load(&g_signals) < kSignals && time(NULL) < deadline) {
    /* The handler takes receives when it may: with it blocked, see how many are out, and take
     * some here when it is behind. */
    pthread_sigmask(SIG_BLOCK, &usr1, &old);
    if (posted_recv - g_recv_taken >= kMaxRecv) {
      struct ibv_wc wc[8];
      int n;
      while ((n = ibv_poll_cq(g_cq_b, 8, wc)) == 0) {
      }
      CHECK(n > 0, "ibv_poll_cq of CQ B: %d", n);
      take(wc, n);
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    g_in_verb = 1;
    struct ibv_recv_wr rwr = {.wr_id = (uint64_t)posted_recv, .sg_list = &sge, .num_sge = 1},
                       *bad_r = NULL;
    CHECK(ibv_post_recv(receiver, &rwr, &bad_r) == 0, "ibv_post_recv %ld", posted_recv);
    ++posted_recv;
    struct ibv_send_wr swr = {.wr_id = (uint64_t)round,
                              .sg_list = &sge,
                              .num_sge = 1,
                              .opcode = IBV_WR_SEND,
                              .send_flags = IBV_SEND_SIGNALED},
                       *bad_s = NULL;
    CHECK(ibv_post_send(sender, &swr, &bad_s) == 0, "ibv_post_send %ld", round);
    struct ibv_wc wc;
    int n;
    while ((n = ibv_poll_cq(cq_a, 1, &wc)) == 0) {
    }
    g_in_verb = 0;
    CHECK(n == 1 && wc.status == IBV_WC_SUCCESS && wc.wr_id == (uint64_t)round,
          "send %ld: %d, status %d", round, n, n == 1 ? (int)wc.status : -1);
    ++round;
  }
  atomic_store(&g_stop, 1);
  pthread_join(t, NULL);
  pthread_sigmask(SIG_BLOCK, &usr1, &old);                    /* one may still be pending */
  for (long spins = 0; g_recv_taken < posted_recv; ++spins) { /* what the handler left */
    struct ibv_wc wc[8];
    const int n = ibv_poll_cq(g_cq_b, 8, wc);
    CHECK(n >= 0, "ibv_poll_cq of CQ B: %d", n);
    take(wc, n);
    CHECK(spins < 10000000L, "receives missing: %ld of %ld", g_recv_taken, posted_recv);
  }
  printf(
      "%ld rounds, %ld signals: the handler's poll of CQ B refused with EDEADLK %ld times (it "
      "interrupted a verb), ran %ld times (%ld of them while the main thread was in its "
      "loop's verbs), failed otherwise %ld times; %ld receives, each completed once, in "
      "order\n",
      round, atomic_load(&g_signals), atomic_load(&g_refused), atomic_load(&g_polled),
      atomic_load(&g_polled_in_verb), atomic_load(&g_other), posted_recv);
  CHECK(atomic_load(&g_signals) >= kSignals, "only %ld signals in 10 s", atomic_load(&g_signals));
  CHECK(atomic_load(&g_other) == 0, "a handler poll failed otherwise than with EDEADLK");
  CHECK(atomic_load(&g_refused) > 0, "no handler poll was refused: they re-entered the world");
  CHECK(atomic_load(&g_polled) > 0, "no handler poll ran (outside the library it should)");
}

int main(void) {
  setvbuf(stdout, NULL, _IONBF, 0);
  /* SIGNALS_ONLY=masks, sigwait or handler runs one part. */
  const char *only = getenv("SIGNALS_ONLY");
  struct ibv_context *ctx = first_device();
  if (!only || strcmp(only, "masks") == 0) drop_in_threads_block_signals();
  if (!only || strcmp(only, "sigwait") == 0) sigterm_is_taken_by_sigwait();
  if (!only || strcmp(only, "handler") == 0) handler_polls_another_cq(ctx);
  printf("PASS\n");
  return 0;
}
