// Prints gin files' statements as ParseGin reads them, one JSON object per
// line (kind, line and the statement's parts, values as Python's repr), for
// comparison with PyPI's gin-config parsing the same files (gin_parse.py).
//   dump_gin FILE...
#include <fstream>
#include <iostream>
#include <sstream>

#include "gin/parser.h"
#include "nlohmann/json.hpp"

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    std::ifstream in(argv[i], std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    absl::StatusOr<std::vector<trainyard::GinStatement>> statements = trainyard::ParseGin(text.str(), argv[i]);
    if (!statements.ok()) {
      std::cerr << statements.status().message() << "\n";
      return 1;
    }
    for (const trainyard::GinStatement& st : *statements) {
      nlohmann::ordered_json j;
      j["line"] = st.location.line;
      switch (st.kind) {
        case trainyard::GinStatement::Kind::kBinding:
          j["kind"] = "binding";
          j["scope"] = st.scope;
          j["selector"] = st.selector;
          j["arg"] = st.arg;
          j["value"] = st.value.ToString();
          break;
        case trainyard::GinStatement::Kind::kImport:
          j["kind"] = "import";
          j["module"] = st.module;
          j["is_from"] = st.is_from;
          j["alias"] = st.alias;
          break;
        case trainyard::GinStatement::Kind::kInclude:
          j["kind"] = "include";
          j["file"] = st.include;
          break;
      }
      std::cout << j.dump() << "\n";
    }
  }
  return 0;
}
