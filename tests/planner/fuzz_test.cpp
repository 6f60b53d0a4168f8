// A fuzz test of every reader and the planner behind it: seeded mutations of a valid profile,
// plan, inference plan and runs (keys deleted, types swapped, extreme numbers, arrays truncated,
// duplicated or shuffled; in the text, nesting too deep, a key repeated, bytes after the
// document) are read through the readers' own text parsing and, when accepted, planned,
// simulated, compared and calibrated. Each case must either succeed or fail as bad input
// (pipeplan::Error, kBadInput, one short line), within kCaseLimitMs; a case whose text is
// spoiled must fail. Special files (FIFOs, devices, folders, loops of links) are refused by every
// reader without waiting. CTest labels it `fuzz` (the name contains "Fuzz").
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <limits>
#include <mutex>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "common/error.h"
#include "common/json.h"
#include "planner/calibration.h"
#include "planner/compare.h"
#include "planner/layer_table.h"
#include "planner/predict.h"
#include "planner/search.h"
#include "planner/simulator.h"
#include "tests/planner/test_profiles.h"
#include "tests/planner/test_runs.h"

namespace pipeplan {
namespace {

constexpr uint64_t kSeed = 18;
/// Cases per document (profile, plan, run, inference plan, zb-h1 run); each applies 1 to
/// kMaxMutations mutations.
constexpr int kCasesPerDocument = 600;
constexpr int kMaxMutations = 3;
/// One case in this many has its text spoiled after its mutations (spoil_text).
constexpr int kSpoiledTextShare = 4;
/// A case slower than this fails the test: no accepted input may make the tools crawl.
constexpr double kCaseLimitMs = 1000;
/// A case that has not finished after this long is reported and the test aborted (a hang).
constexpr auto kHangLimit = std::chrono::seconds(30);
/// The address space a case may use; beyond it allocation fails (and the case fails) instead of
/// the machine swapping.
constexpr rlim_t kAddressSpaceBytes = rlim_t{6} << 30;
/// The longest error line accepted: a value is quoted shortened, never whole.
constexpr size_t kMaxMessageChars = 600;
constexpr int kFailuresShown = 25;

const std::string kFixture =
    std::string(PIPEPLAN_SOURCE_DIR) + "/tests/data/resnet_tiny_cpu_profile_fixture.json";

using Pointer = Json::json_pointer;

// Every value's path inside `json`, the root excluded.
void collect_paths(const Json& json, const Pointer& at, std::vector<Pointer>* out) {
  if (json.is_object()) {
    for (auto it = json.begin(); it != json.end(); ++it) {
      out->push_back(at / it.key());
      collect_paths(it.value(), at / it.key(), out);
    }
  } else if (json.is_array()) {
    for (size_t idx = 0; idx < json.size(); ++idx) {
      out->push_back(at / idx);
      collect_paths(json[idx], at / idx, out);
    }
  }
}

// An integer that breaks careless arithmetic: zero, negative, past 31, 32, 53 and 63 bits.
Json extreme_integer(const Json& value, std::mt19937_64& rng) {
  const std::vector<Json> values = {
      0, -1, 1, 2, 10000000, int64_t{2147483648}, int64_t{4294967297}, int64_t{1099511627776},
      int64_t{9007199254740993}, std::numeric_limits<int64_t>::max(),
      std::numeric_limits<int64_t>::min(), std::numeric_limits<uint64_t>::max()};
  const size_t pick = rng() % (values.size() + 2);
  if (pick < values.size()) return values[pick];
  const int64_t current = value.is_number_unsigned() ? 0 : value.get<int64_t>();
  if (pick == values.size())  // off by one
    return current < std::numeric_limits<int64_t>::max() ? current + 1 : current;
  return current > std::numeric_limits<int64_t>::min() ? current - 1 : current;
}

// A real number that breaks careless arithmetic: zero, negative, tiny, huge, or a scale of the
// value it replaces.
Json extreme_real(const Json& value, std::mt19937_64& rng) {
  const std::vector<double> values = {0, -0.0, -1, 1e-300, 1e13, 1e19, 1e308, -1e308};
  const size_t pick = rng() % (values.size() + 1);
  if (pick < values.size()) return values[pick];
  const double factor = std::pow(10.0, static_cast<double>(rng() % 22) - 6);
  return value.get<double>() * (rng() % 4 ? factor : -factor);
}

// A value of another type than most fields expect.
Json other_type(std::mt19937_64& rng) {
  const std::vector<Json> values = {nullptr, true, "x", "", Json::array(), Json::object(), 1, -1,
                                    1.5, Json::array({1, 2}), Json{{"a", 1}},
                                    std::string(100000, 'z')};
  return values[rng() % values.size()];
}

// Paths whose value satisfies `keep`, or none.
template <typename Keep>
std::vector<Pointer> paths_where(const Json& doc, Keep keep) {
  std::vector<Pointer> all;
  collect_paths(doc, Pointer(), &all);
  std::vector<Pointer> out;
  for (const Pointer& path : all)
    if (keep(path, doc.at(path))) out.push_back(path);
  return out;
}

// Applies one mutation to an array at `path`; returns what it did.
std::string mutate_array(Json* doc, const Pointer& path, int kind, std::mt19937_64& rng) {
  Json& array = doc->at(path);
  if (kind == 0) {
    const size_t size = array.empty() ? 0 : rng() % array.size();
    Json cut = Json::array();
    for (size_t idx = 0; idx < size; ++idx) cut.push_back(array[idx]);
    array = cut;
    return "truncate " + path.to_string() + " to " + std::to_string(size);
  }
  if (kind == 1 && !array.empty()) {
    const size_t from = rng() % array.size();
    array.insert(array.begin() + static_cast<std::ptrdiff_t>(rng() % (array.size() + 1)),
                 Json(array[from]));
    return "duplicate " + path.to_string() + "/" + std::to_string(from);
  }
  std::vector<Json> items(array.begin(), array.end());
  std::shuffle(items.begin(), items.end(), rng);
  array = Json(items);
  return "shuffle " + path.to_string();
}

// Paths of every array, or (half the time) of every array of objects: layers, points, stages,
// ranks, events.
std::vector<Pointer> arrays_of(const Json& doc, std::mt19937_64& rng) {
  const bool objects_only = rng() % 2 == 0;
  auto arrays = paths_where(doc, [&](const Pointer&, const Json& v) {
    return v.is_array() && (!objects_only || (!v.empty() && v.front().is_object()));
  });
  if (arrays.empty())
    arrays = paths_where(doc, [](const Pointer&, const Json& v) { return v.is_array(); });
  return arrays;
}

// Applies one random mutation to `doc`; returns what it did (empty when nothing applied).
std::string mutate(Json* doc, std::mt19937_64& rng) {
  const int kind = static_cast<int>(rng() % 7);
  auto pick = [&](const std::vector<Pointer>& paths) { return paths[rng() % paths.size()]; };
  if (kind <= 2) {  // numbers, the most common kind of field: extreme values of the same type
    const auto numbers =
        paths_where(*doc, [](const Pointer&, const Json& v) { return v.is_number(); });
    if (numbers.empty()) return "";
    const Pointer path = pick(numbers);
    Json& value = doc->at(path);
    value = value.is_number_float() ? extreme_real(value, rng) : extreme_integer(value, rng);
    return "set " + path.to_string() + " = " + value.dump();
  }
  if (kind == 3) {
    const auto members = paths_where(*doc, [&](const Pointer& p, const Json&) {
      return doc->at(p.parent_pointer()).is_object();
    });
    if (members.empty()) return "";
    const Pointer path = pick(members);
    doc->at(path.parent_pointer()).erase(path.back());
    return "delete " + path.to_string();
  }
  if (kind == 4) {
    const Pointer path = pick(paths_where(*doc, [](const Pointer&, const Json&) { return true; }));
    doc->at(path) = other_type(rng);
    return "retype " + path.to_string() + " = " + doc->at(path).dump().substr(0, 40);
  }
  const auto arrays = arrays_of(*doc, rng);
  if (arrays.empty()) return "";
  return mutate_array(doc, pick(arrays), static_cast<int>(rng() % 3), rng);
}

// The valid documents the mutations start from, and what a case is fed to besides its reader.
struct Bases {
  Profile profile;
  Plan plan;
  Run run;
  Plan zero_bubble_plan;  ///< zb-h1, of the profile with its backwards split into B and W
  Json profile_json, plan_json, run_json, inference_plan_json, zero_bubble_run_json;
};

// Two measured steps in which every rank took its stage's predicted times (and, under zb-h1,
// as long for W as for B).
std::vector<StepTimes> predicted_steps(const Plan& plan) {
  std::vector<RankStepTimes> ranks;
  const bool zero_bubble = plan.schedule == Schedule::kZeroBubbleH1;
  for (const RankAssignment& a : plan.ranks) {
    const StagePrediction& s = plan.predictions.stages[a.stage];
    const std::vector<double> bwd(plan.num_micro_batches, s.bwd_ms);
    ranks.push_back({std::vector<double>(plan.num_micro_batches, s.fwd_ms), bwd, {},
                     s.allreduce_ms, s.optimizer_ms, zero_bubble ? bwd : std::vector<double>{}});
  }
  const double iteration_ms = plan.predictions.iteration_ms;
  return {{/*step=*/11, iteration_ms, ranks}, {/*step=*/12, iteration_ms, ranks}};
}

// The best inference plan of the profile with an inference forward for 4 devices.
Plan inference_plan(const Profile& training_profile) {
  const size_t layers = training_profile.layers.size();
  const Profile profile = testing::with_inference_forward(
      training_profile, std::vector<double>(layers, 0.125), std::vector<int64_t>(layers, 4096));
  PlanningContext context;
  context.profile = &profile;
  context.profile_path = "profile.json";
  context.profile_hash = "fnv1a64:00000000000000ab";
  context.cluster = make_cluster(profile, /*devices=*/4, /*device_memory_bytes=*/int64_t{4} << 30,
                                 /*devices_per_node=*/4, /*inter_node_bandwidth_bytes_per_s=*/0);
  context.global_batch = 16;
  context.mode = PlanMode::kInference;
  return search(context, SearchOptions{}).plans.at(0);
}

Bases make_bases() {
  Bases bases;
  bases.profile_json = read_json_file(kFixture);
  bases.profile = profile_from_json(bases.profile_json, "profile.json");
  bases.plan = testing::plan_for(bases.profile, /*dp=*/2, /*pp=*/2, /*global_batch=*/16);
  bases.plan_json = to_json(bases.plan);
  bases.run = testing::run_as_predicted(bases.plan, bases.plan);
  bases.run.measured.step_times = predicted_steps(bases.plan);
  bases.run_json = to_json(bases.run);
  bases.inference_plan_json = to_json(inference_plan(bases.profile));
  const Profile split = testing::with_backward_split(bases.profile, 0.5, 0.5);
  bases.zero_bubble_plan = testing::plan_for(split, /*dp=*/2, /*pp=*/2, /*global_batch=*/16,
                                             Schedule::kZeroBubbleH1);
  Run zero_bubble_run = testing::run_as_predicted(bases.zero_bubble_plan, bases.zero_bubble_plan);
  zero_bubble_run.measured.step_times = predicted_steps(bases.zero_bubble_plan);
  bases.zero_bubble_run_json = to_json(zero_bubble_run);
  return bases;
}

PlanningContext planning_context(const Profile& profile) {
  PlanningContext context;
  context.profile = &profile;
  context.profile_path = "profile.json";
  context.profile_hash = "fnv1a64:00000000000000aa";
  context.cluster = make_cluster(profile, /*devices=*/4, /*device_memory_bytes=*/int64_t{4} << 30,
                                 /*devices_per_node=*/2, kDefaultInterNodeBandwidthBytesPerS);
  context.global_batch = 32;
  return context;
}

// A run of `plan` for the calibration and comparison of a mutated plan: the base run, naming it.
Run run_naming(const Plan& plan, const Run& base) {
  Run run = base;
  run.plan_hash = plan_hash(plan);
  return run;
}

// A contract broken without an exception: a value read differently from what the file holds,
// or a result that is not a finite non-negative number.
struct Nonsense : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Every number of `input` that `output` (the document written back from what was read) also
// holds must be the same number: a reader may refuse a value, never change it.
void expect_read_back(const Json& input, const Json& output, const Pointer& at = Pointer()) {
  if (input.is_object() || input.is_array()) {
    for (const Pointer& path : paths_where(input, [](const Pointer&, const Json& v) {
           return v.is_number();
         }))
      if (output.contains(path)) expect_read_back(input.at(path), output.at(path), path);
    return;
  }
  const bool same = input.is_number_integer() && output.is_number_integer()
                        ? input == output
                        : input.get<double>() == output.get<double>();
  if (!same)
    throw Nonsense("read back differently: " + at.to_string() + ": " + input.dump() + " read as " +
                   output.dump());
}

void expect_sane(double value, const std::string& what) {
  if (!std::isfinite(value) || value < 0)
    throw Nonsense(what + " is " + std::to_string(value) + ", not a finite value >= 0");
}

void feed_profile(const std::string& text, const Bases& bases) {
  const Profile profile = parse_profile(text, "profile.json");
  expect_read_back(Json::parse(text), to_json(profile));
  for (const Plan& plan : search(planning_context(profile), SearchOptions{}).plans) {
    expect_sane(plan.predictions.iteration_ms, "a searched plan's iteration_ms");
    if (plan.predictions.iteration_ms == 0) throw Nonsense("a searched plan predicts 0 ms");
  }
  const CalibrationResult calibration = calibrate(profile, bases.plan, bases.run, "run.json");
  expect_sane(calibration.after.predictions.iteration_ms, "the calibrated iteration_ms");
}

void feed_plan(const std::string& text, const Bases& bases) {
  const Plan plan = plan_from_json(parse_json(text, "plan.json"), "plan.json");
  expect_read_back(Json::parse(text), to_json(plan));
  expect_sane(simulate(simulation_input(plan)).iteration_ms, "the simulated iteration_ms");
  const Run run = run_naming(plan, bases.run);
  check_run_of_plan(plan, "plan.json", run, "run.json");
  expect_sane(compare(plan, "plan.json", run, "run.json").iteration_ms.predicted,
              "the compared iteration_ms");
  calibrate(bases.profile, plan, run, "run.json");
}

// A run of `plan`, read from `text` as `pipeplan compare` reads it, compared and calibrated.
void feed_run(const std::string& text, const Plan& plan, const Bases& bases) {
  const Run run = run_from_json(parse_json(text, "run.json"), "run.json");
  expect_read_back(Json::parse(text), to_json(run));
  check_run_of_plan(plan, "plan.json", run, "run.json");
  check_step_times_of_plan(plan, run, "run.json");
  const Comparison comparison = compare(plan, "plan.json", run, "run.json");
  expect_sane(to_ms(comparison.split.resimulated_ns), "the re-simulated iteration_ms");
  calibrate(plan.schedule == Schedule::kZeroBubbleH1
                ? testing::with_backward_split(bases.profile, 0.5, 0.5)
                : bases.profile,
            plan, run, "run.json");
}

void feed_inference_plan(const std::string& text) {
  const Plan plan = plan_from_json(parse_json(text, "plan.json"), "plan.json");
  expect_read_back(Json::parse(text), to_json(plan));
  const auto [request, interval_ms] =
      play_requests(simulation_input(plan), SimulationOptions{/*record_timeline=*/false});
  expect_sane(request.iteration_ms, "the simulated latency");
  expect_sane(interval_ms, "the simulated interval");
}

// The documents of the cases, in the order their cases take turns.
enum class Document { kProfile, kPlan, kRun, kInferencePlan, kZeroBubbleRun };
constexpr int kDocuments = 5;
const char* const kDocumentNames[kDocuments] = {"profile", "plan", "run", "inference plan",
                                                "zb-h1 run"};

// Reads `text` as the document `doc` through its reader's own text parsing (parse_profile,
// parse_json) and feeds what it accepts to the planner, simulator, comparison and calibration.
void feed(Document doc, const std::string& text, const Bases& bases) {
  switch (doc) {
    case Document::kProfile:
      return feed_profile(text, bases);
    case Document::kPlan:
      return feed_plan(text, bases);
    case Document::kRun:
      return feed_run(text, bases.plan, bases);
    case Document::kInferencePlan:
      return feed_inference_plan(text);
    case Document::kZeroBubbleRun:
      return feed_run(text, bases.zero_bubble_plan, bases);
  }
}

// The string a spoiled case puts in place of a value, replaced in the text by deep nesting.
const char* const kDeepPlaceholder = "\x01" "deep" "\x01";

// Offsets of the '{' that open a non-empty object in `text` (compact JSON), strings skipped.
std::vector<size_t> object_openings(const std::string& text) {
  std::vector<size_t> openings;
  bool in_string = false;
  for (size_t pos = 0; pos < text.size(); ++pos) {
    if (in_string) {
      if (text[pos] == '\\') ++pos;
      else if (text[pos] == '"') in_string = false;
    } else if (text[pos] == '"') {
      in_string = true;
    } else if (text[pos] == '{' && pos + 1 < text.size() && text[pos + 1] == '"') {
      openings.push_back(pos);
    }
  }
  return openings;
}

// Spoils a document that no reader may then accept, first in `doc` (a value to nest deeply in
// the text) and then in `text`, its compact dump: an array nested deeper than kMaxJsonDepth (or
// 100,000 deep) in place of a value, an object's first key given again, or bytes after the
// document. Returns what it did.
class TextSpoiler {
 public:
  explicit TextSpoiler(std::mt19937_64& rng) : rng_(rng), kind_(static_cast<int>(rng() % 3)) {}

