#include "checkpoint/crash_points.h"

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace trainyard {
namespace {

std::atomic<int> armed{0};
std::atomic<int> passed{0};

struct Hold {
  std::string name;  // empty: no hold
  int nth = 1;
  std::atomic<int> seen{0};
};

Hold& HoldFromEnvironment() {
  static Hold* hold = [] {
    Hold* h = new Hold;
    const char* value = std::getenv("TRAINYARD_FAULT_HOLD_AT");
    if (value == nullptr) return h;
    h->name = value;
    const size_t hash = h->name.rfind('#');
    if (hash != std::string::npos) {
      h->nth = std::atoi(h->name.c_str() + hash + 1);
      h->name.resize(hash);
    }
    return h;
  }();
  return *hold;
}

}  // namespace

void CrashPoint(const char* name) {
  const int n = passed.fetch_add(1) + 1;
  const int at = armed.load(std::memory_order_relaxed);
  if (at > 0 && n == at) _exit(kCrashExitCode);
  Hold& hold = HoldFromEnvironment();
  if (!hold.name.empty() && std::strstr(name, hold.name.c_str()) != nullptr && hold.seen.fetch_add(1) + 1 == hold.nth) {
    std::fprintf(stderr, "fault hold: %s\n", name);
    std::fflush(stderr);
    for (;;) pause();
  }
}

void ArmCrashPoints(int n) {
  passed = 0;
  armed = n;
}

int CrashPointsPassed() { return passed.load(); }

}  // namespace trainyard
