// gMock matchers for absl::Status, so tests assert the specific code (and
// message) instead of "not OK":
//   EXPECT_THAT(status, StatusIs(absl::StatusCode::kInvalidArgument,
//                                HasSubstr("batch_size")));
//   EXPECT_THAT(status, IsOk());
#ifndef TRAINYARD_COMMON_TESTING_STATUS_MATCHERS_H_
#define TRAINYARD_COMMON_TESTING_STATUS_MATCHERS_H_

#include <ostream>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gmock/gmock.h"

namespace trainyard {
namespace internal_status {

inline const absl::Status& GetStatus(const absl::Status& status) { return status; }
template <typename T>
const absl::Status& GetStatus(const absl::StatusOr<T>& status_or) {
  return status_or.status();
}

}  // namespace internal_status

MATCHER_P2(StatusIs, code, message_matcher, std::string("has code ") + absl::StatusCodeToString(code)) {
  const absl::Status& status = internal_status::GetStatus(arg);
  *result_listener << "whose status is " << status;
  return status.code() == code &&
         ::testing::ExplainMatchResult(message_matcher, std::string(status.message()), result_listener);
}

MATCHER_P(StatusCodeIs, code, std::string("has code ") + absl::StatusCodeToString(code)) {
  const absl::Status& status = internal_status::GetStatus(arg);
  *result_listener << "whose status is " << status;
  return status.code() == code;
}

MATCHER(IsOk, "is OK") {
  const absl::Status& status = internal_status::GetStatus(arg);
  *result_listener << "whose status is " << status;
  return status.ok();
}

// A StatusOr that is OK and whose value matches `value_matcher`.
MATCHER_P(IsOkAndHolds, value_matcher, "is OK and holds a value that matches") {
  if (!arg.ok()) {
    *result_listener << "whose status is " << arg.status();
    return false;
  }
  return ::testing::ExplainMatchResult(value_matcher, *arg, result_listener);
}

}  // namespace trainyard

#endif  // TRAINYARD_COMMON_TESTING_STATUS_MATCHERS_H_
