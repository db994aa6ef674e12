/* How long one cache line takes to go from one CPU to another and back: two threads, pinned
 * to CPUs A and B, take turns writing a counter in one line. Prints the median of 5 rounds of
 * 200,000 round trips, in nanoseconds. Two processes on one simulated fabric exchange every
 * packet and time bound through shared memory, so their speed follows this figure; on a
 * virtual machine it changes with where the host runs the virtual CPUs
 * (docs/PERFORMANCE.md, "Two processes on one fabric"). tests/multiproc/speed.sh runs it.
 *
 *   multiproc_line_rtt [A B]     (default: CPUs 0 and 1; exit 77 if it cannot run on them)
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

enum { kTrips = 200000, kRounds = 5 };

static _Alignas(64) atomic_long g_turn;
static int g_cpu_b = 1;

static int pin(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

static void* answer(void* arg) {
  (void)arg;
  if (pin(g_cpu_b) != 0) {
    fprintf(stderr, "line_rtt: cannot run on CPU %d\n", g_cpu_b);
    exit(77);
  }
  for (long i = 0; i < (long)kTrips * kRounds; ++i) {
    while (atomic_load_explicit(&g_turn, memory_order_acquire) != 2 * i + 1) {
    }
    atomic_store_explicit(&g_turn, 2 * i + 2, memory_order_release);
  }
  return NULL;
}

static int by_value(const void* a, const void* b) {
  const double x = *(const double*)a;
  const double y = *(const double*)b;
  return (x > y) - (x < y);
}

int main(int argc, char** argv) {
  const int cpu_a = argc > 2 ? atoi(argv[1]) : 0;
  g_cpu_b = argc > 2 ? atoi(argv[2]) : 1;
  if (pin(cpu_a) != 0) {
    fprintf(stderr, "line_rtt: cannot run on CPU %d\n", cpu_a);
    return 77;
  }
  pthread_t thread;
  if (pthread_create(&thread, NULL, answer, NULL) != 0) {
    fprintf(stderr, "line_rtt: pthread_create failed\n");
    return 2;
  }
  double ns[kRounds];
  long i = 0;
  for (int r = 0; r < kRounds; ++r) {
    struct timespec a;
    struct timespec b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (long end = i + kTrips; i < end; ++i) {
      atomic_store_explicit(&g_turn, 2 * i + 1, memory_order_release);
      while (atomic_load_explicit(&g_turn, memory_order_acquire) != 2 * i + 2) {
      }
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    ns[r] = ((double)(b.tv_sec - a.tv_sec) * 1e9 + (double)(b.tv_nsec - a.tv_nsec)) / kTrips;
  }
  pthread_join(thread, NULL);
  qsort(ns, kRounds, sizeof ns[0], by_value);
  printf("%.0f\n", ns[kRounds / 2]);
  return 0;
}
