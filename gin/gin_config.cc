#include "gin/gin_config.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"

namespace trainyard {
namespace {

namespace fs = std::filesystem;

absl::StatusOr<std::string> ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot be read"));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The scope's components ("a/b" -> {a, b}); "" has none.
std::vector<std::string> Scopes(const std::string& scope) {
  if (scope.empty()) return {};
  return absl::StrSplit(scope, '/');
}

// How specifically a binding's scope applies in `active`: -1 if it does not
// (a component missing), else its number of components.
int Specificity(const std::string& binding_scope, const std::vector<std::string>& active) {
  const std::vector<std::string> mine = Scopes(binding_scope);
  for (const std::string& s : mine) {
    if (std::find(active.begin(), active.end(), s) == active.end()) return -1;
  }
  return static_cast<int>(mine.size());
}

}  // namespace

bool GinSelectorMatches(const std::string& selector, const std::string& configurable) {
  if (selector.empty() || configurable.empty()) return false;
  if (selector == configurable) return true;
  return absl::EndsWith(selector, "." + configurable) || absl::EndsWith(configurable, "." + selector);
}

absl::StatusOr<GinConfig> GinConfig::Load(const std::vector<std::string>& files, const GinLoadOptions& options) {
  GinConfig config;
  for (const std::string& file : files) {
    std::string path = file;
    if (!fs::exists(path)) {
      for (const std::string& dir : options.search_path) {
        if (fs::exists(fs::path(dir) / file)) {
          path = (fs::path(dir) / file).string();
          break;
        }
      }
    }
    TY_ASSIGN_OR_RETURN(std::string text, ReadText(path));
    std::vector<std::string> stack;
    TY_RETURN_IF_ERROR(config.Read(path, text, options, &stack));
  }
  for (size_t k = 0; k < options.bindings.size(); ++k) {
    const std::string where = absl::StrCat("--gin-binding #", k + 1);
    TY_ASSIGN_OR_RETURN(std::vector<GinStatement> statements, ParseGin(options.bindings[k], where));
    for (const GinStatement& st : statements) {
      if (st.kind != GinStatement::Kind::kBinding) {
        return absl::InvalidArgumentError(absl::StrCat(where, ": '", options.bindings[k],
                                                       "' is not a binding NAME=VALUE or configurable.param=VALUE"));
      }
    }
    std::vector<std::string> stack;
    TY_RETURN_IF_ERROR(config.Add(std::move(statements), options, ".", &stack));
  }
  return config;
}

absl::StatusOr<GinConfig> GinConfig::FromText(const std::string& text, const std::string& file,
                                              const GinLoadOptions& options) {
  GinConfig config;
  std::vector<std::string> stack;
  TY_RETURN_IF_ERROR(config.Read(file, text, options, &stack));
  return config;
}

absl::Status GinConfig::Read(const std::string& path, const std::string& text, const GinLoadOptions& options,
                             std::vector<std::string>* stack) {
  std::error_code ec;
  const std::string canonical = fs::weakly_canonical(path, ec).string();
  if (std::find(stack->begin(), stack->end(), canonical) != stack->end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("include cycle: ", absl::StrJoin(*stack, " includes "), " includes ", canonical));
  }
  TY_ASSIGN_OR_RETURN(std::vector<GinStatement> statements, ParseGin(text, path));
  stack->push_back(canonical);
  absl::Status status = Add(std::move(statements), options, fs::path(path).parent_path().string(), stack);
  stack->pop_back();
  return status;
}

