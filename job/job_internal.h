// Small helpers shared by the files of TrainingJob (internal to job/).
#ifndef TRAINYARD_JOB_JOB_INTERNAL_H_
#define TRAINYARD_JOB_JOB_INTERNAL_H_

#include <atomic>

namespace trainyard {
namespace job_internal {

inline bool Raised(const std::atomic<bool>* flag) { return flag != nullptr && flag->load(); }

}  // namespace job_internal
}  // namespace trainyard

#endif  // TRAINYARD_JOB_JOB_INTERNAL_H_