  std::string before_dump(Json* doc) {
    if (kind_ != 0) return "";
    std::vector<Pointer> paths;
    collect_paths(*doc, Pointer(), &paths);
    const Pointer path = paths[rng_() % paths.size()];
    doc->at(path) = kDeepPlaceholder;
    depth_ = rng_() % 2 ? kMaxJsonDepth : 100000;
    return " nest " + path.to_string() + " " + std::to_string(depth_) + " deep;";
  }

  std::string after_dump(std::string* text) {
    if (kind_ == 0) {
      const std::string placeholder = Json(kDeepPlaceholder).dump();
      text->replace(text->find(placeholder), placeholder.size(),
                    std::string(depth_, '[') + std::string(depth_, ']'));
      return "";
    }
    const std::vector<size_t> openings = object_openings(*text);
    if (kind_ == 1 && !openings.empty()) {
      const size_t open = openings[rng_() % openings.size()];
      const std::string key = text->substr(open + 1, text->find('"', open + 2) - open);
      text->insert(open + 1, key + ":0,");
      return " repeat key " + key + ";";
    }
    const std::vector<std::string> tails = {std::string(1, '\0'), std::string("\0\0garbage", 9),
                                            " x", "{}", "\n]", std::string("\0{\"a\": 1}", 10)};
    const std::string& tail = tails[rng_() % tails.size()];
    text->append(tail);
    return " append " + Json(tail).dump() + ";";
  }

