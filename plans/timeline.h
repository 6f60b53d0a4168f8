// The timeline of what each rank did, when — shared by the simulator, the executor's --trace
// and run.json's representative step — and its writers: Chrome-trace JSON (opens in
// Perfetto), SVG (alone, or as one panel of a larger SVG), and run.json's JSON form.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/json.h"

namespace pipeplan {

/// What a rank was doing during one timeline event.
enum class TimelineKind {
  kForward,
  kBackward,
  kBackwardInput,   ///< zb-h1's B: the gradient of the stage input alone
  kBackwardWeight,  ///< zb-h1's W: the gradients of the stage's weights, deferred
  kRecompute,  ///< the extra forward of a checkpointed stage (or of its recomputed layers), just before its backward
  /// A transfer: simulated, the time it occupies the link (the rank computes meanwhile); measured,
  /// the time the rank took to hand it to the backend (the transfer itself is not observable).
  kSend,
  kRecvWait,  ///< the rank is blocked until a receive's data arrives (idle)
  kAllReduce,
  kOptimizer,
  kLoad,      ///< measured only: reading a micro-batch's samples (not modelled: overhead)
  kSendWait,  ///< blocked until earlier sends completed (idle): measured, and simulated at the
              ///< send limit (kMaxSendsInFlight)
  kAllGather,  ///< ZeRO-1: gathering the updated parameter shards after the optimizer step
};

/// "forward", "backward", "backward-input", "backward-weight", "recompute", "send", "recv-wait", "all-reduce", "optimizer", "load",
/// "send-wait", "all-gather".
std::string to_string(TimelineKind kind);
/// The kind named by to_string; throws Error(kBadInput) naming `field` for any other word.
TimelineKind parse_timeline_kind(std::string_view word, std::string_view field);
/// Whether time spent in `kind` counts as busy: forward, backward (B and W too), recompute,
/// all-reduce, optimizer and all-gather, as the simulator counts it. Everything else (waits, loading, handing sends to
/// the backend) is idle from the models' point of view.
bool is_busy(TimelineKind kind);

/// One interval on one rank, in ms from the start of the timeline.
struct TimelineEvent {
  int rank = 0;
  TimelineKind kind = TimelineKind::kForward;
  int micro_batch = -1;  ///< -1 for all-reduce, optimizer and the end-of-pass send-wait
  double start_ms = 0;
  double end_ms = 0;  ///< >= start_ms
  int peer = -1;      ///< kSend: the receiving rank; kRecvWait: the sending rank; else -1
  int chunk = 0;      ///< interleaved-1f1b: the rank's local chunk of the action; else 0
};

/// Every rank's events over one iteration (the simulator's, or one measured step whose start
/// is time 0) or over several consecutive measured steps (the executor's trace).
struct Timeline {
  std::vector<int> rank_stages;  ///< the stage of each rank, indexed by rank
  std::vector<TimelineEvent> events;
  double iteration_ms = 0;
  double bubble_fraction = 0;  ///< idle share of ranks × iteration
  std::string title;           ///< what the timeline is of, e.g. "simulated plan.json"
};

/// Chrome trace: `traceEvents` of `ph:"X"` events in µs. Each rank is one process named
/// "rank r (stage s)" whose thread 0 ("compute") holds its compute, waits and collectives,
/// and whose thread 1 + p ("send to rank p") holds its transfers to rank p, so that no two
/// events of one thread overlap.
Json to_chrome_trace(const Timeline& timeline);

/// A self-contained SVG of one panel (see append_svg_panel).
std::string to_svg(const Timeline& timeline);

/// Where a timeline panel goes in a larger SVG document, and its time scale.
struct SvgPanel {
  double top_px = 0;   ///< y of the panel's heading
  double span_ms = 0;  ///< time at the right edge; 0 for the timeline's own (iteration or last end)
};

/// The time a panel of `timeline` spans by itself: its iteration or its last event's end,
/// whichever is later (1 ms when neither is positive).
double timeline_span_ms(const Timeline& timeline);

/// Height in px of the panel of `timeline` (heading, legend, one row per rank, time axis).
double svg_panel_height(const Timeline& timeline);

/// Appends the panel to `svg`: a heading with the title, iteration time and bubble fraction;
/// one row per rank labelled "rank r (stage s)"; forward (light) and backward (dark, hatched)
/// boxes coloured by micro-batch, recompute dashed, all-reduce and optimizer grey, loading
/// tan, waits and idle time as gaps on a light background; a time axis in ms. The document
/// must contain svg_defs() once.
void append_svg_panel(const Timeline& timeline, const SvgPanel& panel, std::string* svg);

/// The <defs> element (hatch pattern) that panels refer to.
std::string svg_defs();

/// Writers (atomic). Throw Error(kBadInput) naming the path when it cannot be written.
void write_chrome_trace(const std::string& path, const Timeline& timeline);

/// run.json's form: {"title", "iteration_ms", "bubble_fraction", "rank_stages", "events":
/// [{"rank", "kind", "micro_batch", "start_ms", "end_ms", "peer"}, ...]}.
Json to_json(const Timeline& timeline);
/// Reads and checks one iteration's timeline: ranks and peers index rank_stages, kinds are
/// known, micro-batches below kMaxMicroBatches, 0 <= start_ms <= end_ms <= kMaxIterationMs.
/// Errors name the reader's document and the field.
Timeline timeline_from_json(const JsonReader& reader);

}  // namespace pipeplan
