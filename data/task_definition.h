// Tasks defined by files (JobSpec.task_definitions): registered by workers
// and the interactive model under their names.
#ifndef TRAINYARD_DATA_TASK_DEFINITION_H_
#define TRAINYARD_DATA_TASK_DEFINITION_H_

#include "absl/status/status.h"
#include "data/task.h"
#include "proto/job.pb.h"

namespace trainyard {

// Adds `def` to `registry`: its splits read from the named files (.jsonl:
// JSON lines with "inputs" and "targets"; otherwise tab-separated), its
// vocabulary loaded (default: the bundled one). A split's files are opened
// when the split is first used, so a bad path fails the job that reads it,
// naming the file. kAlreadyExists for a taken name; kNotFound or
// kInvalidArgument naming the vocabulary file.
absl::Status RegisterTaskDefinition(const TaskDefinition& def, TaskRegistry* registry);

}  // namespace trainyard

#endif  // TRAINYARD_DATA_TASK_DEFINITION_H_
