// Tests for parse_profile on two threads (plans/profile.h): a profile big enough to split reads
// as the whole document does, with the same result or the same first error.
#include "plans/profile.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/error.h"
#include "tests/common/error_of.h"

namespace pipeplan {
namespace {

using testing::error_of;

// Enough layers for a profile of about 1.5 MB, above the size parse_profile splits from.
constexpr int kSplitLayers = 1000;

LayerPoint point_at(int64_t batch_size, double scale) {
  LayerPoint point;
  point.batch_size = batch_size;
  point.fwd_ms = 0.25 * scale;
  point.fwd_ms_p90 = 0.3125 * scale;
  point.bwd_ms = 0.5 * scale;
  point.bwd_ms_p90 = 0.625 * scale;
  point.output_shape = {batch_size, 128};
  point.output_bytes = batch_size * 256;  // bfloat16
  point.retained_bytes = batch_size * 256;
  point.saved_input_bytes = 0;
  point.saved_output_bytes = 0;
  point.fwd_transient_bytes = batch_size * 512;
  point.bwd_transient_bytes = batch_size * 1024;
  return point;
}

// A profile of `num_layers` layers whose names hold what a scan of the text must skip: brackets,
// braces, commas, escaped quotes and backslashes.
Profile big_profile(int num_layers) {
  Profile profile;
  profile.tool_version = "0.1.0";
  profile.created_at = "2025-01-31T12:00:00Z";
  profile.model.name = "mlp \"big\" [1]";
  profile.model.config = Json{{"hidden", 128}, {"layers", num_layers}};
  profile.model.hash = "abc123";
  profile.model.num_layers = num_layers;
  profile.model.input_shape = {128};
  profile.settings = ProfileSettings{"cuda:0", {1, 4}, "amp-bf16", 3, 10, 1, 42};
  profile.device = DeviceProfile{"cuda", "NVIDIA H100", 16, 8, 85899345920, 536870912};
  for (int layer_idx = 0; layer_idx < num_layers; ++layer_idx) {
    LayerProfile layer;
    layer.index = layer_idx;
    layer.name = "block[" + std::to_string(layer_idx) + "] {\"q\\\"}, ] \\";
    layer.kind = layer_idx % 2 ? "linear" : "x,]}";
    layer.param_count = 16512;
    layer.param_bytes = 66048;
    layer.output_dtype = "bfloat16";
    layer.optimizer_step_ms = {{"sgd", 0.125}, {"adamw", 0.25 + layer_idx * 1e-3}};
    layer.points = {point_at(1, 1.0 + layer_idx), point_at(4, 3.0 + layer_idx)};
    layer.fits = fit_points(layer.points);
    profile.layers.push_back(layer);
  }
  profile.ties.push_back(TiedProfile{{0, num_layers - 1}, 4096});
  return profile;
}

// The message of parse_profile's error for `text`, or its profile as JSON; the same of
// profile_from_json(parse_json(...)), the whole document on one thread, must match.
std::string outcome_of_parse(const std::string& text) {
  std::string profile;
  const std::string message =
      error_of([&] { profile = to_json(parse_profile(text, "p.json")).dump(); });
  return message.empty() ? profile : message;
}

std::string outcome_of_whole_document(const std::string& text) {
  std::string profile;
  const std::string message = error_of(
      [&] { profile = to_json(profile_from_json(parse_json(text, "p.json"), "p.json")).dump(); });
  return message.empty() ? profile : message;
}

// The offset of `"index": <layer_idx>` in `text` (dumped with indent 2), to edit in place.
size_t index_offset(const std::string& text, int layer_idx) {
  const size_t offset = text.find("\"index\": " + std::to_string(layer_idx) + ",");
  EXPECT_NE(offset, std::string::npos);
  return offset;
}

TEST(ProfileParseTest, TwoThreadsReadTheProfileTheWholeDocumentGives) {
  const Profile profile = big_profile(kSplitLayers);
  const Json json = to_json(profile);
  for (const int indent : {2, -1}) {
    const std::string text = json.dump(indent);
    ASSERT_GT(text.size(), 1u << 20);
    // Split about halfway (parse_profile splits at the first ',' in the second half of the text).
    const std::optional<RootArrayElements> first_layers =
        find_root_array_elements(text, "layers", text.size() / 2);
    ASSERT_TRUE(first_layers.has_value());
    EXPECT_EQ(text[first_layers->end], ',');
    EXPECT_NEAR(first_layers->elements.size(), kSplitLayers / 2, 20);
    EXPECT_EQ(to_json(parse_profile(text, "p.json")), json);
    EXPECT_EQ(outcome_of_parse(text), outcome_of_whole_document(text));
  }
  // "layers" as the last key, after one that holds a nested "layers".
  Json rest = json;
  rest.erase("layers");
  std::string text = rest.dump(1);
  text.insert(text.rfind('}'), ", \"layers\": " + json["layers"].dump(1));
  EXPECT_EQ(to_json(parse_profile(text, "p.json")), json);
}

TEST(ProfileParseTest, ErrorsInEitherPartAreThoseOfTheWholeDocument) {
  const Json json = to_json(big_profile(kSplitLayers));
  const std::string text = json.dump(2);
  const int late = kSplitLayers - 3;  // among the layers the second thread reads
  const auto expect_same = [&](const std::string& edited, const std::string& expected) {
    const std::string outcome = outcome_of_parse(edited);
    EXPECT_EQ(outcome, outcome_of_whole_document(edited));
    EXPECT_NE(outcome.find(expected), std::string::npos) << outcome.substr(0, 300);
  };
  Json bad_late = json;
  bad_late["layers"][late]["points"][0]["fwd_ms"] = -1;
  expect_same(bad_late.dump(2), "p.json: layers[997].points[0].fwd_ms: -1: expected a time");
  Json bad_early = bad_late;
  bad_early["layers"][2]["points"][1].erase("bwd_ms");
  expect_same(bad_early.dump(2), "p.json: layers[2].points[1].bwd_ms: missing");
  Json bad_settings = bad_late;
  bad_settings["settings"]["repeats"] = 0;
  expect_same(bad_settings.dump(2), "p.json: settings.repeats: 0: expected an integer");
  Json not_object = json;
  not_object["layers"][late] = 5;
  expect_same(not_object.dump(2), "p.json: layers[997]: 5: expected an object");
  Json wrong_index = json;
  wrong_index["layers"][late]["index"] = 3;
  expect_same(wrong_index.dump(2), "p.json: layers[997]");

  // Text that is no JSON in either thread's part: the byte named is the file's.
  for (const int layer_idx : {3, late}) {
    const size_t index = index_offset(text, layer_idx);
    std::string truncated_value = text;
    truncated_value.replace(index, 10, "\"index\": tru");
    expect_same(truncated_value, "p.json: not valid JSON (error at byte");
    std::string huge_number = text;
    huge_number.replace(index, 9, "\"index\": 1e999");
    expect_same(huge_number, "p.json: not valid JSON (");
    // The ',' before the layer, whose first key is "buffer_bytes".
    const size_t separator = text.rfind(',', text.rfind("\"buffer_bytes\"", index));
    std::string blank_element = text;
    blank_element.insert(separator, ", ");
    expect_same(blank_element, "p.json: not valid JSON (error at byte");
    std::string byte_order_mark = text;
    byte_order_mark.insert(separator + 1, "\xEF\xBB\xBF");
    expect_same(byte_order_mark, "p.json: not valid JSON (error at byte");
  }
  std::string trailing = text;
  trailing.insert(text.rfind(']', text.find("\"model\"")), ",");
  expect_same(trailing, "p.json: not valid JSON (error at byte");
  expect_same(text + " x", "p.json: not valid JSON (error at byte");

  // "layers" twice: the last one counts, as Json::parse keeps it (here: too few layers).
  std::string twice = text;
  twice.insert(twice.rfind('}'), ", \"layers\": [" + json["layers"][0].dump() + "]");
  expect_same(twice, "p.json: ");
}

}  // namespace
}  // namespace pipeplan
