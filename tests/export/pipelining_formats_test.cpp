// The torch.distributed.pipelining description and torchtitan's TOML: stages hold the plan's
// layers by FQN, ranks loop over stages, the actions are the plan's order in pipelining's
// notation, and the plans each format refuses.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/json.h"
#include "tests/export/export_fixtures.h"

namespace pipeplan::testing {
namespace {

Json pipelining_doc(const Plan& plan, const ExportModel& model) {
  return parse_json(export_plan(plan, model, ExportFormat::kTorchPipelining, {}).document,
                    "torch-pipelining.json");
}

std::string joined(const Json& row) {
  std::string out;
  for (const Json& action : row) out += (out.empty() ? "" : ",") + action.get<std::string>();
  return out;
}

TEST(TorchPipeliningExportTest, StagesHoldThePlansLayersByFqn) {
  const Plan plan = chunked_plan({3, 4, 4}, /*pp=*/3, Schedule::kOneFOneB, 6);
  const ExportModel model = gpt_model(8);
  const Json doc = pipelining_doc(plan, model);
  EXPECT_EQ(doc.at("schema"), "pipeplan.export.torch-pipelining/1");
  EXPECT_EQ(doc.at("schedule_class"), "Schedule1F1B");
  EXPECT_EQ(doc.at("n_microbatches"), 6);
  EXPECT_EQ(doc.at("micro_batch_size"), 2);
  ASSERT_EQ(doc.at("stages").size(), 3u);
  EXPECT_EQ(doc.at("stages")[0].at("modules"),
            Json(std::vector<std::string>{"embed", "blocks.0", "blocks.1"}));
  EXPECT_EQ(doc.at("stages")[2].at("modules"),
            Json(std::vector<std::string>{"blocks.6", "blocks.7", "ln_f", "head"}));
  for (int stage = 0; stage < 3; ++stage) EXPECT_EQ(doc.at("stages")[stage].at("pp_rank"), stage);
  // 1f1b on stage 0 of 3 with 6 micro-batches: 2 warm-up forwards, then F B alternating.
  EXPECT_EQ(joined(doc.at("actions")[0]), "0F0,0F1,0F2,0B0,0F3,0B1,0F4,0B2,0F5,0B3,0B4,0B5");
}

TEST(TorchPipeliningExportTest, InterleavedChunksLoopOverTheRanksInMegatronsOrder) {
  const Plan plan = chunked_plan({2, 3, 3, 3}, /*pp=*/2, Schedule::kInterleaved1F1B, 4);
  const Json doc = pipelining_doc(plan, gpt_model(8));
  EXPECT_EQ(doc.at("schedule_class"), "ScheduleInterleaved1F1B");
  EXPECT_EQ(doc.at("virtual_stages"), 2);
  for (int stage = 0; stage < 4; ++stage)
    EXPECT_EQ(doc.at("stages")[stage].at("pp_rank"), stage % 2);
  // plans/schedule.h's drawing for pp=2, V=2, m=4, local chunk v of rank s being stage v·2 + s:
  //   stage 0: F0 F1 F0v1 F1v1 F2 B0v1 F3 B1v1 F2v1 B0 F3v1 B1 B2v1 B3v1 B2 B3
  //   stage 1: F0 F1 F0v1 B0v1 F1v1 B1v1 F2 B0 F3 B1 F2v1 B2v1 F3v1 B3v1 B2 B3
  EXPECT_EQ(joined(doc.at("actions")[0]),
            "0F0,0F1,2F0,2F1,0F2,2B0,0F3,2B1,2F2,0B0,2F3,0B1,2B2,2B3,0B2,0B3");
  EXPECT_EQ(joined(doc.at("actions")[1]),
            "1F0,1F1,3F0,3B0,3F1,3B1,1F2,1B0,1F3,1B1,3F2,3B2,3F3,3B3,1B2,1B3");
}

TEST(TorchPipeliningExportTest, ZeroBubbleSplitsEachBackwardIntoInputAndWeightActions) {
  const Plan plan = chunked_plan({4, 4, 3}, /*pp=*/3, Schedule::kZeroBubbleH1, 4);
  const ExportFiles files = export_plan(plan, gpt_model(8), ExportFormat::kTorchPipelining, {});
  const Json doc = parse_json(files.document, "torch-pipelining.json");
  EXPECT_EQ(doc.at("schedule_class"), "_PipelineScheduleRuntime");
  // plans/schedule.h's drawing, zb-h1 pp=3 m=4, stage 1: F0 F1 Bi0 F2 Bi1 W0 F3 Bi2 W1 Bi3 W2 W3
  EXPECT_EQ(joined(doc.at("actions")[1]), "1F0,1F1,1I0,1F2,1I1,1W0,1F3,1I2,1W1,1I3,1W2,1W3");
  // The CSV _load_csv reads: row r is rank r's actions.
  const std::vector<std::string> lines = split(files.schedule_csv, '\n');
  ASSERT_EQ(lines.size(), 4u);  // 3 rows and the final newline
  for (int rank = 0; rank < 3; ++rank) EXPECT_EQ(lines[rank], joined(doc.at("actions")[rank]));
}

TEST(TorchPipeliningExportTest, InferencePlansRunForwardsOnly) {
  Plan plan = chunked_plan({5, 6}, 2, Schedule::kGpipe, 3);
  plan.mode = PlanMode::kInference;
  const Json doc = pipelining_doc(plan, gpt_model(8));
  EXPECT_EQ(doc.at("schedule_class"), "ScheduleGPipe");
  EXPECT_EQ(joined(doc.at("actions")[1]), "1F0,1F1,1F2");
}

TEST(TorchPipeliningExportTest, RefusesLayersThatAreNoModuleAndTiesAcrossStages) {
  ExportModel merged = gpt_model(8);
  merged.layer_names[3] = "blocks.2..blocks.3";
  const Plan plan = chunked_plan({3, 8}, 2, Schedule::kOneFOneB);
  EXPECT_NE(refusal(plan, merged, ExportFormat::kTorchPipelining)
                .find("torch-pipelining cannot express layer 3 'blocks.2..blocks.3'"),
            std::string::npos);
  ExportModel tied = gpt_model(8);
  tied.ties.push_back({{0, 10}, 1000});
  EXPECT_NE(refusal(plan, tied, ExportFormat::kTorchPipelining)
                .find("a parameter tied between layers 'embed' (stage 0) and 'head' (stage 1)"),
            std::string::npos);
}

// The quoted strings of each inner array of TOML key `key` = [[...], ...] in `toml`.
std::vector<std::vector<std::string>> toml_string_arrays(const std::string& toml,
                                                         const std::string& key) {
  size_t pos = toml.find("\n" + key + " = [");
  EXPECT_NE(pos, std::string::npos) << toml;
  pos = toml.find('[', pos);
  std::vector<std::vector<std::string>> arrays;
  int depth = 0;
  for (; pos < toml.size(); ++pos) {
    const char c = toml[pos];
    if (c == '[' && ++depth == 2) arrays.emplace_back();
    if (c == ']' && --depth == 0) break;
    if (c == '"') {
      const size_t end = toml.find('"', pos + 1);
      arrays.back().push_back(toml.substr(pos + 1, end - pos - 1));
      pos = end;
    }
  }
  return arrays;
}

// The value text of `key = value` inside [section] of `toml`.
std::string toml_value(const std::string& toml, const std::string& section,
                       const std::string& key) {
  const size_t start = toml.find("[" + section + "]\n");
  EXPECT_NE(start, std::string::npos) << toml;
  const size_t end = toml.find("\n[", start + 1);
  const size_t at = toml.find("\n" + key + " = ", start);
  if (at == std::string::npos || at > end) return "";
  const size_t value = at + key.size() + 4;
  return toml.substr(value, toml.find('\n', value) - value);
}

TEST(TorchtitanExportTest, ModelPartsAreThePlansStagesAndBatchesItsMicroBatches) {
  const Plan plan = chunked_plan({2, 3, 3, 3}, 2, Schedule::kInterleaved1F1B, 4);
  const ExportModel model = gpt_model(8);
  const std::string toml = export_plan(plan, model, ExportFormat::kTorchtitan, {}).document;
  const auto parts = toml_string_arrays(toml, "module_fqns_per_model_part");
  ASSERT_EQ(parts.size(), 4u);
  for (size_t chunk = 0; chunk < parts.size(); ++chunk)
    EXPECT_EQ(parts[chunk],
              std::vector<std::string>(model.layer_names.begin() + plan.stages[chunk].first,
                                       model.layer_names.begin() + plan.stages[chunk].last));
  EXPECT_EQ(toml_value(toml, "parallelism", "pipeline_parallel_degree"), "2");
  EXPECT_EQ(toml_value(toml, "parallelism", "pipeline_parallel_schedule"), "\"Interleaved1F1B\"");
  // torchtitan: n_microbatches = local_batch_size / pipeline_parallel_microbatch_size.
  EXPECT_EQ(std::stoi(toml_value(toml, "training", "local_batch_size")) /
                std::stoi(toml_value(toml, "parallelism", "pipeline_parallel_microbatch_size")),
            plan.num_micro_batches);
  EXPECT_EQ(toml_value(toml, "parallelism", "pipeline_parallel_schedule_csv"), "");
  EXPECT_EQ(toml_value(toml, "activation_checkpoint", "mode"), "\"none\"");
}

// torchtitan takes the plan's tp; torch.distributed.pipelining's stages cannot split a layer.
TEST(TorchtitanExportTest, CarriesTensorParallelismAndPipeliningRefusesIt) {
  const Plan plan = with_tensor_parallel(chunked_plan({3, 4, 4}, /*pp=*/3, Schedule::kOneFOneB), 2);
  const std::string toml = export_plan(plan, gpt_model(8), ExportFormat::kTorchtitan, {}).document;
  EXPECT_NE(toml.find("\ntensor_parallel_degree = 2\n"), std::string::npos) << toml;
  EXPECT_EQ(toml.find("only this TorchScript model's MLPs"), std::string::npos) << toml;
  // A TorchScript file's plan (its configuration holds the file's hash) split its MLPs only.
  Plan script_plan = plan;
  script_plan.model.config["file_hash"] = "fnv1a64:0000000000000001";
  EXPECT_NE(export_plan(script_plan, gpt_model(8), ExportFormat::kTorchtitan, {})
                .document.find("only this TorchScript model's MLPs"),
            std::string::npos);
  EXPECT_EQ(refusal(plan, gpt_model(8), ExportFormat::kTorchPipelining)
                .rfind("torch-pipelining cannot express tensor_parallel.tp = 2", 0),
            0u);
}

TEST(TorchtitanExportTest, ZeroBubbleNamesItsCsv) {
  const Plan plan = chunked_plan({4, 7}, 2, Schedule::kZeroBubbleH1, 4);
  ExportOptions options;
  EXPECT_NE(refusal(plan, gpt_model(8), ExportFormat::kTorchtitan, options)
                .find("give --schedule-csv FILE"),
            std::string::npos);
  options.schedule_csv_path = "zb.csv";
  const std::string toml =
      export_plan(plan, gpt_model(8), ExportFormat::kTorchtitan, options).document;
  EXPECT_EQ(toml_value(toml, "parallelism", "pipeline_parallel_schedule_csv"), "\"zb.csv\"");
  EXPECT_EQ(toml_value(toml, "parallelism", "pipeline_parallel_schedule"), "\"1F1B\"");
}

TEST(TorchtitanExportTest, RefusesWhatItsConfigCannotExpress) {
  const ExportModel model = gpt_model(8);
  const auto refuses = [&model](const Plan& plan, const std::string& expected,
                                const ExportModel* other = nullptr) {
    const std::string message = refusal(plan, other ? *other : model, ExportFormat::kTorchtitan);
    EXPECT_EQ(message.rfind("torchtitan cannot express ", 0), 0u) << message;
    EXPECT_NE(message.find(expected), std::string::npos) << message;
  };
  Plan amp = chunked_plan({3, 8}, 2, Schedule::kOneFOneB);
  amp.precision = Precision::kAmpBf16;
  refuses(amp, "precision amp-bf16");
  Plan zero = chunked_plan({3, 8}, 2, Schedule::kOneFOneB, 4, /*dp=*/2);
  zero.data_parallel.zero = 1;
  refuses(zero, "ZeRO-1");
  Plan mixed = chunked_plan({3, 8}, 2, Schedule::kOneFOneB);
  mixed.stages[0].checkpoint = true;
  refuses(mixed, "checkpointing on 1 of 2 stages");
  Plan serving = chunked_plan({3, 8}, 2, Schedule::kGpipe);
  serving.mode = PlanMode::kInference;
  refuses(serving, "a plan of mode inference");
  ExportModel nested = model;
  nested.layer_names[2] = "trunk.blocks.1";
  refuses(chunked_plan({3, 8}, 2, Schedule::kOneFOneB), "layer 2 'trunk.blocks.1'", &nested);
}

}  // namespace
}  // namespace pipeplan::testing
