#include "compare/svg.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

namespace strata::svg {

namespace {

constexpr double kCharWidth = 6.4;     // average width of a 11-12 px sans-serif character
constexpr double kLegendWidth = 190;   // room on the right for the legend
constexpr double kLeftMargin = 74;     // y tick labels and the y axis title
constexpr double kTopMargin = 34;      // the heading
constexpr const char* kAxis = "#444";
constexpr const char* kGrid = "#e4e4e4";

bool finite(double v) { return std::isfinite(v); }

/// `text` cut to `max` characters (UTF-8 aware enough for names: never splits a sequence).
std::string shorten(const std::string& text, std::size_t max) {
  if (text.size() <= max) return text;
  std::size_t cut = max - 1;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
  return text.substr(0, cut) + "…";
}

/// A bar label cut to `max` characters, keeping a world-size suffix ("@8") visible.
std::string shorten_label(const std::string& label, std::size_t max) {
  const auto at = label.rfind('@');
  if (label.size() <= max || at == std::string::npos || label.size() - at >= max / 2) return shorten(label, max);
  const std::string tail = label.substr(at);
  return shorten(label.substr(0, at), max - tail.size()) + tail;
}

std::string num(double v) { return fmt::format("{:.1f}", v); }

/// Ticks at 1, 2 or 5 times a power of ten covering [lo, hi] with about `target` intervals.
std::vector<double> nice_ticks(double lo, double hi, int target) {
  if (!(hi > lo)) {
    const double pad = std::abs(lo) > 0 ? std::abs(lo) * 0.1 : 1.0;
    lo -= pad;
    hi += pad;
  }
  const double raw = (hi - lo) / target;
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  const double r = raw / magnitude;
  const double step = (r < 1.5 ? 1 : r < 3 ? 2 : r < 7 ? 5 : 10) * magnitude;
  const auto first = static_cast<long long>(std::floor(lo / step + 1e-9));
  const auto last = static_cast<long long>(std::ceil(hi / step - 1e-9));
  std::vector<double> ticks;
  for (long long i = first; i <= last; ++i) ticks.push_back(static_cast<double>(i) * step);
  return ticks;
}

/// A tick label with as many decimals as the tick spacing needs.
std::string tick_text(double v, double step, const std::string& suffix) {
  if (std::abs(v) >= 1e6) return fmt::format("{:.3g}{}", v, suffix);
  const int decimals = step > 0 ? std::max(0, static_cast<int>(-std::floor(std::log10(step) + 1e-9))) : 0;
  if (std::abs(v) < step * 1e-6) v = 0;
  return fmt::format("{:.{}f}{}", v, decimals, suffix);
}

/// Maps a value range onto a pixel range.
struct Scale {
  double d0 = 0, d1 = 1, p0 = 0, p1 = 1;
  double operator()(double v) const { return p0 + (v - d0) / (d1 - d0) * (p1 - p0); }
};

std::string text(double x, double y, const std::string& s, const char* anchor = "start", const char* extra = "") {
  return fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"{}\"{}>{}</text>", num(x), num(y), anchor, extra,
                     escape(s));
}

std::string line(double x1, double y1, double x2, double y2, const std::string& stroke, double width = 1,
                 const std::string& dash = "") {
  return fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"{}\" stroke-width=\"{}\"{}/>", num(x1),
                     num(y1), num(x2), num(y2), escape(stroke), width,
                     dash.empty() ? "" : " stroke-dasharray=\"" + escape(dash) + "\"");
}

/// Heading, the y axis with ticks and grid lines, the frame's bottom line; returns the y scale.
std::string frame(const std::string& title, const std::string& y_label, const std::string& suffix, double lo,
                  double hi, double left, double top, double right, double bottom, Box box, Scale& y) {
  std::string out = text(box.x + 4, box.y + 17, title, "start", " font-size=\"14\" font-weight=\"600\"");
  const auto ticks = nice_ticks(lo, hi, 5);
  y = {ticks.front(), ticks.back(), bottom, top};
  const double step = ticks.size() > 1 ? ticks[1] - ticks[0] : 1;
  for (double t : ticks) {
    out += line(left, y(t), right, y(t), kGrid);
    out += text(left - 6, y(t) + 4, tick_text(t, step, suffix), "end");
  }
  out += line(left, top, left, bottom, kAxis) + line(left, bottom, right, bottom, kAxis);
  const double mid = (top + bottom) / 2;
  out += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" transform=\"rotate(-90 {} {})\">{}</text>",
                     num(box.x + 14), num(mid), num(box.x + 14), num(mid), escape(y_label));
  return out;
}

