// Megatron-LM, DeepSpeed and vLLM exports read back by parsers of each target's documented
// grammar, written here independently of export/, and the plans each format refuses.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <string>
#include <vector>

#include "common/json.h"
#include "tests/export/export_fixtures.h"

namespace pipeplan::testing {
namespace {

// Megatron-LM's --pipeline-model-parallel-layout, as its help documents it (core_v0.14.0
// arguments.py): E embedding, t decoder layer, m MTP layer, L loss; stages split by '|';
// "x*n" and "(...)*n" repeat a token or a group; commas are cosmetic. A recursive-descent
// reading: sequence := item*, item := (token | '(' sequence ')') ['*' number].
class LayoutParser {
 public:
  explicit LayoutParser(std::string text) {
    text.erase(std::remove(text.begin(), text.end(), ','), text.end());
    text_ = text;
  }
  // The stages, each a string of tokens.
  std::vector<std::string> stages() {
    const std::string flat = sequence();
    EXPECT_EQ(pos_, text_.size()) << "layout '" << text_ << "' has trailing text";
    return split(flat, '|');
  }

 private:
  std::string sequence() {
    std::string out;
    while (pos_ < text_.size() && text_[pos_] != ')') out += item();
    return out;
  }
  std::string item() {
    std::string unit;
    if (text_[pos_] == '(') {
      ++pos_;
      unit = sequence();
      EXPECT_LT(pos_, text_.size()) << "unclosed '(' in '" << text_ << "'";
      ++pos_;
    } else {
      EXPECT_NE(std::string("EtmL|").find(text_[pos_]), std::string::npos)
          << "unknown token '" << text_[pos_] << "' in '" << text_ << "'";
      unit = text_.substr(pos_++, 1);
    }
    if (pos_ < text_.size() && text_[pos_] == '*') {
      ++pos_;
      size_t digits = 0;
      const int times = std::stoi(text_.substr(pos_), &digits);
      pos_ += digits;
      std::string repeated;
      for (int idx = 0; idx < times; ++idx) repeated += unit;
      return repeated;
    }
    return unit;
  }
  std::string text_;
  size_t pos_ = 0;
};

// The words of a bash array `NAME=( ... )` in `text`: whitespace-separated, single quotes removed.
std::vector<std::string> bash_array(const std::string& text, const std::string& name) {
  const size_t open = text.find(name + "=(");
  EXPECT_NE(open, std::string::npos) << text;
  const size_t close = text.find("\n)", open);
  std::vector<std::string> words;
  std::string word;
  bool quoted = false;
  for (size_t idx = open + name.size() + 2; idx < close; ++idx) {
    const char c = text[idx];
    if (c == '\'') {
      quoted = !quoted;
    } else if (!quoted && std::isspace(static_cast<unsigned char>(c))) {
      if (!word.empty()) words.push_back(word);
      word.clear();
    } else {
      word += c;
    }
  }
  if (!word.empty()) words.push_back(word);
  return words;
}

// "--flag value" pairs and bare "--flag"s of an argument list.
std::map<std::string, std::string> flags(const std::vector<std::string>& words) {
  std::map<std::string, std::string> out;
  for (size_t idx = 0; idx < words.size(); ++idx) {
    const bool has_value = idx + 1 < words.size() && words[idx + 1].rfind("--", 0) != 0;
    out[words[idx]] = has_value ? words[idx + 1] : "";
    if (has_value) ++idx;
  }
  return out;
}

std::map<std::string, std::string> megatron_flags(const Plan& plan, const ExportModel& model) {
  const ExportFiles files = export_plan(plan, model, ExportFormat::kMegatron, {});
  return flags(bash_array(files.document, "PIPEPLAN_MEGATRON_ARGS"));
}

TEST(LayoutParserTest, ReadsMegatronsDocumentedExamples) {
  // arguments.py's help example and the parse_str_to_list docstring's.
  EXPECT_EQ(LayoutParser("E|(t|)*3,m|m||L").stages(),
            (std::vector<std::string>{"E", "t", "t", "t", "m", "m", "", "L"}));
  const std::vector<std::string> stages = LayoutParser("Ettt|(tt|)*29,m|L").stages();
  ASSERT_EQ(stages.size(), 32u);
  EXPECT_EQ(stages[0], "Ettt");
  EXPECT_EQ(stages[29], "tt");
  EXPECT_EQ(stages[30], "m");
  EXPECT_EQ(stages[31], "L");
}

TEST(MegatronExportTest, LayoutExpandsToThePlansStageLayerCounts) {
  // embed + blocks 0-1 | blocks 2-5 | blocks 6-7 + ln_f + head
  const Plan plan = chunked_plan({3, 4, 4}, /*pp=*/3, Schedule::kOneFOneB, /*num_micro_batches=*/6);
  const auto args = megatron_flags(plan, gpt_model(8));
  EXPECT_EQ(args.at("--pipeline-model-parallel-size"), "3");
  EXPECT_EQ(LayoutParser(args.at("--pipeline-model-parallel-layout")).stages(),
            (std::vector<std::string>{"Ett", "tttt", "ttL"}));
  EXPECT_EQ(args.at("--num-layers"), "8");
  EXPECT_EQ(args.at("--micro-batch-size"), "2");
  EXPECT_EQ(args.at("--global-batch-size"), "12");
  EXPECT_EQ(args.count("--recompute-granularity"), 0u);
  EXPECT_EQ(args.count("--num-virtual-stages-per-pipeline-rank"), 0u)
      << "Megatron refuses it beside a layout, which sets V itself";
  EXPECT_EQ(args.count("--untie-embeddings-and-output-weights"), 1u);
}

// Megatron-LM and vLLM take the plan's tp; DeepSpeed's pipeline configuration has none.
TEST(MegatronExportTest, CarriesTensorParallelismAndDeepspeedRefusesIt) {
  const Plan plan = with_tensor_parallel(
      chunked_plan({3, 4, 4}, /*pp=*/3, Schedule::kOneFOneB, /*num_micro_batches=*/6), 2);
  const auto args = megatron_flags(plan, gpt_model(8));
  EXPECT_EQ(args.at("--tensor-model-parallel-size"), "2");
  EXPECT_EQ(args.at("--pipeline-model-parallel-size"), "3");
  const ExportFiles files = export_plan(plan, gpt_model(8), ExportFormat::kMegatron, {});
  EXPECT_NE(files.document.find("start 6 ranks"), std::string::npos) << files.document;
  EXPECT_NE(files.document.find("by the\n# vocabulary too"), std::string::npos);
  EXPECT_EQ(refusal(plan, gpt_model(8), ExportFormat::kDeepspeed)
                .rfind("deepspeed cannot express tensor_parallel.tp = 2: DeepSpeed's pipeline "
                       "configuration has no tensor-parallel degree",
                       0),
            0u);
  const Plan plain = chunked_plan({3, 4, 4}, /*pp=*/3, Schedule::kOneFOneB, 6);
  EXPECT_EQ(megatron_flags(plain, gpt_model(8)).at("--tensor-model-parallel-size"), "1");
}

TEST(MegatronExportTest, InterleavedLayoutHasPpTimesVStagesInChunkOrder) {
  // 2 stages x 2 chunks; chunk c runs on stage c % 2 as Megatron's layout index v·pp + s.
  const Plan plan = chunked_plan({2, 3, 3, 3}, /*pp=*/2, Schedule::kInterleaved1F1B);
  const auto args = megatron_flags(plan, gpt_model(8));
  const std::vector<std::string> stages =
      LayoutParser(args.at("--pipeline-model-parallel-layout")).stages();
  ASSERT_EQ(stages.size(), 4u);
  EXPECT_EQ(stages.size() / std::stoul(args.at("--pipeline-model-parallel-size")), 2u);
  for (size_t chunk = 0; chunk < stages.size(); ++chunk) {
    const auto decoders = std::count(stages[chunk].begin(), stages[chunk].end(), 't');
    const StagePlan& expected = plan.stages[chunk];
    const int expected_decoders =
        std::min(expected.last, 9) - std::max(expected.first, 1);  // blocks are layers 1..8
    EXPECT_EQ(decoders, expected_decoders) << "chunk " << chunk;
  }
  EXPECT_EQ(stages.front().front(), 'E');
  EXPECT_EQ(stages.back().back(), 'L');
}

TEST(MegatronExportTest, RecomputesEveryStageWholeWhenEveryStageCheckpoints) {
  Plan plan = chunked_plan({3, 4, 4}, /*pp=*/3, Schedule::kOneFOneB, 6);
  for (StagePlan& stage : plan.stages) stage.checkpoint = true;
  plan.precision = Precision::kAmpBf16;
  plan.dp = 2;
  plan.data_parallel.zero = 1;
  const auto args = megatron_flags(plan, gpt_model(8));
  EXPECT_EQ(args.at("--recompute-granularity"), "full");
  EXPECT_EQ(args.at("--recompute-method"), "uniform");
  // Megatron's uniform method checkpoints runs of N layers from each stage's first: N = the
  // most decoder layers of a stage makes each stage one run, keeping only its input.
  EXPECT_EQ(args.at("--recompute-num-layers"), "4");
  EXPECT_EQ(args.count("--bf16"), 1u);
  EXPECT_EQ(args.count("--use-distributed-optimizer"), 1u);
}

TEST(MegatronExportTest, RefusesWhatItsLayoutCannotExpress) {
  const ExportModel model = gpt_model(8);
  const auto refuses = [&model](const Plan& plan, const std::string& expected) {
    const std::string message = refusal(plan, model, ExportFormat::kMegatron);
    EXPECT_EQ(message.rfind("megatron cannot express ", 0), 0u) << message;
    EXPECT_NE(message.find(expected), std::string::npos) << message;
  };
  refuses(chunked_plan({3, 8}, 2, Schedule::kGpipe), "schedule gpipe");
  refuses(chunked_plan({3, 8}, 2, Schedule::kZeroBubbleH1), "schedule zb-h1");
  // The embedding alone on the first stage is a layout Megatron takes ("E|t*8L").
  EXPECT_EQ(refusal(chunked_plan({1, 10}, 2, Schedule::kOneFOneB), model, ExportFormat::kMegatron),
            "");
  refuses(chunked_plan({10, 1}, 2, Schedule::kOneFOneB), "output layer 'ln_f' on stage 0");
  Plan mixed = chunked_plan({3, 8}, 2, Schedule::kOneFOneB);
  mixed.stages[1].checkpoint = true;
  refuses(mixed, "checkpointing on 1 of 2 stages");
  Plan partial = chunked_plan({3, 8}, 2, Schedule::kOneFOneB);
  partial.stages[1].recompute_layers = {4, 6};
  refuses(partial,
          "stages[1].recompute_layers (2 of its layers recomputed): Megatron-LM's "
          "--recompute-method recomputes whole stages or none (plan with --checkpoint none or "
          "all)");
  Plan serving = chunked_plan({3, 8}, 2, Schedule::kGpipe);
  serving.mode = PlanMode::kInference;
  refuses(serving, "a plan of mode inference");
  ExportModel odd = model;
  odd.layer_kinds[4] = "MoEBlock";
  EXPECT_NE(refusal(chunked_plan({3, 8}, 2, Schedule::kOneFOneB), odd, ExportFormat::kMegatron)
                .find("layer 4 'blocks.3' of kind 'MoEBlock' between the decoder layers"),
            std::string::npos);
}

TEST(DeepspeedExportTest, PartsAreThePlansStageBoundaries) {
  Plan plan = chunked_plan({3, 5, 3}, /*pp=*/3, Schedule::kOneFOneB, /*num_micro_batches=*/6,
                           /*dp=*/2);
  const Json config = parse_json(
      export_plan(plan, gpt_model(8), ExportFormat::kDeepspeed, {}).document, "ds_config.json");
  // DeepSpeed's own batch rule: train_batch_size = micro-batch x accumulation x data parallel.
  EXPECT_EQ(config.at("train_batch_size").get<int64_t>(),
            config.at("train_micro_batch_size_per_gpu").get<int64_t>() *
                config.at("gradient_accumulation_steps").get<int64_t>() * plan.dp);
  EXPECT_EQ(config.at("gradient_accumulation_steps"), 6);
  const std::vector<int> parts = config.at("pipeline").at("parts").get<std::vector<int>>();
  ASSERT_EQ(parts.size(), 4u);  // PipelineModule.parts: num_stages + 1 boundaries
  // Stage s builds layers [parts[s], parts[s + 1]) (PipelineModule._set_bounds).
  for (size_t stage = 0; stage < plan.stages.size(); ++stage) {
    EXPECT_EQ(parts[stage], plan.stages[stage].first);
    EXPECT_EQ(parts[stage + 1], plan.stages[stage].last);
  }
  EXPECT_EQ(config.at("pipeline").at("activation_checkpoint_interval"), 0);
  EXPECT_EQ(config.at("pipeline").at("layers").size(), 11u);
  EXPECT_FALSE(config.contains("zero_optimization"));
}

TEST(DeepspeedExportTest, OneCheckpointedBlockPerStageWhenEveryStageCheckpoints) {
  Plan plan = chunked_plan({3, 5, 3}, 3, Schedule::kOneFOneB, 6, 2);
  for (StagePlan& stage : plan.stages) stage.checkpoint = true;
  plan.data_parallel.zero = 1;
  const Json config = parse_json(
      export_plan(plan, gpt_model(8), ExportFormat::kDeepspeed, {}).document, "ds_config.json");
  const int interval = config.at("pipeline").at("activation_checkpoint_interval");
  const std::vector<int> parts = config.at("pipeline").at("parts").get<std::vector<int>>();
  // PipelineModule.forward checkpoints blocks range(0, local layers, interval) of each stage.
  for (size_t stage = 0; stage + 1 < parts.size(); ++stage) {
    const int local_layers = parts[stage + 1] - parts[stage];
    int blocks = 0;
    for (int start = 0; start < local_layers; start += interval) ++blocks;
    EXPECT_EQ(blocks, 1) << "stage " << stage;
  }
  EXPECT_EQ(config.at("zero_optimization").at("stage"), 1);
}

TEST(DeepspeedExportTest, RefusesSchedulesOtherThan1f1b) {
  for (const Schedule schedule : {Schedule::kGpipe, Schedule::kZeroBubbleH1}) {
    const std::string message =
        refusal(chunked_plan({3, 8}, 2, schedule), gpt_model(8), ExportFormat::kDeepspeed);
    EXPECT_NE(message.find("deepspeed cannot express schedule " + to_string(schedule)),
              std::string::npos)
        << message;
  }
  EXPECT_NE(refusal(chunked_plan({2, 3, 3, 3}, 2, Schedule::kInterleaved1F1B), gpt_model(8),
                    ExportFormat::kDeepspeed)
                .find("schedule interleaved-1f1b"),
            std::string::npos);
}

// vLLM's get_pp_indices with VLLM_PP_LAYER_PARTITION set (vllm/distributed/utils.py): the value
// is one decoder-layer count per pipeline rank, summing to num_hidden_layers; rank r holds
// [sum of counts before r, that + its count).
std::vector<std::pair<int, int>> vllm_indices(const std::string& partition, int pp_size,
                                              int num_hidden_layers) {
  std::vector<int> counts;
  for (const std::string& piece : split(partition, ',')) counts.push_back(std::stoi(piece));
  EXPECT_EQ(static_cast<int>(counts.size()), pp_size);
  int sum = 0;
  for (const int count : counts) sum += count;
  EXPECT_EQ(sum, num_hidden_layers);
  std::vector<std::pair<int, int>> indices;
  int start = 0;
  for (const int count : counts) {
    indices.emplace_back(start, start + count);
    start += count;
  }
  return indices;
}

TEST(VllmExportTest, PartitionGivesEachRankThePlansDecoderLayers) {
  Plan plan = chunked_plan({4, 3, 4}, 3, Schedule::kGpipe);
  plan.mode = PlanMode::kInference;
  plan.precision = Precision::kAmpBf16;
  const std::string doc = export_plan(plan, gpt_model(8), ExportFormat::kVllm, {}).document;
  const size_t at = doc.find("export VLLM_PP_LAYER_PARTITION=");
  ASSERT_NE(at, std::string::npos) << doc;
  const std::string value = doc.substr(at + 31, doc.find('\n', at) - at - 31);
  const auto args = flags(bash_array(doc, "PIPEPLAN_VLLM_ARGS"));
  const int pp = std::stoi(args.at("--pipeline-parallel-size"));
  const auto indices = vllm_indices(value, pp, /*num_hidden_layers=*/8);
  // Decoder layer d is pipeplan layer d + 1 (after the embedding).
  for (int rank = 0; rank < pp; ++rank) {
    EXPECT_EQ(indices[rank].first, std::max(plan.stages[rank].first, 1) - 1) << rank;
    EXPECT_EQ(indices[rank].second, std::min(plan.stages[rank].last, 9) - 1) << rank;
  }
  EXPECT_EQ(args.at("--dtype"), "bfloat16");
}

TEST(VllmExportTest, RefusesTrainingPlansAndLayersOffTheirStage) {
  const ExportModel model = gpt_model(8);
  EXPECT_NE(refusal(chunked_plan({3, 8}, 2, Schedule::kOneFOneB), model, ExportFormat::kVllm)
                .find("vllm cannot express a plan of mode training"),
            std::string::npos);
  Plan serving = chunked_plan({10, 1}, 2, Schedule::kGpipe);
  serving.mode = PlanMode::kInference;
  EXPECT_NE(refusal(serving, model, ExportFormat::kVllm).find("output layer 'ln_f' on stage 0"),
            std::string::npos);
  ExportModel no_stack = model;
  no_stack.layer_kinds.assign(no_stack.layer_kinds.size(), "group");
  serving = chunked_plan({5, 6}, 2, Schedule::kGpipe);
  serving.mode = PlanMode::kInference;
  EXPECT_NE(refusal(serving, no_stack, ExportFormat::kVllm).find("without a decoder stack"),
            std::string::npos);
}

}  // namespace
}  // namespace pipeplan::testing
