// The timeline as SVG: a panel with one row per rank, boxes coloured by micro-batch, either
// alone in a document or one of several panels of a larger one.
#include <algorithm>
#include <cmath>
#include <sstream>
#include <string>

#include "common/error.h"
#include "plans/svg.h"
#include "plans/timeline.h"

namespace pipeplan {
namespace {

// Layout, in SVG user units (px).
constexpr double kLabelWidthPx = 130;
constexpr double kRightMarginPx = 20;
constexpr double kHeadingHeightPx = 56;
constexpr double kRowHeightPx = 26;
constexpr double kRowGapPx = 6;
constexpr double kAxisHeightPx = 40;
constexpr double kSendBarPx = 3;
constexpr double kChunkBandPx = 3;  // the top band that tells interleaved chunks apart
constexpr double kMinLabelWidthPx = 18;  // boxes narrower than this get no "F3" text
constexpr int kTargetTicks = 10;
constexpr double kGoldenAngleDeg = 137.508;  // spreads micro-batch hues evenly
constexpr int kForwardLightnessPercent = 72;
constexpr int kBackwardLightnessPercent = 38;
constexpr int kRecomputeLightnessPercent = 85;
constexpr int kBackwardInputLightnessPercent = 50;  // zb-h1's B: between forward and backward
constexpr int kBackwardWeightLightnessPercent = 28;  // zb-h1's W: darker than a whole backward
constexpr int kSendLightnessPercent = 30;

// Enough decimals to tell ticks `step` apart: 0 for steps of 1 and more, 1 for 0.1, ...
int tick_decimals(double step) {
  return step >= 1 ? 0 : static_cast<int>(std::ceil(-std::log10(step) - 1e-9));
}

std::string hue_colour(int micro_batch, int lightness_percent) {
  const double hue = std::fmod(std::max(micro_batch, 0) * kGoldenAngleDeg, 360.0);
  return detail::concat("hsl(", svg_number(hue), ",65%,", lightness_percent, "%)");
}

// A tick step of 1, 2 or 5 times a power of ten giving about kTargetTicks ticks.
double tick_step(double span_ms) {
  const double raw = span_ms / kTargetTicks;
  const double power = std::pow(10.0, std::floor(std::log10(raw)));
  for (double factor : {1.0, 2.0, 5.0})
    if (factor * power >= raw) return factor * power;
  return 10 * power;
}

class SvgPanelWriter {
 public:
  SvgPanelWriter(const Timeline& timeline, const SvgPanel& panel)
      : timeline_(timeline),
        top_px_(panel.top_px),
        span_ms_(panel.span_ms > 0 ? panel.span_ms : timeline_span_ms(timeline)),
        plot_width_px_(kSvgWidthPx - kLabelWidthPx - kRightMarginPx) {}

  std::string render() {
    const int rows = static_cast<int>(timeline_.rank_stages.size());
    heading();
    for (int rank = 0; rank < rows; ++rank) row_background(rank);
    for (const TimelineEvent& event : timeline_.events) draw(event);
    axis(row_top(rows));
    return out_.str();
  }

 private:
  double x(double ms) const { return kLabelWidthPx + ms / span_ms_ * plot_width_px_; }
  double row_top(int rank) const {
    return top_px_ + kHeadingHeightPx + rank * (kRowHeightPx + kRowGapPx);
  }

  void heading() {
    const std::string text =
        detail::concat(timeline_.title.empty() ? "timeline" : timeline_.title, ": iteration ",
                       svg_number(timeline_.iteration_ms), " ms, bubble ",
                       svg_number(timeline_.bubble_fraction * 100), " %");
    out_ << svg_text(10, top_px_ + 22, text, " font-size=\"15\" font-weight=\"bold\"")
         << svg_text(10, top_px_ + 42,
                     "forward: light, backward: dark and hatched (zb-h1: Bi hatched, W darkest, outlined), "
                     "recompute: dashed outline, "
                     "all-reduce and optimizer: grey, load: tan, blank: idle or waiting; "
                     "colour = micro-batch",
                     " fill=\"#444\"");
  }

  void row_background(int rank) {
    const double top = row_top(rank);
    out_ << svg_text(8, top + kRowHeightPx * 0.65,
                     detail::concat("rank ", rank, " (stage ", timeline_.rank_stages[rank], ")"))
         << svg_rect(x(0), top, plot_width_px_, kRowHeightPx, "#eef1f5");
  }

  void box(double left, double top, double width, const std::string& fill,
           const std::string& extra = "") {
    out_ << svg_rect(left, top, width, kRowHeightPx, fill, extra);
  }

