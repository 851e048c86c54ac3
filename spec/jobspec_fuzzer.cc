// libFuzzer entry point for the job-spec front end: whatever the bytes, the
// parsers, the override applier and the validator must return a Status and
// never crash, and a spec that validates must be a fixed point: formatting
// it, parsing it back and validating again reproduces it exactly.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "absl/strings/string_view.h"
#include "google/protobuf/util/message_differencer.h"
#include "spec/jobspec.h"
#include "spec/jobspec_validator.h"
#include "spec/overrides.h"

namespace {

void CheckFixedPoint(const trainyard::JobSpec& normalized) {
  absl::StatusOr<trainyard::JobSpec> again =
      trainyard::ParseJobSpec(trainyard::FormatJobSpecText(normalized), "roundtrip", trainyard::SpecFormat::kText);
  if (!again.ok()) std::abort();
  if (!trainyard::ValidateAndNormalize(&*again).ok()) std::abort();
  if (!google::protobuf::util::MessageDifferencer::Equals(normalized, *again)) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::string_view input(reinterpret_cast<const char*>(data), size);
  // The first line, if it looks like one, is also tried as a --set override.
  const size_t newline = input.find('\n');
  const absl::string_view first_line = input.substr(0, newline);
  for (auto format : {trainyard::SpecFormat::kText, trainyard::SpecFormat::kJson}) {
    absl::StatusOr<trainyard::JobSpec> spec = trainyard::ParseJobSpec(input, "fuzz", format);
    if (!spec.ok()) continue;
    trainyard::JobSpec overridden = *spec;
    (void)trainyard::ApplyOverride(first_line, &overridden);
    for (trainyard::JobSpec* candidate : {&*spec, &overridden}) {
      trainyard::ValidationOptions options;
      options.output_root = "/srv/trainyard";
      if (trainyard::ValidateAndNormalize(candidate, options).ok()) CheckFixedPoint(*candidate);
    }
  }
  trainyard::JobSpec empty;
  (void)trainyard::ApplyOverride(input, &empty);
  return 0;
}