/// A legend entry: a swatch (square), a line sample (stroke, dash) and the name.
std::string legend_entry(double x, double y, const Key& key, bool square, const std::string& dash = "") {
  std::string out = fmt::format("<g class=\"legend-entry\"><title>{}</title>", escape(key.name));
  if (square)
    out += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"14\" height=\"12\" fill=\"{}\"/>", num(x + 4), num(y - 9),
                       escape(key.color));
  else
    out += line(x, y - 3, x + 24, y - 3, key.color, 2.5, dash);
  return out + text(x + 30, y + 1, shorten_label(key.name, 24)) + "</g>";
}

/// `text` broken at spaces into lines of at most `width` characters (a longer word keeps its line).
std::vector<std::string> wrap(const std::string& text, std::size_t width) {
  std::vector<std::string> lines;
  std::string current, word;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t end = std::min(text.find(' ', start), text.size());
    word = text.substr(start, end - start);
    if (!current.empty() && current.size() + 1 + word.size() > width) {
      lines.push_back(current);
      current.clear();
    }
    current += (current.empty() ? "" : " ") + word;
    start = end + 1;
  }
  if (!current.empty()) lines.push_back(current);
  return lines;
}

/// A point's symbol centred at (x, y).
std::string glyph(Glyph g, double x, double y, const std::string& color) {
  switch (g) {
    case Glyph::kHollow:
      return fmt::format("<circle class=\"glyph-hollow\" cx=\"{}\" cy=\"{}\" r=\"4.5\" fill=\"#fff\" stroke=\"{}\" "
                         "stroke-width=\"2\"/>",
                         num(x), num(y), escape(color));
    case Glyph::kSuspect:
      return fmt::format("<polygon class=\"glyph-suspect\" points=\"{},{} {},{} {},{}\" fill=\"{}\" stroke=\"#222\" "
                         "stroke-width=\"1.3\"/>",
                         num(x), num(y - 7), num(x - 6), num(y + 4.5), num(x + 6), num(y + 4.5), escape(color));
    case Glyph::kWhisker:
      return line(x, y - 6, x, y + 6, color, 1.5) + line(x - 4, y - 6, x + 4, y - 6, color, 1.5) +
             line(x - 4, y + 6, x + 4, y + 6, color, 1.5);
    case Glyph::kDot: break;
  }
  return fmt::format("<circle cx=\"{}\" cy=\"{}\" r=\"3.5\" fill=\"{}\"/>", num(x), num(y), escape(color));
}

/// The legend of a line chart from (x, y) down to `bottom`: a line per listed series, then the
/// notes (glyph and text); series that do not fit end with "… n more".
std::string line_legend(const LineChart& chart, double x, double y, double bottom) {
  std::vector<const Series*> listed;
  for (const auto& s : chart.series)
    if (s.in_legend) listed.push_back(&s);
  std::vector<std::pair<Glyph, std::vector<std::string>>> notes;
  double notes_height = 0;
  for (const auto& n : chart.notes) {
    notes.emplace_back(n.glyph, wrap(n.text, 25));
    notes_height += 6 + 15 * static_cast<double>(notes.back().second.size());
  }
  const auto rows = static_cast<std::size_t>(std::max(1.0, std::floor((bottom - y + 10 - notes_height) / 18)));
  std::string out;
  for (std::size_t i = 0; i < listed.size() && i < rows; ++i) {
    const Series& s = *listed[i];
    if (i + 1 == rows && listed.size() > rows) {
      out += text(x, y, fmt::format("… {} more", listed.size() - i), "start", " fill=\"#666\"");
    } else {
      out += legend_entry(x, y, {s.name, s.color}, false, s.dash);
    }
    y += 18;
  }
  for (const auto& [g, lines] : notes) {
    y += 6;
    out += "<g class=\"legend-note\">" + glyph(g, x + 12, y - 4, "#555");
    for (const auto& l : lines) {
      out += text(x + 30, y, l, "start", " fill=\"#444\"");
      y += 15;
    }
    out += "</g>";
  }
  return out;
}

