// The gradient transfer dtype's default and its one restriction.
#include <gtest/gtest.h>

#include "tierflow/grad_transfer.h"

namespace tierflow {
namespace {

TEST(GradTransfer, DefaultIsTheWeightsDtypeWhen16Bit) {
  EXPECT_EQ(DefaultGradTransferDType(DType::kBF16), DType::kBF16);
  EXPECT_EQ(DefaultGradTransferDType(DType::kF16), DType::kF16);
  EXPECT_EQ(DefaultGradTransferDType(DType::kF32), DType::kF32);
  EXPECT_EQ(GradTransferDType(DType::kBF16, std::nullopt), DType::kBF16);
  EXPECT_EQ(GradTransferDType(DType::kBF16, DType::kF32), DType::kF32);
}

TEST(GradTransfer, Fp16NeedsFp16Weights) {
  for (const DType weights : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (const DType transfer : {DType::kF32, DType::kBF16}) {
      EXPECT_TRUE(ValidateGradTransferDType("x", weights, transfer).ok());
    }
  }
  EXPECT_TRUE(ValidateGradTransferDType("x", DType::kF16, DType::kF16).ok());
  const Status s = ValidateGradTransferDType("--grad-transfer-dtype", DType::kBF16, DType::kF16);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(
      s.message().rfind("--grad-transfer-dtype: fp16 gradient transfer needs fp16 weights", 0), 0u)
      << s.message();
  EXPECT_NE(s.message().find("use bf16 or fp32"), std::string::npos) << s.message();
  EXPECT_FALSE(ValidateGradTransferDType("x", DType::kF32, DType::kF16).ok());
}

}  // namespace
}  // namespace tierflow
