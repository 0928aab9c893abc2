#pragma once
// Small static SVG charts for report.html: line charts (world size on a log2 axis, or steps) and
// bar charts (stacked parts, horizontal markers, a note above each bar). The output is plain
// inline SVG with its own fonts and colours, readable without scripts or network; every element
// that carries data has a <title> so a browser shows its value on hover.
//
// A chart is one <svg class="chart" data-chart=KIND> holding one or more panels, each drawn into
// a box of the chart's coordinates, so a chart can stack panels with different axes (memory:
// model state next to tensor peaks of another magnitude) or lay out small multiples (a loss panel
// per strategy). Points may carry ranges (error bars or a band) and glyphs (within noise,
// suspect) that the legend's notes explain.

#include <limits>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace strata::svg {

/// `text` with & < > " ' escaped: safe in HTML and SVG content and in attribute values.
std::string escape(std::string_view text);

/// A rectangle of the chart, in its user units (px at 100% zoom).
struct Box {
  double x = 0, y = 0, w = 0, h = 0;
};

/// A name and a CSS colour (a legend entry: a stacked part, a marker).
struct Key {
  std::string name;
  std::string color;
};

/// A symbol of a line chart: how a point is marked, and the legend's notes explaining them.
enum class Glyph {
  kDot,      ///< a filled dot: a plain result
  kHollow,   ///< an open circle: within noise of the reference (its range overlaps the reference's)
  kSuspect,  ///< a triangle with a dark outline: suspect (e.g. an efficiency above 100% beyond the noise)
  kWhisker,  ///< legend only: an error bar (min..max)
};

/// One line of a line chart.
struct Series {
  std::string name;   ///< legend entry (long names are shortened there; the full one is the tooltip)
  std::string color;  ///< CSS colour
  std::string dash;   ///< stroke-dasharray, e.g. "6 3"; empty: solid
  std::vector<std::pair<double, double>> points;  ///< (x, y) in x order; points with a non-finite y are skipped
  bool markers = true;                            ///< a glyph at each point (`glyphs`, else dots)
  /// Per point, (low, high): an error bar (class "errorbar") or, with `band`, a shaded band (class
  /// "band") through them. Empty: none; a non-finite pair: none at that point.
  std::vector<std::pair<double, double>> ranges;
  bool band = false;
  std::vector<Glyph> glyphs;      ///< per point (kDot, kHollow or kSuspect); empty: dots
  std::vector<std::string> tips;  ///< per point hover text; empty or "": "name: y at x"
  bool in_legend = true;          ///< listed in the legend
};

/// A line of the legend under the series: a symbol and what it means.
struct Note {
  Glyph glyph = Glyph::kDot;
  std::string text;  ///< wrapped to the legend's width
};

struct LineChart {
  std::string title;               ///< the panel's heading
  std::string x_label, y_label;    ///< axis titles
  std::string y_suffix;            ///< appended to y tick labels, e.g. "%" or "x"
  std::vector<Series> series;      ///< drawn in order; the legend lists them in order
  bool log2_x = false;             ///< world sizes: a log2 axis ticked at the x values present
  bool y_from_zero = true;         ///< the y axis starts at 0 (else at the data's minimum)
  double y_at_least = 0;           ///< the y axis reaches at least this value
  /// A fixed y range (panels that must share a scale); NaN: from the data (ranges included).
  double y_min = std::numeric_limits<double>::quiet_NaN(), y_max = std::numeric_limits<double>::quiet_NaN();
  /// Shift each series with ranges a few px sideways, in order, so that error bars at the same x
  /// stay apart (the x ticks remain at the true values).
  bool dodge = false;
  bool legend = true;              ///< the legend on the right (false: the plot takes the width)
  std::vector<Note> notes;         ///< legend lines under the series
};

/// One bar of a bar chart.
struct Bar {
  std::string label;          ///< under the bar, e.g. "ddp@2" (shortened when long; full in the tooltip)
  std::string color;          ///< fill of a one-part bar; a strip under a stacked one
  std::vector<double> parts;  ///< stacked from the bottom: one per BarChart::parts, or one value
  std::vector<double> marks;  ///< one per BarChart::marks; NaN: none for this bar
  std::string note;           ///< small text above the bar; empty: none
  std::string tooltip;        ///< hover text (the values); empty: the label
};

struct BarChart {
  std::string title;        ///< the panel's heading
  std::string y_label;      ///< axis title, with the unit
  std::string y_suffix;     ///< appended to y tick labels
  std::vector<Key> parts;   ///< stacked parts (legend); empty: one part coloured per bar
  std::vector<Key> marks;   ///< horizontal markers across the bar (legend)
  std::vector<Bar> bars;
  bool legend_space = false;  ///< keep the legend's room without a legend (aligns panels stacked in one chart)
};

/// The panel's elements (a <g>) drawn into `box`: heading, axes with ticks and grid, data,
/// legend on the right. Without finite data it says "no data".
std::string line_panel(const LineChart& chart, Box box);
std::string bar_panel(const BarChart& chart, Box box);

/// The whole chart: <svg class="chart" data-chart=`kind` role="img" aria-label=`title`> with a
/// <title>, of `width` x `height`, holding `body` (panels).
std::string chart(const std::string& kind, const std::string& title, double width, double height,
                  const std::string& body);

}  // namespace strata::svg
