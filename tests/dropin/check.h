/* The C tests' CHECK: on failure, prints "FAIL file:line: message" (ctest looks for FAIL) and
 * exits with status 1. */
#ifndef VERBSIM_DROPIN_CHECK_H
#define VERBSIM_DROPIN_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#define CHECK(cond, ...)                                   \
  do {                                                     \
    if (!(cond)) {                                         \
      fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
      fprintf(stderr, __VA_ARGS__);                        \
      fprintf(stderr, "\n");                               \
      exit(1);                                             \
    }                                                      \
  } while (0)

#endif
