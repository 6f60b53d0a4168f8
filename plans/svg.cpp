// Small SVG writing helpers: numbers, escaping, boxes, text, the document frame.
#include "plans/svg.h"

#include <algorithm>
#include <cstdio>

#include "common/error.h"
#include "common/units.h"

namespace pipeplan {
namespace {

constexpr double kMinBoxWidthPx = 0.5;

}  // namespace

std::string svg_number(double value, int decimals) { return format_fixed(value, decimals); }

std::string svg_escape(const std::string& text) {
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

std::string svg_rect(double left, double top, double width, double height, const std::string& fill,
                     const std::string& extra) {
  return detail::concat("<rect x=\"", svg_number(left), "\" y=\"", svg_number(top), "\" width=\"",
                        svg_number(std::max(width, kMinBoxWidthPx)), "\" height=\"",
                        svg_number(height), "\" fill=\"", fill, "\"", extra, "/>\n");
}

std::string svg_text(double x, double y, const std::string& text, const std::string& extra) {
  return detail::concat("<text x=\"", svg_number(x), "\" y=\"", svg_number(y), "\"", extra, ">",
                        svg_escape(text), "</text>\n");
}

std::string svg_document_open(double height_px) {
  const std::string width = svg_number(kSvgWidthPx);
  const std::string height = svg_number(height_px);
  return detail::concat("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n",
                        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"", width, "\" height=\"",
                        height, "\" viewBox=\"0 0 ", width, " ", height,
                        "\" font-family=\"sans-serif\" font-size=\"11\">\n",
                        svg_rect(0, 0, kSvgWidthPx, height_px, "white"));
}

}  // namespace pipeplan