 private:
  std::mt19937_64& rng_;
  int kind_;
  int depth_ = 0;
};

// What one case did: accepted, rejected as bad input, or a failure (with why).
struct CaseOutcome {
  bool accepted = false;
  std::string failure;  ///< empty unless the case failed the contract
};

CaseOutcome run_case(Document doc, const std::string& text, const Bases& bases) {
  CaseOutcome outcome;
  try {
    feed(doc, text, bases);
    outcome.accepted = true;
  } catch (const Error& e) {
    const std::string message = e.what();
    if (e.kind() != ErrorKind::kBadInput)
      outcome.failure = std::string(e.kind() == ErrorKind::kInternal ? "internal" : "runtime") +
                        " error: " + message.substr(0, 300);
    else if (message.find('\n') != std::string::npos || message.size() > kMaxMessageChars)
      outcome.failure = "error message of " + std::to_string(message.size()) +
                        " characters or several lines: " + message.substr(0, 200);
  } catch (const Nonsense& e) {
    outcome.failure = std::string("accepted nonsense: ") + e.what();
  } catch (const std::exception& e) {
    outcome.failure = std::string("other exception: ") + std::string(e.what()).substr(0, 300);
  }
  return outcome;
}

// Aborts the process, naming the case, when one runs past kHangLimit.
class Watchdog {
 public:
  Watchdog() : thread_([this] { watch(); }) {}
  ~Watchdog() {
    stop_ = true;
    thread_.join();
  }
  void start(const std::string& what) {
    std::lock_guard<std::mutex> lock(mutex_);
    what_ = what;
    started_ = std::chrono::steady_clock::now();
  }

