// The timeline as a self-contained SVG: one row per rank, boxes coloured by micro-batch.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <string>

#include "common/error.h"
#include "plans/timeline.h"

namespace pipeplan {
namespace {

// Layout, in SVG user units (px).
constexpr double kWidthPx = 1200;
constexpr double kLabelWidthPx = 130;
constexpr double kRightMarginPx = 20;
constexpr double kTitleHeightPx = 56;
constexpr double kRowHeightPx = 26;
constexpr double kRowGapPx = 6;
constexpr double kAxisHeightPx = 40;
constexpr double kSendBarPx = 3;
constexpr double kMinLabelWidthPx = 18;  // boxes narrower than this get no "F3" text
constexpr int kTargetTicks = 10;
constexpr double kGoldenAngleDeg = 137.508;  // spreads micro-batch hues evenly

std::string number(double value, int decimals = 2) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.*f", decimals, value);
  return buffer;
}

// Enough decimals to tell ticks `step` apart: 0 for steps of 1 and more, 1 for 0.1, ...
int tick_decimals(double step) {
  return step >= 1 ? 0 : static_cast<int>(std::ceil(-std::log10(step) - 1e-9));
}

std::string escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string hue_colour(int micro_batch, int lightness_percent) {
  const double hue = std::fmod(std::max(micro_batch, 0) * kGoldenAngleDeg, 360.0);
  return detail::concat("hsl(", number(hue), ",65%,", lightness_percent, "%)");
}

// A tick step of 1, 2 or 5 times a power of ten giving about kTargetTicks ticks.
double tick_step(double span_ms) {
  const double raw = span_ms / kTargetTicks;
  const double power = std::pow(10.0, std::floor(std::log10(raw)));
  for (double factor : {1.0, 2.0, 5.0})
    if (factor * power >= raw) return factor * power;
  return 10 * power;
}

class SvgCanvas {
 public:
  explicit SvgCanvas(const Timeline& timeline)
      : timeline_(timeline),
        span_ms_(std::max(timeline.iteration_ms, latest_end(timeline))),
        plot_width_px_(kWidthPx - kLabelWidthPx - kRightMarginPx) {}

  std::string render() {
    const int rows = static_cast<int>(timeline_.rank_stages.size());
    const double height = kTitleHeightPx + rows * (kRowHeightPx + kRowGapPx) + kAxisHeightPx;
    out_ << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
         << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << number(kWidthPx)
         << "\" height=\"" << number(height) << "\" viewBox=\"0 0 " << number(kWidthPx) << " "
         << number(height) << "\" font-family=\"sans-serif\" font-size=\"11\">\n";
    defs();
    out_ << "<rect x=\"0\" y=\"0\" width=\"" << number(kWidthPx) << "\" height=\"" << number(height)
         << "\" fill=\"white\"/>\n";
    title();
    for (int rank = 0; rank < rows; ++rank) row_background(rank);
    for (const TimelineEvent& event : timeline_.events) draw(event);
    axis(kTitleHeightPx + rows * (kRowHeightPx + kRowGapPx));
    out_ << "</svg>\n";
    return out_.str();
  }

 private:
  static double latest_end(const Timeline& timeline) {
    double end_ms = 0;
    for (const TimelineEvent& event : timeline.events) end_ms = std::max(end_ms, event.end_ms);
    return end_ms > 0 ? end_ms : 1.0;
  }
  double x(double ms) const { return kLabelWidthPx + ms / span_ms_ * plot_width_px_; }
  double row_top(int rank) const { return kTitleHeightPx + rank * (kRowHeightPx + kRowGapPx); }

  void defs() {
    out_ << "<defs><pattern id=\"hatch\" width=\"6\" height=\"6\" patternUnits=\"userSpaceOnUse\""
            " patternTransform=\"rotate(45)\"><line x1=\"0\" y1=\"0\" x2=\"0\" y2=\"6\""
            " stroke=\"white\" stroke-opacity=\"0.45\" stroke-width=\"2\"/></pattern></defs>\n";
  }

  void title() {
    const std::string heading =
        detail::concat(timeline_.title.empty() ? "timeline" : timeline_.title, ": iteration ",
                       number(timeline_.iteration_ms), " ms, bubble ",
                       number(timeline_.bubble_fraction * 100), " %");
    out_ << "<text x=\"10\" y=\"22\" font-size=\"15\" font-weight=\"bold\">" << escape(heading)
         << "</text>\n"
         << "<text x=\"10\" y=\"42\" fill=\"#444\">forward: light, backward: dark and hatched, "
            "recompute: dashed outline, all-reduce and optimizer: grey, blank: idle; colour = "
            "micro-batch</text>\n";
  }

