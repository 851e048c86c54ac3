#include "gin/t5x_converter.h"

#include <cctype>
#include <optional>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "gin/t5_tasks.h"

namespace trainyard {
namespace gin_internal {

std::string Quoted(const GinValue& v) { return v.ToString(); }

absl::Status TypeError(const Bound& b, absl::string_view want) {
  return absl::InvalidArgumentError(
      absl::StrCat(b.where.ToString(), ": ", b.key, " = ", Quoted(b.value), ": expected ", want));
}

absl::StatusOr<std::optional<Bound>> Converter::Get(const Call& call, const std::string& arg) {
  const GinConfig::Binding* binding = config_->Find(call.scope, call.name, arg);
  if (binding == nullptr) return std::optional<Bound>();
  Bound b;
  const GinStatement& st = binding->statement;
  b.where = st.location;
  b.key = (st.scope.empty() ? "" : st.scope + "/") + st.selector + "." + st.arg;
  TY_ASSIGN_OR_RETURN(b.value, config_->Resolve(binding->statement.value, b.where));
  return std::optional<Bound>(std::move(b));
}

absl::StatusOr<std::optional<int64_t>> Converter::Int(const Call& call, const std::string& arg, int64_t lo,
                                                      int64_t hi) {
  TY_ASSIGN_OR_RETURN(std::optional<Bound> b, Get(call, arg));
  if (!b || b->value.is_none()) return std::optional<int64_t>();
  if (b->value.kind != GinValue::Kind::kInt || b->value.i < lo || b->value.i > hi) {
    return TypeError(*b, absl::StrCat("an integer in [", lo, ", ", hi, "]"));
  }
  return std::optional<int64_t>(b->value.i);
}

absl::StatusOr<std::optional<double>> Converter::Float(const Call& call, const std::string& arg, double lo, double hi) {
  TY_ASSIGN_OR_RETURN(std::optional<Bound> b, Get(call, arg));
  if (!b || b->value.is_none()) return std::optional<double>();
  if (!b->value.is_number() || !(b->value.number() >= lo && b->value.number() <= hi)) {
    return TypeError(*b, absl::StrCat("a number in [", lo, ", ", hi, "]"));
  }
  return std::optional<double>(b->value.number());
}

absl::StatusOr<std::optional<bool>> Converter::Bool(const Call& call, const std::string& arg) {
  TY_ASSIGN_OR_RETURN(std::optional<Bound> b, Get(call, arg));
  if (!b || b->value.is_none()) return std::optional<bool>();
  if (b->value.kind != GinValue::Kind::kBool) return TypeError(*b, "True or False");
  return std::optional<bool>(b->value.b);
}

absl::StatusOr<std::optional<std::string>> Converter::String(const Call& call, const std::string& arg) {
  TY_ASSIGN_OR_RETURN(std::optional<Bound> b, Get(call, arg));
  if (!b || b->value.is_none()) return std::optional<std::string>();
  if (b->value.kind != GinValue::Kind::kString) return TypeError(*b, "a string");
  return std::optional<std::string>(b->value.s);
}

absl::StatusOr<std::optional<Call>> Converter::Callee(const Call& call, const std::string& arg,
                                                      const std::vector<std::string>& allowed, bool evaluated) {
  TY_ASSIGN_OR_RETURN(std::optional<Bound> b, Get(call, arg));
  if (!b || b->value.is_none()) return std::optional<Call>();
  return CalleeOf(*b, allowed, evaluated);
}

absl::StatusOr<std::optional<Call>> Converter::CalleeOf(const Bound& b, const std::vector<std::string>& allowed,
                                                        bool evaluated) {
  const GinValue& v = b.value;
  const std::string shape = evaluated ? "@NAME()" : "@NAME";
  if (v.kind != GinValue::Kind::kReference || v.evaluate != evaluated) {
    return TypeError(b, absl::StrCat("a reference ", shape, " to one of ", absl::StrJoin(allowed, ", ")));
  }
  const size_t slash = v.s.rfind('/');
  Call call;
  call.scope = slash == std::string::npos ? "" : v.s.substr(0, slash);
  const std::string name = config_->ExpandAliases(slash == std::string::npos ? v.s : v.s.substr(slash + 1));
  for (const std::string& a : allowed) {
    if (GinSelectorMatches(name, a)) {
      call.name = a;
      called_.push_back(call);
      return std::optional<Call>(call);
    }
  }
  TY_RETURN_IF_ERROR(Refuse(b, absl::StrCat("Trainyard converts ", absl::StrJoin(allowed, ", "), " here")));
  return std::optional<Call>();
}

absl::Status Converter::Refuse(const Bound& b, const std::string& why) {
  const std::string message = absl::StrCat(b.where.ToString(), ": ", b.key, " = ", Quoted(b.value), ": ", why);
  if (!options_.allow_unmapped) {
    return absl::InvalidArgumentError(absl::StrCat(message, " (--allow-unmapped converts the rest without it)"));
  }
  out_->warnings.push_back(message);
  return absl::OkStatus();
}

absl::Status Converter::Expect(const Call& call, const std::string& arg, const std::function<bool(const GinValue&)>& ok,
                               const std::string& why) {
  TY_ASSIGN_OR_RETURN(std::optional<Bound> b, Get(call, arg));
  if (b && !ok(b->value)) return Refuse(*b, why);
  return absl::OkStatus();
}

absl::Status Converter::Note(const Call& call, const std::string& arg, const std::string& why) {
  TY_ASSIGN_OR_RETURN(std::optional<Bound> b, Get(call, arg));
  if (b) out_->notes.push_back(absl::StrCat(b->where.ToString(), ": ", b->key, " = ", Quoted(b->value), ": ", why));
  return absl::OkStatus();
}

bool IsNone(const GinValue& v) { return v.is_none(); }
bool IsFalse(const GinValue& v) { return v.kind == GinValue::Kind::kBool && !v.b; }
bool IsTrue(const GinValue& v) { return v.kind == GinValue::Kind::kBool && v.b; }
bool IsZero(const GinValue& v) { return v.is_number() && v.number() == 0; }
bool IsEmpty(const GinValue& v) {
  return v.is_none() ||
         ((v.kind == GinValue::Kind::kList || v.kind == GinValue::Kind::kTuple || v.kind == GinValue::Kind::kDict) &&
          v.items.empty());
}
std::function<bool(const GinValue&)> RefersTo(const std::string& name) {
  return [name](const GinValue& v) { return v.kind == GinValue::Kind::kReference && GinSelectorMatches(v.s, name); };
}

absl::Status LocalPath(const std::string& path, const Bound& b) {
  if (absl::StartsWith(path, "gs://") || absl::StrContains(path, "://")) {
    return absl::InvalidArgumentError(absl::StrCat(b.where.ToString(), ": ", b.key, " = '", path,
                                                   "': Trainyard reads local files only; copy it (e.g. gsutil cp -r ",
                                                   path, " ./local_copy) and bind the copy: --gin-binding \"", b.key,
                                                   " = './local_copy'\""));
  }
  return absl::OkStatus();
}

std::string NameFromFolder(std::string folder) {
  while (folder.size() > 1 && folder.back() == '/') folder.pop_back();
  std::string name = folder.substr(folder.rfind('/') + 1);
  for (char& ch : name) {
    if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '_' && ch != '.' && ch != '-') ch = '-';
  }
  while (!name.empty() && !std::isalnum(static_cast<unsigned char>(name[0]))) name.erase(0, 1);
  if (name.size() > 128) name.resize(128);
  return name.empty() ? "t5x-run" : name;
}

absl::Status Converter::Run() {
  const Call train{kTrain, ""};
  if (!config_->Mentions("", kTrain)) {
    const bool other = config_->Mentions("", "__main__.evaluate") || config_->Mentions("", "__main__.infer");
    return absl::InvalidArgumentError(
        other ? "the configuration binds eval.py's `evaluate` or infer.py's `infer`: only train.py's `train` "
                "configurations are converted (run an EVALUATION or INFERENCE job of the converted training spec)"
              : "the configuration binds nothing of train.py's `train` (e.g. train.total_steps): not a T5X "
                "training run");
  }
  called_.push_back(train);
  spec_->set_kind(TRAIN);
  TY_RETURN_IF_ERROR(MapTrainScript(train));
  TY_RETURN_IF_ERROR(MapTrainScriptSettings(train));
  TY_RETURN_IF_ERROR(MapActions(train));
  for (const TaskDefinition& t : options_.definitions.task_definitions()) AddDefinition(t);
  for (const TaskDefinition& t : t5_tasks_) AddDefinition(t);
  out_->vocabulary = vocabulary_;
  for (const MixtureDefinition& m : options_.definitions.mixture_definitions()) *spec_->add_mixture_definitions() = m;
  return CheckUnused();
}

void Converter::AddDefinition(const TaskDefinition& def) {
  TaskDefinition* copy = spec_->add_task_definitions();
  *copy = def;
  if (copy->vocabulary().empty()) copy->set_vocabulary(vocabulary_);
  if (!copy->has_extra_ids() && extra_ids_) copy->set_extra_ids(static_cast<int32_t>(*extra_ids_));
}

absl::Status Converter::ResolveT5Task(const Bound& task) {
  const std::string& name = task.value.s;
  for (const TaskDefinition& d : options_.definitions.task_definitions()) {
    if (d.name() == name) return absl::OkStatus();
  }
  for (const MixtureDefinition& m : options_.definitions.mixture_definitions()) {
    if (m.name() == name) return absl::OkStatus();
  }
  for (const TaskDefinition& d : t5_tasks_) {
    if (d.name() == name) return absl::OkStatus();
  }
  absl::StatusOr<TaskDefinition> def = T5TaskDefinition(name, options_.tfds_data_dir);
  if (absl::IsNotFound(def.status())) return absl::OkStatus();  // a bundled task, or the validator names it
  if (!def.ok()) return Refuse(task, std::string(def.status().message()));
  out_->notes.push_back(
      absl::StrCat(task.where.ToString(), ": task ", name, ": T5's definition over TFDS ",
                   def->splits().begin()->second.substr(5), " (and its other splits), read under ",
                   def->tfds_data_dir().empty() ? "the workers' TFDS_DATA_DIR" : def->tfds_data_dir()));
  t5_tasks_.push_back(*std::move(def));
  return absl::OkStatus();
}

// Bindings nobody read: an error (or warning) when their configurable was
// called (Trainyard has no counterpart for the argument), a note when it
// never was (T5X ignores it too).
absl::Status Converter::CheckUnused() {
  for (const GinConfig::Binding& b : config_->bindings()) {
    if (b.used || b.overridden || b.statement.is_macro()) continue;
    const GinStatement& st = b.statement;
    const std::string key = (st.scope.empty() ? "" : st.scope + "/") + st.selector + "." + st.arg;
    bool called = false;
    for (const Call& c : called_) {
      if (GinSelectorMatches(b.module_selector, c.name) && (st.scope.empty() || st.scope == c.scope)) called = true;
    }
    if (!called) {
      out_->notes.push_back(absl::StrCat(st.location.ToString(), ": ", key,
                                         ": not used (train.py never calls it here; T5X ignores it too)"));
      continue;
    }
    TY_RETURN_IF_ERROR(Refuse(Bound{st.value, st.location, key}, "Trainyard has no counterpart for this argument"));
  }
  return absl::OkStatus();
}

}  // namespace gin_internal
}  // namespace trainyard