 private:
  void watch() {
    while (!stop_) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      std::lock_guard<std::mutex> lock(mutex_);
      if (!what_.empty() && std::chrono::steady_clock::now() - started_ > kHangLimit) {
        std::fprintf(stderr, "fuzz: case hung: %s\n", what_.c_str());
        std::abort();
      }
    }
  }
  std::atomic<bool> stop_{false};
  std::mutex mutex_;
  std::string what_;
  std::chrono::steady_clock::time_point started_;
  std::thread thread_;
};

// Limits the address space while the fuzz runs, restoring it after.
class AddressSpaceLimit {
 public:
  AddressSpaceLimit() {
    getrlimit(RLIMIT_AS, &saved_);
    rlimit limit = saved_;
    limit.rlim_cur = std::min(saved_.rlim_max, kAddressSpaceBytes);
    setrlimit(RLIMIT_AS, &limit);
  }
  ~AddressSpaceLimit() { setrlimit(RLIMIT_AS, &saved_); }

 private:
  rlimit saved_{};
};

TEST(FuzzInputTest, MutatedFilesAreReadOrRejectedAsBadInput) {
  const Bases bases = make_bases();
  const Json* docs[kDocuments] = {&bases.profile_json, &bases.plan_json, &bases.run_json,
                                  &bases.inference_plan_json, &bases.zero_bubble_run_json};
  const bool verbose = std::getenv("PIPEPLAN_FUZZ_VERBOSE") != nullptr;
  std::mt19937_64 rng(kSeed);
  int accepted = 0, rejected = 0;
  double slowest_ms = 0;
  std::string slowest;
  std::vector<std::string> failures;
  const auto fuzz_start = std::chrono::steady_clock::now();
  {
    AddressSpaceLimit limit;
    Watchdog watchdog;
    for (int case_idx = 0; case_idx < kDocuments * kCasesPerDocument; ++case_idx) {
      const int doc_idx = case_idx % kDocuments;
      Json doc = *docs[doc_idx];
      std::string what =
          std::string(kDocumentNames[doc_idx]) + " #" + std::to_string(case_idx) + ":";
      // Half the cases mutate once, so that a mutation is not hidden behind an earlier one.
      const int count = rng() % 2 ? 1 : 2 + static_cast<int>(rng() % (kMaxMutations - 1));
      for (int idx = 0; idx < count; ++idx) what += " " + mutate(&doc, rng) + ";";
      std::optional<TextSpoiler> spoiler;
      if (rng() % kSpoiledTextShare == 0) spoiler.emplace(rng);
      if (spoiler) what += spoiler->before_dump(&doc);
      std::string text = doc.dump();
      if (spoiler) what += spoiler->after_dump(&text);
      if (verbose) std::fprintf(stderr, "fuzz: %s\n", what.c_str());
      watchdog.start(what);
      const auto start = std::chrono::steady_clock::now();
      const CaseOutcome outcome = run_case(static_cast<Document>(doc_idx), text, bases);
      const double ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
              .count();
      if (ms > slowest_ms) slowest_ms = ms, slowest = what;
      (outcome.accepted ? accepted : rejected) += 1;
      if (!outcome.failure.empty()) failures.push_back(what + " -> " + outcome.failure);
      else if (spoiler && outcome.accepted)
        failures.push_back(what + " -> accepted a spoiled text");
      else if (ms > kCaseLimitMs)
        failures.push_back(what + " -> took " + std::to_string(ms) + " ms");
    }
  }
  const double total_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - fuzz_start).count();
  std::printf("fuzz: %d cases, %d accepted, %d rejected, %zu failed, slowest case %.1f ms (%s), "
              "%.1f s in all\n",
              kDocuments * kCasesPerDocument, accepted, rejected, failures.size(), slowest_ms,
              slowest.c_str(), total_s);
  for (size_t idx = 0; idx < failures.size() && (verbose || idx < kFailuresShown); ++idx)
    std::printf("fuzz failure: %s\n", failures[idx].c_str());
  EXPECT_TRUE(failures.empty()) << failures.size() << " cases broke the contract";
  EXPECT_GT(accepted, 0) << "no mutation was accepted: the fuzz tests only the first checks";
  EXPECT_LT(total_s, 60.0) << "the fuzz must stay under a minute of CI";
}

