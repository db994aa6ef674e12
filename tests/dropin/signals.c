/* Signals and the drop-in (backends/dropin/README.md, "Signals").
 *
 * 1. The drop-in's threads take no signal: after ibv_open_device (which starts the progress
 *    thread) every thread but main blocks every signal but the synchronous ones
 *    (/proc/self/task/N/status, SigBlk), so a SIGTERM the program blocks in order to take it
 *    with sigtimedwait() is taken there (before the fix the progress thread took it, and its
 *    default action killed the process).
 * SIGNALS_ONLY=masks or sigwait runs one part. Exit status 0 and "PASS" when every
 * check held. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "rc.h"

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

int main(void) {
  setvbuf(stdout, NULL, _IONBF, 0);
  /* SIGNALS_ONLY=masks or sigwait runs one part. */
  const char *only = getenv("SIGNALS_ONLY");
  first_device();
  if (!only || strcmp(only, "masks") == 0) drop_in_threads_block_signals();
  if (!only || strcmp(only, "sigwait") == 0) sigterm_is_taken_by_sigwait();
  printf("PASS\n");
  return 0;
}