std::string no_data(double left, double top, double right, double bottom) {
  return text((left + right) / 2, (top + bottom) / 2, "no data", "middle", " fill=\"#888\"");
}

}  // namespace

std::string escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string line_panel(const LineChart& chart, Box box) {
  const bool legend = chart.legend && (!chart.series.empty() || !chart.notes.empty());
  const double left = box.x + kLeftMargin, top = box.y + kTopMargin;
  const double right = box.x + box.w - (legend ? kLegendWidth : 16), bottom = box.y + box.h - 44;
  const auto usable = [&](double x, double v) { return finite(x) && finite(v) && (!chart.log2_x || x > 0); };
  double x_min = std::numeric_limits<double>::infinity(), x_max = -x_min, y_min = x_min, y_max = -x_min;
  std::vector<double> xs;
  for (const auto& s : chart.series)
    for (std::size_t i = 0; i < s.points.size(); ++i) {
      const auto [x, v] = s.points[i];
      if (!usable(x, v)) continue;
      x_min = std::min(x_min, x);
      x_max = std::max(x_max, x);
      y_min = std::min(y_min, v);
      y_max = std::max(y_max, v);
      if (i < s.ranges.size())  // the whiskers and bands stay inside the frame
        for (double r : {s.ranges[i].first, s.ranges[i].second})
          if (finite(r)) y_min = std::min(y_min, r), y_max = std::max(y_max, r);
      if (std::find(xs.begin(), xs.end(), x) == xs.end()) xs.push_back(x);
    }
  std::string out = "<g class=\"panel\">";
  if (xs.empty()) {
    Scale y;
    out += frame(chart.title, chart.y_label, chart.y_suffix, 0, 1, left, top, right, bottom, box, y);
    return out + no_data(left, top, right, bottom) + "</g>";
  }
  double lo = chart.y_from_zero ? std::min(0.0, y_min) : y_min, hi = std::max(y_max, chart.y_at_least);
  if (finite(chart.y_min)) lo = chart.y_min;
  if (finite(chart.y_max)) hi = chart.y_max;
  Scale y;
  out += frame(chart.title, chart.y_label, chart.y_suffix, lo, hi, left, top, right, bottom, box, y);
  // x axis: log2 ticked at the values present (world sizes), or linear with round ticks.
  std::sort(xs.begin(), xs.end());
  const auto tx = [&](double x) { return chart.log2_x ? std::log2(x) : x; };
  double d0 = tx(x_min), d1 = tx(x_max);
  const double pad = chart.log2_x ? 0.3 : 0.0;
  if (d1 - d0 < 1e-12) {  // one x value: centred
    d0 -= 0.5;
    d1 += 0.5;
  }
  const Scale sx{d0 - pad, d1 + pad, left, right};
  const auto px = [&](double x) { return sx(tx(x)); };
  std::vector<double> ticks;
  if (chart.log2_x) ticks = xs;
  else
    for (double t : nice_ticks(x_min, x_max, 6))
      if (t >= d0 - 1e-9 && t <= d1 + 1e-9) ticks.push_back(t);
  const double step = !chart.log2_x && ticks.size() > 1 ? ticks[1] - ticks[0] : 1;
  for (double t : ticks) {
    out += line(px(t), bottom, px(t), bottom + 5, kAxis);
    out += text(px(t), bottom + 18, tick_text(t, step, ""), "middle");
  }
  out += text((left + right) / 2, bottom + 36, chart.x_label, "middle");
  // Sideways shifts: the series with error bars spread over at most 48 px around each x.
  std::vector<double> shift(chart.series.size(), 0.0);
  if (chart.dodge) {
    std::vector<std::size_t> ranged;
    for (std::size_t i = 0; i < chart.series.size(); ++i)
      if (!chart.series[i].ranges.empty() && !chart.series[i].band) ranged.push_back(i);
    const double gap = ranged.size() > 1 ? std::min(8.0, 48.0 / static_cast<double>(ranged.size() - 1)) : 0;
    for (std::size_t k = 0; k < ranged.size(); ++k)
      shift[ranged[k]] = (static_cast<double>(k) - static_cast<double>(ranged.size() - 1) / 2) * gap;
  }
  // Bands first (under every line), then each series: error bars, line, point glyphs.
  for (const auto& s : chart.series) {
    if (!s.band) continue;
    std::string upper, lower;
    for (std::size_t i = 0; i < s.points.size() && i < s.ranges.size(); ++i) {
      const auto [low, high] = s.ranges[i];
      if (!usable(s.points[i].first, s.points[i].second) || !finite(low) || !finite(high)) continue;
      upper += fmt::format("{}{},{}", upper.empty() ? "" : " ", num(px(s.points[i].first)), num(y(high)));
      lower = fmt::format("{},{}", num(px(s.points[i].first)), num(y(low))) + (lower.empty() ? "" : " ") + lower;
    }
    if (!upper.empty())
      out += fmt::format("<polygon class=\"band\" points=\"{} {}\" fill=\"{}\" fill-opacity=\"0.22\" stroke=\"none\">"
                         "<title>{}: min..max</title></polygon>",
                         upper, lower, escape(s.color), escape(s.name));
  }
  for (std::size_t k = 0; k < chart.series.size(); ++k) {
    const auto& s = chart.series[k];
    std::string points, marks, bars;
    int count = 0;
    for (std::size_t i = 0; i < s.points.size(); ++i) {
      const auto [x, v] = s.points[i];
      if (!usable(x, v)) continue;
      const double cx = px(x) + shift[k], cy = y(v);
      points += fmt::format("{}{},{}", points.empty() ? "" : " ", num(cx), num(cy));
      ++count;
      const std::string tip = i < s.tips.size() && !s.tips[i].empty() ? s.tips[i]
                                                                     : fmt::format("{}: {:.4g} at {:g}", s.name, v, x);
      if (i < s.ranges.size() && !s.band && finite(s.ranges[i].first) && finite(s.ranges[i].second)) {
        const double y0 = y(s.ranges[i].first), y1 = y(s.ranges[i].second);
        bars += fmt::format("<g class=\"errorbar\"><title>{}</title>{}{}{}</g>", escape(tip),
                            line(cx, y0, cx, y1, s.color, 1.5), line(cx - 4, y0, cx + 4, y0, s.color, 1.5),
                            line(cx - 4, y1, cx + 4, y1, s.color, 1.5));
      }
      if (s.markers)
        marks += fmt::format("<g class=\"point\"><title>{}</title>{}</g>", escape(tip),
                             glyph(i < s.glyphs.size() ? s.glyphs[i] : Glyph::kDot, cx, cy, s.color));
    }
    if (count == 0) continue;
    out += fmt::format("<g class=\"series\" data-series=\"{}\" data-color=\"{}\"><title>{}</title>", escape(s.name),
                       escape(s.color), escape(s.name));
    out += bars;
    out += fmt::format("<polyline class=\"series-line\" points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\""
                       " stroke-linejoin=\"round\" stroke-opacity=\"0.9\"{}/>",
                       points, escape(s.color), s.dash.empty() ? "" : " stroke-dasharray=\"" + escape(s.dash) + "\"");
    if (count == 1 && !s.markers) {
      const auto comma = points.find(',');
      out += fmt::format("<circle cx=\"{}\" cy=\"{}\" r=\"2.5\" fill=\"{}\"/>", points.substr(0, comma),
                         points.substr(comma + 1), escape(s.color));
    }
    out += marks + "</g>";
  }
  if (legend) out += line_legend(chart, right + 16, top + 10, bottom);
  return out + "</g>";
}

