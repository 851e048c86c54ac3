#include "spec/actions.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace trainyard {
namespace {

const double* Find(const MetricsByTask& metrics, const std::string& task, const std::string& name) {
  auto t = metrics.find(task);
  if (t == metrics.end()) return nullptr;
  auto m = t->second.find(name);
  return m == t->second.end() ? nullptr : &m->second;
}

}  // namespace

EarlyStoppingAction::EarlyStoppingAction(std::string task, std::string metric, EarlyStopping::Mode mode, int patience,
                                         double atol, double rtol)
    : task_(std::move(task)), metric_(std::move(metric)), mode_(mode), patience_(patience), atol_(atol), rtol_(rtol) {}

bool EarlyStoppingAction::Run(int64_t step, const MetricsByTask& metrics_by_task) {
  const double* value = Find(metrics_by_task, task_, metric_);
  if (value == nullptr) return false;
  // Compare in "lower is better" terms.
  const double current = mode_ == EarlyStopping::MAX ? -*value : *value;
  if (!best_.has_value()) {
    best_ = current;
    return false;
  }
  const double threshold = atol_ + rtol_ * std::fabs(*best_);
  if (*best_ - current > threshold) {
    best_ = current;
    stalls_ = 0;
    return false;
  }
  ++stalls_;
  if (stalls_ < patience_) return false;
  reason_ = absl::StrCat("early stopping at step ", step, ": ", task_, "/", metric_, " has not improved on ",
                         mode_ == EarlyStopping::MAX ? -*best_ : *best_, " for ", stalls_, " evaluations");
  return true;
}

TerminateOnNanAction::TerminateOnNanAction(std::string task, std::string metric)
    : task_(std::move(task)), metric_(std::move(metric)) {}

bool TerminateOnNanAction::Run(int64_t step, const MetricsByTask& metrics_by_task) {
  const double* value = Find(metrics_by_task, task_, metric_);
  if (value == nullptr || std::isfinite(*value)) return false;
  reason_ = absl::StrCat(task_, "/", metric_, " is ", *value, " at step ", step);
  return true;
}

absl::StatusOr<ActionsByMode> CreateActions(const JobSpec& spec) {
  ActionsByMode actions;
  for (int i = 0; i < spec.actions_size(); ++i) {
    const ActionConfig& config = spec.actions(i);
    ActionModeKind mode;
    switch (config.on()) {
      case ACTION_TRAIN:
        mode = ActionModeKind::kTrain;
        break;
      case ACTION_INFER_EVAL:
        mode = ActionModeKind::kInferEval;
        break;
      default:
        mode = ActionModeKind::kTrainEval;
        break;
    }
    std::unique_ptr<BaseAction> action;
    if (config.has_early_stopping()) {
      const EarlyStopping& es = config.early_stopping();
      if (es.mode() == EarlyStopping::MODE_UNSPECIFIED) {
        return absl::InvalidArgumentError(absl::StrCat("actions[", i, "].early_stopping.mode: missing"));
      }
      action = std::make_unique<EarlyStoppingAction>(es.task(), es.metric(), es.mode(),
                                                     es.has_patience() ? es.patience() : 3, es.atol(), es.rtol());
    } else if (config.has_terminate_on_nan()) {
      const TerminateOnNan& t = config.terminate_on_nan();
      action = std::make_unique<TerminateOnNanAction>(t.task(), t.metric().empty() ? "loss" : t.metric());
    } else {
      return absl::InvalidArgumentError(absl::StrCat("actions[", i, "]: no action set"));
    }
    actions[mode].push_back(std::move(action));
  }
  return actions;
}

std::string ActionsOutcome::reason() const { return absl::StrJoin(reasons, "; "); }

void RunEveryAction(const std::vector<std::unique_ptr<BaseAction>>& actions, int64_t step,
                    const MetricsByTask& metrics_by_task, ActionsOutcome* outcome) {
  for (const auto& action : actions) {
    if (!action->Run(step, metrics_by_task)) continue;
    outcome->halt = true;
    outcome->failure = outcome->failure || action->halts_as_failure();
    outcome->reasons.push_back(action->reason());
  }
}

}  // namespace trainyard
