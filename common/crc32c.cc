#include "common/crc32c.h"

#include <array>
#include <cstddef>

namespace trainyard {
namespace {

constexpr uint32_t kCrc32cPolynomial = 0x82F63B78;  // reflected Castagnoli
constexpr uint32_t kMaskDelta = 0xA282EAD8;

// Slicing-by-8 tables: table[0] is the byte-wise one; table[k][b] is byte b
// followed by k zero bytes.
using Crc32cTables = std::array<std::array<uint32_t, 256>, 8>;

const Crc32cTables& Tables() {
  static const Crc32cTables tables = [] {
    Crc32cTables t{};
    for (uint32_t b = 0; b < 256; ++b) {
      uint32_t crc = b;
      for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (kCrc32cPolynomial & (0u - (crc & 1)));
      t[0][b] = crc;
    }
    for (uint32_t b = 0; b < 256; ++b) {
      for (int k = 1; k < 8; ++k) t[k][b] = (t[k - 1][b] >> 8) ^ t[0][t[k - 1][b] & 0xFF];
    }
    return t;
  }();
  return tables;
}

}  // namespace

uint32_t Crc32c(absl::string_view data, uint32_t crc) {
  const Crc32cTables& t = Tables();
  const auto* p = reinterpret_cast<const unsigned char*>(data.data());
  size_t n = data.size();
  crc = ~crc;
  for (; n >= 8; p += 8, n -= 8) {
    const uint32_t lo = crc ^ (uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24);
    crc = t[7][lo & 0xFF] ^ t[6][(lo >> 8) & 0xFF] ^ t[5][(lo >> 16) & 0xFF] ^ t[4][lo >> 24] ^ t[3][p[4]] ^
          t[2][p[5]] ^ t[1][p[6]] ^ t[0][p[7]];
  }
  for (; n > 0; ++p, --n) crc = (crc >> 8) ^ t[0][(crc ^ *p) & 0xFF];
  return ~crc;
}

uint32_t MaskCrc32c(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + kMaskDelta; }

}  // namespace trainyard
