// The comparison as an SVG: per-stage bars of predicted against measured memory and compute,
// then the predicted and the measured timelines on one time scale.
#include <algorithm>
#include <string>
#include <utility>

#include "common/error.h"
#include "common/units.h"
#include "planner/compare.h"
#include "planner/layer_table.h"
#include "plans/svg.h"

namespace pipeplan {
namespace {

// Layout, in SVG user units (px).
constexpr double kTitleHeightPx = 62;
constexpr double kSectionHeadingPx = 34;
constexpr double kBarHeightPx = 16;
constexpr double kBarGapPx = 3;
constexpr double kStageGapPx = 10;
constexpr double kLegendHeightPx = 22;
constexpr double kBarLabelWidthPx = 170;
constexpr double kBarValueWidthPx = 150;  // room right of the longest bar for its value
constexpr double kPanelGapPx = 16;
constexpr const char* kMeasuredColour = "#d95f02";

// Memory terms stacked in a predicted bar, with their colours.
struct TermColour {
  const char* name;
  int64_t MemoryTerms::*field;
  const char* colour;
};
const TermColour kTermColours[] = {
    {"parameters", &MemoryTerms::parameters_bytes, "#1b9e77"},
    {"gradients", &MemoryTerms::gradients_bytes, "#66c2a5"},
    {"optimizer state", &MemoryTerms::optimizer_state_bytes, "#7570b3"},
    {"master copy", &MemoryTerms::master_copy_bytes, "#b3b0e0"},
    {"buffers", &MemoryTerms::buffers_bytes, "#e6ab02"},
    {"activations", &MemoryTerms::activations_bytes, "#1f78b4"},
    {"recompute", &MemoryTerms::recompute_bytes, "#a6cee3"},
    {"gradients kept for W", &MemoryTerms::deferred_gradients_bytes, "#fb9a99"},
    {"transient", &MemoryTerms::transient_bytes, "#e7298a"},
    {"comm buffers", &MemoryTerms::comm_buffers_bytes, "#a6761d"},
    {"runtime overhead", &MemoryTerms::runtime_overhead_bytes, "#666666"},
    {"calibration", &MemoryTerms::calibration_bytes, "#bbbbbb"},
};

std::string error_text(const Difference& d) {
  const std::optional<double> percent = d.error_percent();
  return percent ? detail::concat(*percent >= 0 ? "+" : "", svg_number(*percent, 1), " %") : "n/a";
}

class CompareSvg {
 public:
  explicit CompareSvg(const Comparison& c) : c_(c) {}

  std::string render() {
    const double bars = 2 * bar_section_height() + kLegendHeightPx;
    const double panels = svg_panel_height(c_.predicted_timeline) +
                          svg_panel_height(c_.measured_timeline) + 2 * kPanelGapPx;
    std::string svg = svg_document_open(kTitleHeightPx + bars + panels) + svg_defs();
    title(&svg);
    double top = kTitleHeightPx;
    top = memory_section(&svg, top);
    top = compute_section(&svg, top);
    const double span_ms =
        std::max(timeline_span_ms(c_.predicted_timeline), timeline_span_ms(c_.measured_timeline));
    top += kPanelGapPx;
    append_svg_panel(c_.predicted_timeline, SvgPanel{top, span_ms}, &svg);
    top += svg_panel_height(c_.predicted_timeline) + kPanelGapPx;
    append_svg_panel(c_.measured_timeline, SvgPanel{top, span_ms}, &svg);
    return svg + "</svg>\n";
  }

 private:
  double bar_section_height() const {
    return kSectionHeadingPx + c_.stages.size() * (2 * (kBarHeightPx + kBarGapPx) + kStageGapPx);
  }

  void title(std::string* svg) const {
    const IterationSplit& s = c_.split;
    *svg +=
        svg_text(10, 24,
                 detail::concat(c_.plan_path, " against ", c_.run_path, ": iteration predicted ",
                                svg_number(c_.iteration_ms.predicted, 3), " ms, measured ",
                                svg_number(c_.iteration_ms.measured, 3), " ms (",
                                error_text(c_.iteration_ms), ")"),
                 " font-size=\"16\" font-weight=\"bold\"");
    *svg +=
        svg_text(10, 46,
                 detail::concat(c_.configuration, "; error ", svg_number(to_ms(s.error_ns()), 3),
                                " ms = compute model ", svg_number(to_ms(s.compute_error_ns()), 3),
                                " ms + schedule, communication and overhead ",
                                svg_number(to_ms(s.schedule_error_ns()), 3), " ms",
                                c_.in_sample ? " (in-sample: calibrated from this run)" : ""),
                 " fill=\"#444\"");
  }

