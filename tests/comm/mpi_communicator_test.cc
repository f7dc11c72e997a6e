// The MPI backend, run by ctest under mpirun with 1, 2, 3 and 4 ranks (and
// once over TCP on loopback with shared memory off). Every rank knows every
// rank's input (a function of rank and index), so each checks its results,
// bit for bit, against a plain rank-ordered reference it computes itself.
#include "comm/mpi_communicator.h"
#include "comm/agree.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#include "common/half.h"

namespace tierflow::comm {
namespace {

MpiCommunicator* g_comm = nullptr;

// Rank r's value at index i: mixed signs and magnitudes, so the order of
// the adds changes the bits (checked below), plus subnormals and -0.
float Value(int rank, size_t i) {
  uint32_t x = static_cast<uint32_t>(i) * 2654435761u + static_cast<uint32_t>(rank) * 40503u + 7u;
  x ^= x >> 13;
  x *= 0x5bd1e995u;
  x ^= x >> 15;
  const float mant = static_cast<float>(static_cast<int>(x >> 8) - (1 << 23)) / (1 << 23);
  const int exp = static_cast<int>((x >> 2) % 20) - 10;
  if (i % 97 == 3) return std::numeric_limits<float>::denorm_min() * static_cast<float>(rank + 1);
  if (i % 89 == 5) return -0.0f;
  return std::ldexp(mant, exp);
}

template <typename T>
std::vector<T> Contribution(int rank, size_t n) {
  std::vector<T> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = FromFloat<T>(Value(rank, i));
  return v;
}

// The plain reference: ((c_0 + c_1) + c_2) + ... in rank order.
template <typename T>
float RankOrderedSum(int world, size_t i) {
  float acc = ToFloat(FromFloat<T>(Value(0, i)));
  for (int r = 1; r < world; ++r) acc += ToFloat(FromFloat<T>(Value(r, i)));
  return acc;
}

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

template <typename T>
void CheckReduceScatter(DType dtype, size_t count, size_t align) {
  MpiCommunicator& comm = *g_comm;
  auto part = Partition::Even(count, comm.world_size(), align);
  ASSERT_TRUE(part.ok()) << part.status().message();
  const std::vector<T> send = Contribution<T>(comm.rank(), count);
  std::vector<float> recv(part->size(comm.rank()) + 1, 12345.0f);  // +1: a guard
  Status s = comm.ReduceScatterSum(send.data(), dtype, *part, recv.data());
  ASSERT_TRUE(s.ok()) << s.message();
  const size_t b = part->begin(comm.rank());
  for (size_t i = 0; i < part->size(comm.rank()); ++i) {
    ASSERT_EQ(Bits(recv[i]), Bits(RankOrderedSum<T>(comm.world_size(), b + i)))
        << "rank " << comm.rank() << " element " << b + i << " count " << count;
  }
  EXPECT_EQ(recv.back(), 12345.0f) << "wrote past its part";
}

TEST(MpiCommunicator, ReduceScatterIsTheRankOrderedSumForEveryDtype) {
  for (size_t count : {0ul, 1ul, 5ul, 1000ul, 4099ul, 100003ul}) {
    for (size_t align : {1ul, 16ul, 1024ul}) {
      CheckReduceScatter<float>(DType::kF32, count, align);
      CheckReduceScatter<bf16>(DType::kBF16, count, align);
      CheckReduceScatter<fp16>(DType::kF16, count, align);
    }
  }
}

TEST(MpiCommunicator, TheInputsMakeTheOrderMatter) {
  // Without this, a backend that summed in another order could pass.
  if (g_comm->world_size() < 3) GTEST_SKIP() << "the order of two adds does not change a sum";
  size_t differ = 0;
  for (size_t i = 0; i < 10000; ++i) {
    float reverse = Value(g_comm->world_size() - 1, i);
    for (int r = g_comm->world_size() - 2; r >= 0; --r) reverse += Value(r, i);
    differ += Bits(reverse) != Bits(RankOrderedSum<float>(g_comm->world_size(), i));
  }
  EXPECT_GT(differ, 100u);
}

// Two calls with `accumulate` on the second continue one running sum: the
// second round's contributions are added after the first round's, in rank
// order, as one process adding 2N micro-batches one after another would.
TEST(MpiCommunicator, AccumulatingReduceScatterContinuesOneRunningSum) {
  MpiCommunicator& comm = *g_comm;
  const int world = comm.world_size();
  const size_t count = 4099;
  auto part = Partition::Even(count, world, 16);
  ASSERT_TRUE(part.ok());
  // Round j's contribution of rank r is Value(j * world + r, i).
  std::vector<float> recv(part->size(comm.rank()));
  for (int round = 0; round < 2; ++round) {
    const std::vector<bf16> send = Contribution<bf16>(round * world + comm.rank(), count);
    ASSERT_TRUE(
        comm.ReduceScatterSum(send.data(), DType::kBF16, *part, recv.data(), round > 0).ok());
  }
  for (size_t i = 0; i < recv.size(); ++i) {
    const size_t g = part->begin(comm.rank()) + i;
    float want = ToFloat(FromFloat<bf16>(Value(0, g)));
    for (int k = 1; k < 2 * world; ++k) want += ToFloat(FromFloat<bf16>(Value(k, g)));
    ASSERT_EQ(Bits(recv[i]), Bits(want)) << i;
  }
}

TEST(MpiCommunicator, AllReduceGivesEveryRankTheSameRankOrderedSum) {
  MpiCommunicator& comm = *g_comm;
  for (size_t count : {1ul, 17ul, 65536ul + 3}) {
    const std::vector<bf16> send = Contribution<bf16>(comm.rank(), count);
    std::vector<float> recv(count);
    Status s = AllReduceSum(comm, send.data(), DType::kBF16, count, recv.data());
    ASSERT_TRUE(s.ok()) << s.message();
    for (size_t i = 0; i < count; ++i) {
      ASSERT_EQ(Bits(recv[i]), Bits(RankOrderedSum<bf16>(comm.world_size(), i))) << i;
    }
    // In place: the fp32 contribution is the output buffer.
    std::vector<float> inout = Contribution<float>(comm.rank(), count);
    s = AllReduceSum(comm, inout.data(), DType::kF32, count, inout.data());
    ASSERT_TRUE(s.ok()) << s.message();
    for (size_t i = 0; i < count; ++i) {
      ASSERT_EQ(Bits(inout[i]), Bits(RankOrderedSum<float>(comm.world_size(), i))) << i;
    }
  }
}

TEST(MpiCommunicator, AllGatherPlacesEveryPartInPlaceAndInOrder) {
  MpiCommunicator& comm = *g_comm;
  for (size_t count : {0ul, 3ul, 1001ul}) {
    auto part = Partition::Even(count, comm.world_size(), 16);
    ASSERT_TRUE(part.ok());
    // 2-byte elements: element i of the whole is (i * 7 + 1) & 0xffff.
    auto want = [](size_t i) { return static_cast<uint16_t>(i * 7 + 1); };
    std::vector<uint16_t> mine(part->size(comm.rank()));
    for (size_t i = 0; i < mine.size(); ++i) mine[i] = want(part->begin(comm.rank()) + i);
    std::vector<uint16_t> all(count, 0xdead);
    Status s = comm.AllGather(mine.data(), 2, *part, all.data());
    ASSERT_TRUE(s.ok()) << s.message();
    for (size_t i = 0; i < count; ++i) ASSERT_EQ(all[i], want(i)) << i;
    // In place: the rank's part already sits in the output.
    std::vector<uint16_t> inplace(count, 0xdead);
    for (size_t i = part->begin(comm.rank()); i < part->end(comm.rank()); ++i) inplace[i] = want(i);
    s = comm.AllGather(inplace.data() + part->begin(comm.rank()), 2, *part, inplace.data());
    ASSERT_TRUE(s.ok()) << s.message();
    EXPECT_EQ(inplace, all);
  }
}

TEST(MpiCommunicator, BroadcastFromEveryRoot) {
  MpiCommunicator& comm = *g_comm;
  for (int root = 0; root < comm.world_size(); ++root) {
    std::vector<unsigned char> data(4099);
    for (size_t i = 0; i < data.size(); ++i) {
      data[i] = comm.rank() == root ? static_cast<unsigned char>(i * 31 + root) : 0;
    }
    ASSERT_TRUE(comm.Broadcast(data.data(), data.size(), root).ok());
    for (size_t i = 0; i < data.size(); ++i) {
      ASSERT_EQ(data[i], static_cast<unsigned char>(i * 31 + root)) << "root " << root;
    }
  }
  ASSERT_TRUE(comm.Barrier().ok());
}

TEST(MpiCommunicator, MessagesLargerThanOnePieceGoInPieces) {
  // The 1 GiB piece limit (MPI counts are int), lowered to 7 bytes: every
  // transfer is split, with a ragged last piece.
  MpiCommunicator& comm = *g_comm;
  const size_t saved = comm.max_piece_bytes();
  comm.set_max_piece_bytes(7);
  CheckReduceScatter<bf16>(DType::kBF16, 1001, 1);
  CheckReduceScatter<float>(DType::kF32, 333, 16);
  std::vector<float> recv(257);
  const std::vector<float> send = Contribution<float>(comm.rank(), 257);
  ASSERT_TRUE(AllReduceSum(comm, send.data(), DType::kF32, 257, recv.data()).ok());
  for (size_t i = 0; i < recv.size(); ++i) {
    ASSERT_EQ(Bits(recv[i]), Bits(RankOrderedSum<float>(comm.world_size(), i))) << i;
  }
  std::vector<unsigned char> data(100, comm.rank() == 0 ? 9 : 0);
  ASSERT_TRUE(comm.Broadcast(data.data(), data.size(), 0).ok());
  EXPECT_EQ(data, std::vector<unsigned char>(100, 9));
  comm.set_max_piece_bytes(saved);
}

TEST(MpiCommunicator, RefusesMismatchedShapesBeforeCommunicating) {
  MpiCommunicator& comm = *g_comm;
  auto wrong = Partition::Even(100, comm.world_size() + 1, 1);
  ASSERT_TRUE(wrong.ok());
  std::vector<float> buf(100);
  Status s = comm.ReduceScatterSum(buf.data(), DType::kF32, *wrong, buf.data());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("parts for a world of"), std::string::npos) << s.message();
  s = comm.AllGather(buf.data(), 4, *wrong, buf.data());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  s = comm.Broadcast(buf.data(), 4, comm.world_size());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("root"), std::string::npos);
  // Every rank refused locally: the ranks are still in step.
  EXPECT_TRUE(comm.Barrier().ok());
}

