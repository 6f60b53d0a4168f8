// Tests for plans/profile.h (no LibTorch): exact JSON round trips, rejected documents name the
// field, and the linear fits.
#include "plans/profile.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <string>

#include "common/error.h"
#include "common/files.h"
#include "tests/common/error_of.h"

namespace pipeplan {
namespace {

using testing::error_of;

LayerPoint sample_point(int64_t batch_size, double scale) {
  LayerPoint point;
  point.batch_size = batch_size;
  point.fwd_ms = 0.25 * scale;
  point.fwd_ms_p90 = 0.3125 * scale;
  point.bwd_ms = 0.5 * scale;
  point.bwd_ms_p90 = 0.625 * scale;
  point.output_shape = {batch_size, 128};
  point.output_bytes = batch_size * 256;  // bfloat16
  point.retained_bytes = batch_size * 3136 + 512;
  point.saved_input_bytes = batch_size * 3136;
  point.saved_output_bytes = 0;
  point.fwd_transient_bytes = batch_size * 512;
  point.bwd_transient_bytes = batch_size * 3136 + 401920;
  return point;
}

// A profile touching every field, optional ones included (kernel times, interconnect).
Profile sample_profile() {
  Profile profile;
  profile.tool_version = "0.1.0";
  profile.created_at = "2025-01-31T12:00:00Z";
  profile.model.name = "mlp_tiny";
  profile.model.config = Json{{"hidden", 128}, {"layers", 1}};
  profile.model.hash = "abc123";
  profile.model.num_layers = 2;
  profile.model.input_shape = {1, 28, 28};
  profile.settings = ProfileSettings{"cuda:1", {1, 4}, "amp-bf16", 3, 10, 1, 42, {}};
  profile.device = DeviceProfile{"cuda", "NVIDIA H100", 16, 8, 85899345920, 536870912};
  profile.interconnect = InterconnectProfile{
      "nccl", 2, CommProfile{0.01, 1.5e11, 0.001, {{1024, 0.02}, {1048576, 0.03}}},
      CommProfile{0.02, 1e11, 0.002, {{1024, 0.04}}}};
  for (int layer_idx = 0; layer_idx < 2; ++layer_idx) {
    LayerProfile layer;
    layer.index = layer_idx;
    layer.name = layer_idx == 0 ? "input" : "head";
    layer.kind = layer_idx == 0 ? "linear" : "head";
    layer.param_count = 100480;
    layer.param_bytes = 401920;
    layer.buffer_bytes = 64;
    layer.output_dtype = "bfloat16";
    layer.optimizer_step_ms = {{"sgd", 0.125}, {"adamw", 0.25}};
    layer.points = {sample_point(1, 1.0), sample_point(4, 3.0)};
    layer.points[1].fwd_kernel_ms = 0.0625;
    layer.points[1].bwd_kernel_ms = 0.125;
    layer.fits = fit_points(layer.points);
    profile.layers.push_back(layer);
  }
  profile.ties.push_back(TiedProfile{{0, 1}, 4096});
  return profile;
}

TEST(ProfileReportTest, RoundTripThroughJsonAndFileIsExact) {
  const Profile profile = sample_profile();
  const Json json = to_json(profile);
  EXPECT_EQ(to_json(profile_from_json(json, "profile.json")), json);

  const std::string path =
      (std::filesystem::temp_directory_path() / "pipeplan_report_test_profile.json").string();
  write_profile(path, profile);
  const Profile again = read_profile(path);
  std::filesystem::remove(path);
  EXPECT_EQ(to_json(again), json);
  ASSERT_TRUE(again.layers[0].points[1].fwd_kernel_ms.has_value());
  EXPECT_FALSE(again.layers[0].points[0].bwd_kernel_ms.has_value());
  EXPECT_EQ(again.settings.seed, 42u);
  ASSERT_TRUE(again.interconnect.has_value());
  EXPECT_EQ(again.interconnect->p2p.points.size(), 2u);
}

TEST(ProfileReportTest, MissingFieldsAreNamed) {
  const Json json = to_json(sample_profile());
  Json missing_point_field = json;
  missing_point_field["layers"][1]["points"][0].erase("retained_bytes");
  EXPECT_EQ(error_of([&] { profile_from_json(missing_point_field, "p.json"); }),
            "p.json: layers[1].points[0].retained_bytes: missing");
  Json missing_settings = json;
  missing_settings.erase("settings");
  EXPECT_EQ(error_of([&] { profile_from_json(missing_settings, "p.json"); }),
            "p.json: settings: missing");
  Json missing_fit = json;
  missing_fit["layers"][0]["fits"].erase("bwd_transient_bytes");
  EXPECT_EQ(error_of([&] { profile_from_json(missing_fit, "p.json"); }),
            "p.json: layers[0].fits.bwd_transient_bytes: missing");
}

// read_profile converts each layer while it parses the file; its errors are still those of
// profile_from_json, the first in the documented order (a layer's after the settings'), and a
// file that is no JSON is reported as such before any wrong layer.
TEST(ProfileReportTest, ReadProfileReportsTheFirstErrorOfTheFile) {
  const Json json = to_json(sample_profile());
  const std::string path =
      (std::filesystem::temp_directory_path() / "pipeplan_first_error_profile.json").string();
  const auto read_error = [&](const Json& doc, const std::string& suffix) {
    write_file_atomic(path, doc.dump(2) + suffix);
    const std::string message = error_of([&] { read_profile(path); });
    std::filesystem::remove(path);
    return message.substr(std::min(message.size(), path.size()));
  };
  Json bad_layer = json;
  bad_layer["layers"][1]["points"][0]["fwd_ms"] = -1;
  EXPECT_EQ(read_error(bad_layer, ""),
            ": layers[1].points[0].fwd_ms: -1: expected a time in ms in [0, 1e+08]");
  Json bad_settings = bad_layer;
  bad_settings["settings"]["repeats"] = 0;
  EXPECT_EQ(read_error(bad_settings, ""),
            ": settings.repeats: 0: expected an integer in [1, 2147483647]");
  EXPECT_EQ(read_error(bad_layer, " x"), ": not valid JSON (error at byte " +
                                             std::to_string(bad_layer.dump(2).size() + 2) + ")");
  Json not_object = json;
  not_object["layers"].push_back(5);
  EXPECT_EQ(read_error(not_object, ""), ": layers[2]: 5: expected an object");
}

TEST(ProfileReportTest, WrongSchemaIsRejected) {
  Json json = to_json(sample_profile());
  json["schema"] = "pipeplan.profile/2";
  EXPECT_NE(error_of([&] { profile_from_json(json, "p.json"); })
                .find("p.json: schema: \"pipeplan.profile/2\": unsupported"),
            std::string::npos);
  json["schema"] = "pipeplan.plan/1";
  EXPECT_NE(error_of([&] { profile_from_json(json, "p.json"); }).find("pipeplan.profile/1"),
            std::string::npos);
}

TEST(ProfileReportTest, NegativeValuesAreRejectedWithTheField) {
  const Json json = to_json(sample_profile());
  const auto rejects = [&](const std::function<void(Json&)>& spoil, const std::string& field) {
    Json bad = json;
    spoil(bad);
    const std::string message = error_of([&] { profile_from_json(bad, "p.json"); });
    EXPECT_NE(message.find("p.json: " + field + ": "), std::string::npos) << message;
  };
  rejects([](Json& j) { j["layers"][1]["points"][0]["fwd_ms"] = -0.5; },
          "layers[1].points[0].fwd_ms");
  rejects([](Json& j) { j["layers"][0]["points"][1]["bwd_kernel_ms"] = -1.0; },
          "layers[0].points[1].bwd_kernel_ms");
  rejects([](Json& j) { j["layers"][0]["param_bytes"] = -4; }, "layers[0].param_bytes");
  rejects([](Json& j) { j["layers"][0]["points"][0]["bwd_transient_bytes"] = -1; },
          "layers[0].points[0].bwd_transient_bytes");
  rejects([](Json& j) { j["layers"][0]["optimizer_step_ms"]["adamw"] = -2.0; },
          "layers[0].optimizer_step_ms.adamw");
  rejects([](Json& j) { j["device"]["memory_bytes"] = -1; }, "device.memory_bytes");
  rejects([](Json& j) { j["settings"]["warmup"] = -1; }, "settings.warmup");
  rejects([](Json& j) { j["settings"]["seed"] = -7; }, "settings.seed");
  rejects([](Json& j) { j["layers"][0]["fits"]["fwd_ms"]["rms_residual"] = -1.0; },
          "layers[0].fits.fwd_ms.rms_residual");
}

TEST(ProfileReportTest, InconsistentDocumentsAreRejected) {
  const Json json = to_json(sample_profile());
  Json saved_too_much = json;
  saved_too_much["layers"][0]["points"][0]["saved_output_bytes"] = 1 << 20;
  EXPECT_NE(error_of([&] {
              profile_from_json(saved_too_much, "p.json");
            }).find("layers[0].points[0].saved_input_bytes"),
            std::string::npos);
  Json wrong_sizes = json;
  wrong_sizes["settings"]["batch_sizes"] = {1, 8};
  EXPECT_NE(error_of([&] {
              profile_from_json(wrong_sizes, "p.json");
            }).find("layers[0].points[1].batch_size: 4: expected settings.batch_sizes[1] = 8"),
            std::string::npos);
  Json too_few_layers = json;
  too_few_layers["layers"].erase(1);
  EXPECT_NE(error_of([&] {
              profile_from_json(too_few_layers, "p.json");
            }).find("layers: 1 records: expected one per layer of the model (2"),
            std::string::npos);
  Json bad_precision = json;
  bad_precision["settings"]["precision"] = "fp8";
  EXPECT_NE(error_of([&] { profile_from_json(bad_precision, "p.json"); }).find("'fp8'"),
            std::string::npos);
}

// Issue 18: a profile whose fields parse but disagree with each other, or whose numbers would
// overflow the planner, is refused naming the field, the value and what is expected.
TEST(ProfileReportTest, MeaninglessDocumentsAreRejectedNamingTheValue) {
  const Json json = to_json(sample_profile());
  const auto rejects = [&](const std::function<void(Json&)>& spoil, const std::string& expected) {
    Json bad = json;
    spoil(bad);
    const std::string message = error_of([&] { profile_from_json(bad, "p.json"); });
    EXPECT_NE(message.find("p.json: " + expected), std::string::npos) << message;
  };
  rejects([](Json& j) { j["layers"][1]["points"][0]["fwd_ms"] = 1e13; },
          "layers[1].points[0].fwd_ms: 10000000000000.0: expected a time in ms in [0, 1e+08]");
  rejects([](Json& j) { j["layers"][1]["index"] = int64_t{4294967297}; },
          "layers[1].index: 4294967297: expected an integer in [0, 65535]");
  rejects([](Json& j) { j["settings"]["batch_sizes"] = {1, int64_t{1} << 40}; },
          "settings.batch_sizes: 1099511627776: expected an integer in [1, 16777216]");
  rejects([](Json& j) { j["model"]["config"]["hidden"] = -128; },
          "model.config.hidden: -128: expected a finite number >= 0");
  rejects([](Json& j) { j["settings"]["device"] = "cpu"; },
          "settings.device: 'cpu': expected device kind 'cuda'");
  rejects([](Json& j) { j["layers"][0]["points"][1]["fwd_ms_p90"] = 0.5; },
          "layers[0].points[1].fwd_ms_p90: 0.5: expected at least the median fwd_ms 0.75");
  rejects([](Json& j) { j["layers"][0]["points"][1]["output_shape"] = {1, 128}; },
          "layers[0].points[1].output_shape: [1, 128]: expected the batch dimension 4 first");
  rejects([](Json& j) { j["layers"][0]["points"][1]["output_shape"] = {4, 64, 2}; },
          "layers[0].points[1].output_shape: [4, 64, 2]: expected the sample shape of points[0] "
          "[1, 128]");
  rejects([](Json& j) { j["layers"][0]["points"][1]["output_bytes"] = 2048; },
          "layers[0].points[1].output_bytes: 2048: expected 1024 (output_shape [4, 128] of "
          "bfloat16)");
  rejects([](Json& j) { j["layers"][1]["param_bytes"] = 0; },
          "layers[1].param_bytes: 0: expected 0 exactly when param_count is 0");
  rejects([](Json& j) { j["layers"][1]["fits"]["fwd_ms"]["slope"] = -5.0; },
          "layers[1].fits.fwd_ms: intercept 0.0833333, slope -5, rms_residual 0: expected the fit "
          "of the points (0.0833333, 0.166667, 0)");
  rejects([](Json& j) { j["interconnect"]["p2p"]["bandwidth_bytes_per_s"] = 1e-300; },
          "interconnect.p2p.bandwidth_bytes_per_s: 1e-300: expected a number in [1, 1e+18]");
  rejects([](Json& j) { j["model"]["input_shape"] = Json::array(); },
          "model.input_shape: []: expected the dimensions of one sample");
  rejects([](Json& j) { j["ties"][0]["layers"] = {1, 0}; },
          "ties[0].layers[1]: 0: expected layers of the model in strictly ascending order");
  rejects([](Json& j) { j["ties"][0]["layers"] = {0, 2}; },
          "ties[0].layers[1]: 2: expected layers of the model in strictly ascending order");
  rejects([](Json& j) { j["ties"][0]["layers"] = {1}; },
          "ties[0].layers: 1 layers: expected the two or more layers that use the parameter");
  rejects([](Json& j) { j["ties"][0]["param_count"] = 100481; },
          "ties[0].param_count: 100481: expected at most layers[0].param_count 100480");
}

// sample_profile with the B/W split at every point (layer 0's input is the data: B is 0).
Profile sample_profile_with_split() {
  Profile profile = sample_profile();
  for (LayerProfile& layer : profile.layers) {
    for (LayerPoint& point : layer.points) {
      point.bwd_input_ms = layer.index == 0 ? 0.0 : 0.25 * point.bwd_ms;
      point.bwd_weight_ms = layer.index == 0 ? point.bwd_ms : 0.875 * point.bwd_ms;
    }
    layer.fits = fit_points(layer.points);
  }
  return profile;
}

TEST(ProfileSplitTest, RoundTripsWithTheSplitAndWritesNoKeysWithout) {
  const Profile split = sample_profile_with_split();
  EXPECT_TRUE(split.has_backward_split());
  const Json json = to_json(split);
  EXPECT_EQ(json["layers"][1]["points"][1]["bwd_input_ms"], 0.375);
  EXPECT_EQ(json["layers"][1]["points"][1]["bwd_weight_ms"], 1.3125);
  ASSERT_TRUE(json["layers"][1]["fits"].contains("bwd_input_ms"));
  EXPECT_NEAR(json["layers"][1]["fits"]["bwd_weight_ms"]["slope"].get<double>(),
              (1.3125 - 0.4375) / (4 - 1), 1e-12);
  const Profile back = profile_from_json(json, "profile.json");
  EXPECT_EQ(to_json(back), json);
  EXPECT_TRUE(back.has_backward_split());
  ASSERT_TRUE(back.layers[0].points[0].bwd_input_ms.has_value());
  EXPECT_EQ(*back.layers[0].points[0].bwd_input_ms, 0.0);
  ASSERT_TRUE(back.layers[1].fits.bwd_input_ms.has_value());
  EXPECT_NEAR(back.layers[1].fits.bwd_input_ms->at(4), 0.375, 1e-12);

  const Profile plain = sample_profile();
  EXPECT_FALSE(plain.has_backward_split());
  const Json plain_json = to_json(plain);
  for (const Json& layer : plain_json["layers"]) {
    EXPECT_FALSE(layer["fits"].contains("bwd_input_ms"));
    EXPECT_FALSE(layer["fits"].contains("bwd_weight_ms"));
    for (const Json& point : layer["points"]) {
      EXPECT_FALSE(point.contains("bwd_input_ms"));
      EXPECT_FALSE(point.contains("bwd_weight_ms"));
    }
  }
  const Profile plain_back = profile_from_json(plain_json, "profile.json");
  EXPECT_EQ(to_json(plain_back), plain_json);
  EXPECT_FALSE(plain_back.layers[0].fits.bwd_input_ms.has_value());
}

TEST(ProfileSplitTest, ProfilesFromBeforeTheSplitStillRead) {
  const Profile fixture = read_profile(std::string(PIPEPLAN_SOURCE_DIR) +
                                       "/tests/data/resnet_tiny_cpu_profile_fixture.json");
  EXPECT_FALSE(fixture.has_backward_split());
  EXPECT_FALSE(fixture.layers.front().points.front().bwd_input_ms.has_value());
  EXPECT_FALSE(fixture.layers.front().fits.bwd_weight_ms.has_value());
}

TEST(ProfileSplitTest, IncompleteOrWrongSplitsAreRejectedNamingTheValue) {
  const Json json = to_json(sample_profile_with_split());
  const auto rejects = [&](const std::function<void(Json&)>& spoil, const std::string& expected) {
    Json bad = json;
    spoil(bad);
    const std::string message = error_of([&] { profile_from_json(bad, "p.json"); });
    EXPECT_NE(message.find("p.json: " + expected), std::string::npos) << message;
  };
  rejects([](Json& j) { j["layers"][1]["points"][0].erase("bwd_weight_ms"); },
          "layers[1].points[0].bwd_weight_ms: missing: expected beside bwd_input_ms 0.125 (the "
          "B/W split has both times or neither)");
  rejects([](Json& j) { j["layers"][0]["points"][1].erase("bwd_input_ms"); },
          "layers[0].points[1].bwd_input_ms: missing: expected beside bwd_weight_ms 1.5");
  rejects(
      [](Json& j) {
        j["layers"][1]["points"][1].erase("bwd_input_ms");
        j["layers"][1]["points"][1].erase("bwd_weight_ms");
      },
      "layers[1].points[1].bwd_input_ms: missing: expected the B/W split (bwd_input_ms, "
      "bwd_weight_ms) at every point, as layers[0].points[0] has it, or at none");
  rejects([](Json& j) { j["layers"][1]["points"][0]["bwd_input_ms"] = -0.125; },
          "layers[1].points[0].bwd_input_ms: -0.125: expected a time in ms in [0, 1e+08]");
  rejects([](Json& j) { j["layers"][0]["points"][0]["bwd_weight_ms"] = 2e8; },
          "layers[0].points[0].bwd_weight_ms: 200000000.0: expected a time in ms in [0, 1e+08]");
  Json wrong_fit = json;
  wrong_fit["layers"][1]["fits"]["bwd_weight_ms"]["slope"] = 1.0;
  const std::string fit_error = error_of([&] { profile_from_json(wrong_fit, "p.json"); });
  EXPECT_EQ(
      fit_error.rfind("p.json: layers[1].fits.bwd_weight_ms: intercept 0.145833, slope 1, ", 0), 0u)
      << fit_error;
  EXPECT_NE(fit_error.find(": expected the fit of the points (0.145833, 0.291667, "),
            std::string::npos)
      << fit_error;
  rejects([](Json& j) { j["layers"][0]["fits"].erase("bwd_input_ms"); },
          "layers[0].fits.bwd_input_ms: missing: expected the fit of the points' bwd_input_ms");
  rejects([](Json& j) { j["layers"][1]["fits"]["bwd_input_ms"]["rms_residual"] = -1.0; },
          "layers[1].fits.bwd_input_ms.rms_residual: -1");
  // A split fit beside points without the split.
  Json stray_fit = to_json(sample_profile());
  stray_fit["layers"][1]["fits"]["bwd_input_ms"] = json["layers"][1]["fits"]["bwd_input_ms"];
  EXPECT_NE(error_of([&] { profile_from_json(stray_fit, "p.json"); })
                .find("p.json: layers[1].fits.bwd_input_ms: present: expected none, as the "
                      "points have no bwd_input_ms"),
            std::string::npos);
}

// A profile built in memory (the profiler's, a synthetic one) is checked as a file is.
TEST(ProfileSplitTest, ValidateChecksTheSplitOfAProfileInMemory) {
  const auto error_with = [](const std::function<void(Profile&)>& spoil) {
    Profile profile = sample_profile_with_split();
    spoil(profile);
    return error_of([&] { profile.validate("mem"); });
  };
  EXPECT_EQ(error_with([](Profile&) {}), "");
  EXPECT_EQ(error_with([](Profile& p) { p.layers[1].points[0].bwd_weight_ms = -1.0; }),
            "mem: layers[1].points[0].bwd_weight_ms: -1: expected a time in ms in [0, 1e+08]");
  EXPECT_NE(error_with([](Profile& p) {
              p.layers[1].points[0].bwd_input_ms = std::nan("");
            }).find("mem: layers[1].points[0].bwd_input_ms: nan: expected a time in ms"),
            std::string::npos);
  EXPECT_EQ(error_with([](Profile& p) { p.layers[0].points[1].bwd_input_ms.reset(); }),
            "mem: layers[0].points[1].bwd_input_ms: missing: expected beside bwd_weight_ms 1.5 "
            "(the B/W split has both times or neither)");
  EXPECT_EQ(error_with([](Profile& p) {
              p.layers[1].points[1].bwd_input_ms = 9.0;  // the fit is now the wrong one
            }).rfind("mem: layers[1].fits.bwd_input_ms: intercept ", 0),
            0u);
}

// sample_profile with the inference forward at every point: 0.625 of the training forward's
// time, p90 0.75 of it, peak bytes 1024 per sample + 256.
Profile sample_profile_with_inference() {
  Profile profile = sample_profile();
  for (LayerProfile& layer : profile.layers) {
    for (LayerPoint& point : layer.points) {
      point.inference_fwd_ms = 0.625 * point.fwd_ms;
      point.inference_fwd_ms_p90 = 0.75 * point.fwd_ms;
      point.inference_fwd_peak_bytes = 1024 * point.batch_size + 256;
    }
    layer.fits = fit_points(layer.points);
  }
  return profile;
}

TEST(ProfileInferenceTest, RoundTripsWithTheInferenceForwardAndWritesNoKeysWithout) {
  const Profile profile = sample_profile_with_inference();
  EXPECT_TRUE(profile.has_inference_forward());
  const Json json = to_json(profile);
  const Json& point = json["layers"][1]["points"][1];
  EXPECT_EQ(point["inference_fwd_ms"], 0.46875);
  EXPECT_EQ(point["inference_fwd_ms_p90"], 0.5625);
  EXPECT_EQ(point["inference_fwd_peak_bytes"], 4352);
  EXPECT_NEAR(json["layers"][1]["fits"]["inference_fwd_peak_bytes"]["slope"].get<double>(), 1024,
              1e-9);
  EXPECT_NEAR(json["layers"][0]["fits"]["inference_fwd_ms"]["slope"].get<double>(),
              (0.46875 - 0.15625) / (4 - 1), 1e-12);
  const Profile back = profile_from_json(json, "profile.json");
  EXPECT_EQ(to_json(back), json);
  EXPECT_TRUE(back.has_inference_forward());
  EXPECT_EQ(*back.layers[0].points[0].inference_fwd_peak_bytes, 1280);
  ASSERT_TRUE(back.layers[1].fits.inference_fwd_ms.has_value());
  EXPECT_NEAR(back.layers[1].fits.inference_fwd_ms->at(4), 0.46875, 1e-12);

  // Without it: no keys written, and read back without.
  const Json plain_json = to_json(sample_profile());
  for (const Json& layer : plain_json["layers"]) {
    EXPECT_FALSE(layer["fits"].contains("inference_fwd_ms"));
    EXPECT_FALSE(layer["fits"].contains("inference_fwd_peak_bytes"));
    for (const Json& plain_point : layer["points"])
      for (const char* key :
           {"inference_fwd_ms", "inference_fwd_ms_p90", "inference_fwd_peak_bytes"})
        EXPECT_FALSE(plain_point.contains(key)) << key;
  }
  EXPECT_FALSE(profile_from_json(plain_json, "profile.json").has_inference_forward());
}

TEST(ProfileInferenceTest, ProfilesFromBeforeTheInferenceForwardStillRead) {
  const Profile fixture = read_profile(std::string(PIPEPLAN_SOURCE_DIR) +
                                       "/tests/data/resnet_tiny_cpu_profile_fixture.json");
  EXPECT_FALSE(fixture.has_inference_forward());
  EXPECT_FALSE(fixture.layers.front().points.front().inference_fwd_ms.has_value());
  EXPECT_FALSE(fixture.layers.front().fits.inference_fwd_peak_bytes.has_value());
}

TEST(ProfileInferenceTest, IncompleteOrWrongInferenceForwardIsRejectedNamingTheValue) {
  const Json json = to_json(sample_profile_with_inference());
  const auto rejects = [&](const std::function<void(Json&)>& spoil, const std::string& expected) {
    Json bad = json;
    spoil(bad);
    const std::string message = error_of([&] { profile_from_json(bad, "p.json"); });
    EXPECT_NE(message.find("p.json: " + expected), std::string::npos) << message;
  };
  rejects([](Json& j) { j["layers"][1]["points"][0].erase("inference_fwd_ms_p90"); },
          "layers[1].points[0].inference_fwd_ms_p90: missing: expected beside inference_fwd_ms "
          "(the inference forward has inference_fwd_ms, inference_fwd_ms_p90 and "
          "inference_fwd_peak_bytes, or none)");
  rejects([](Json& j) { j["layers"][0]["points"][1].erase("inference_fwd_peak_bytes"); },
          "layers[0].points[1].inference_fwd_peak_bytes: missing: expected beside "
          "inference_fwd_ms");
  rejects(
      [](Json& j) {
        for (const char* key :
             {"inference_fwd_ms", "inference_fwd_ms_p90", "inference_fwd_peak_bytes"})
          j["layers"][1]["points"][1].erase(key);
      },
      "layers[1].points[1].inference_fwd_ms: missing: expected the inference forward "
      "(inference_fwd_ms, inference_fwd_ms_p90, inference_fwd_peak_bytes) at every point, as "
      "layers[0].points[0] has it, or at none");
  rejects([](Json& j) { j["layers"][0]["points"][0]["inference_fwd_ms_p90"] = 0.125; },
          "layers[0].points[0].inference_fwd_ms_p90: 0.125: expected at least the median "
          "inference_fwd_ms 0.15625");
  rejects([](Json& j) { j["layers"][1]["points"][0]["inference_fwd_ms"] = -0.5; },
          "layers[1].points[0].inference_fwd_ms: -0.5: expected a time in ms in [0, 1e+08]");
  rejects([](Json& j) { j["layers"][1]["points"][0]["inference_fwd_peak_bytes"] = -1; },
          "layers[1].points[0].inference_fwd_peak_bytes: -1");
  rejects([](Json& j) { j["layers"][0]["fits"].erase("inference_fwd_peak_bytes"); },
          "layers[0].fits.inference_fwd_peak_bytes: missing: expected the fit of the points' "
          "inference_fwd_peak_bytes");
  rejects([](Json& j) { j["layers"][1]["fits"]["inference_fwd_ms"]["slope"] = 1.0; },
          "layers[1].fits.inference_fwd_ms: intercept ");
  Json stray_fit = to_json(sample_profile());
  stray_fit["layers"][1]["fits"]["inference_fwd_ms"] =
      json["layers"][1]["fits"]["inference_fwd_ms"];
  EXPECT_NE(error_of([&] { profile_from_json(stray_fit, "p.json"); })
                .find("p.json: layers[1].fits.inference_fwd_ms: present: expected none, as the "
                      "points have no inference_fwd_ms"),
            std::string::npos);
}

// A profile built in memory (the profiler's) is checked as a file is.
TEST(ProfileInferenceTest, ValidateChecksTheInferenceForwardOfAProfileInMemory) {
  const auto error_with = [](const std::function<void(Profile&)>& spoil) {
    Profile profile = sample_profile_with_inference();
    spoil(profile);
    return error_of([&] { profile.validate("mem"); });
  };
  EXPECT_EQ(error_with([](Profile&) {}), "");
  EXPECT_EQ(error_with([](Profile& p) { p.layers[1].points[0].inference_fwd_peak_bytes = -4; }),
            "mem: layers[1].points[0].inference_fwd_peak_bytes: -4: expected a byte count in [0, "
            "1125899906842624]");
  EXPECT_EQ(error_with([](Profile& p) { p.layers[0].points[1].inference_fwd_ms.reset(); }),
            "mem: layers[0].points[1].inference_fwd_ms: missing: expected beside "
            "inference_fwd_ms_p90 (the inference forward has inference_fwd_ms, "
            "inference_fwd_ms_p90 and inference_fwd_peak_bytes, or none)");
  EXPECT_NE(error_with([](Profile& p) {
              p.layers[1].points[1].inference_fwd_ms = std::nan("");
            }).find("mem: layers[1].points[1].inference_fwd_ms: nan: expected a time in ms"),
            std::string::npos);
}

// sample_profile with layer 1 split at tp 2: its shard half the parameters and times.
Profile sample_profile_with_shards() {
  Profile profile = sample_profile();
  profile.settings.tp_sizes = {2};
  LayerProfile& whole = profile.layers[1];
  whole.tp_divides = {{"heads", 4}, {"mlp_dim", 64}};
  LayerProfile shard = whole;
  shard.tp = 2;
  shard.param_count = whole.param_count / 2;
  shard.param_bytes = whole.param_bytes / 2;
  for (LayerPoint& point : shard.points) {
    point.fwd_ms /= 2;
    point.fwd_ms_p90 /= 2;
  }
  shard.fits = fit_points(shard.points);
  whole.tp_shards.push_back(shard);
  return profile;
}

TEST(ProfileTensorParallelTest, ShardsRoundTripAndNoKeysAreWrittenWithout) {
  const Json plain = to_json(sample_profile());
  EXPECT_FALSE(plain.at("settings").contains("tp_sizes"));
  EXPECT_FALSE(plain.at("layers").at(1).contains("tp_shards"));
  EXPECT_FALSE(plain.at("layers").at(1).contains("tp_divides"));
  Profile profile = sample_profile_with_shards();
  profile.layers[1].tp_all_reduces = 1;
  EXPECT_NO_THROW(profile.validate("profile.json"));
  const Json json = to_json(profile);
  const Profile back = profile_from_json(json, "profile.json");
  EXPECT_EQ(to_json(back), json);
  ASSERT_EQ(back.layers[1].tp_shards.size(), 1u);
  EXPECT_EQ(back.layers[1].tp_shards[0].tp, 2);
  EXPECT_EQ(back.layers[1].tp_shards[0].param_count, 50240);
  EXPECT_EQ(back.layers[1].tp_divides.at("heads"), 4);
  EXPECT_EQ(back.layers[1].tp_all_reduces, 1);
  EXPECT_EQ(back.settings.tp_sizes, std::vector<int>{2});
  // A profile from before the key: a transformer block's two all-reduces.
  Json older = json;
  older["layers"][1].erase("tp_all_reduces");
  EXPECT_EQ(profile_from_json(older, "profile.json").layers[1].tp_all_reduces, 2);
  EXPECT_EQ(to_json(parse_profile(json.dump(), "profile.json")), json);
}

// What reading `text` gives: the profile's JSON, or the error.
std::string outcome(const std::function<Profile()>& read) {
  try {
    return to_json(read()).dump();
  } catch (const Error& e) {
    return std::string("error: ") + e.what();
  }
}

// Reading a profile's layers in two halves on two threads (detail::parse_profile_in_halves)
// gives what reading the whole document gives: the same profile, or nothing, so that
// parse_profile reads the text another way for the same error. Strings holding brackets, quotes
// and "layers" do not confuse where the layers are.
TEST(ProfileParseTest, ReadingTheLayersInHalvesGivesTheWholeDocumentsProfileOrNothing) {
  Profile profile = sample_profile_with_shards();
  // Valid strings full of structure, before the root's "layers" key (keys are written sorted)
  // and inside the layers.
  profile.created_at = "\",\"layers\":[{";
  profile.device.name = "layers\\";
  profile.layers[0].name = "odd \"]}{[, \"layers\": [";
  const std::string compact = to_json(profile).dump();
  const std::string pretty = to_json(profile).dump(2);
  const auto whole = [](const std::string& text) {
    return outcome([&] { return profile_from_json(parse_json(text, "p.json"), "p.json"); });
  };
  for (const std::string& text : {compact, pretty}) {
    const std::optional<Profile> halves = detail::parse_profile_in_halves(text, "p.json");
    ASSERT_TRUE(halves.has_value());
    EXPECT_EQ(to_json(*halves).dump(), whole(text));
    EXPECT_EQ(outcome([&] { return parse_profile(text, "p.json"); }), whole(text));
  }
  // Each a text the whole document's reading refuses (or reads otherwise): the halves give
  // nothing, and parse_profile says what the whole reading says.
  const auto replaced = [&](const std::string& from, const std::string& to) {
    std::string text = compact;
    const size_t at = text.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return text.replace(at, from.size(), to);
  };
  const size_t between = compact.find("},{\"buffer_bytes\"");
  ASSERT_NE(between, std::string::npos);
  const std::vector<std::string> spoiled = {
      replaced("\"param_count\":", "\"param_count\":1,\"param_count\":"),  // a key twice
      std::string(compact).replace(between, 2, "}{"),                      // no comma
      std::string(compact).replace(between, 2, "},,"),                     // two commas
      std::string(compact).insert(between + 1, " 5"),                      // no object
      replaced("\"layers\":[", "\"layers\":[],\"layers\":["),              // the key twice
      compact + " x",                                                      // trailing bytes
      std::string(compact).insert(between, std::string(1, '\0')),          // a NUL byte
      // Nested within a layer as deep as the parse allows a document, but not inside two more
      // levels (the root object and the layers array): the first depth refused.
      std::string(compact).insert(between + 3,
                                  "\"zz\":" + std::string(62, '[') + std::string(62, ']') + ","),
      compact.substr(0, compact.size() / 2),  // cut short
  };
  for (const std::string& text : spoiled) {
    const std::string expected = whole(text);
    EXPECT_EQ(expected.rfind("error: ", 0), 0u) << "accepted: " << text.substr(0, 200);
    EXPECT_FALSE(detail::parse_profile_in_halves(text, "p.json").has_value())
        << text.substr(0, 200);
    EXPECT_EQ(outcome([&] { return parse_profile(text, "p.json"); }), expected)
        << text.substr(0, 200);
  }
  // Nested as deep as the halves still read (kMaxJsonDepth - 4 within a layer): the same.
  std::string nested = compact;
  nested.insert(between + 3, "\"zz\":" + std::string(59, '[') + std::string(59, ']') + ",");
  ASSERT_TRUE(detail::parse_profile_in_halves(nested, "p.json").has_value());
  EXPECT_EQ(outcome([&] { return parse_profile(nested, "p.json"); }), whole(nested));
  // The key written escaped is still the key: read another way, to the same profile.
  const std::string escaped = replaced("\"layers\":[", "\"lay\\u0065rs\":[");
  EXPECT_FALSE(detail::parse_profile_in_halves(escaped, "p.json").has_value());
  EXPECT_EQ(outcome([&] { return parse_profile(escaped, "p.json"); }), whole(compact));
}

TEST(ProfileTensorParallelTest, ShardsThatDoNotMatchTheirLayerOrTheSizesAreRefused) {
  const auto refusal = [](const Profile& profile) {
    return error_of([&] { profile.validate("profile.json"); });
  };
  Profile extra_size = sample_profile_with_shards();
  extra_size.settings.tp_sizes = {2, 4};
  EXPECT_EQ(refusal(extra_size),
            "profile.json: layers[1].tp_shards: 1 shards: expected one per settings.tp_sizes (2)");
  Profile unsorted = sample_profile_with_shards();
  unsorted.settings.tp_sizes = {2, 2};
  EXPECT_EQ(refusal(unsorted),
            "profile.json: settings.tp_sizes[1]: 2: expected group sizes of at least 2 in "
            "strictly ascending order");
  Profile wrong_tp = sample_profile_with_shards();
  wrong_tp.layers[1].tp_shards[0].tp = 4;
  EXPECT_EQ(refusal(wrong_tp),
            "profile.json: layers[1].tp_shards[0].tp: 4: expected settings.tp_sizes[0] = 2");
  Profile renamed = sample_profile_with_shards();
  renamed.layers[1].tp_shards[0].name = "other";
  EXPECT_NE(refusal(renamed).find("expected a shard of layer 'head'"), std::string::npos);
  Profile stale_fit = sample_profile_with_shards();
  stale_fit.layers[1].tp_shards[0].points[1].fwd_ms *= 3;
  stale_fit.layers[1].tp_shards[0].points[1].fwd_ms_p90 *= 3;
  EXPECT_NE(refusal(stale_fit).find("layers[1].tp_shards[0].fits.fwd_ms"), std::string::npos)
      << refusal(stale_fit);
  Profile whole_marked = sample_profile_with_shards();
  whole_marked.layers[0].tp = 2;
  EXPECT_EQ(refusal(whole_marked),
            "profile.json: layers[0].tp: 2: expected 1 (a whole layer; shards are in tp_shards)");
}

TEST(LinearFitTest, RecoversALineAndHandlesOnePoint) {
  const LinearFit fit = fit_linear({1, 2, 4, 8}, {3, 5, 9, 17});
  EXPECT_NEAR(fit.intercept, 1.0, 1e-9);
  EXPECT_NEAR(fit.slope, 2.0, 1e-9);
  EXPECT_NEAR(fit.rms_residual, 0.0, 1e-9);
  EXPECT_NEAR(fit.at(16), 33.0, 1e-9);
  const LinearFit one = fit_linear({4}, {10});
  EXPECT_DOUBLE_EQ(one.intercept, 0.0);
  EXPECT_DOUBLE_EQ(one.slope, 2.5);
  const LinearFit noisy = fit_linear({1, 2, 3}, {1, 3, 2});
  EXPECT_GT(noisy.rms_residual, 0.0);
}

TEST(CommFitTest, RecoversLatencyAndBandwidthAndWeighsSmallMessages) {
  // 20 us latency, 3 GB/s: the small messages alone set the latency.
  std::vector<CommProfile::Point> points;
  for (int64_t bytes = 4096; bytes <= (int64_t{64} << 20); bytes *= 4)
    points.push_back({bytes, 0.02 + static_cast<double>(bytes) / 3e9 * 1e3});
  CommProfile fit = fit_comm(points);
  EXPECT_NEAR(fit.latency_ms, 0.02, 1e-9);
  EXPECT_NEAR(fit.bandwidth_bytes_per_s, 3e9, 1e-3 * 3e9);
  EXPECT_NEAR(fit.rms_residual_ms, 0, 1e-9);
  EXPECT_EQ(fit.points.size(), points.size());
  // A 10% slower 64 MiB point must not swamp the latency (plain least squares would make it
  // negative here).
  points.back().time_ms *= 1.1;
  fit = fit_comm(points);
  EXPECT_NEAR(fit.latency_ms, 0.02, 0.005);
  // Times that do not grow with size are a disturbed measurement, not a negative bandwidth.
  const std::vector<CommProfile::Point> flat{{4096, 1.0}, {1 << 20, 0.5}};
  EXPECT_THROW(fit_comm(flat), Error);
}

TEST(CommFitTest, InterconnectRoundTripsAndUnknownBackendIsNamed) {
  InterconnectProfile link{"gloo", 2, fit_comm({{4096, 0.03}, {1 << 20, 0.4}}),
                           fit_comm({{4096, 0.1}, {1 << 20, 0.9}})};
  const InterconnectProfile back = interconnect_from_json(to_json(link), "link.json");
  EXPECT_EQ(back.backend, "gloo");
  EXPECT_DOUBLE_EQ(back.p2p.bandwidth_bytes_per_s, link.p2p.bandwidth_bytes_per_s);
  EXPECT_EQ(back.allreduce.points.size(), 2u);
  Json json = to_json(link);
  json["backend"] = "mpi";
  try {
    interconnect_from_json(json, "link.json");
    FAIL() << "backend mpi accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("backend"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("'mpi': expected gloo"), std::string::npos) << e.what();
  }
}

// The all-reduces of tensor-parallel groups (optional) round-trip; their ranks ascend above the
// link's.
TEST(CommFitTest, GroupAllReducesRoundTripAndAscendAboveTheLinksRanks) {
  InterconnectProfile link{"gloo", 2, fit_comm({{4096, 0.03}, {1 << 20, 0.4}}),
                           fit_comm({{4096, 0.1}, {1 << 20, 0.9}})};
  EXPECT_FALSE(to_json(link).contains("group_allreduce"));
  link.group_allreduce = {{4, fit_comm({{4096, 0.3}, {1 << 20, 1.9}})},
                          {8, fit_comm({{4096, 0.7}, {1 << 20, 3.9}})}};
  const InterconnectProfile back = interconnect_from_json(to_json(link), "link.json");
  ASSERT_EQ(back.group_allreduce.size(), 2u);
  EXPECT_EQ(back.group_allreduce[1].ranks, 8);
  EXPECT_DOUBLE_EQ(back.group_allreduce[1].allreduce.latency_ms,
                   link.group_allreduce[1].allreduce.latency_ms);
  EXPECT_EQ(to_json(back), to_json(link));
  Json json = to_json(link);
  json["group_allreduce"][1]["ranks"] = 4;
  EXPECT_EQ(error_of([&] { interconnect_from_json(json, "link.json"); }),
            "link.json: group_allreduce[1].ranks: 4: expected more than 4 (strictly ascending, "
            "above the link's ranks)");
  json["group_allreduce"][0]["ranks"] = 2;
  EXPECT_NE(error_of([&] {
              interconnect_from_json(json, "link.json");
            }).find("group_allreduce[0].ranks: 2"),
            std::string::npos);
}

}  // namespace
}  // namespace pipeplan