  double bar_scale(double largest) const {
    return (kSvgWidthPx - kBarLabelWidthPx - kBarValueWidthPx) / std::max(largest, 1e-12);
  }

  // One bar row: label, bar (drawn by `draw` from x0 with the scale), value text after it.
  void value_text(std::string* svg, double right, double top, const std::string& text) const {
    *svg += svg_text(right + 6, top + kBarHeightPx * 0.8, text);
  }

  double memory_section(std::string* svg, double top) const {
    *svg +=
        svg_text(10, top + 22, "peak memory per stage: predicted (stacked by term) and measured",
                 " font-size=\"14\" font-weight=\"bold\"");
    double largest = 0;
    for (const StageComparison& stage : c_.stages)
      largest =
          std::max({largest, stage.peak_memory_bytes.predicted, stage.peak_memory_bytes.measured});
    const double scale = bar_scale(largest);
    double y = top + kSectionHeadingPx;
    for (size_t stage_idx = 0; stage_idx < c_.stages.size(); ++stage_idx) {
      const StageComparison& stage = c_.stages[stage_idx];
      *svg +=
          svg_text(10, y + kBarHeightPx * 0.8, detail::concat("stage ", stage_idx, " predicted"));
      double x = kBarLabelWidthPx;
      for (const TermColour& term : kTermColours) {
        const int64_t bytes = stage.memory.*term.field;
        if (bytes <= 0) continue;  // a negative calibration shortens the total, not the stack
        *svg += svg_rect(x, y, bytes * scale, kBarHeightPx, term.colour);
        x += bytes * scale;
      }
      value_text(svg, std::max(x, kBarLabelWidthPx + stage.peak_memory_bytes.predicted * scale), y,
                 format_size(static_cast<int64_t>(stage.peak_memory_bytes.predicted)));
      y += kBarHeightPx + kBarGapPx;
      measured_bar(svg, y, stage_idx, stage.peak_memory_bytes, scale,
                   format_size(static_cast<int64_t>(stage.peak_memory_bytes.measured)));
      y += kBarHeightPx + kBarGapPx + kStageGapPx;
    }
    return legend(svg, y);
  }

  void measured_bar(std::string* svg, double y, size_t stage_idx, const Difference& d, double scale,
                    const std::string& value) const {
    *svg += svg_text(10, y + kBarHeightPx * 0.8, detail::concat("stage ", stage_idx, " measured"));
    *svg += svg_rect(kBarLabelWidthPx, y, d.measured * scale, kBarHeightPx, kMeasuredColour);
    value_text(svg, kBarLabelWidthPx + d.measured * scale, y,
               detail::concat(value, " (error ", error_text(d), ")"));
  }

  double legend(std::string* svg, double top) const {
    double x = kBarLabelWidthPx;
    for (const TermColour& term : kTermColours) {
      *svg += svg_rect(x, top + 4, 10, 10, term.colour);
      *svg += svg_text(x + 13, top + 13, term.name);
      x += 14 + 6.5 * std::string(term.name).size() + 10;
    }
    *svg += svg_rect(x, top + 4, 10, 10, kMeasuredColour);
    *svg += svg_text(x + 13, top + 13, "measured");
    return top + kLegendHeightPx;
  }

  double compute_section(std::string* svg, double top) const {
    *svg += svg_text(10, top + 22, "compute per iteration per stage (ms): predicted and measured",
                     " font-size=\"14\" font-weight=\"bold\"");
    double largest = 0;
    for (const StageComparison& stage : c_.stages)
      largest = std::max({largest, stage.compute_ms.predicted, stage.compute_ms.measured});
    const double scale = bar_scale(largest);
    double y = top + kSectionHeadingPx;
    for (size_t stage_idx = 0; stage_idx < c_.stages.size(); ++stage_idx) {
      const Difference& d = c_.stages[stage_idx].compute_ms;
      *svg +=
          svg_text(10, y + kBarHeightPx * 0.8, detail::concat("stage ", stage_idx, " predicted"));
      *svg += svg_rect(kBarLabelWidthPx, y, d.predicted * scale, kBarHeightPx, "#1f78b4");
      value_text(svg, kBarLabelWidthPx + d.predicted * scale, y,
                 svg_number(d.predicted, 3) + " ms");
      y += kBarHeightPx + kBarGapPx;
      measured_bar(svg, y, stage_idx, d, scale, svg_number(d.measured, 3) + " ms");
      y += kBarHeightPx + kBarGapPx + kStageGapPx;
    }
    return y;
  }

  const Comparison& c_;
};

}  // namespace

std::string to_svg(const Comparison& comparison) { return CompareSvg(comparison).render(); }

}  // namespace pipeplan
