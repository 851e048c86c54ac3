// libFuzzer entry point for the OCDBT manifest and B+tree node decoders:
// whatever the bytes, they return a value or a Status and never crash. The
// input is decoded as it is, and also wrapped in a valid header and CRC-32C
// (its first byte choosing manifest or node) so that the body's decoding is
// reached.
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "checkpoint/ocdbt.h"

namespace {

std::string Wrap(uint32_t magic, absl::string_view body) {
  std::string out;
  for (int i = 3; i >= 0; --i) out.push_back(static_cast<char>((magic >> (8 * i)) & 0xff));
  const uint64_t length = 4 + 8 + 2 + body.size() + 4;
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((length >> (8 * i)) & 0xff));
  out.push_back(0);  // version
  out.push_back(0);  // uncompressed
  out.append(body.data(), body.size());
  const uint32_t crc = trainyard::Crc32c(out);
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((crc >> (8 * i)) & 0xff));
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view in(reinterpret_cast<const char*>(data), size);
  (void)trainyard::DecodeOcdbtManifest(in, "fuzz");
  (void)trainyard::DecodeOcdbtNode(in, "fuzz", "", "");
  if (size == 0) return 0;
  if (data[0] & 1) {
    (void)trainyard::DecodeOcdbtManifest(Wrap(0x0cdb3a2a, in.substr(1)), "fuzz");
  } else {
    (void)trainyard::DecodeOcdbtNode(Wrap(0x0cdb20de, in.substr(1)), "fuzz", "d/", "k");
  }
  return 0;
}
