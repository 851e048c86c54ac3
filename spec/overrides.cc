#include "spec/overrides.h"

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/status_macros.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/text_format.h"

namespace trainyard {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::EnumValueDescriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

struct PathElement {
  std::string name;
  int index = -1;  // -1: no [i]
};

absl::StatusOr<std::vector<PathElement>> ParsePath(absl::string_view path) {
  std::vector<PathElement> elements;
  for (absl::string_view part : absl::StrSplit(path, '.')) {
    PathElement element;
    const size_t bracket = part.find('[');
    if (bracket == absl::string_view::npos) {
      element.name = std::string(part);
    } else {
      element.name = std::string(part.substr(0, bracket));
      absl::string_view index = part.substr(bracket + 1);
      if (!absl::ConsumeSuffix(&index, "]") || !absl::SimpleAtoi(index, &element.index) || element.index < 0) {
        return absl::InvalidArgumentError(absl::StrCat("\"", part, "\" is not NAME or NAME[i] with i >= 0"));
      }
    }
    if (element.name.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("empty field name in path \"", path, "\""));
    }
    elements.push_back(std::move(element));
  }
  return elements;
}

std::string FieldNames(const Descriptor* descriptor) {
  std::vector<std::string> names;
  for (int i = 0; i < descriptor->field_count(); ++i) {
    names.push_back(descriptor->field(i)->name());
  }
  return absl::StrJoin(names, ", ");
}

std::string Unquote(absl::string_view value) {
  if (value.size() >= 2 &&
      ((value.front() == '"' && value.back() == '"') || (value.front() == '\'' && value.back() == '\''))) {
    value = value.substr(1, value.size() - 2);
  }
  return std::string(value);
}

const char* TypeName(const FieldDescriptor* field) {
  switch (field->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
      return "an integer (int32)";
    case FieldDescriptor::CPPTYPE_INT64:
      return "an integer (int64)";
    case FieldDescriptor::CPPTYPE_UINT32:
      return "a non-negative integer (uint32)";
    case FieldDescriptor::CPPTYPE_UINT64:
      return "a non-negative integer (uint64)";
    case FieldDescriptor::CPPTYPE_FLOAT:
    case FieldDescriptor::CPPTYPE_DOUBLE:
      return "a finite number";
    case FieldDescriptor::CPPTYPE_BOOL:
      return "true or false";
    case FieldDescriptor::CPPTYPE_ENUM:
      return "an enum name";
    case FieldDescriptor::CPPTYPE_STRING:
      return "a string";
    case FieldDescriptor::CPPTYPE_MESSAGE:
      return "a message in braces";
  }
  return "a value";
}

// Stores `v` in `field`: the singular value, a new element (index -1), or
// element `index` of a repeated field.
template <typename T>
absl::Status Store(Message* message, const FieldDescriptor* field, int index, T v,
                   void (Reflection::*set)(Message*, const FieldDescriptor*, T) const,
                   void (Reflection::*add)(Message*, const FieldDescriptor*, T) const,
                   void (Reflection::*set_repeated)(Message*, const FieldDescriptor*, int, T) const) {
  const Reflection* r = message->GetReflection();
  if (!field->is_repeated()) {
    (r->*set)(message, field, std::move(v));
  } else if (index < 0) {
    (r->*add)(message, field, std::move(v));
  } else {
    (r->*set_repeated)(message, field, index, std::move(v));
  }
  return absl::OkStatus();
}

// Sets enum `field` (element `index` if repeated, -1 = append) from the text
// `raw`: a value's name, quoted or not; lower case finds an upper-case name.
absl::Status SetEnum(Message* message, const FieldDescriptor* field, int index, absl::string_view raw) {
  const std::string text = std::string(absl::StripAsciiWhitespace(raw));
  const EnumValueDescriptor* value = field->enum_type()->FindValueByName(Unquote(text));
  if (value == nullptr) {
    value = field->enum_type()->FindValueByName(absl::AsciiStrToUpper(Unquote(text)));
  }
  if (value == nullptr) {
    std::vector<std::string> names;
    for (int i = 0; i < field->enum_type()->value_count(); ++i) {
      if (field->enum_type()->value(i)->number() != 0) {
        names.push_back(field->enum_type()->value(i)->name());
      }
    }
    return absl::InvalidArgumentError(
        absl::StrCat(field->name(), ": \"", raw, "\" is not one of ", absl::StrJoin(names, ", ")));
  }
  return Store(message, field, index, value, &Reflection::SetEnum, &Reflection::AddEnum, &Reflection::SetRepeatedEnum);
}

