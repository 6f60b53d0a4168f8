// Tests for executor/comm.h's rendezvous (connect_store) with ranks as threads of this process:
// two jobs on one port name the clash, and torchrun's agent store is joined as a client under
// its workers' prefix.
#include "executor/comm.h"

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "common/error.h"
#include "executor/launcher.h"
#include "models/torch_compat.h"

namespace pipeplan::executor {
namespace {

using StorePtr = c10::intrusive_ptr<c10d::Store>;

constexpr auto kTimeout = std::chrono::seconds(3);
constexpr const char* kWhat = "pipeplan train of plan fnv1a64:0";

RendezvousEnv rank_env(int rank, int world_size, int port, const std::string& launch_id) {
  RendezvousEnv env;
  env.rank = rank;
  env.world_size = world_size;
  env.local_rank = rank;
  env.master_addr = "127.0.0.1";
  env.master_port = port;
  env.launch_id = launch_id;
  return env;
}

// Joins every rank of `envs` at once, each in its own thread; returns each one's error ("" when
// it joined). The stores live until every thread is done, as the ranks' processes would.
std::vector<std::string> join_all(const std::vector<RendezvousEnv>& envs) {
  std::vector<std::string> errors(envs.size());
  std::vector<StorePtr> stores(envs.size());
  std::vector<std::thread> threads;
  for (size_t idx = 0; idx < envs.size(); ++idx)
    threads.emplace_back([&, idx] {
      try {
        stores[idx] = connect_store(envs[idx], kTimeout, kWhat);
      } catch (const Error& e) {
        errors[idx] = e.what();
      }
    });
  for (std::thread& thread : threads) thread.join();
  return errors;
}

// A TCPStore server on a free port, as torchrun's agent (or any other job) holds one.
c10::intrusive_ptr<c10d::TCPStore> serve_store() {
  c10d::TCPStoreOptions options;
  options.port = 0;
  options.isServer = true;
  options.waitWorkers = false;
  options.timeout = kTimeout;
  return compat::make_tcp_store("127.0.0.1", options);
}

TEST(RendezvousStoreTest, ARankOfAnotherJobOnThePortNamesTheClash) {
  const int port = pick_free_port();
  const std::vector<std::string> errors =
      join_all({rank_env(0, 2, port, "A"), rank_env(1, 2, port, "B")});
  const std::string port_text = std::to_string(port);
  EXPECT_NE(errors[1].find("another job is using port " + port_text), std::string::npos)
      << errors[1];
  EXPECT_NE(errors[1].find("launch A"), std::string::npos) << errors[1];
  EXPECT_NE(errors[0].find("only 1 of 2 ranks joined"), std::string::npos) << errors[0];
  // Another world size is another job too.
  const int other_port = pick_free_port();
  const std::vector<std::string> sizes =
      join_all({rank_env(0, 2, other_port, ""), rank_env(1, 3, other_port, "")});
  EXPECT_NE(sizes[1].find("another job is using port"), std::string::npos) << sizes[1];
}

TEST(RendezvousStoreTest, APortTakenByAnotherServerIsNamed) {
  const auto other = serve_store();
  const int port = other->getPort();
  const std::vector<std::string> errors = join_all({rank_env(0, 2, port, "A")});
  EXPECT_NE(errors[0].find("port " + std::to_string(port) + " is already in use"),
            std::string::npos)
      << errors[0];
}

TEST(RendezvousStoreTest, MoreRanksThanTheWorldSizeAreRefused) {
  const int port = pick_free_port();
  const std::vector<std::string> errors =
      join_all({rank_env(0, 2, port, ""), rank_env(1, 2, port, ""), rank_env(1, 2, port, "")});
  int refused = 0;
  for (const std::string& error : errors)
    refused += error.find("more than WORLD_SIZE=2 ranks joined") != std::string::npos;
  EXPECT_EQ(refused, 1) << errors[0] << "\n" << errors[1] << "\n" << errors[2];
}

TEST(RendezvousStoreTest, TorchrunsAgentStoreIsJoinedAsAClientUnderTheWorkerPrefix) {
  const auto agent = serve_store();
  std::vector<RendezvousEnv> envs{rank_env(0, 2, agent->getPort(), "torchrun none"),
                                  rank_env(1, 2, agent->getPort(), "torchrun none")};
  for (RendezvousEnv& env : envs) {
    env.agent_store = true;
    env.restart_count = 3;
  }
  const std::vector<std::string> errors = join_all(envs);
  EXPECT_EQ(errors[0], "");
  EXPECT_EQ(errors[1], "");
  EXPECT_TRUE(agent->check({"/worker/attempt_3/pipeplan/joined"}));
  EXPECT_FALSE(agent->check({"pipeplan/joined"}));
}

}  // namespace
}  // namespace pipeplan::executor
