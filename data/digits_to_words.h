// The bundled task's data: numbers written in digits, to be spelled out in
// English ("1234" -> "one thousand two hundred thirty-four"). Generated, not
// downloaded: every example is a pure function of its number, and each
// number belongs to exactly one split by a fixed hash, so the splits are
// disjoint and identical on every machine. Exact-match accuracy measures a
// model's quality exactly.
#ifndef TRAINYARD_DATA_DIGITS_TO_WORDS_H_
#define TRAINYARD_DATA_DIGITS_TO_WORDS_H_

#include <cstdint>
#include <string>

namespace trainyard {

// Numbers 0 .. kMaxNumber are used.
constexpr int64_t kDigitsToWordsMaxNumber = 999999;

// "0" -> "zero", "40" -> "forty", "115" -> "one hundred fifteen",
// "1234" -> "one thousand two hundred thirty-four".
std::string NumberToWords(int64_t n);

enum class DigitsToWordsSplit { kTrain, kValidation, kTest };

// 80 % train, 10 % validation, 10 % test, by a hash of the number.
DigitsToWordsSplit SplitOfNumber(int64_t n);

}  // namespace trainyard

#endif  // TRAINYARD_DATA_DIGITS_TO_WORDS_H_
