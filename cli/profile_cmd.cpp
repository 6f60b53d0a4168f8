// `pipeplan profile`: measure a model layer by layer on this machine and write profile.json; with
// --co-located N, N copies of the command measure at once, kept in step through a TCPStore.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "cli/commands.h"
#include "common/error.h"
#include "common/json.h"
#include "common/log.h"
#include "common/units.h"
#include "executor/comm.h"
#include "executor/launcher.h"
#include "executor/rendezvous.h"
#include "models/zoo.h"
#include "plans/profile.h"
#include "profiler/model_profiler.h"

namespace pipeplan::cli {
namespace {

// Set in the copies a co-located profile starts; their rank, world size and the store's address
// come from the launch's RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT.
constexpr const char* kCopyVariable = "PIPEPLAN_PROFILE_COPY";
// The interconnect record the launching process measured, for the copy that writes the profile.
constexpr const char* kLinkVariable = "PIPEPLAN_PROFILE_LINK";
// How long a copy waits for the others at a barrier. The launch stops every copy as soon as one
// fails, so this only bounds a hang; one chain at one batch size may take minutes on a CPU.
constexpr std::chrono::milliseconds kBarrierTimeout = std::chrono::minutes(30);
// How often rank 0 looks whether the other copies are done with the store it serves.
constexpr std::chrono::milliseconds kDonePollInterval = std::chrono::milliseconds(10);

// "1,2,4,8" from the library's default sizes.
std::string default_batch_sizes() {
  std::string text;
  for (int64_t size : profiler::ProfileOptions().batch_sizes)
    text += (text.empty() ? "" : ",") + std::to_string(size);
  return text;
}

struct ProfileFlags {
  std::string model;
  std::vector<std::string> model_args;
  std::string batch_sizes = default_batch_sizes();
  std::string tp_sizes = "2,4,8";
  std::string output;
  bool no_comm = false;
  profiler::ProfileOptions options;
};

// Set when this process is a copy started by a co-located profile: its rank, the world size
// and the store's address, from the launch's RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT.
std::optional<executor::RendezvousEnv> copy_env() {
  if (std::getenv(kCopyVariable) == nullptr) return std::nullopt;
  return executor::read_rendezvous_env();
}

// A barrier of the co-located copies over a TCPStore that rank 0 serves.
class CopyBarrier {
 public:
  explicit CopyBarrier(const executor::RendezvousEnv& env)
      : env_(env), store_(executor::connect_store(env, kBarrierTimeout, "pipeplan profile")) {}

  // Returns once every copy has called it as often.
  void wait() {
    const std::string key = "pipeplan/profile/barrier/" + std::to_string(generation_++);
    if (store_->add(key, 1) == env_.world_size) store_->set(key + "/open", std::vector<uint8_t>{1});
    store_->wait({key + "/open"}, kBarrierTimeout);
  }

  // The last use of the store: the other copies say they are done with it; rank 0, which serves
  // it, waits for them, so that none loses the store while still waiting at a barrier.
  void finish() {
    const std::string key = "pipeplan/profile/done";
    store_->add(key, 1);
    if (env_.rank != 0) return;
    const auto deadline = std::chrono::steady_clock::now() + kBarrierTimeout;
    while (store_->add(key, 0) < env_.world_size) {
      PIPEPLAN_RUNTIME_CHECK(std::chrono::steady_clock::now() < deadline,
                             "co-located profile: a copy did not finish within ",
                             kBarrierTimeout.count() / 1000, " s");
      std::this_thread::sleep_for(kDonePollInterval);
    }
  }