absl::Status GinConfig::Add(std::vector<GinStatement> statements, const GinLoadOptions& options,
                            const std::string& folder, std::vector<std::string>* stack) {
  for (GinStatement& st : statements) {
    statements_.push_back(st);
    if (st.kind == GinStatement::Kind::kImport) {
      const std::string bound = !st.alias.empty() ? st.alias
                                                  : (st.is_from ? st.module.substr(st.module.rfind('.') + 1)
                                                                : st.module.substr(0, st.module.find('.')));
      const std::string path = st.is_from || !st.alias.empty() ? st.module : bound;
      aliases_.emplace_back(bound, path);
      continue;
    }
    if (st.kind == GinStatement::Kind::kInclude) {
      std::vector<std::string> tried;
      std::string found;
      for (const std::string& dir : options.search_path) {
        tried.push_back((fs::path(dir) / st.include).string());
        if (fs::exists(tried.back())) {
          found = tried.back();
          break;
        }
      }
      if (found.empty()) {
        tried.push_back(fs::path(st.include).is_absolute() ? st.include : (fs::path(folder) / st.include).string());
        if (fs::exists(tried.back())) found = tried.back();
      }
      if (found.empty()) {
        return absl::NotFoundError(absl::StrCat(st.location.ToString(), ": include '", st.include,
                                                "' is not found; looked for ", absl::StrJoin(tried, ", "),
                                                " (add its root folder with --gin-search-path)"));
      }
      TY_ASSIGN_OR_RETURN(std::string text, ReadText(found));
      TY_RETURN_IF_ERROR(Read(found, text, options, stack));
      continue;
    }
    Binding b;
    b.module_selector = st.is_macro() ? st.selector : ExpandAliases(st.selector);
    for (Binding& earlier : bindings_) {
      if (!earlier.overridden && earlier.statement.scope == st.scope && earlier.statement.is_macro() == st.is_macro() &&
          (st.is_macro() ? earlier.module_selector == b.module_selector
                         : GinSelectorMatches(earlier.module_selector, b.module_selector)) &&
          earlier.statement.arg == st.arg) {
        earlier.overridden = true;
      }
    }
    b.statement = std::move(st);
    bindings_.push_back(std::move(b));
  }
  return absl::OkStatus();
}

std::string GinConfig::ExpandAliases(const std::string& selector) const {
  const size_t dot = selector.find('.');
  if (dot == std::string::npos) return selector;
  const std::string head = selector.substr(0, dot);
  for (auto it = aliases_.rbegin(); it != aliases_.rend(); ++it) {
    if (it->first == head) return it->second + selector.substr(dot);
  }
  return selector;
}

const GinConfig::Binding* GinConfig::Find(const std::string& scope, const std::string& configurable,
                                          const std::string& arg) {
  const std::vector<std::string> active = Scopes(scope);
  Binding* best = nullptr;
  int best_specificity = -1;
  for (Binding& b : bindings_) {
    const GinStatement& st = b.statement;
    if (st.is_macro() || st.arg != arg || !GinSelectorMatches(b.module_selector, configurable)) continue;
    const int specificity = Specificity(st.scope, active);
    if (specificity >= best_specificity && specificity >= 0) {  // later wins a tie
      best = &b;
      best_specificity = specificity;
    }
  }
  if (best != nullptr) best->used = true;
  return best;
}

bool GinConfig::Mentions(const std::string& scope, const std::string& configurable) const {
  const std::vector<std::string> active = Scopes(scope);
  for (const Binding& b : bindings_) {
    if (!b.statement.is_macro() && GinSelectorMatches(b.module_selector, configurable) &&
        Specificity(b.statement.scope, active) >= 0) {
      return true;
    }
  }
  return false;
}

absl::StatusOr<GinValue> GinConfig::Resolve(const GinValue& value, const GinLocation& where) {
  return ResolveDepth(value, where, 0);
}

absl::StatusOr<GinValue> GinConfig::ResolveDepth(const GinValue& value, const GinLocation& where, int depth) {
  if (depth > 64) {
    return absl::InvalidArgumentError(absl::StrCat(where.ToString(), ": macros refer to each other in a cycle"));
  }
  if (value.kind == GinValue::Kind::kMacro) {
    if (value.is_required()) {
      return absl::InvalidArgumentError(absl::StrCat(where.ToString(), ": a value is %gin.REQUIRED here; bind it"));
    }
    const size_t slash = value.s.rfind('/');
    const std::string scope = slash == std::string::npos ? "" : value.s.substr(0, slash);
    const std::string name = slash == std::string::npos ? value.s : value.s.substr(slash + 1);
    Binding* found = nullptr;
    for (Binding& b : bindings_) {
      if (b.statement.is_macro() && b.statement.selector == name && b.statement.scope == scope) found = &b;
    }
    if (found == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(where.ToString(), ": macro %", value.s, " is not bound"));
    }
    found->used = true;
    if (found->statement.value.is_required()) {
      return absl::InvalidArgumentError(absl::StrCat(where.ToString(), ": ", value.s, " is %gin.REQUIRED (",
                                                     found->statement.location.ToString(),
                                                     "); bind it: --gin-binding \"", value.s, " = ...\""));
    }
    return ResolveDepth(found->statement.value, found->statement.location, depth + 1);
  }
  if (value.kind == GinValue::Kind::kList || value.kind == GinValue::Kind::kTuple ||
      value.kind == GinValue::Kind::kDict) {
    GinValue out = value;
    for (GinValue& item : out.items) {
      TY_ASSIGN_OR_RETURN(item, ResolveDepth(item, where, depth + 1));
    }
    return out;
  }
  return value;
}

}  // namespace trainyard
