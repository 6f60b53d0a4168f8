// synthetic_profile: writes the GPT-like profile of the planner benchmarks to a file, so that
// `pipeplan plan` and `pipeplan simulate` can be timed through the command line
// (bench/planner_scale.sh) on the same model planner_bench searches.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "bench/synthetic_profile.h"
#include "common/error.h"

namespace pipeplan::bench {
namespace {

constexpr const char* kUsage =
    "usage: synthetic_profile --layers N [--hidden H] [--sequence S] [--seed S] [--no-tp]\n"
    "                         -o FILE\n"
    "Writes the synthetic GPT-like profile (bench/synthetic_profile.h) of N layers\n"
    "(embedding + blocks + head) of width H (default 2048) as profile.json, each block\n"
    "with its tensor-parallel shards at 2, 4 and 8 unless --no-tp.\n";

struct Options {
  SyntheticModel model;
  std::string output;
};

int64_t parse_integer(std::string_view flag, const char* text) {
  char* end = nullptr;
  const long long value = std::strtoll(text, &end, 10);
  PIPEPLAN_CHECK(end != text && *end == '\0' && value >= 1, flag, ": ", quote(text),
                 " is not a positive integer");
  return value;
}

Options parse(int argc, char** argv) {
  Options options;
  bool layers_given = false;
  for (int idx = 1; idx < argc; ++idx) {
    const std::string_view flag = argv[idx];
    if (flag == "--no-tp") {
      options.model.tp_sizes.clear();
      continue;
    }
    PIPEPLAN_CHECK(idx + 1 < argc, flag, ": missing value (see --help)");
    const char* value = argv[++idx];
    if (flag == "--layers") {
      options.model.num_layers = static_cast<int>(parse_integer(flag, value));
      layers_given = true;
    } else if (flag == "--hidden") {
      options.model.hidden = parse_integer(flag, value);
    } else if (flag == "--sequence") {
      options.model.sequence = parse_integer(flag, value);
    } else if (flag == "--seed") {
      options.model.seed = static_cast<uint64_t>(parse_integer(flag, value));
    } else if (flag == "-o" || flag == "--output") {
      options.output = value;
    } else {
      PIPEPLAN_CHECK(false, "unknown flag ", quote(flag), " (see --help)");
    }
  }
  PIPEPLAN_CHECK(layers_given && !options.output.empty(), "--layers and -o are required");
  PIPEPLAN_CHECK(options.model.num_layers >= 2, "--layers: ", options.model.num_layers,
                 " must be at least 2 (an embedding and a head)");
  return options;
}

}  // namespace
}  // namespace pipeplan::bench

int main(int argc, char** argv) {
  using namespace pipeplan;
  for (int idx = 1; idx < argc; ++idx)
    if (std::string_view(argv[idx]) == "--help" || std::string_view(argv[idx]) == "-h") {
      std::fputs(bench::kUsage, stdout);
      return 0;
    }
  try {
    const bench::Options options = bench::parse(argc, argv);
    write_profile(options.output, bench::synthetic_profile(options.model));
    std::printf("wrote %s (%d layers, hidden %lld)\n", options.output.c_str(),
                options.model.num_layers, static_cast<long long>(options.model.hidden));
    return 0;
  } catch (const Error& error) {
    std::fprintf(stderr, "synthetic_profile: error: %s\n", error.what());
    return error.exit_code();
  }
}
