#include "checkpoint/zstd.h"

#include <zstd.h>

#include <memory>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace trainyard {

absl::StatusOr<std::string> ZstdDecompress(absl::string_view in, uint64_t max_bytes, const std::string& what) {
  std::unique_ptr<ZSTD_DStream, size_t (*)(ZSTD_DStream*)> stream(ZSTD_createDStream(), ZSTD_freeDStream);
  if (stream == nullptr) return absl::InternalError("zstd: ZSTD_createDStream failed");
  std::string out;
  ZSTD_inBuffer input{in.data(), in.size(), 0};
  std::string buffer(ZSTD_DStreamOutSize(), '\0');
  while (true) {
    ZSTD_outBuffer output{buffer.data(), buffer.size(), 0};
    const size_t rc = ZSTD_decompressStream(stream.get(), &output, &input);
    if (ZSTD_isError(rc)) {
      return absl::DataLossError(absl::StrCat(what, ": not zstd-compressed data (", ZSTD_getErrorName(rc), ")"));
    }
    if (out.size() + output.pos > max_bytes) {
      return absl::DataLossError(absl::StrCat(what, ": decompresses to more than ", max_bytes, " bytes"));
    }
    out.append(buffer.data(), output.pos);
    const bool consumed = input.pos == input.size;
    if (consumed && rc == 0) break;  // every frame ended
    // All input in, the output not full, and a frame still open: cut short.
    if (consumed && output.pos < output.size) {
      return absl::DataLossError(absl::StrCat(what, ": a zstd frame cut short"));
    }
  }
  return out;
}

}  // namespace trainyard
