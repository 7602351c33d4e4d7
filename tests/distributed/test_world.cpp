// Where a process stands, from the launchers' environment variables (dist/world.h).
#include <gtest/gtest.h>

#include <map>

#include "core/error.h"
#include "distributed/world.h"

namespace {
using ctune::distributed::first_host;
using ctune::distributed::World;
using ctune::distributed::world_from;

World from(const std::map<std::string, std::string>& env) {
  return world_from([&env](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

TEST(World, NoVariablesIsOneProcess) {
  const World w = from({});
  EXPECT_FALSE(w.distributed());
  EXPECT_EQ(w.size, 1);
}

TEST(World, TorchrunVariables) {
  const World w = from({{"RANK", "5"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "4"},
                        {"MASTER_ADDR", "node7"}, {"MASTER_PORT", "29400"}, {"TORCHELASTIC_USE_AGENT_STORE", "True"},
                        {"TORCHELASTIC_RESTART_COUNT", "2"}});
  EXPECT_EQ(w.rank, 5);
  EXPECT_EQ(w.size, 8);
  EXPECT_EQ(w.local_rank, 1);
  EXPECT_EQ(w.local_size, 4);
  EXPECT_EQ(w.node(), 1);
  EXPECT_EQ(w.nodes(), 2);
  EXPECT_EQ(w.master_addr, "node7");
  EXPECT_EQ(w.master_port, 29400);
  EXPECT_TRUE(w.agent_store);
  EXPECT_EQ(w.store_prefix, "ctune/2/");
  // Without the node-local variables: one node.
  const World one_node = from({{"RANK", "1"}, {"WORLD_SIZE", "2"}});
  EXPECT_EQ(one_node.local_size, 2);
  EXPECT_EQ(one_node.local_rank, 1);
  EXPECT_FALSE(one_node.agent_store);
}

TEST(World, SlurmVariables) {
  const World w = from({{"SLURM_PROCID", "3"}, {"SLURM_NTASKS", "4"}, {"SLURM_LOCALID", "1"},
                        {"SLURM_STEP_TASKS_PER_NODE", "2(x2)"}, {"SLURM_JOB_NODELIST", "gpu[07-08]"}});
  EXPECT_EQ(w.rank, 3);
  EXPECT_EQ(w.size, 4);
  EXPECT_EQ(w.local_rank, 1);
  EXPECT_EQ(w.local_size, 2);
  EXPECT_EQ(w.master_addr, "gpu07");
  EXPECT_EQ(w.master_port, 29500);
  // MASTER_ADDR wins over the node list.
  EXPECT_EQ(from({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_JOB_NODELIST", "a,b"}, {"MASTER_ADDR", "10.0.0.1"}}).master_addr,
            "10.0.0.1");
}

TEST(World, SlurmNodeLists) {
  EXPECT_EQ(first_host("node01"), "node01");
  EXPECT_EQ(first_host("node01,node02"), "node01");
  EXPECT_EQ(first_host("gpu[07-09,12],cpu1"), "gpu07");
  EXPECT_EQ(first_host("rack[3,5]-n[01-04]"), "rack3-n01");
}

TEST(World, InconsistentVariablesAreRefusedByName) {
  auto message = [](const std::map<std::string, std::string>& env) {
    try {
      from(env);
    } catch (const ctune::ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_NE(message({{"RANK", "2"}, {"WORLD_SIZE", "2"}}).find("rank 2 is outside the world of 2 ranks"), std::string::npos);
  EXPECT_NE(message({{"RANK", "0"}}).find("RANK and WORLD_SIZE must be set together"), std::string::npos);
  EXPECT_NE(message({{"RANK", "0"}, {"WORLD_SIZE", "x"}}).find("WORLD_SIZE: expected an integer"), std::string::npos);
  EXPECT_NE(message({{"RANK", "0"}, {"WORLD_SIZE", "6"}, {"LOCAL_WORLD_SIZE", "4"}}).find("not a multiple"), std::string::npos);
  EXPECT_NE(message({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "70000"}}).find("not a TCP port"), std::string::npos);
}

}  // namespace