std::string bar_panel(const BarChart& chart, Box box) {
  const std::size_t n_legend = chart.parts.size() + chart.marks.size();
  const double left = box.x + kLeftMargin, top = box.y + kTopMargin;
  const double right = box.x + box.w - (n_legend > 0 || chart.legend_space ? kLegendWidth : 16);
  const double slot = chart.bars.empty() ? 1 : (right - left) / static_cast<double>(chart.bars.size());
  // Labels turn by 35 degrees when they do not fit under their bar; the plot area gives way.
  std::size_t longest = 0;
  bool notes_fit = true;  // notes are left out (values stay in the tooltips) when one would overflow its slot
  for (const auto& b : chart.bars) {
    longest = std::max(longest, std::min<std::size_t>(b.label.size(), 20));
    notes_fit = notes_fit && static_cast<double>(b.note.size()) * 5.8 <= slot - 4;
  }
  const bool turn = static_cast<double>(longest) * kCharWidth > slot - 6;
  const double bottom = box.y + box.h - (turn ? 24 + 0.58 * static_cast<double>(longest) * kCharWidth : 30);
  double hi = 0;
  bool any = false;
  for (const auto& b : chart.bars) {
    double total = 0;
    for (double v : b.parts)
      if (finite(v) && v > 0) total += v, any = true;
    hi = std::max(hi, total);
    for (double m : b.marks)
      if (finite(m)) hi = std::max(hi, m), any = any || m > 0;
  }
  Scale y;
  std::string out = "<g class=\"panel\">" + frame(chart.title, chart.y_label, chart.y_suffix, 0, any ? hi : 1, left,
                                                   top, right, bottom, box, y);
  if (!any) out += no_data(left, top, right, bottom);
  const double width = std::clamp(slot * 0.62, 4.0, 56.0);
  for (std::size_t i = 0; i < chart.bars.size(); ++i) {
    const Bar& b = chart.bars[i];
    const double cx = left + slot * (static_cast<double>(i) + 0.5);
    out += fmt::format("<g class=\"bar\" data-label=\"{}\"><title>{}</title>", escape(b.label),
                       escape(b.tooltip.empty() ? b.label : b.tooltip));
    double base = 0;
    for (std::size_t p = 0; p < b.parts.size(); ++p) {
      const double v = b.parts[p];
      if (!finite(v) || v <= 0) continue;
      const std::string color = chart.parts.empty() ? b.color : chart.parts[p % chart.parts.size()].color;
      const std::string name = chart.parts.empty() ? b.label : chart.parts[p % chart.parts.size()].name;
      out += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\"><title>{}: {:.4g}</title></rect>",
                         num(cx - width / 2), num(y(base + v)), num(width), num(std::max(0.5, y(base) - y(base + v))),
                         escape(color), escape(name), v);
      base += v;
    }
    // The note sits on the stack it sums, unless a marker crosses it there: then above the marker.
    double note_y = y(base) - 5;
    for (std::size_t m = 0; m < b.marks.size() && m < chart.marks.size(); ++m) {
      if (!finite(b.marks[m])) continue;
      if (y(b.marks[m]) < y(base) + 1 && y(b.marks[m]) > note_y - 13) note_y = std::min(note_y, y(b.marks[m]) - 6);
      out += fmt::format("<g class=\"mark\"><title>{}: {:.4g}</title>{}</g>", escape(chart.marks[m].name), b.marks[m],
                         line(cx - width / 2 - 5, y(b.marks[m]), cx + width / 2 + 5, y(b.marks[m]),
                              chart.marks[m].color, 3));
    }
    if (!chart.parts.empty() && !b.color.empty())
      out += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"4\" fill=\"{}\"/>", num(cx - width / 2),
                         num(bottom + 2), num(width), escape(b.color));
    if (!b.note.empty() && notes_fit) out += text(cx, note_y, b.note, "middle", " font-size=\"10.5\" fill=\"#333\"");
    const std::string label = shorten_label(b.label, 20);
    out += turn ? fmt::format("<text x=\"{0}\" y=\"{1}\" text-anchor=\"end\" transform=\"rotate(-35 {0} {1})\">{2}</text>",
                              num(cx + 3), num(bottom + 16), escape(label))
                : text(cx, bottom + 20, label, "middle");
    out += "</g>";
  }
  double ly = top + 10;
  for (const auto& part : chart.parts) {
    out += legend_entry(right + 16, ly, part, true);
    ly += 18;
  }
  for (const auto& mark : chart.marks) {
    out += legend_entry(right + 16, ly, mark, false);
    ly += 18;
  }
  return out + "</g>";
}

std::string chart(const std::string& kind, const std::string& title, double width, double height,
                  const std::string& body) {
  return fmt::format("<svg class=\"chart\" data-chart=\"{0}\" role=\"img\" aria-label=\"{1}\" viewBox=\"0 0 {2} {3}\" "
                     "width=\"{2}\" height=\"{3}\" font-family=\"system-ui, -apple-system, 'Segoe UI', Roboto, "
                     "sans-serif\" font-size=\"12\" fill=\"#222\"><title>{1}</title>"
                     "<rect x=\"0\" y=\"0\" width=\"{2}\" height=\"{3}\" fill=\"#fff\"/>{4}</svg>",
                     escape(kind), escape(title), num(width), num(height), body);
}

}  // namespace strata::svg
