#include "tierflow/status.h"

#include <cerrno>

#include <gtest/gtest.h>

namespace tierflow {
namespace {

StatusOr<int> Half(int x) {
  if (x % 2) return InvalidArgumentError("odd: " + std::to_string(x));
  return x / 2;
}

Status UseAssign(int x, int* out) {
  TF_ASSIGN_OR_RETURN(int h, Half(x));
  *out = h;
  return Status::Ok();
}

TEST(Status, ErrnoMapsToTypedCodesAndNamesThePath) {
  Status s = ErrnoStatus(ENOSPC, "write /nvme/run/state.bin at offset 4096");
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("/nvme/run/state.bin"), std::string::npos);
  EXPECT_NE(s.message().find("disk is full"), std::string::npos);
  EXPECT_EQ(ErrnoStatus(ENOENT, "x").code(), StatusCode::kNotFound);
  EXPECT_EQ(ErrnoStatus(EIO, "x").code(), StatusCode::kIoError);
  EXPECT_EQ(ErrnoStatus(EROFS, "x").code(), StatusCode::kFailedPrecondition);
}

TEST(Status, AssignOrReturnPropagatesErrorsAndValues) {
  int out = -1;
  EXPECT_TRUE(UseAssign(8, &out).ok());
  EXPECT_EQ(out, 4);
  Status s = UseAssign(7, &out);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "odd: 7");
  EXPECT_EQ(out, 4);
}

TEST(Status, WithContextPrefixesAndKeepsCode) {
  Status s = DataLossError("crc mismatch").WithContext("tensor layers.0/exp_avg");
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_EQ(s.ToString(), "DataLoss: tensor layers.0/exp_avg: crc mismatch");
  EXPECT_TRUE(Status::Ok().WithContext("x").ok());
}

}  // namespace
}  // namespace tierflow