// Sets message `field` (element `index` if repeated, -1 = append) to the
// text-format fields inside the braces of `raw`.
absl::Status SetMessage(Message* message, const FieldDescriptor* field, int index, absl::string_view raw) {
  const Reflection* r = message->GetReflection();
  absl::string_view body = absl::StripAsciiWhitespace(raw);
  if (!absl::ConsumePrefix(&body, "{") || !absl::ConsumeSuffix(&body, "}")) {
    return absl::InvalidArgumentError(absl::StrCat(field->name(),
                                                   " is a message: give its fields in text format inside braces, "
                                                   "e.g. ",
                                                   field->name(), "={...}, or set one field with ", field->name(),
                                                   ".NAME=VALUE"));
  }
  Message* target;
  if (!field->is_repeated())
    target = r->MutableMessage(message, field);
  else if (index < 0)
    target = r->AddMessage(message, field);
  else
    target = r->MutableRepeatedMessage(message, field, index);
  target->Clear();
  if (!google::protobuf::TextFormat::ParseFromString(std::string(body), target)) {
    return absl::InvalidArgumentError(
        absl::StrCat(field->name(), ": \"", body, "\" is not a valid text-format ", field->message_type()->name()));
  }
  return absl::OkStatus();
}

// Sets `field` of `message` (element `index` if repeated, -1 = append) from
// the text `raw`.
absl::Status SetScalar(Message* message, const FieldDescriptor* field, int index, absl::string_view raw) {
  auto bad = [&] {
    return absl::InvalidArgumentError(absl::StrCat(field->name(), " expects ", TypeName(field), ", got \"", raw, "\""));
  };
  const std::string text = std::string(absl::StripAsciiWhitespace(raw));
  switch (field->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32: {
      int32_t v;
      if (!absl::SimpleAtoi(text, &v)) return bad();
      return Store(message, field, index, v, &Reflection::SetInt32, &Reflection::AddInt32,
                   &Reflection::SetRepeatedInt32);
    }
    case FieldDescriptor::CPPTYPE_INT64: {
      int64_t v;
      if (!absl::SimpleAtoi(text, &v)) return bad();
      return Store(message, field, index, v, &Reflection::SetInt64, &Reflection::AddInt64,
                   &Reflection::SetRepeatedInt64);
    }
    case FieldDescriptor::CPPTYPE_UINT32: {
      uint32_t v;
      if (!absl::SimpleAtoi(text, &v)) return bad();
      return Store(message, field, index, v, &Reflection::SetUInt32, &Reflection::AddUInt32,
                   &Reflection::SetRepeatedUInt32);
    }
    case FieldDescriptor::CPPTYPE_UINT64: {
      uint64_t v;
      if (!absl::SimpleAtoi(text, &v)) return bad();
      return Store(message, field, index, v, &Reflection::SetUInt64, &Reflection::AddUInt64,
                   &Reflection::SetRepeatedUInt64);
    }
    case FieldDescriptor::CPPTYPE_FLOAT: {
      float v;
      if (!absl::SimpleAtof(text, &v) || !std::isfinite(v)) return bad();
      return Store(message, field, index, v, &Reflection::SetFloat, &Reflection::AddFloat,
                   &Reflection::SetRepeatedFloat);
    }
    case FieldDescriptor::CPPTYPE_DOUBLE: {
      double v;
      if (!absl::SimpleAtod(text, &v) || !std::isfinite(v)) return bad();
      return Store(message, field, index, v, &Reflection::SetDouble, &Reflection::AddDouble,
                   &Reflection::SetRepeatedDouble);
    }
    case FieldDescriptor::CPPTYPE_BOOL: {
      bool v;
      if (!absl::SimpleAtob(text, &v)) return bad();
      return Store(message, field, index, v, &Reflection::SetBool, &Reflection::AddBool, &Reflection::SetRepeatedBool);
    }
    case FieldDescriptor::CPPTYPE_ENUM:
      return SetEnum(message, field, index, raw);
    case FieldDescriptor::CPPTYPE_STRING: {
      return Store(message, field, index, Unquote(raw), &Reflection::SetString, &Reflection::AddString,
                   &Reflection::SetRepeatedString);
    }
    case FieldDescriptor::CPPTYPE_MESSAGE:
      return SetMessage(message, field, index, raw);
  }
  return bad();
}

