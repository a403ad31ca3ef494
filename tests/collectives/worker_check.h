// The multi-rank test workers' check tally (worker.cpp, rounds_worker.cpp,
// shared_buffers_worker.cpp): CHECK(cond, printf-format, ...) counts a check and, when
// cond is false, a failure, printing "rank R: FAIL file:line: cond: message". main sets
// g_rank once the group exists and returns g_failures == 0 ? 0 : 1.
#pragma once

#include <cstdio>

namespace tandem_test {
inline int g_failures = 0;
inline int g_checks = 0;
inline int g_rank = -1;
}  // namespace tandem_test

#define CHECK(cond, ...)                                                                              \
  do {                                                                                                \
    ++tandem_test::g_checks;                                                                          \
    if (!(cond)) {                                                                                    \
      ++tandem_test::g_failures;                                                                      \
      std::printf("rank %d: FAIL %s:%d: %s: ", tandem_test::g_rank, __FILE__, __LINE__, #cond);       \
      std::printf(__VA_ARGS__);                                                                       \
      std::printf("\n");                                                                              \
    }                                                                                                 \
  } while (0)
