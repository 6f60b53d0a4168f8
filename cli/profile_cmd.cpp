// `pipeplan profile`: measure a model layer by layer on this machine and write profile.json.
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "common/json.h"
#include "common/log.h"
#include "common/units.h"
#include "models/zoo.h"
#include "profiler/model_profiler.h"

namespace pipeplan::cli {
namespace {

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
  int threads = 0;
  std::string output;
  profiler::ProfileOptions options;
  CLI::Option* threads_option = nullptr;
};

int run_profile(ProfileFlags& flags) {
  profiler::ProfileOptions& options = flags.options;
  options.batch_sizes = parse_positive_list(flags.batch_sizes, "--batch-sizes");
  if (flags.threads_option->count() > 0) options.threads = flags.threads;
  options.validate();
  const models::Model model = models::make_model(flags.model, flags.model_args);
  check_writable(flags.output, "-o");

  ProgressLine progress_line;
  const Profile profile = profiler::profile_model(
      model, options,
      [&](int layer_idx, int num_layers, const std::string& name, int64_t batch_size) {
        progress_line.update(detail::concat("layer ", layer_idx + 1, "/", num_layers, " (", name,
                                            ") b=", batch_size));
      });
  write_profile(flags.output, profile);
  return 0;
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
  sub->add_option("--precision", options.precision, "fp32, or amp-bf16 / amp-fp16 (CUDA autocast)")
      ->capture_default_str();
  sub->add_option("--warmup", options.warmup,
                  "Untimed runs per layer, size and phase (forward, backward)")
      ->capture_default_str();
  sub->add_option("--repeats", options.repeats,
                  "Timed runs of forward and of backward per layer and size (median, p90)")
      ->capture_default_str();
  flags->threads_option = sub->add_option("--threads", flags->threads,
                                          "Intra-op CPU threads (default: LibTorch's choice)");
  sub->add_option("--seed", options.seed, "Seed of the layer weights and the random batch")
      ->capture_default_str();
  sub->add_option("-o,--output", flags->output, "Where to write profile.json")->required();
  return [flags] { return run_profile(*flags); };
}

}  // namespace pipeplan::cli
