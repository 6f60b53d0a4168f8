// Rendezvous variables: what torchrun, SLURM wrappers and `pipeplan launch` tell each rank.
#pragma once

#include <cstdlib>
#include <functional>
#include <string>

namespace pipeplan::executor {

/// Set by `pipeplan launch` in every rank: one value per launch, so that ranks of two jobs that
/// were given the same MASTER_PORT tell each other apart at rendezvous.
inline constexpr const char* kLaunchIdVariable = "PIPEPLAN_LAUNCH_ID";

/// Where this process sits in the job. A single process (none of RANK and WORLD_SIZE set, or
/// WORLD_SIZE=1) is rank 0 of 1 and needs no store.
struct RendezvousEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;               ///< LOCAL_RANK, or `rank` when unset
  std::string master_addr;          ///< MASTER_ADDR; "" for a single process
  int master_port = 0;              ///< MASTER_PORT; 0 for a single process
  std::string gloo_socket_ifname;   ///< GLOO_SOCKET_IFNAME's first entry, "" when unset
  /// Names the launch all ranks of this job share: PIPEPLAN_LAUNCH_ID, else torchrun's
  /// TORCHELASTIC_RUN_ID, else SLURM_JOB_ID.SLURM_STEP_ID; "" when none is set.
  std::string launch_id;
  /// TORCHELASTIC_USE_AGENT_STORE=True: torchrun's agent on node 0 already serves the store at
  /// MASTER_ADDR:MASTER_PORT, so every rank (rank 0 too) connects as a client and keeps its keys
  /// under agent_store_prefix(restart_count), as torch.distributed's env:// rendezvous does.
  bool agent_store = false;
  int restart_count = 0;            ///< TORCHELASTIC_RESTART_COUNT; read with agent_store

  bool single_process() const { return world_size == 1; }
};

/// Reads RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT, GLOO_SOCKET_IFNAME, the launch
/// id's variables and torchrun's TORCHELASTIC_USE_AGENT_STORE and TORCHELASTIC_RESTART_COUNT
/// through `getenv`. Throws Error(kBadInput) naming the variable when one is malformed (not an
/// integer, out of range) or missing while another says the job has several ranks.
RendezvousEnv read_rendezvous_env(
    const std::function<const char*(const char*)>& getenv = [](const char* name) -> const char* {
      return std::getenv(name);
    });

/// True for addresses that stay on this machine: "localhost", 127.x.y.z, "::1".
bool is_loopback_address(const std::string& address);

/// "/worker/attempt_<restart_count>": where torchrun's workers keep their keys in its agent's
/// store (torch/distributed/rendezvous.py, _create_c10d_store, PyTorch 1.13 and 2.x).
std::string agent_store_prefix(int restart_count);

/// What every rank of one job computes alike and a rank of another job almost surely does not:
/// `what` the job runs (e.g. the plan's hash), the world size and the launch id.
std::string job_identity(const RendezvousEnv& env, const std::string& what);

}  // namespace pipeplan::executor