  void draw(const TimelineEvent& event) {
    if (event.rank < 0 || event.rank >= static_cast<int>(timeline_.rank_stages.size())) return;
    const double left = x(event.start_ms);
    const double width = x(event.end_ms) - left;
    const double top = row_top(event.rank);
    switch (event.kind) {
      case TimelineKind::kForward:
        box(left, top, width, hue_colour(event.micro_batch, kForwardLightnessPercent));
        break;
      case TimelineKind::kBackward:
        box(left, top, width, hue_colour(event.micro_batch, kBackwardLightnessPercent));
        box(left, top, width, "url(#hatch)");
        break;
      case TimelineKind::kBackwardInput:
        box(left, top, width, hue_colour(event.micro_batch, kBackwardInputLightnessPercent));
        box(left, top, width, "url(#hatch)");
        break;
      case TimelineKind::kBackwardWeight:
        box(left, top, width, hue_colour(event.micro_batch, kBackwardWeightLightnessPercent),
            " stroke=\"#111\" stroke-width=\"0.8\"");
        break;
      case TimelineKind::kRecompute:
        box(left, top, width, hue_colour(event.micro_batch, kRecomputeLightnessPercent),
            " stroke=\"#333\" stroke-dasharray=\"3,2\" stroke-width=\"0.8\"");
        break;
      case TimelineKind::kAllReduce:
      case TimelineKind::kAllGather:
        box(left, top, width, "#9a9a9a");
        return;
      case TimelineKind::kOptimizer:
        box(left, top, width, "#5a5a5a");
        return;
      case TimelineKind::kLoad:
        box(left, top, width, "#d9c7a3");
        return;
      case TimelineKind::kSend:
        out_ << svg_rect(left, top + kRowHeightPx - kSendBarPx, width, kSendBarPx,
                         hue_colour(event.micro_batch, kSendLightnessPercent),
                         " fill-opacity=\"0.6\"");
        return;
      case TimelineKind::kRecvWait:
      case TimelineKind::kSendWait:
        return;  // idle: left blank on purpose
    }
    // interleaved-1f1b: a chunk past the first carries a dark band along its top, darker for
    // later chunks, besides its label ("F3v1").
    if (event.chunk > 0)
      out_ << svg_rect(left, top, width, kChunkBandPx, "#111",
                       detail::concat(" fill-opacity=\"", std::min(0.25 * event.chunk, 0.9), "\""));
    label(event, left, width, top);
  }

  void label(const TimelineEvent& event, double left, double width, double top) {
    if (width < kMinLabelWidthPx || event.micro_batch < 0) return;
    const char* prefix = event.kind == TimelineKind::kForward          ? "F"
                         : event.kind == TimelineKind::kBackward       ? "B"
                         : event.kind == TimelineKind::kBackwardInput  ? "Bi"
                         : event.kind == TimelineKind::kBackwardWeight ? "W"
                                                                       : "R";
    const bool dark = event.kind == TimelineKind::kBackward ||
                      event.kind == TimelineKind::kBackwardInput ||
                      event.kind == TimelineKind::kBackwardWeight;
    const char* colour = dark ? "white" : "black";
    out_ << svg_text(left + width / 2, top + kRowHeightPx * 0.65,
                     detail::concat(prefix, event.micro_batch,
                                    event.chunk > 0 ? detail::concat("v", event.chunk) : ""),
                     detail::concat(" text-anchor=\"middle\" fill=\"", colour, "\""));
  }

  void axis(double top) {
    out_ << "<line x1=\"" << svg_number(x(0)) << "\" y1=\"" << svg_number(top) << "\" x2=\""
         << svg_number(x(span_ms_)) << "\" y2=\"" << svg_number(top) << "\" stroke=\"black\"/>\n";
    const double step = tick_step(span_ms_);
    for (int tick = 0; tick * step <= span_ms_ * (1 + 1e-9); ++tick) {
      const double px = x(tick * step);
      out_ << "<line x1=\"" << svg_number(px) << "\" y1=\"" << svg_number(top) << "\" x2=\""
           << svg_number(px) << "\" y2=\"" << svg_number(top + 5) << "\" stroke=\"black\"/>\n"
           << svg_text(px, top + 17, svg_number(tick * step, tick_decimals(step)),
                       " text-anchor=\"middle\"");
    }
    out_ << svg_text(x(span_ms_ / 2), top + 33, "time (ms)", " text-anchor=\"middle\"");
  }

  const Timeline& timeline_;
  double top_px_;
  double span_ms_;
  double plot_width_px_;
  std::ostringstream out_;
};

}  // namespace

double timeline_span_ms(const Timeline& timeline) {
  double end_ms = timeline.iteration_ms;
  for (const TimelineEvent& event : timeline.events) end_ms = std::max(end_ms, event.end_ms);
  return end_ms > 0 ? end_ms : 1.0;
}

double svg_panel_height(const Timeline& timeline) {
  const double rows = static_cast<double>(timeline.rank_stages.size());
  return kHeadingHeightPx + rows * (kRowHeightPx + kRowGapPx) + kAxisHeightPx;
}

void append_svg_panel(const Timeline& timeline, const SvgPanel& panel, std::string* svg) {
  *svg += SvgPanelWriter(timeline, panel).render();
}

std::string svg_defs() {
  return "<defs><pattern id=\"hatch\" width=\"6\" height=\"6\" patternUnits=\"userSpaceOnUse\""
         " patternTransform=\"rotate(45)\"><line x1=\"0\" y1=\"0\" x2=\"0\" y2=\"6\""
         " stroke=\"white\" stroke-opacity=\"0.45\" stroke-width=\"2\"/></pattern></defs>\n";
}

std::string to_svg(const Timeline& timeline) {
  std::string svg = svg_document_open(svg_panel_height(timeline)) + svg_defs();
  append_svg_panel(timeline, SvgPanel{}, &svg);
  return svg + "</svg>\n";
}

}  // namespace pipeplan
