// ToGrpcStatus / FromGrpcStatus: every code maps to the code of the same name (the table
// below is written from the two enums' documentation, not from the code under test), the
// message survives, and unknown codes degrade to UNKNOWN without losing the number. An
// exception escaping a handler or a main becomes a status or exit code that names it.
#include "common/status/grpc_status.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <new>
#include <stdexcept>
#include <utility>
#include <vector>

namespace rlmesh {
namespace {

const std::vector<std::pair<absl::StatusCode, grpc::StatusCode>>& SameNamedCodes() {
  static const auto* table = new std::vector<std::pair<absl::StatusCode, grpc::StatusCode>>{
      {absl::StatusCode::kCancelled, grpc::StatusCode::CANCELLED},
      {absl::StatusCode::kUnknown, grpc::StatusCode::UNKNOWN},
      {absl::StatusCode::kInvalidArgument, grpc::StatusCode::INVALID_ARGUMENT},
      {absl::StatusCode::kDeadlineExceeded, grpc::StatusCode::DEADLINE_EXCEEDED},
      {absl::StatusCode::kNotFound, grpc::StatusCode::NOT_FOUND},
      {absl::StatusCode::kAlreadyExists, grpc::StatusCode::ALREADY_EXISTS},
      {absl::StatusCode::kPermissionDenied, grpc::StatusCode::PERMISSION_DENIED},
      {absl::StatusCode::kResourceExhausted, grpc::StatusCode::RESOURCE_EXHAUSTED},
      {absl::StatusCode::kFailedPrecondition, grpc::StatusCode::FAILED_PRECONDITION},
      {absl::StatusCode::kAborted, grpc::StatusCode::ABORTED},
      {absl::StatusCode::kOutOfRange, grpc::StatusCode::OUT_OF_RANGE},
      {absl::StatusCode::kUnimplemented, grpc::StatusCode::UNIMPLEMENTED},
      {absl::StatusCode::kInternal, grpc::StatusCode::INTERNAL},
      {absl::StatusCode::kUnavailable, grpc::StatusCode::UNAVAILABLE},
      {absl::StatusCode::kDataLoss, grpc::StatusCode::DATA_LOSS},
      {absl::StatusCode::kUnauthenticated, grpc::StatusCode::UNAUTHENTICATED},
  };
  return *table;
}

TEST(GrpcStatusTest, OkMapsToOkBothWays) {
  EXPECT_TRUE(ToGrpcStatus(absl::OkStatus()).ok());
  EXPECT_TRUE(FromGrpcStatus(grpc::Status::OK).ok());
}

TEST(GrpcStatusTest, EveryCodeMapsToTheSameNamedCodeWithItsMessage) {
  EXPECT_EQ(SameNamedCodes().size(), 16u);
  for (const auto& [absl_code, grpc_code] : SameNamedCodes()) {
    SCOPED_TRACE(absl::StatusCodeToString(absl_code));
    const absl::Status in(absl_code, "field sampling_params.n: expected >= 1, got 0");
    const grpc::Status out = ToGrpcStatus(in);
    EXPECT_EQ(out.error_code(), grpc_code);
    EXPECT_EQ(out.error_message(), "field sampling_params.n: expected >= 1, got 0");
    const absl::Status back = FromGrpcStatus(out);
    EXPECT_EQ(back.code(), absl_code);
    EXPECT_EQ(back, in);
  }
}

TEST(GrpcStatusTest, UnknownCodesBecomeUnknownAndKeepTheNumber) {
  const grpc::Status odd(static_cast<grpc::StatusCode>(42), "weird");
  const absl::Status a = FromGrpcStatus(odd);
  EXPECT_EQ(a.code(), absl::StatusCode::kUnknown);
  EXPECT_EQ(a.message(), "grpc status code 42: weird");
  // absl::Status itself stores an out-of-range code as kUnknown.
  const grpc::Status g = ToGrpcStatus(absl::Status(static_cast<absl::StatusCode>(99), "odd"));
  EXPECT_EQ(g.error_code(), grpc::StatusCode::UNKNOWN);
  EXPECT_EQ(g.error_message(), "odd");
}

TEST(GrpcStatusTest, EmptyMessageStaysEmpty) {
  const grpc::Status g = ToGrpcStatus(absl::NotFoundError(""));
  EXPECT_EQ(g.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(g.error_message(), "");
}

// A handler shaped like the services' (a function-try-block around the body).
grpc::Status Handler(int what) try {
  if (what == 1) throw std::runtime_error("[json.exception.type_error.302] type must be number");
  if (what == 2) throw std::bad_alloc();
  if (what == 3) throw 7;
  return grpc::Status::OK;
} catch (...) {
  return StatusFromCurrentException("TestService.Call");
}

TEST(GrpcStatusTest, AnExceptionInAHandlerBecomesAStatusNamingTheRpc) {
  EXPECT_TRUE(Handler(0).ok());
  const grpc::Status thrown = Handler(1);
  EXPECT_EQ(thrown.error_code(), grpc::StatusCode::INTERNAL);
  EXPECT_EQ(thrown.error_message(),
            "TestService.Call: unexpected exception: [json.exception.type_error.302] type must be "
            "number");
  const grpc::Status memory = Handler(2);
  EXPECT_EQ(memory.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(memory.error_message(), ::testing::HasSubstr("out of memory"));
  EXPECT_THAT(Handler(3).error_message(), ::testing::HasSubstr("not a std::exception"));
}

TEST(GrpcStatusTest, AnExceptionInMainBecomesExitStatusOne) {
  int code = 0;
  try {
    throw std::logic_error("broken");
  } catch (...) {
    code = ExitFromCurrentException("test");
  }
  EXPECT_EQ(code, 1);
}

}  // namespace
}  // namespace rlmesh
