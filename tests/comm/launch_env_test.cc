// DetectLaunch: which environments make a rank, and which are refused by name.
#include "comm/launch_env.h"

#include <gtest/gtest.h>

#include <map>

namespace tierflow::comm {
namespace {

EnvLookup FakeEnv(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](std::string_view name) -> std::optional<std::string> {
    auto it = vars.find(std::string(name));
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

std::map<std::string, std::string> OpenMpi(int rank, int size, int local_rank, int local_size) {
  return {{"OMPI_COMM_WORLD_RANK", std::to_string(rank)},
          {"OMPI_COMM_WORLD_SIZE", std::to_string(size)},
          {"OMPI_COMM_WORLD_LOCAL_RANK", std::to_string(local_rank)},
          {"OMPI_COMM_WORLD_LOCAL_SIZE", std::to_string(local_size)}};
}

TEST(LaunchEnv, APlainProcessIsNoRank) {
  auto got = DetectLaunch(FakeEnv({{"HOME", "/root"}, {"PATH", "/bin"}}));
  ASSERT_TRUE(got.ok()) << got.status().message();
  EXPECT_FALSE(got->has_value());
}

TEST(LaunchEnv, ReadsOpenMpisRankAndLocalRank) {
  auto got = DetectLaunch(FakeEnv(OpenMpi(5, 8, 1, 4)));
  ASSERT_TRUE(got.ok()) << got.status().message();
  ASSERT_TRUE(got->has_value());
  const LaunchEnv& e = **got;
  EXPECT_EQ(e.launcher, "mpirun");
  EXPECT_EQ(e.rank, 5);
  EXPECT_EQ(e.world_size, 8);
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_EQ(e.local_size, 4);
}

TEST(LaunchEnv, RefusesOpenMpiValuesOutOfRangeByName) {
  struct Case {
    std::map<std::string, std::string> env;
    const char* names;
  };
  auto with = [](std::map<std::string, std::string> m, const std::string& k, const std::string& v) {
    m[k] = v;
    return m;
  };
  const Case cases[] = {
      {OpenMpi(2, 2, 0, 1), "rank 2 >= world size 2"},
      {OpenMpi(0, 2, 1, 1), "local rank 1 >= local size 1"},
      {OpenMpi(0, 2, 0, 3), "local size 3 > world size 2"},
      {with(OpenMpi(0, 2, 0, 1), "OMPI_COMM_WORLD_SIZE", "2x"), "OMPI_COMM_WORLD_SIZE='2x'"},
      {with(OpenMpi(0, 2, 0, 1), "OMPI_COMM_WORLD_RANK", "-1"), "OMPI_COMM_WORLD_RANK='-1'"},
      {with(OpenMpi(0, 2, 0, 1), "OMPI_COMM_WORLD_SIZE", "99999999999"), "OMPI_COMM_WORLD_SIZE"},
      {with(OpenMpi(0, 2, 0, 1), "OMPI_COMM_WORLD_SIZE", "0"), "OMPI_COMM_WORLD_SIZE='0'"},
      {with(OpenMpi(0, 2, 0, 1), "OMPI_COMM_WORLD_LOCAL_RANK", ""),
       "OMPI_COMM_WORLD_LOCAL_RANK=''"},
      {{{"OMPI_COMM_WORLD_RANK", "0"}}, "OMPI_COMM_WORLD_SIZE is not set"},
  };
  for (const Case& c : cases) {
    auto got = DetectLaunch(FakeEnv(c.env));
    ASSERT_FALSE(got.ok()) << c.names;
    EXPECT_EQ(got.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(got.status().message().find(c.names), std::string::npos) << got.status().message();
  }
}

std::map<std::string, std::string> Srun(int procid, int ntasks, int localid) {
  return {{"SLURM_PROCID", std::to_string(procid)},   {"SLURM_NTASKS", std::to_string(ntasks)},
          {"SLURM_LOCALID", std::to_string(localid)}, {"SLURM_NODEID", "1"},
          {"SLURM_STEP_TASKS_PER_NODE", "4,2(x2),1"}, {"PMIX_RANK", std::to_string(procid)}};
}

TEST(LaunchEnv, ReadsSrunWithTheNodesEntryOfTheTaskLayout) {
  auto got = DetectLaunch(FakeEnv(Srun(5, 9, 1)));
  ASSERT_TRUE(got.ok()) << got.status().message();
  ASSERT_TRUE(got->has_value());
  EXPECT_EQ((*got)->launcher, "srun");
  EXPECT_EQ((*got)->rank, 5);
  EXPECT_EQ((*got)->world_size, 9);
  EXPECT_EQ((*got)->local_rank, 1);
  EXPECT_EQ((*got)->local_size, 2);  // node 1 is the first of "2(x2)"

  auto m = Srun(0, 9, 0);
  m["SLURM_NODEID"] = "0";
  got = DetectLaunch(FakeEnv(m));
  ASSERT_TRUE(got.ok()) << got.status().message();
  EXPECT_EQ((*got)->local_size, 4);
  m["SLURM_NODEID"] = "3";
  got = DetectLaunch(FakeEnv(m));
  ASSERT_TRUE(got.ok()) << got.status().message();
  EXPECT_EQ((*got)->local_size, 1);
  m["SLURM_NTASKS_PER_NODE"] = "3";  // the job's fixed count wins
  got = DetectLaunch(FakeEnv(m));
  ASSERT_TRUE(got.ok()) << got.status().message();
  EXPECT_EQ((*got)->local_size, 3);
}

TEST(LaunchEnv, ABatchScriptsOwnShellIsNoRank) {
  // sbatch sets SLURM_PROCID=0 for the script itself; without a process
  // manager's rank, a command run there is a plain process.
  auto m = Srun(0, 4, 0);
  m.erase("PMIX_RANK");
  auto got = DetectLaunch(FakeEnv(m));
  ASSERT_TRUE(got.ok()) << got.status().message();
  EXPECT_FALSE(got->has_value());
}

TEST(LaunchEnv, RefusesABadSrunLayoutOrADisagreeingProcessManager) {
  const std::pair<std::string, std::string> bad_layouts[] = {
      {"2(x", "'2(x'"}, {"2(x0)", "'2(x0)'"}, {"a", "'a'"},
      {"", "''"},       {"1", "past"},        {"99", "'99'"},
  };
  for (const auto& [layout, what] : bad_layouts) {
    auto m = Srun(5, 9, 1);
    m["SLURM_STEP_TASKS_PER_NODE"] = layout;
    auto got = DetectLaunch(FakeEnv(m));
    ASSERT_FALSE(got.ok()) << layout;
    EXPECT_NE(got.status().message().find(what), std::string::npos) << got.status().message();
  }
  auto m = Srun(5, 9, 1);
  m["PMIX_RANK"] = "4";
  auto got = DetectLaunch(FakeEnv(m));
  ASSERT_FALSE(got.ok());
  EXPECT_NE(got.status().message().find("PMIX_RANK=4 but SLURM_PROCID=5"), std::string::npos)
      << got.status().message();
}

}  // namespace
}  // namespace tierflow::comm