TEST(MpiCommunicator, ASecondCommunicatorInOneProcessIsRefused) {
  LaunchEnv env;
  env.rank = g_comm->rank();
  env.world_size = g_comm->world_size();
  auto second = MpiCommunicator::Create(env);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kFailedPrecondition);
}

// Every rank takes the same branch: all ok is ok; otherwise every rank
// gets the first failed rank's code and message, named.
TEST(Agree, EveryRankSeesTheFirstFailure) {
  Communicator& comm = *g_comm;
  EXPECT_TRUE(AgreeOnStatus(comm, Status::Ok()).ok());
  const int last = comm.world_size() - 1;
  const Status mine = comm.rank() == last
                          ? IoError("disk full writing part " + std::to_string(last))
                          : Status::Ok();
  const Status agreed = AgreeOnStatus(comm, mine);
  ASSERT_FALSE(agreed.ok());
  EXPECT_EQ(agreed.code(), StatusCode::kIoError);
  EXPECT_NE(agreed.message().find("disk full writing part " + std::to_string(last)),
            std::string::npos);
  if (comm.rank() != last) {
    EXPECT_NE(agreed.message().find("rank " + std::to_string(last) + " of "), std::string::npos);
  }
  std::string s = comm.rank() == 0 ? std::string("/shared/out/checkpoints/step-7") : "";
  ASSERT_TRUE(BroadcastString(comm, &s, 0).ok());
  EXPECT_EQ(s, "/shared/out/checkpoints/step-7");
}

}  // namespace
}  // namespace tierflow::comm

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  auto launch = tierflow::comm::DetectLaunch(tierflow::comm::ProcessEnv());
  if (!launch.ok() || !launch->has_value()) {
    std::fprintf(stderr, "mpi_communicator_test: run it under mpirun (%s)\n",
                 launch.ok() ? "no launcher environment" : launch.status().message().c_str());
    return 2;
  }
  auto comm = tierflow::comm::MpiCommunicator::Create(**launch);
  if (!comm.ok()) {
    std::fprintf(stderr, "mpi_communicator_test: %s\n", comm.status().message().c_str());
    return 1;
  }
  tierflow::comm::g_comm = comm->get();
  const int rc = RUN_ALL_TESTS();
  tierflow::comm::g_comm = nullptr;
  comm->reset();
  return rc;
}
