#include "coordinator/watchdog.h"

#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace trainyard {
namespace {

// Whether `a` says it cannot reach `b`.
bool Unreachable(const std::vector<absl::StatusOr<ProbeResponse>>& probes, int a, int b) {
  const ProbeResponse& p = *probes[a];
  return b < p.reachable_size() && !p.reachable(b);
}

bool Finished(const std::vector<bool>& finished, int r) { return r < static_cast<int>(finished.size()) && finished[r]; }

}  // namespace

WatchdogVerdict Examine(const std::vector<absl::StatusOr<ProbeResponse>>& probes, absl::Duration stall,
                        const std::vector<bool>& finished) {
  const int world = static_cast<int>(probes.size());
  std::vector<int> answered, silent;
  double least_stalled = -1;
  for (int r = 0; r < world; ++r) {
    if (!probes[r].ok()) {
      silent.push_back(r);
      continue;
    }
    answered.push_back(r);
    if (Finished(finished, r)) continue;
    const ProbeResponse& p = *probes[r];
    if (!p.collective_waiting() || absl::Seconds(p.stalled_seconds()) < stall) return {};
    least_stalled = least_stalled < 0 ? p.stalled_seconds() : std::min(least_stalled, p.stalled_seconds());
  }
  if (least_stalled < 0) return {};  // no rank in its call answered
  WatchdogVerdict verdict;
  std::vector<std::string> why;
  if (!silent.empty()) {
    verdict.drop = silent;
    why.push_back(absl::StrCat(silent.size() == 1 ? "rank " : "ranks ", absl::StrJoin(silent, ", "),
                               " did not answer the watchdog's probe"));
  }
  // Cut links among the ranks that answered.
  std::set<int> kept(answered.begin(), answered.end());
  while (true) {
    int worst = -1, worst_count = 0;
    for (int a : kept) {
      int count = 0;
      for (int b : kept) {
        if (a != b && (Unreachable(probes, a, b) || Unreachable(probes, b, a))) ++count;
      }
      if (count > 0 && count >= worst_count) {
        worst = a;
        worst_count = count;
      }
    }
    if (worst < 0) break;
    std::vector<int> cut_from;
    for (int b : kept) {
      if (b != worst && (Unreachable(probes, worst, b) || Unreachable(probes, b, worst))) cut_from.push_back(b);
    }
    why.push_back(absl::StrCat("rank ", worst, " and ", cut_from.size() == 1 ? "rank " : "ranks ",
                               absl::StrJoin(cut_from, ", "), " cannot reach each other"));
    verdict.drop.push_back(worst);
    kept.erase(worst);
  }
  if (verdict.drop.empty()) return {};
  std::sort(verdict.drop.begin(), verdict.drop.end());
  verdict.reason = absl::StrCat(absl::StrJoin(why, "; "), " (the other ranks were blocked in a collective for ",
                                absl::StrFormat("%.1f", least_stalled), " s)");
  return verdict;
}

bool Suspect(const std::vector<absl::StatusOr<ProbeResponse>>& probes) {
  const int world = static_cast<int>(probes.size());
  bool any_answered = false, any_silent = false;
  for (int a = 0; a < world; ++a) {
    if (!probes[a].ok()) {
      any_silent = true;
      continue;
    }
    any_answered = true;
    for (int b = 0; b < world; ++b) {
      if (b != a && Unreachable(probes, a, b)) return true;
    }
  }
  return any_answered && any_silent;
}

absl::Duration UntilStalled(const std::vector<absl::StatusOr<ProbeResponse>>& probes, absl::Duration stall,
                            const std::vector<bool>& finished) {
  absl::Duration wait = absl::ZeroDuration();
  bool any = false;
  for (int r = 0; r < static_cast<int>(probes.size()); ++r) {
    const absl::StatusOr<ProbeResponse>& p = probes[r];
    if (!p.ok() || Finished(finished, r)) continue;
    any = true;
    const absl::Duration stalled = p->collective_waiting() ? absl::Seconds(p->stalled_seconds()) : absl::ZeroDuration();
    wait = std::max(wait, stall - stalled);
  }
  return any ? wait : stall;
}

std::vector<int> BlockedOnAnsweredRanks(const std::vector<absl::StatusOr<ProbeResponse>>& probes,
                                        const std::vector<bool>& answered, absl::Duration stall) {
  std::vector<int> blocked;
  for (int r = 0; r < static_cast<int>(probes.size()); ++r) {
    if (r < static_cast<int>(answered.size()) && answered[r]) continue;
    if (!probes[r].ok() || !probes[r]->collective_waiting() || absl::Seconds(probes[r]->stalled_seconds()) < stall) {
      return {};
    }
    blocked.push_back(r);
  }
  if (blocked.size() == probes.size()) return {};  // nobody has left
  return blocked;
}

}  // namespace trainyard
