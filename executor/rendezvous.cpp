// Rendezvous variables: parsing with one-line errors that name the variable.
#include "executor/rendezvous.h"

#include <cerrno>
#include <cstdlib>
#include <string_view>

#include "common/error.h"

namespace pipeplan::executor {
namespace {

constexpr int kMaxPort = 65535;
// Restarts torchrun may report; its --max-restarts is far below.
constexpr int kMaxRestarts = 1 << 20;

// The value of `name`, or "" when unset.
std::string value_of(const std::function<const char*(const char*)>& getenv, const char* name) {
  const char* value = getenv(name);
  return value == nullptr ? std::string() : std::string(value);
}

// A decimal integer in [min_value, max_value]; the message names the variable and the range.
int parse_int(const std::string& text, const char* name, int min_value, int max_value) {
  char* end = nullptr;
  errno = 0;
  const long value = text.empty() ? 0 : std::strtol(text.c_str(), &end, 10);
  const bool ok = !text.empty() && end != nullptr && *end == '\0' && errno == 0 &&
                  value >= min_value && value <= max_value;
  PIPEPLAN_CHECK(ok, name, "=", quote(text), " is not an integer in [", min_value, ", ", max_value,
                 "]; set ", name, " as torchrun does");
  return static_cast<int>(value);
}

// PIPEPLAN_LAUNCH_ID, else TORCHELASTIC_RUN_ID, else SLURM_JOB_ID.SLURM_STEP_ID, else "".
std::string launch_id(const std::function<const char*(const char*)>& getenv) {
  const std::string own = value_of(getenv, kLaunchIdVariable);
  if (!own.empty()) return own;
  const std::string torchrun = value_of(getenv, "TORCHELASTIC_RUN_ID");
  if (!torchrun.empty()) return "torchrun " + torchrun;
  const std::string slurm_job = value_of(getenv, "SLURM_JOB_ID");
  if (slurm_job.empty()) return "";
  return "slurm " + slurm_job + "." + value_of(getenv, "SLURM_STEP_ID");
}

}  // namespace

RendezvousEnv read_rendezvous_env(const std::function<const char*(const char*)>& getenv) {
  RendezvousEnv env;
  const std::string rank = value_of(getenv, "RANK");
  const std::string world_size = value_of(getenv, "WORLD_SIZE");
  const std::string ifname = value_of(getenv, "GLOO_SOCKET_IFNAME");
  env.gloo_socket_ifname = ifname.substr(0, ifname.find(','));
  if (rank.empty() && world_size.empty()) return env;
  PIPEPLAN_CHECK(!world_size.empty(), "WORLD_SIZE is not set but RANK=", quote(rank),
                 " is; set both (or neither, for a single process)");
  PIPEPLAN_CHECK(!rank.empty(), "RANK is not set but WORLD_SIZE=", quote(world_size),
                 " is; set both (or neither, for a single process)");
  env.world_size = parse_int(world_size, "WORLD_SIZE", 1, 1 << 20);
  env.rank = parse_int(rank, "RANK", 0, env.world_size - 1);
  const std::string local_rank = value_of(getenv, "LOCAL_RANK");
  env.local_rank = local_rank.empty() ? env.rank : parse_int(local_rank, "LOCAL_RANK", 0, 1 << 20);
  if (env.single_process()) return env;
  env.master_addr = value_of(getenv, "MASTER_ADDR");
  PIPEPLAN_CHECK(!env.master_addr.empty(), "MASTER_ADDR is not set; with WORLD_SIZE=",
                 env.world_size, " every rank needs the address of rank 0's store");
  const std::string port = value_of(getenv, "MASTER_PORT");
  PIPEPLAN_CHECK(!port.empty(), "MASTER_PORT is not set; with WORLD_SIZE=", env.world_size,
                 " every rank needs the port of rank 0's store");
  env.master_port = parse_int(port, "MASTER_PORT", 1, kMaxPort);
  env.launch_id = launch_id(getenv);
  env.agent_store = value_of(getenv, "TORCHELASTIC_USE_AGENT_STORE") == "True";
  if (env.agent_store)
    env.restart_count = parse_int(value_of(getenv, "TORCHELASTIC_RESTART_COUNT"),
                                  "TORCHELASTIC_RESTART_COUNT", 0, kMaxRestarts);
  return env;
}

bool is_loopback_address(const std::string& address) {
  return address == "localhost" || address == "::1" || std::string_view(address).substr(0, 4) == "127.";
}

std::string agent_store_prefix(int restart_count) {
  return "/worker/attempt_" + std::to_string(restart_count);
}

std::string job_identity(const RendezvousEnv& env, const std::string& what) {
  return detail::concat(what, ", ", env.world_size, " ranks",
                        env.launch_id.empty() ? "" : ", launch " + env.launch_id);
}

}  // namespace pipeplan::executor
