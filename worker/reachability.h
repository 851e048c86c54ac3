// Which hosts this worker can reach: a TCP connection to each address,
// all attempted at once, each given the same timeout. The coordinator's
// watchdog asks every rank of a stalled group (WorkerService.Probe) to find
// a cut link between two ranks that both still reach the coordinator.
//
// Thread-safety: thread-safe (no shared state).
#ifndef TRAINYARD_WORKER_REACHABILITY_H_
#define TRAINYARD_WORKER_REACHABILITY_H_

#include <string>
#include <vector>

#include "absl/time/time.h"

namespace trainyard {

// For each "host:port" ("[v6]:port" for IPv6 literals): whether a TCP
// connection was established within `timeout` (a refused connection, an
// unresolvable host, a malformed address or silence count as not
// reachable). An empty address is reported reachable (a rank's own entry).
// Returns after at most about `timeout` (name resolution aside).
std::vector<bool> ReachableAddresses(const std::vector<std::string>& addresses, absl::Duration timeout);

}  // namespace trainyard

#endif  // TRAINYARD_WORKER_REACHABILITY_H_
