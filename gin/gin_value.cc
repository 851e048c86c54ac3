#include "gin/gin_value.h"

#include <charconv>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace trainyard {
namespace {

// Python's repr of a float: the shortest digits that read back to the same
// double, fixed notation for exponents in [-4, 16), otherwise scientific
// with at least two exponent digits ("1e-05", "1e+16").
std::string PythonFloat(double v) {
  if (v != v) return "nan";
  if (v == 1.0 / 0.0) return "inf";
  if (v == -1.0 / 0.0) return "-inf";
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::scientific);
  if (ec != std::errc()) return absl::StrCat(v);
  std::string sci(buf, end);  // "-1.2345e-05"
  const size_t e = sci.find('e');
  std::string mantissa = sci.substr(0, e);
  const int exponent = std::atoi(sci.c_str() + e + 1);
  const bool negative = mantissa[0] == '-';
  if (negative) mantissa.erase(0, 1);
  std::string digits;
  for (char c : mantissa) {
    if (c != '.') digits.push_back(c);
  }
  std::string out;
  if (exponent >= -4 && exponent < 16) {
    if (exponent < 0) {
      out = "0." + std::string(static_cast<size_t>(-exponent - 1), '0') + digits;
    } else if (static_cast<int>(digits.size()) <= exponent + 1) {
      out = digits + std::string(static_cast<size_t>(exponent + 1) - digits.size(), '0') + ".0";
    } else {
      out =
          digits.substr(0, static_cast<size_t>(exponent + 1)) + "." + digits.substr(static_cast<size_t>(exponent + 1));
    }
  } else {
    out = digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char exp[16];
    std::snprintf(exp, sizeof(exp), "e%c%02d", exponent < 0 ? '-' : '+', exponent < 0 ? -exponent : exponent);
    out += exp;
  }
  return negative ? "-" + out : out;
}

// Python's repr of a str: single quotes unless the text holds ' and no ".
std::string PythonString(const std::string& s) {
  const bool dq = s.find('\'') != std::string::npos && s.find('"') == std::string::npos;
  const char quote = dq ? '"' : '\'';
  std::string out(1, quote);
  for (unsigned char c : s) {
    switch (c) {
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c == quote) {
          out += '\\';
          out += static_cast<char>(c);
        } else if (c < 0x20 || c == 0x7f) {
          char hex[8];
          std::snprintf(hex, sizeof(hex), "\\x%02x", c);
          out += hex;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += quote;
  return out;
}

}  // namespace

std::string GinLocation::ToString() const { return absl::StrCat(file, ":", line); }

GinValue GinValue::Bool(bool v) {
  GinValue x;
  x.kind = Kind::kBool;
  x.b = v;
  return x;
}

GinValue GinValue::Int(int64_t v) {
  GinValue x;
  x.kind = Kind::kInt;
  x.i = v;
  return x;
}

GinValue GinValue::Float(double v) {
  GinValue x;
  x.kind = Kind::kFloat;
  x.f = v;
  return x;
}

GinValue GinValue::String(std::string v) {
  GinValue x;
  x.kind = Kind::kString;
  x.s = std::move(v);
  return x;
}

GinValue GinValue::Reference(std::string name, bool evaluate) {
  GinValue x;
  x.kind = Kind::kReference;
  x.s = std::move(name);
  x.evaluate = evaluate;
  return x;
}

GinValue GinValue::Macro(std::string name) {
  GinValue x;
  x.kind = Kind::kMacro;
  x.s = std::move(name);
  return x;
}

std::string GinValue::ToString() const {
  auto join = [this](const char* sep) {
    return absl::StrJoin(items, sep, [](std::string* out, const GinValue& v) { out->append(v.ToString()); });
  };
  switch (kind) {
    case Kind::kNone:
      return "None";
    case Kind::kBool:
      return b ? "True" : "False";
    case Kind::kInt:
      return absl::StrCat(i);
    case Kind::kFloat:
      return PythonFloat(f);
    case Kind::kString:
      return PythonString(s);
    case Kind::kList:
      return "[" + join(", ") + "]";
    case Kind::kTuple:
      return items.size() == 1 ? "(" + items[0].ToString() + ",)" : "(" + join(", ") + ")";
    case Kind::kDict: {
      std::string out = "{";
      for (size_t k = 0; k + 1 < items.size(); k += 2) {
        if (k > 0) out += ", ";
        out += items[k].ToString() + ": " + items[k + 1].ToString();
      }
      return out + "}";
    }
    case Kind::kReference:
      return "@" + s + (evaluate ? "()" : "");
    case Kind::kMacro:
      return "%" + s;
  }
  return "";
}

bool operator==(const GinValue& a, const GinValue& b) {
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case GinValue::Kind::kNone:
      return true;
    case GinValue::Kind::kBool:
      return a.b == b.b;
    case GinValue::Kind::kInt:
      return a.i == b.i;
    case GinValue::Kind::kFloat:
      return a.f == b.f;
    case GinValue::Kind::kString:
    case GinValue::Kind::kMacro:
      return a.s == b.s;
    case GinValue::Kind::kReference:
      return a.s == b.s && a.evaluate == b.evaluate;
    case GinValue::Kind::kList:
    case GinValue::Kind::kTuple:
    case GinValue::Kind::kDict:
      return a.items == b.items;
  }
  return false;
}

}  // namespace trainyard