absl::Status ApplyPath(const std::vector<PathElement>& path, absl::string_view value, Message* message) {
  std::string walked;
  for (size_t i = 0; i < path.size(); ++i) {
    const PathElement& element = path[i];
    const bool last = i + 1 == path.size();
    const Descriptor* descriptor = message->GetDescriptor();
    const FieldDescriptor* field = descriptor->FindFieldByName(element.name);
    if (!walked.empty()) absl::StrAppend(&walked, ".");
    absl::StrAppend(&walked, element.name);
    if (field == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(walked, ": no such field in ", descriptor->name(), "; allowed: ", FieldNames(descriptor)));
    }
    const Reflection* r = message->GetReflection();
    if (field->is_repeated()) {
      const int size = r->FieldSize(*message, field);
      if (element.index < 0) {
        if (!last || field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
          return absl::InvalidArgumentError(
              absl::StrCat(walked, " is a repeated message field; use ", element.name, "[i].FIELD=VALUE"));
        }
        // A whole repeated scalar: a comma-separated list replaces it.
        r->ClearField(message, field);
        if (absl::StripAsciiWhitespace(value).empty()) return absl::OkStatus();
        for (absl::string_view item : absl::StrSplit(value, ',')) {
          TY_RETURN_IF_ERROR(SetScalar(message, field, -1, item));
        }
        return absl::OkStatus();
      }
      absl::StrAppend(&walked, "[", element.index, "]");
      if (element.index > size) {
        return absl::InvalidArgumentError(absl::StrCat(walked, ": index out of range; ", element.name, " has ", size,
                                                       " element(s), so i may be 0..", size));
      }
      const int index = element.index == size ? -1 : element.index;  // size: append
      if (last) return SetScalar(message, field, index, value);
      if (field->cpp_type() != FieldDescriptor::CPPTYPE_MESSAGE) {
        return absl::InvalidArgumentError(absl::StrCat(walked, " is not a message"));
      }
      message = index < 0 ? r->AddMessage(message, field) : r->MutableRepeatedMessage(message, field, index);
      continue;
    }
    if (element.index >= 0) {
      return absl::InvalidArgumentError(absl::StrCat(walked, " is not a repeated field"));
    }
    if (last) return SetScalar(message, field, -1, value);
    if (field->cpp_type() != FieldDescriptor::CPPTYPE_MESSAGE) {
      return absl::InvalidArgumentError(absl::StrCat(walked, " is ", TypeName(field), ", not a message with fields"));
    }
    message = r->MutableMessage(message, field);
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ApplyOverride(absl::string_view assignment, Message* message) {
  const size_t eq = assignment.find('=');
  if (eq == absl::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat("--set ", assignment, ": expected path.to.field=value"));
  }
  const absl::string_view path = absl::StripAsciiWhitespace(assignment.substr(0, eq));
  const absl::string_view value = assignment.substr(eq + 1);
  absl::StatusOr<std::vector<PathElement>> elements = ParsePath(path);
  absl::Status status = elements.ok() ? ApplyPath(*elements, value, message) : elements.status();
  return Annotate(status, absl::StrCat("--set ", assignment));
}

absl::Status ApplyOverrides(const std::vector<std::string>& assignments, Message* message) {
  for (const std::string& assignment : assignments) {
    TY_RETURN_IF_ERROR(ApplyOverride(assignment, message));
  }
  return absl::OkStatus();
}

}  // namespace trainyard
