// report.html: the charts (report_charts.cpp) and tables (report_tables.cpp) of a set of runs as
// one static page, with the facts of where and how they ran. The page is laid out for a laptop
// screen: charts at their natural width, tables in boxes of their own that scroll sideways when
// they are wider than the page, long cells (directories, errors) wrapping.

#include "compare/report.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <thread>

#include <fmt/format.h>

#include "device/peaks.hpp"
#include "compare/report_charts.hpp"
#include "compare/svg.hpp"

namespace strata {

namespace {

using svg::escape;

/// A cell's HTML. In a number column, a trailing range " (low–high)" goes on a line of its own
/// under the value, so that ranges widen a column by little.
std::string cell_html(const std::string& text, char align) {
  const auto open = text.rfind(" (");
  if (align != 'r' || open == std::string::npos || text.back() != ')' || text.find("–", open) == std::string::npos)
    return escape(text);
  return escape(text.substr(0, open)) + "<span class=\"range\">" + escape(text.substr(open + 2, text.size() - open - 3)) +
         "</span>";
}

/// `align`: 'l' and 'r' as ReportTable; 'w' a left-aligned column whose long cells wrap.
std::string html_table(const ReportTable& t) {
  const auto align = [&](std::size_t c) { return c < t.align.size() ? t.align[c] : 'l'; };
  std::string out = "<table>\n<thead><tr>";
  for (std::size_t c = 0; c < t.grid.front().size(); ++c)
    out += fmt::format("<th class=\"{}\">{}</th>", align(c), escape(t.grid.front()[c]));
  out += "</tr></thead>\n<tbody>\n";
  for (std::size_t l = 1; l < t.grid.size(); ++l) {
    out += "<tr>";
    for (std::size_t c = 0; c < t.grid[l].size(); ++c)
      out += fmt::format("<td class=\"{}\">{}</td>", align(c), cell_html(t.grid[l][c], align(c)));
    out += "</tr>\n";
  }
  return out + "</tbody>\n</table>\n";
}

/// The distinct values of a summary string at `path` over the runs, joined.
std::string distinct(const Report& report, const std::function<std::string(const ReportRun&)>& f) {
  std::vector<std::string> seen;
  for (const auto& r : report.runs)
    if (const auto s = f(r); !s.empty() && std::find(seen.begin(), seen.end(), s) == seen.end()) seen.push_back(s);
  std::string out;
  for (const auto& s : seen) out += (out.empty() ? "" : ", ") + s;
  return out.empty() ? "-" : out;
}

std::string summary_text(const ReportRun& r, const std::string& path) {
  if (!r.result.summary) return {};
  const Json* v = r.result.summary->at_path(path);
  if (!v) return {};
  if (v->is_number()) return fmt::format("{:g}", v->number_or(NAN));
  return v->string_or("");
}

std::string runs_table(const Report& report) {
  ReportTable t{"Runs", {{"run", "strategy", "world size", "status", "segments", "model", "dataset", "steps",
                          "global batch", "device", "directory", "cause"}}, "llrlrlllrrlww", {}};
  for (const auto& r : report.runs) {
    // A resumed run is marked: its figures are its last segment's (the notes name the others).
    const auto& segments = r.result.segments;
    const std::string marked = segments.empty()  ? std::string()
                               : r.result.resumed() ? fmt::format("{} (resumed)", segments.size())
                                                    : std::string("1");
    t.grid.push_back({r.label, r.series, std::to_string(r.world_size), r.result.status, marked,
                      summary_text(r, "model"), summary_text(r, "dataset"), summary_text(r, "steps"),
                      summary_text(r, "global_batch_size"), summary_text(r, "device"), r.dir,
                      r.ok() ? std::string() : r.result.error});
  }
  return html_table(t);
}

/// The identical work that spread beyond the noise threshold (Report::noise, from `strata
/// compare`), and the cells an auto-repeat left loose; "" when there are none.
std::string noise_section(const Report& report) {
  if (report.noise.empty() && report.loose.empty()) return {};
  std::string out = fmt::format("<section id=\"noise\">\n<h2>Noise</h2>\n<p>Runs of identical work that spread by more "
                                "than {:.0f}% (max - min over the median): differences of that size between strategies "
                                "are noise of this machine, not the strategies.</p>\n<ul>\n",
                                100 * report.noise_threshold);
  for (const auto& f : report.noise) {
    std::string members;
    for (const auto& [label, seconds] : f.members)
      members += fmt::format("{}{} {}", members.empty() ? "" : ", ", label, detail::number_text(1e3 * seconds, "{:.3g} ms"));
    out += fmt::format("<li>{}: {:.0f}% ({})</li>\n", escape(f.what), 100 * f.relative_range, escape(members));
  }
  if (!report.loose.empty()) {
    std::string loose;
    for (const auto& l : report.loose) loose += (loose.empty() ? "" : ", ") + l;
    out += "<li>still loose after the last repeat: " + escape(loose) + "</li>\n";
  }
  return out + "</ul>\n</section>\n";
}

// Laid out for screens from a phone to a wide monitor: the page is at most 1180 px wide (a
// laptop's 1280 px window leaves room for the widest usual table), a chart keeps its natural
// width or shrinks with the page, a table wider than the page scrolls in its own box, and header
// cells and long text cells wrap instead of widening their table.
constexpr const char* kCss = R"(
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: #222; background: #fafafa;
       margin: 0; }
main { max-width: 1180px; margin: 0 auto; padding: 24px; }
h1 { font-size: 24px; margin: 0 0 12px; }
h2 { font-size: 19px; margin: 32px 0 10px; border-bottom: 1px solid #ddd; padding-bottom: 4px; }
h3 { font-size: 15px; margin: 20px 0 6px; }
dl.facts { display: grid; grid-template-columns: max-content 1fr; gap: 3px 16px; margin: 0; font-size: 14px; }
dl.facts dt { color: #666; }
dl.facts dd { margin: 0; overflow-wrap: anywhere; }
figure { background: #fff; border: 1px solid #ddd; border-radius: 4px; margin: 16px 0; padding: 8px;
         max-width: 900px; }
figcaption { font-size: 13px; color: #555; margin: 6px 4px 2px; }
svg.chart { display: block; max-width: 100%; height: auto; }
.scroll { overflow-x: auto; max-width: 100%; }
table { border-collapse: collapse; font-size: 13px; background: #fff; margin: 4px 0 6px; }
th, td { border: 1px solid #ddd; padding: 3px 7px; white-space: nowrap; vertical-align: top; }
th { background: #f0f0f0; font-weight: 600; white-space: normal; vertical-align: bottom; min-width: 3.5em; }
td.r, th.r { text-align: right; font-variant-numeric: tabular-nums; }
td.l, th.l, td.w, th.w { text-align: left; }
td.w { white-space: normal; overflow-wrap: anywhere; min-width: 10em; max-width: 30em; }
td .range { display: block; font-size: 11px; color: #777; }
tbody tr:nth-child(even) { background: #f8f8f8; }
section > p, section li { font-size: 14px; }
p.note { font-size: 12px; color: #555; margin: 0 0 14px; max-width: 900px; }
nav a { margin-right: 12px; font-size: 14px; }
footer { color: #888; font-size: 12px; margin-top: 32px; }
)";

}  // namespace

std::string machine_description() {
  return fmt::format("{}, {} cores", cpu_model(), std::thread::hardware_concurrency());
}

std::string render_report(const Report& report) {
  const auto cells = report_cells(report);
  const bool any_ok = std::any_of(report.runs.begin(), report.runs.end(), [](const ReportRun& r) { return r.ok(); });
  std::string out = fmt::format("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
                                "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
                                "<title>{}</title>\n<style>{}</style>\n</head>\n<body>\n<main>\n<h1>{}</h1>\n",
                                escape(report.title), kCss, escape(report.title));
  std::vector<std::pair<std::string, std::string>> facts{
      {"date", report.date},
      {"machine", report.machine},
      {"software", fmt::format("strata {}, LibTorch {}", STRATA_VERSION, STRATA_TORCH_VERSION)},
      {"device", distinct(report, [](const ReportRun& r) {
         const auto d = summary_text(r, "device"), b = summary_text(r, "backend");
         return d.empty() || b.empty() || b == "none" ? d : d + " (" + b + ")";
       })},
      {"model", distinct(report, [](const ReportRun& r) { return summary_text(r, "model"); })},
      {"dataset", distinct(report, [](const ReportRun& r) { return summary_text(r, "dataset"); })},
      {"scaling", report.scaling == "weak"
                      ? "weak: the per-rank batch is fixed; speedup = throughput / baseline throughput"
                      : "strong: the same global work; speedup = baseline step time / step time"},
      {"baseline", report.baseline}};
  out += "<dl class=\"facts\">\n";
  for (const auto& [k, text] : facts) out += fmt::format("<dt>{}</dt><dd>{}</dd>\n", escape(k), escape(text));
  for (const auto& f : report.facts) {
    const auto colon = f.find(": ");
    out += colon == std::string::npos ? fmt::format("<dt></dt><dd>{}</dd>\n", escape(f))
                                      : fmt::format("<dt>{}</dt><dd>{}</dd>\n", escape(f.substr(0, colon)),
                                                    escape(f.substr(colon + 2)));
  }
  out += "</dl>\n<nav><a href=\"#charts\">charts</a><a href=\"#tables\">tables</a>" +
         std::string(report.noise.empty() && report.loose.empty() ? "" : "<a href=\"#noise\">noise</a>") +
         "<a href=\"#runs\">runs</a>" + std::string(report.notes.empty() ? "" : "<a href=\"#notes\">notes</a>") +
         "</nav>\n";

  out += "<section id=\"charts\">\n<h2>Charts</h2>\n";
  if (!any_ok) out += "<p>No run succeeded: there is nothing to chart.</p>\n";
  else out += detail::report_charts(report, cells);
  out += "</section>\n<section id=\"tables\">\n<h2>Tables</h2>\n<p>@N: world size N (ranks, or dp's replicas in one "
         "process); medians over repeats.</p>\n";
  for (const auto& t : report_tables(report)) {
    out += fmt::format("<h3>{}</h3>\n<div class=\"scroll\">{}</div>\n", escape(t.title), html_table(t));
    if (!t.note.empty()) out += "<p class=\"note\">" + escape(t.note) + "</p>\n";
  }
  out += "</section>\n" + noise_section(report) + "<section id=\"runs\">\n<h2>Runs</h2>\n<div class=\"scroll\">" +
         runs_table(report) +
         "</div>\n</section>\n";
  if (!report.notes.empty()) {
    out += "<section id=\"notes\">\n<h2>Notes</h2>\n<ul>\n";
    for (const auto& n : report.notes) out += "<li>" + escape(n) + "</li>\n";
    out += "</ul>\n</section>\n";
  }
  return out + fmt::format("<footer>Made by strata {} on {}.</footer>\n</main>\n</body>\n</html>\n", STRATA_VERSION,
                           escape(report.date));
}

}  // namespace strata