// Special files in a fresh folder, each named by what it is; removed with the folder.
class SpecialFiles {
 public:
  SpecialFiles() : dir_(std::filesystem::temp_directory_path() /
                        ("pipeplan_fuzz_special_" + std::to_string(::getpid()))) {
    namespace fs = std::filesystem;
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "folder");
    add("FIFO", ::mkfifo((dir_ / "fifo").c_str(), 0600) == 0, "fifo");
    // A FIFO this process also holds open for writing: a read of it would wait for ever.
    add("FIFO with a writer", ::mkfifo((dir_ / "fed").c_str(), 0600) == 0, "fed");
    writer_fd_ = ::open((dir_ / "fed").c_str(), O_RDWR);
    fs::create_symlink("loop", dir_ / "loop");
    fs::create_symlink("fifo", dir_ / "to_fifo");
    paths_.push_back({"loop of links", (dir_ / "loop").string()});
    paths_.push_back({"link to a FIFO", (dir_ / "to_fifo").string()});
    paths_.push_back({"folder", (dir_ / "folder").string()});
    paths_.push_back({"missing file", (dir_ / "missing.json").string()});
    for (const char* device : {"/dev/zero", "/dev/null", "/dev/urandom", "/dev/full"})
      paths_.push_back({device, device});
    socket_fd_ = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    const std::string socket_path = (dir_ / "socket").string();
    std::snprintf(address.sun_path, sizeof address.sun_path, "%s", socket_path.c_str());
    add("socket",
        ::bind(socket_fd_, reinterpret_cast<const sockaddr*>(&address), sizeof address) == 0,
        "socket");
  }
  ~SpecialFiles() {
    if (writer_fd_ >= 0) ::close(writer_fd_);
    if (socket_fd_ >= 0) ::close(socket_fd_);
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  SpecialFiles(const SpecialFiles&) = delete;
  SpecialFiles& operator=(const SpecialFiles&) = delete;

  /// (what it is, its path)
  const std::vector<std::pair<std::string, std::string>>& paths() const { return paths_; }

 private:
  void add(const std::string& what, bool made, const std::string& name) {
    EXPECT_TRUE(made) << "could not make the " << what;
    if (made) paths_.push_back({what, (dir_ / name).string()});
  }
  std::filesystem::path dir_;
  std::vector<std::pair<std::string, std::string>> paths_;
  int writer_fd_ = -1;
  int socket_fd_ = -1;
};

