// CHECK(cond) for the fuzz targets' own invariants: a failed one prints the condition and aborts,
// which libFuzzer reports as a crash and saves the input, as it does a sanitizer report.
#pragma once

#include <cstdio>
#include <cstdlib>

#define CHECK(cond)                                                                      \
  do {                                                                                   \
    if (!(cond)) {                                                                       \
      std::fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);      \
      std::abort();                                                                      \
    }                                                                                    \
  } while (0)
