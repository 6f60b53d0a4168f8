// Rendezvous variables: what torchrun, SLURM wrappers and `pipeplan launch` tell each rank.
#pragma once

#include <cstdlib>
#include <functional>
#include <string>

namespace pipeplan::executor {

/// Where this process sits in the job. A single process (none of RANK and WORLD_SIZE set, or
/// WORLD_SIZE=1) is rank 0 of 1 and needs no store.
struct RendezvousEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;               ///< LOCAL_RANK, or `rank` when unset
  std::string master_addr;          ///< MASTER_ADDR; "" for a single process
  int master_port = 0;              ///< MASTER_PORT; 0 for a single process
  std::string gloo_socket_ifname;   ///< GLOO_SOCKET_IFNAME's first entry, "" when unset

  bool single_process() const { return world_size == 1; }
};

/// Reads RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT and GLOO_SOCKET_IFNAME through
/// `getenv`. Throws Error(kBadInput) naming the variable when one is malformed (not an integer,
/// out of range) or missing while another says the job has several ranks.
RendezvousEnv read_rendezvous_env(
    const std::function<const char*(const char*)>& getenv = [](const char* name) -> const char* {
      return std::getenv(name);
    });

/// True for addresses that stay on this machine: "localhost", 127.x.y.z, "::1".
bool is_loopback_address(const std::string& address);

}  // namespace pipeplan::executor
