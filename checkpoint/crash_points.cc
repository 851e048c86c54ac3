#include "checkpoint/crash_points.h"

#include <unistd.h>

#include <atomic>

namespace trainyard {
namespace {

std::atomic<int> armed{0};
std::atomic<int> passed{0};

}  // namespace

void CrashPoint(const char* /*name*/) {
  const int n = passed.fetch_add(1) + 1;
  const int at = armed.load(std::memory_order_relaxed);
  if (at > 0 && n == at) _exit(kCrashExitCode);
}

void ArmCrashPoints(int n) {
  passed = 0;
  armed = n;
}

int CrashPointsPassed() { return passed.load(); }

}  // namespace trainyard