  void row_background(int rank) {
    const double top = row_top(rank);
    out_ << "<text x=\"8\" y=\"" << number(top + kRowHeightPx * 0.65) << "\">rank " << rank
         << " (stage " << timeline_.rank_stages[rank] << ")</text>\n"
         << "<rect x=\"" << number(x(0)) << "\" y=\"" << number(top) << "\" width=\""
         << number(plot_width_px_) << "\" height=\"" << number(kRowHeightPx)
         << "\" fill=\"#eef1f5\"/>\n";
  }

  void box(double left, double top, double width, double height, const std::string& fill,
           const std::string& extra) {
    out_ << "<rect x=\"" << number(left) << "\" y=\"" << number(top) << "\" width=\""
         << number(std::max(width, 0.5)) << "\" height=\"" << number(height) << "\" fill=\"" << fill
         << "\"" << extra << "/>\n";
  }

  void draw(const TimelineEvent& event) {
    if (event.rank < 0 || event.rank >= static_cast<int>(timeline_.rank_stages.size())) return;
    const double left = x(event.start_ms);
    const double width = x(event.end_ms) - left;
    const double top = row_top(event.rank);
    switch (event.kind) {
      case TimelineKind::kForward:
        box(left, top, width, kRowHeightPx, hue_colour(event.micro_batch, 72), "");
        break;
      case TimelineKind::kBackward:
        box(left, top, width, kRowHeightPx, hue_colour(event.micro_batch, 38), "");
        box(left, top, width, kRowHeightPx, "url(#hatch)", "");
        break;
      case TimelineKind::kRecompute:
        box(left, top, width, kRowHeightPx, hue_colour(event.micro_batch, 85),
            " stroke=\"#333\" stroke-dasharray=\"3,2\" stroke-width=\"0.8\"");
        break;
      case TimelineKind::kAllReduce:
        box(left, top, width, kRowHeightPx, "#9a9a9a", "");
        break;
      case TimelineKind::kOptimizer:
        box(left, top, width, kRowHeightPx, "#5a5a5a", "");
        break;
      case TimelineKind::kSend:
        box(left, top + kRowHeightPx - kSendBarPx, width, kSendBarPx,
            hue_colour(event.micro_batch, 30), " fill-opacity=\"0.6\"");
        return;
      case TimelineKind::kRecvWait:
        return;  // idle: left blank on purpose
    }
    label(event, left, width, top);
  }

  void label(const TimelineEvent& event, double left, double width, double top) {
    if (width < kMinLabelWidthPx || event.micro_batch < 0) return;
    const char* prefix = event.kind == TimelineKind::kForward    ? "F"
                         : event.kind == TimelineKind::kBackward ? "B"
                                                                 : "R";
    const char* colour = event.kind == TimelineKind::kBackward ? "white" : "black";
    out_ << "<text x=\"" << number(left + width / 2) << "\" y=\""
         << number(top + kRowHeightPx * 0.65) << "\" text-anchor=\"middle\" fill=\"" << colour
         << "\">" << prefix << event.micro_batch << "</text>\n";
  }

  void axis(double top) {
    out_ << "<line x1=\"" << number(x(0)) << "\" y1=\"" << number(top) << "\" x2=\""
         << number(x(span_ms_)) << "\" y2=\"" << number(top) << "\" stroke=\"black\"/>\n";
    const double step = tick_step(span_ms_);
    for (int tick = 0; tick * step <= span_ms_ * (1 + 1e-9); ++tick) {
      const double px = x(tick * step);
      out_ << "<line x1=\"" << number(px) << "\" y1=\"" << number(top) << "\" x2=\"" << number(px)
           << "\" y2=\"" << number(top + 5) << "\" stroke=\"black\"/>\n"
           << "<text x=\"" << number(px) << "\" y=\"" << number(top + 17)
           << "\" text-anchor=\"middle\">" << number(tick * step, tick_decimals(step))
           << "</text>\n";
    }
    out_ << "<text x=\"" << number(x(span_ms_ / 2)) << "\" y=\"" << number(top + 33)
         << "\" text-anchor=\"middle\">time (ms)</text>\n";
  }

  const Timeline& timeline_;
  double span_ms_;
  double plot_width_px_;
  std::ostringstream out_;
};

}  // namespace

std::string to_svg(const Timeline& timeline) { return SvgCanvas(timeline).render(); }

}  // namespace pipeplan
