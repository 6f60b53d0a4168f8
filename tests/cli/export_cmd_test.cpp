// `pipeplan export` as users run it: the help lists every format with what it refuses, the
// export finds the plan's profile by its hash, a refused plan is one line and exit 2, and
// torchtitan's TOML is TOML to Python's own parser.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "common/json.h"
#include "export/export.h"
#include "tests/cli/cli_fixture.h"

namespace pipeplan::testing {
namespace {

class ExportCmdTest : public CliTest {
 protected:
  // plan.json for 2 stages of the fixture profile (resnet_tiny: stem, 8 blocks, head).
  void make_plan(const std::string& schedule) const {
    const Outcome planned =
        run(plan_args("--pp 2 --dp 1 --schedule " + schedule + " --checkpoint none -o plan.json"));
    ASSERT_EQ(planned.exit_code, 0) << planned.err;
  }
};

TEST_F(ExportCmdTest, HelpListsEveryFormatWithWhatItRefuses) {
  const Outcome help = run("export --help");
  ASSERT_EQ(help.exit_code, 0) << help.err;
  size_t refusal_lines = 0;
  for (size_t at = help.out.find("refuses: "); at != std::string::npos;
       at = help.out.find("refuses: ", at + 1))
    ++refusal_lines;
  EXPECT_EQ(refusal_lines, export_formats().size()) << help.out;
  for (const ExportFormatInfo& info : export_formats()) {
    EXPECT_NE(help.out.find(std::string("  ") + info.name + "\n"), std::string::npos) << info.name;
    EXPECT_NE(help.out.find(info.target), std::string::npos) << info.name;
  }
}

TEST_F(ExportCmdTest, ExportsThePlansStagesByTheProfilesLayerNames) {
  make_plan("1f1b");
  const Outcome exported = run("export --plan plan.json --to torch-pipelining -o stages.json");
  ASSERT_EQ(exported.exit_code, 0) << exported.err;
  const Json doc = read_json_file((dir_ / "stages.json").string());
  const Json plan = read_json_file((dir_ / "plan.json").string());
  ASSERT_EQ(doc.at("stages").size(), 2u);
  for (int stage = 0; stage < 2; ++stage) {
    const int first = plan.at("stages")[stage].at("first");
    const int last = plan.at("stages")[stage].at("last");
    ASSERT_EQ(doc.at("stages")[stage].at("modules").size(), static_cast<size_t>(last - first));
    if (first == 0) {
      EXPECT_EQ(doc.at("stages")[stage].at("modules")[0], "stem");
    }
  }
  EXPECT_EQ(doc.at("stages")[1].at("modules").back(), "head");
  // Without -o the export goes to standard output.
  const Outcome printed = run("export --plan plan.json --to deepspeed");
  ASSERT_EQ(printed.exit_code, 0) << printed.err;
  EXPECT_EQ(parse_json(printed.out, "stdout").at("pipeline").at("parts").size(), 3u);
}

TEST_F(ExportCmdTest, RefusesAProfileThatIsNotThePlans) {
  make_plan("1f1b");
  std::ofstream(dir_ / "other.json") << slurp(kFixture) << "\n";
  expect_bad_input("export --plan plan.json --to vllm --profile other.json",
                   "--profile: 'other.json': content hash ");
  expect_bad_input("export --plan plan.json --to vllm --profile missing.json",
                   "--profile: 'missing.json': no such file");
}

TEST_F(ExportCmdTest, RefusalsAreOneLineNamingWhatTheTargetCannotExpress) {
  make_plan("gpipe");
  expect_bad_input("export --plan plan.json --to megatron",
                   "megatron cannot express schedule gpipe: Megatron-LM runs 1F1B and "
                   "interleaved 1F1B only");
  expect_bad_input("export --plan plan.json --to vllm",
                   "vllm cannot express a plan of mode training");
  expect_bad_input("export --plan plan.json --to deepspeed --schedule-csv a.csv",
                   "--schedule-csv: 'a.csv': the action CSV is for training plans exported --to "
                   "torch-pipelining or torchtitan");
  expect_bad_input("export --plan plan.json --to nemo",
                   "--to: 'nemo': expected one of torch-pipelining, torchtitan, megatron, "
                   "deepspeed, vllm");
  EXPECT_FALSE(std::filesystem::exists(dir_ / "a.csv"));
}

TEST_F(ExportCmdTest, TorchtitanTomlReadsBackWithPythonsTomllib) {
  make_plan("gpipe");
  const Outcome exported =
      run("export --plan plan.json --to torchtitan -o job.toml --schedule-csv order.csv");
  ASSERT_EQ(exported.exit_code, 0) << exported.err;
  // Python's tomllib (3.11) parses the file; the script prints the keys torchtitan reads.
  const std::string script =
      "import json, tomllib; t = tomllib.load(open('job.toml', 'rb')); p = t['parallelism']; "
      "print(json.dumps({'pp': p['pipeline_parallel_degree'], 'parts': "
      "p['module_fqns_per_model_part'], 'schedule': p['pipeline_parallel_schedule'], 'csv': "
      "p['pipeline_parallel_schedule_csv'], 'local': t['training']['local_batch_size'], "
      "'micro': p['pipeline_parallel_microbatch_size'], 'ac': "
      "t['activation_checkpoint']['mode']}))";
  const std::string command =
      "cd '" + dir_.string() + "' && python3 -c \"" + script + "\" > parsed.json 2> python.err";
  if (std::system("python3 -c 'import tomllib' 2> /dev/null") != 0)
    GTEST_SKIP() << "python3 without tomllib (3.11+)";
  ASSERT_EQ(std::system(command.c_str()), 0) << slurp(dir_ / "python.err");
  const Json parsed = read_json_file((dir_ / "parsed.json").string());
  const Json plan = read_json_file((dir_ / "plan.json").string());
  EXPECT_EQ(parsed.at("pp"), 2);
  EXPECT_EQ(parsed.at("schedule"), "GPipe");
  EXPECT_EQ(parsed.at("csv"), "order.csv");
  EXPECT_EQ(parsed.at("local").get<int>() / parsed.at("micro").get<int>(),
            plan.at("num_micro_batches").get<int>());
  ASSERT_EQ(parsed.at("parts").size(), 2u);
  EXPECT_EQ(parsed.at("parts")[0][0], "stem");
  EXPECT_EQ(parsed.at("ac"), "none");
  // The CSV holds one row per rank: gpipe's forwards then backwards of its stage.
  const std::vector<std::string> rows = [&] {
    std::vector<std::string> lines;
    std::ifstream in(dir_ / "order.csv");
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    return lines;
  }();
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[1].rfind("1F0,1F1", 0), 0u) << rows[1];
}

}  // namespace
}  // namespace pipeplan::testing