 private:
  executor::RendezvousEnv env_;
  c10::intrusive_ptr<c10d::Store> store_;
  int generation_ = 0;
};

// This process's own command line, with the path of its executable first.
std::vector<std::string> own_command() {
  std::ifstream cmdline("/proc/self/cmdline", std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(cmdline)),
                         std::istreambuf_iterator<char>());
  std::vector<std::string> command;
  for (size_t begin = 0; begin < text.size();) {
    const size_t end = std::min(text.find('\0', begin), text.size());
    command.push_back(text.substr(begin, end - begin));
    begin = end + 1;
  }
  PIPEPLAN_RUNTIME_CHECK(!command.empty(), "cannot read this process's command line");
  command.front() = std::filesystem::read_symlink("/proc/self/exe").string();
  return command;
}

// Starts `co_located` copies of this very command, marked as copies, and waits for them.
int start_copies(const ProfileFlags& flags, const std::string& link_path) {
  executor::LaunchOptions launch;
  launch.nproc = flags.options.co_located;
  launch.command = own_command();
  launch.set_omp_num_threads = false;
  launch.extra_env = {{kCopyVariable, "1"},
                      {"OMP_NUM_THREADS", std::to_string(*flags.options.threads)},
                      {kLinkVariable, link_path}};
  return executor::launch(launch);
}

// Measures here: alone, or as one of the co-located copies (then only rank 0 writes).
// `link_path`: the interconnect record time_link wrote, or "" (--no-comm).
int measure(const ProfileFlags& flags, const models::Model& model,
            const executor::RendezvousEnv& env,
            const std::string& link_path) {
  std::unique_ptr<CopyBarrier> barrier;
  profiler::BarrierFn barrier_fn;
  if (env.world_size > 1) {
    barrier = std::make_unique<CopyBarrier>(env);
    barrier_fn = [&barrier] { barrier->wait(); };
  }
  ProgressLine progress_line;
  Profile profile = profiler::profile_model(
      model, flags.options,
      [&](int first_layer, int last_layer, int num_layers, int64_t batch_size) {
        progress_line.update(detail::concat("layers ", first_layer + 1, "-", last_layer, " of ",
                                            num_layers, ", b=", batch_size));
      },
      barrier_fn);
  if (barrier) barrier->finish();
  if (env.rank != 0) return 0;
  if (!link_path.empty())
    profile.interconnect = interconnect_from_json(read_json_file(link_path), link_path);
  write_profile(flags.output, profile);
  return 0;
}

// Removes a file when the scope ends.
struct RemoveOnExit {
  std::string path;
  ~RemoveOnExit() {
    std::error_code ignored;
    if (!path.empty()) std::filesystem::remove(path, ignored);
  }
};

// Starts `ranks` ranks of `pipeplan link-bench` on this machine, the way `launch` starts a job,
// writing to `path`.
void run_link_bench(const std::string& device, int ranks, const std::string& path) {
  executor::LaunchOptions launch;
  launch.nproc = ranks;
  launch.command = {std::filesystem::read_symlink("/proc/self/exe").string(),
                    "link-bench",
                    "--device",
                    device,
                    "-o",
                    path};
  launch.set_omp_num_threads = false;
  launch.extra_env = {{"OMP_NUM_THREADS", "1"}};
  PIPEPLAN_RUNTIME_CHECK(executor::launch(launch) == 0, "timing the link between ", ranks,
                         " local ranks failed (see the ranks' errors above; --no-comm skips "
                         "the timing)");
}

// The tensor-parallel sizes above 2 whose all-reduce this machine can time: the profile's
// (profiler::usable_tp_sizes: ascending, each once, none for a model that does not split),
// with a GPU (on CPU, a core) for each rank.
std::vector<int> group_sizes(const ProfileFlags& flags, const models::Model& model) {
  const bool cuda = flags.options.device.rfind("cuda", 0) == 0;
  const int local = cuda ? static_cast<int>(torch::cuda::device_count()) : executor::usable_cores();
  std::vector<int> sizes;
  for (int tp : profiler::usable_tp_sizes(model, flags.options.tp_sizes))
    if (tp > 2 && tp <= local) sizes.push_back(tp);
  return sizes;
}

// Times the link between 2 local ranks, and the all-reduce of each group_sizes size, and
// returns the file in the temporary folder where the interconnect they measured is.
std::string time_link(const ProfileFlags& flags, const models::Model& model) {
  const std::string device = flags.options.device.rfind("cuda", 0) == 0 ? "cuda" : "cpu";
  const std::string link_path =
      (std::filesystem::temp_directory_path() /
       ("pipeplan-link-" + std::to_string(::getpid()) + ".json"))
          .string();
  if (stderr_is_terminal())
    log_line("timing send/recv and all-reduce between 2 local ranks (4 KiB-64 MiB)");
  RemoveOnExit unless_returned{link_path};
  run_link_bench(device, 2, link_path);
  const std::vector<int> sizes = group_sizes(flags, model);
  if (!sizes.empty()) {
    InterconnectProfile link = interconnect_from_json(read_json_file(link_path), link_path);
    for (int ranks : sizes) {
      if (stderr_is_terminal())
        log_line(detail::concat("timing the all-reduce over ", ranks, " local ranks"));
      const RemoveOnExit group{link_path + "." + std::to_string(ranks)};
      run_link_bench(device, ranks, group.path);
      link.group_allreduce.push_back(
          group_allreduce_from_json(read_json_file(group.path), group.path));
    }
    write_json_file(link_path, to_json(link));
  }
  unless_returned.path.clear();
  return link_path;
}

int run_profile(ProfileFlags& flags) {
  profiler::ProfileOptions& options = flags.options;
  options.batch_sizes = parse_positive_list(flags.batch_sizes, "--batch-sizes");
  options.tp_sizes.clear();
  if (flags.tp_sizes != "none")
    for (int64_t tp : parse_positive_list(flags.tp_sizes, "--tp-sizes"))
      options.tp_sizes.push_back(static_cast<int>(std::min<int64_t>(tp, kMaxDevices + 1)));
  options.validate();
  PIPEPLAN_CHECK(options.co_located <= executor::max_local_processes(), "--co-located: ",
                 options.co_located, " processes are too many here; give ",
                 executor::local_processes_limit());
  // More threads than cores only wait on each other: 1,000 on 2 cores took 48 s to measure.
  PIPEPLAN_CHECK(!options.threads || *options.threads <= executor::usable_cores(), "--threads: ",
                 *options.threads, " is more than the ", executor::usable_cores(),
                 " cores this process may use; give at most that");
  check_outputs_distinct({{"-o", flags.output}}, {{"--model", flags.model}});
  const models::Model model = models::make_model(flags.model, flags.model_args);
  // Refused here, not when `train` finds nothing to optimize after profiling and planning.
  PIPEPLAN_CHECK(models::parameter_count(model) > 0, "--model ", quote(flags.model),
                 ": the model has no parameters; expected a model with weights to train");
  check_writable(flags.output, "-o");
  if (options.co_located > 1 && !options.threads)
    options.threads = std::max(1, executor::usable_cores() / options.co_located);
  const std::optional<executor::RendezvousEnv> env = copy_env();
  if (!env) {
    // The link first: the profile is then written once, whole, by the process that measured.
    const RemoveOnExit link{flags.no_comm ? "" : time_link(flags, model)};
    return options.co_located > 1 ? start_copies(flags, link.path)
                                  : measure(flags, model, {}, link.path);
  }
  PIPEPLAN_ASSERT(env->world_size == options.co_located, "copy of a co-located profile with ",
                  env->world_size, " ranks for --co-located ", options.co_located);
  const char* link_path = std::getenv(kLinkVariable);
  return measure(flags, model, *env, link_path ? link_path : "");
}

}  // namespace

