// Small SVG writing helpers shared by the timeline panels and `pipeplan compare`'s chart.
#pragma once

#include <string>

namespace pipeplan {

/// Width of every pipeplan SVG document, in SVG user units (px).
inline constexpr double kSvgWidthPx = 1200;

/// `value` with `decimals` decimals ("12.50"), as SVG attributes and labels want it.
std::string svg_number(double value, int decimals = 2);

/// `text` with &, <, > and " escaped for SVG text and attribute values.
std::string svg_escape(const std::string& text);

/// `<rect .../>` at (left, top) of `width` (at least 0.5 px, so that tiny events stay
/// visible) × `height`, filled with `fill`; `extra` is appended inside the tag verbatim
/// (e.g. ` stroke="#333"`).
std::string svg_rect(double left, double top, double width, double height, const std::string& fill,
                     const std::string& extra = "");

/// `<text ...>escaped text</text>` at (x, y); `extra` is appended inside the opening tag.
std::string svg_text(double x, double y, const std::string& text, const std::string& extra = "");

/// The XML declaration, the `<svg>` opening tag of kSvgWidthPx × `height_px` and a white
/// background; close the document with "</svg>\n".
std::string svg_document_open(double height_px);

}  // namespace pipeplan
