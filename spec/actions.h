// Actions (T5X's BaseAction): decisions taken after a train summary or an
// evaluation, from the metrics of each task. Run returns true to halt
// training. Every action of the mode runs (RunEveryAction, T5X's
// run_actions), so each keeps its own history, and training halts when any
// asks to: an early stop writes a checkpoint at its step and ends the job
// SUCCEEDED; a halt that fails the job (halts_as_failure: a NaN loss) ends
// it FAILED without one. Tensor-free: the coordinator runs them on rank 0's
// metrics.
//
// T5X passes the train state too; these actions only read metrics and the
// step, so the state is reduced to the step here.
//
// Thread-safety: not thread-safe (actions keep history).
#ifndef TRAINYARD_SPEC_ACTIONS_H_
#define TRAINYARD_SPEC_ACTIONS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/optional.h"
#include "proto/job.pb.h"

namespace trainyard {

// When an action runs.
enum class ActionModeKind { kTrain, kTrainEval, kInferEval };

// task -> metric name -> value. The train summary is the task "train".
using MetricsByTask = std::map<std::string, std::map<std::string, double>>;

class BaseAction {
 public:
  virtual ~BaseAction() = default;
  // True: halt training.
  virtual bool Run(int64_t step, const MetricsByTask& metrics_by_task) = 0;
  // Why the last Run returned true.
  virtual std::string reason() const = 0;
  // Whether halting for this action's reason fails the job (a NaN loss) or
  // ends it successfully (early stopping).
  virtual bool halts_as_failure() const { return false; }
};

// Halts when `task`/`metric` has not improved on its best value by more than
// atol + rtol * |best| for `patience` consecutive runs. mode MIN: lower is
// better; MAX: higher is better. A missing task or metric is skipped.
class EarlyStoppingAction : public BaseAction {
 public:
  EarlyStoppingAction(std::string task, std::string metric, EarlyStopping::Mode mode, int patience = 3,
                      double atol = 0.0, double rtol = 0.0);
  bool Run(int64_t step, const MetricsByTask& metrics_by_task) override;
  std::string reason() const override { return reason_; }

 private:
  std::string task_, metric_;
  EarlyStopping::Mode mode_;
  int patience_;
  double atol_, rtol_;
  absl::optional<double> best_;
  int stalls_ = 0;
  std::string reason_;
};

// Halts when `task`/`metric` (default "loss") is NaN or infinite.
class TerminateOnNanAction : public BaseAction {
 public:
  explicit TerminateOnNanAction(std::string task, std::string metric = "loss");
  bool Run(int64_t step, const MetricsByTask& metrics_by_task) override;
  std::string reason() const override { return reason_; }
  bool halts_as_failure() const override { return true; }

 private:
  std::string task_, metric_;
  std::string reason_;
};

// The actions of a job spec, grouped by mode.
using ActionsByMode = std::map<ActionModeKind, std::vector<std::unique_ptr<BaseAction>>>;
absl::StatusOr<ActionsByMode> CreateActions(const JobSpec& spec);

// What actions decided.
struct ActionsOutcome {
  bool halt = false;                 // one asked to halt training
  bool failure = false;              // one that halted fails the job (halts_as_failure)
  std::vector<std::string> reasons;  // every halting action's, in the order they ran
  // The reasons joined by "; ".
  std::string reason() const;
};

// Runs every action of `actions` at `step` on `metrics_by_task`, in order,
// also after one asked to halt, and adds what they decided to *outcome.
void RunEveryAction(const std::vector<std::unique_ptr<BaseAction>>& actions, int64_t step,
                    const MetricsByTask& metrics_by_task, ActionsOutcome* outcome);

}  // namespace trainyard

#endif  // TRAINYARD_SPEC_ACTIONS_H_
