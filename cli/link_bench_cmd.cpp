// `pipeplan link-bench`: internal. `pipeplan profile` starts two of these as ranks of one job;
// they time point-to-point, all-reduce, reduce-scatter and all-gather messages between them and
// rank 0 writes the fitted interconnect record for the profile. Started as more ranks (a
// tensor-parallel group's size), they time the all-reduce over all of them alone, and rank 0
// writes a "group_allreduce" element.
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "common/error.h"
#include "common/json.h"
#include "executor/comm.h"
#include "executor/rendezvous.h"
#include "plans/profile.h"

namespace pipeplan::cli {
namespace {

// 4 KiB to 64 MiB in factors of 4.
std::vector<int64_t> message_sizes() {
  std::vector<int64_t> sizes;
  for (int64_t bytes = int64_t{4} << 10; bytes <= int64_t{64} << 20; bytes *= 4)
    sizes.push_back(bytes);
  return sizes;
}

struct LinkBenchFlags {
  std::string device = "cpu";
  int repeats = 7;
  int timeout_s = 120;
  std::string output;
};

int run_link_bench(const LinkBenchFlags& flags) {
  PIPEPLAN_CHECK(flags.repeats >= 1, "--repeats: ", flags.repeats, " is below 1");
  const executor::RendezvousEnv env = executor::read_rendezvous_env();
  const torch::Device device(flags.device == "cuda" ? "cuda:" + std::to_string(env.local_rank)
                                                    : flags.device);
  const executor::LinkTimings timings = executor::time_links(
      env, device, message_sizes(), flags.repeats, std::chrono::seconds(flags.timeout_s));
  if (env.rank != 0) return 0;
  if (env.world_size > 2) {
    std::vector<CommProfile::Point> allreduce;
    for (const executor::LinkTimings::Point& point : timings.points)
      allreduce.push_back({point.bytes, point.allreduce_ms});
    write_json_file(flags.output, to_json(GroupAllReduce{env.world_size, fit_comm(allreduce)}));
    return 0;
  }
  std::vector<CommProfile::Point> p2p, allreduce, reduce_scatter, all_gather;
  for (const executor::LinkTimings::Point& point : timings.points) {
    p2p.push_back({point.bytes, point.p2p_ms});
    allreduce.push_back({point.bytes, point.allreduce_ms});
    reduce_scatter.push_back({point.bytes, point.reduce_scatter_ms});
    all_gather.push_back({point.bytes, point.all_gather_ms});
  }
  InterconnectProfile link{timings.backend, env.world_size, fit_comm(std::move(p2p)),
                           fit_comm(std::move(allreduce))};
  // ZeRO-1's collectives, `bytes` the whole tensor: the "interconnect" object's optional
  // "reduce_scatter" and "all_gather" keys.
  link.reduce_scatter = fit_comm(std::move(reduce_scatter));
  link.all_gather = fit_comm(std::move(all_gather));
  write_json_file(flags.output, to_json(link));
  return 0;
}

}  // namespace

Runner add_link_bench_command(CLI::App& app) {
  auto flags = std::make_shared<LinkBenchFlags>();
  CLI::App* sub = app.add_subcommand(
      "link-bench",
      "Internal: time messages between the ranks `pipeplan profile` starts (two, or a "
      "tensor-parallel group's all-reduce).");
  sub->group("");  // hidden from --help
  sub->add_option("--device", flags->device, "cpu or cuda (each rank uses cuda:LOCAL_RANK)");
  sub->add_option("--repeats", flags->repeats, "Timed rounds per message size (median)");
  sub->add_option("--timeout-s", flags->timeout_s, "Seconds to wait for the other rank");
  sub->add_option("-o,--output", flags->output, "Where rank 0 writes the interconnect record")
      ->required();
  return [flags] { return run_link_bench(*flags); };
}

}  // namespace pipeplan::cli
