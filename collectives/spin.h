// Spin-then-park: a thread that expects an event within microseconds polls a flag for a
// short budget before it sleeps on a condition variable. A kernel wake-up costs several
// microseconds on a VM, more than a small collective itself, so the hand-offs between the
// caller and the communication thread (a submitted op, a finished one) spin first. The
// budget is short, and every poll pauses the core, so a thread that waits for a long op
// still parks and leaves the CPU to compute (collectives/README.md, "The hand-off").
// Invariant: spin_until only reads; it never replaces the locked wait that follows it,
// which is what keeps the timeouts and wake-ups exact.
#pragma once

#include <chrono>
#include <thread>

namespace tandem {

// How long a waiter polls before it parks. Measured on the 2-vCPU machine
// (collectives/README.md, "The hand-off"): two ranks there run four threads on two cores, so a
// spinner must yield, or it holds the core the engine needs; 10 us with yields beat both
// no spin and 50 us (which cost a waited 8-byte op 110 us instead of 5-11).
inline constexpr std::chrono::microseconds kSpinBudget{10};

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

// Polls `ready` (cheap, lock-free) for up to `budget`, yielding the core between short
// bursts of polls; true as soon as it returns true.
template <typename Ready>
bool spin_until(Ready&& ready, std::chrono::microseconds budget = kSpinBudget) {
  if (ready()) return true;
  if (budget.count() <= 0) return false;
  const auto deadline = std::chrono::steady_clock::now() + budget;
  for (;;) {
    for (int i = 0; i < 16; ++i) {
      cpu_relax();
      if (ready()) return true;
    }
    std::this_thread::yield();
    if (ready()) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
  }
}

}  // namespace tandem