Runner add_profile_command(CLI::App& app) {
  auto flags = std::make_shared<ProfileFlags>();
  profiler::ProfileOptions& options = flags->options;
  CLI::App* sub = app.add_subcommand(
      "profile", "Measure a model layer by layer (times, memory, output sizes) -> profile.json.");
  sub->add_option("--model", flags->model,
                  "Zoo model name (see `pipeplan models`), or the path of a TorchScript file "
                  "saved from PyTorch (README: Your own model)")
      ->required();
  sub->add_option("--model-arg", flags->model_args,
                  "Override a configuration field, KEY=VALUE (repeatable)");
  sub->add_option("--device", options.device, "cpu, cuda or cuda:N")->capture_default_str();
  sub->add_option("--batch-sizes", flags->batch_sizes,
                  "Micro-batch sizes to measure, comma-separated")
      ->capture_default_str();
  sub->add_option("--tp-sizes", flags->tp_sizes,
                  "Tensor-parallel group sizes to measure the split layers' shards at (zoo "
                  "transformer blocks; a TorchScript file's MLPs), comma-separated, or none "
                  "(sizes that do not divide the heads and MLP widths are skipped)")
      ->capture_default_str();
  sub->add_option("--precision", options.precision, "fp32, or amp-bf16 / amp-fp16 (CUDA autocast)")
      ->capture_default_str();
  sub->add_option("--warmup", options.warmup,
                  "Untimed passes (every layer's forward, then backward) per batch size")
      ->capture_default_str();
  sub->add_option("--repeats", options.repeats,
                  "Timed passes (every layer's forward, then backward) per batch size; median, p90")
      ->capture_default_str();
  sub->add_option("--threads", options.threads,
                  "Intra-op CPU threads per measuring process (default: LibTorch's choice; "
                  "cores / N with --co-located N)");
  sub->add_option("--co-located", options.co_located,
                  "Measure in N processes at once, as N ranks sharing this machine's cores (or "
                  "one GPU) run; recorded in the profile")
      ->capture_default_str();
  sub->add_option("--seed", options.seed, "Seed of the layer weights and the random batch")
      ->capture_default_str();
  sub->add_flag("--no-comm", flags->no_comm,
                "Skip timing send/recv and all-reduce between two local ranks, and the "
                "all-reduce of larger tensor-parallel groups (the planner then predicts "
                "communication as free)");
  sub->add_option("-o,--output", flags->output, "Where to write profile.json")->required();
  return [flags] { return run_profile(*flags); };
}

}  // namespace pipeplan::cli
