#include "common/grpc/status.h"

#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainyard {
namespace {

using ::testing::Eq;

TEST(GrpcStatusTest, EveryCanonicalCodeRoundTrips) {
  for (int code = 0; code <= 16; ++code) {
    const absl::Status original(static_cast<absl::StatusCode>(code),
                                code == 0 ? "" : "message " + std::to_string(code));
    const grpc::Status wire = ToGrpcStatus(original);
    EXPECT_EQ(static_cast<int>(wire.error_code()), code);
    EXPECT_EQ(FromGrpcStatus(wire), original);
  }
}

TEST(GrpcStatusTest, SpecificMappings) {
  EXPECT_EQ(ToGrpcStatus(absl::InvalidArgumentError("bad")).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(ToGrpcStatus(absl::UnavailableError("retry")).error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(FromGrpcStatus(grpc::Status(grpc::StatusCode::ABORTED, "restart")),
              StatusIs(absl::StatusCode::kAborted, Eq("restart")));
}

TEST(GrpcStatusTest, OutOfRangeCodeBecomesUnknown) {
  EXPECT_THAT(FromGrpcStatus(grpc::Status(static_cast<grpc::StatusCode>(42), "odd peer")),
              StatusIs(absl::StatusCode::kUnknown, Eq("odd peer")));
}

}  // namespace
}  // namespace trainyard
