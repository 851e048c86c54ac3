#include "data/digits_to_words.h"

#include <string>

namespace trainyard {
namespace {

const char* const kOnes[] = {"zero",     "one",     "two",     "three",     "four",     "five",    "six",
                             "seven",    "eight",   "nine",    "ten",       "eleven",   "twelve",  "thirteen",
                             "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen"};
const char* const kTens[] = {"", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"};

// 1..999
std::string BelowThousand(int64_t n) {
  std::string out;
  if (n >= 100) {
    out = std::string(kOnes[n / 100]) + " hundred";
    n %= 100;
    if (n == 0) return out;
    out += " ";
  }
  if (n < 20) return out + kOnes[n];
  out += kTens[n / 10];
  if (n % 10 != 0) out += std::string("-") + kOnes[n % 10];
  return out;
}

uint64_t Mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  return x ^ (x >> 33);
}

}  // namespace

std::string NumberToWords(int64_t n) {
  if (n == 0) return "zero";
  std::string out;
  if (n >= 1000) {
    out = BelowThousand(n / 1000) + " thousand";
    n %= 1000;
    if (n == 0) return out;
    out += " ";
  }
  return out + BelowThousand(n);
}

DigitsToWordsSplit SplitOfNumber(int64_t n) {
  const uint64_t bucket = Mix(static_cast<uint64_t>(n)) % 10;
  if (bucket == 0) return DigitsToWordsSplit::kTest;
  if (bucket == 1) return DigitsToWordsSplit::kValidation;
  return DigitsToWordsSplit::kTrain;
}

}  // namespace trainyard