// Issue 46: a FIFO or a device as an input hung a reader or read without end. Every JSON reader
// (the profile's, the plan's and inference plan's, the run's and calibration run's, the
// checkpoint manifest's and interconnect record's read_json_file) refuses each special file as
// bad input, at once.
TEST(FuzzInputTest, SpecialFilesAreRefusedByEveryReaderWithoutWaiting) {
  const SpecialFiles files;
  const std::vector<std::pair<std::string, std::function<void(const std::string&)>>> readers = {
      {"read_profile", [](const std::string& path) { read_profile(path); }},
      {"read_plan", [](const std::string& path) { read_plan(path); }},
      {"read_run", [](const std::string& path) { read_run(path); }},
      {"read_json_file", [](const std::string& path) { read_json_file(path); }},
  };
  Watchdog watchdog;
  for (const auto& [reader_name, read] : readers)
    for (const auto& [what, path] : files.paths()) {
      const std::string name = reader_name + " of a " + what + " (" + path + ")";
      watchdog.start(name);
      const auto start = std::chrono::steady_clock::now();
      try {
        read(path);
        ADD_FAILURE() << name << ": accepted";
      } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::kBadInput) << name << ": " << e.what();
        EXPECT_EQ(std::string(e.what()).rfind(path + ": ", 0), 0u) << name << ": " << e.what();
      }
      EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
                1.0)
          << name;
    }
}

}  // namespace
}  // namespace pipeplan
