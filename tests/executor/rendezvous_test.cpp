// Tests for executor/rendezvous.h: the variables torchrun sets, with one-line errors.
#include "executor/rendezvous.h"

#include <gtest/gtest.h>

#include <map>

#include "common/error.h"

namespace pipeplan::executor {
namespace {

// A getenv over `vars`.
std::function<const char*(const char*)> env_of(const std::map<std::string, std::string>& vars) {
  return [vars](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}

std::string error_of(const std::map<std::string, std::string>& vars) {
  try {
    read_rendezvous_env(env_of(vars));
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), 2);
    return e.what();
  }
  return "";
}

TEST(RendezvousTest, NoVariablesMeanASingleProcess) {
  const RendezvousEnv env = read_rendezvous_env(env_of({}));
  EXPECT_TRUE(env.single_process());
  EXPECT_EQ(env.rank, 0);
  EXPECT_TRUE(env.master_addr.empty());
  EXPECT_TRUE(read_rendezvous_env(env_of({{"RANK", "0"}, {"WORLD_SIZE", "1"}})).single_process());
}

TEST(RendezvousTest, ReadsWhatTorchrunSets) {
  const RendezvousEnv env = read_rendezvous_env(env_of({{"RANK", "3"}, {"WORLD_SIZE", "4"},
      {"LOCAL_RANK", "1"}, {"MASTER_ADDR", "10.0.0.1"}, {"MASTER_PORT", "29500"},
      {"GLOO_SOCKET_IFNAME", "eth0,eth1"}}));
  EXPECT_EQ(env.rank, 3);
  EXPECT_EQ(env.world_size, 4);
  EXPECT_EQ(env.local_rank, 1);
  EXPECT_EQ(env.master_addr, "10.0.0.1");
  EXPECT_EQ(env.master_port, 29500);
  EXPECT_EQ(env.gloo_socket_ifname, "eth0");
  EXPECT_EQ(read_rendezvous_env(env_of({{"RANK", "2"}, {"WORLD_SIZE", "4"}, {"MASTER_ADDR", "h"},
                                        {"MASTER_PORT", "1"}})).local_rank, 2);
}

TEST(RendezvousTest, NamesTheVariableThatIsMissingOrMalformed) {
  const std::map<std::string, std::string> good{{"RANK", "1"}, {"WORLD_SIZE", "2"},
                                                {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "29500"}};
  auto without = [&](const char* name) { auto vars = good; vars.erase(name); return vars; };
  auto with = [&](const char* name, const char* value) { auto vars = good; vars[name] = value; return vars; };
  EXPECT_NE(error_of(without("RANK")).find("RANK is not set"), std::string::npos);
  EXPECT_NE(error_of(without("WORLD_SIZE")).find("WORLD_SIZE is not set"), std::string::npos);
  EXPECT_NE(error_of(without("MASTER_ADDR")).find("MASTER_ADDR"), std::string::npos);
  EXPECT_NE(error_of(without("MASTER_PORT")).find("MASTER_PORT"), std::string::npos);
  EXPECT_NE(error_of(with("RANK", "2")).find("RANK='2'"), std::string::npos);
  EXPECT_NE(error_of(with("WORLD_SIZE", "two")).find("WORLD_SIZE='two'"), std::string::npos);
  EXPECT_NE(error_of(with("MASTER_PORT", "70000")).find("MASTER_PORT='70000'"), std::string::npos);
  EXPECT_NE(error_of(with("LOCAL_RANK", "-1")).find("LOCAL_RANK"), std::string::npos);
}

TEST(RendezvousTest, ReadsTorchrunsAgentStoreAndTheLaunchId) {
  const std::map<std::string, std::string> torchrun{
      {"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "29500"},
      {"TORCHELASTIC_USE_AGENT_STORE", "True"}, {"TORCHELASTIC_RESTART_COUNT", "2"},
      {"TORCHELASTIC_RUN_ID", "none"}};
  const RendezvousEnv env = read_rendezvous_env(env_of(torchrun));
  EXPECT_TRUE(env.agent_store);
  EXPECT_EQ(env.restart_count, 2);
  EXPECT_EQ(agent_store_prefix(env.restart_count), "/worker/attempt_2");
  EXPECT_EQ(env.launch_id, "torchrun none");
  auto with = [&](const char* name, const char* value) {
    auto vars = torchrun;
    vars[name] = value;
    return vars;
  };
  EXPECT_FALSE(read_rendezvous_env(env_of(with("TORCHELASTIC_USE_AGENT_STORE", "False"))).agent_store);
  EXPECT_NE(error_of(with("TORCHELASTIC_RESTART_COUNT", "x")).find("TORCHELASTIC_RESTART_COUNT='x'"),
            std::string::npos);
  EXPECT_EQ(read_rendezvous_env(env_of(with(kLaunchIdVariable, "host:1:2"))).launch_id, "host:1:2");
  auto slurm = torchrun;
  slurm.erase("TORCHELASTIC_RUN_ID");
  slurm["SLURM_JOB_ID"] = "77";
  slurm["SLURM_STEP_ID"] = "0";
  EXPECT_EQ(read_rendezvous_env(env_of(slurm)).launch_id, "slurm 77.0");
  EXPECT_EQ(job_identity(read_rendezvous_env(env_of(slurm)), "pipeplan train of plan h"),
            "pipeplan train of plan h, 2 ranks, launch slurm 77.0");
}

TEST(RendezvousTest, KnowsLoopbackAddresses) {
  EXPECT_TRUE(is_loopback_address("127.0.0.1"));
  EXPECT_TRUE(is_loopback_address("localhost"));
  EXPECT_FALSE(is_loopback_address("10.1.2.3"));
}

}  // namespace
}  // namespace pipeplan::executor
