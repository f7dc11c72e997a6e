// The NCCL backend on one rank (the only NCCL check one GPU allows: NCCL
// refuses two ranks on one device): the group forms without MPI, and each
// collective does what the interface says, on device buffers. Skipped,
// with the reason, where no GPU is usable; a multi-GPU check waits for a
// multi-GPU machine (README).
#include <cuda_runtime_api.h>

#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "comm/nccl_communicator.h"
#include "common/half.h"
#include "tests/common/require.h"
#include "tierflow/device.h"

namespace tierflow::comm {
namespace {

class NcclCommunicatorCuda : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string why = CudaUnavailableReason();
    if (!why.empty()) TIERFLOW_SKIP_WITHOUT("gpu") << "no GPU: " << why;
    auto c = NcclCommunicator::Create(nullptr, 0);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    comm_ = std::move(c).value();
  }
  template <typename T>
  T* Upload(const std::vector<T>& host) {
    void* p = nullptr;
    EXPECT_EQ(cudaMalloc(&p, host.size() * sizeof(T)), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(p, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice),
              cudaSuccess);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    owned_.push_back(p);
    return static_cast<T*>(p);
  }
  template <typename T>
  std::vector<T> Download(const T* device, size_t n) {
    std::vector<T> host(n);
    EXPECT_EQ(cudaMemcpy(host.data(), device, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return host;
  }
  void TearDown() override {
    for (void* p : owned_) (void)cudaFree(p);
  }
  std::unique_ptr<NcclCommunicator> comm_;
  std::vector<void*> owned_;
};

TEST_F(NcclCommunicatorCuda, OneRankReduceScatterWidensAndAccumulates) {
  EXPECT_EQ(comm_->backend(), "nccl");
  EXPECT_EQ(comm_->buffers(), BufferKind::kDevice);
  ASSERT_EQ(comm_->world_size(), 1);
  const size_t n = 100003;  // odd: the kernels' tails
  std::vector<bf16> halves(n);
  std::vector<float> expected(n);
  for (size_t i = 0; i < n; ++i) {
    const float v = static_cast<float>(static_cast<int>(i % 97) - 48) * 0.125f;
    halves[i] = FloatToBf16(v);
    expected[i] = Bf16ToFloat(halves[i]);
  }
  auto part = Partition::Even(n, 1, 16384);
  ASSERT_TRUE(part.ok());
  const bf16* send = Upload(halves);
  float* recv = Upload(std::vector<float>(n, 0.0f));
  ASSERT_TRUE(comm_->ReduceScatterSum(send, DType::kBF16, *part, recv).ok());
  EXPECT_EQ(Download(recv, n), expected);
  // Accumulating: the running sum continues.
  ASSERT_TRUE(comm_->ReduceScatterSum(send, DType::kBF16, *part, recv, true).ok());
  std::vector<float> twice = expected;
  for (float& v : twice) v *= 2;
  EXPECT_EQ(Download(recv, n), twice);
  // A partition of another world is refused by name.
  auto two = Partition::Even(n, 2, 16384);
  ASSERT_TRUE(two.ok());
  EXPECT_FALSE(comm_->ReduceScatterSum(send, DType::kBF16, *two, recv).ok());
}

TEST_F(NcclCommunicatorCuda, OneRankAllGatherBroadcastAndBarrier) {
  const std::vector<float> values = {1.5f, -2.0f, 3.25f, 7.0f, 0.5f};
  auto part = Partition::Even(values.size(), 1, 1);
  ASSERT_TRUE(part.ok());
  const float* send = Upload(values);
  float* recv = Upload(std::vector<float>(values.size(), 0.0f));
  ASSERT_TRUE(comm_->AllGather(send, sizeof(float), *part, recv).ok());
  EXPECT_EQ(Download(recv, values.size()), values);
  ASSERT_TRUE(comm_->AllGather(recv, sizeof(float), *part, recv).ok());  // in place
  EXPECT_EQ(Download(recv, values.size()), values);
  ASSERT_TRUE(comm_->Broadcast(recv, values.size() * sizeof(float), 0).ok());
  EXPECT_EQ(Download(recv, values.size()), values);
  EXPECT_FALSE(comm_->Broadcast(recv, 4, 1).ok());  // no rank 1
  EXPECT_TRUE(comm_->Barrier().ok());
}

// Without a GPU the backend says so instead of failing inside NCCL.
TEST(NcclCommunicatorCudaAvailability, WithoutAGpuItIsUnavailable) {
  if (CudaUnavailableReason().empty()) GTEST_SKIP() << "a GPU is present";
  auto c = NcclCommunicator::Create(nullptr, 0);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kUnavailable) << c.status().ToString();
}

}  // namespace
}  // namespace tierflow::comm
