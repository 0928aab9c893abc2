#!/usr/bin/env python3
"""report.html: `strata compare` writes one self-contained page (inline SVG and CSS, no scripts, no
network) with a chart per figure (step time, speedup, efficiency, throughput and peak memory against
world size, each with min..max error bars over repeats; memory by part, bus, loss curves one per
strategy with their repeats as a band; breakdown and flops when the summaries have them) and the
tables of results.md; `strata plot RUN_DIR...` builds the same page from separate run directories,
with the same colour per strategy, refusing a directory without a readable summary.json (exit 2).
Results within noise of the baseline and suspect efficiencies are marked in charts and tables. The
comparison's TensorBoard directory holds no stray run, and dp's HPARAMS world size is its replicas.
Headless Chromium, where installed, renders the page at a laptop's width without overflow or
overlapping text."""

import csv
import sys
import glob
import html.parser
import json
import os
import re
import shutil
import struct
import xml.etree.ElementTree as ET

import strata_test as st
from test_compare import SMALL, write_sweep

# Charts against world size (with error bars), then the others every report has.
WORLD_CHARTS = ["time", "speedup", "efficiency", "throughput", "peak-memory"]
BASE_CHARTS = WORLD_CHARTS + ["memory", "bus", "loss"]
# Panels per world-size chart: time has step time and train time, peak-memory tensors and process.
PANELS = {"time": 2, "speedup": 1, "efficiency": 1, "throughput": 1, "peak-memory": 2}


class ReportParser(html.parser.HTMLParser):
    """The charts of a report: kind -> {"attrs", "series" (data-series names), "colors" (series ->
    data-color), "lines" (points of each polyline), "bars" (data-label of each bar), "titles",
    "texts" (every <text>), "errorbars" (the tooltip of each error bar), "bands" (count), "points"
    ([tooltip, glyph class] of each point)}; the figures' ids; the tables' header cells and body cells."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.charts, self.headers, self.cells, self.figures, self.tags = {}, [], [], [], []
        self._chart, self._groups, self._in, self._text = None, [], None, ""

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.append((tag, a))
        if tag == "figure" and a.get("id"):
            self.figures.append(a["id"])
        if tag == "svg" and "chart" in a.get("class", ""):
            self._chart = self.charts.setdefault(a.get("data-chart"), {
                "attrs": a, "series": [], "colors": {}, "lines": [], "bars": [], "titles": [], "texts": [],
                "errorbars": [], "bands": 0, "points": []})
        elif self._chart is not None:
            c = self._chart
            if tag == "g":
                cls = a.get("class", "")
                if cls == "series":
                    c["series"].append(a.get("data-series"))
                    c["colors"].setdefault(a.get("data-series"), a.get("data-color"))
                elif cls == "bar":
                    c["bars"].append(a.get("data-label"))
                elif cls == "errorbar":
                    c["errorbars"].append("")
                elif cls == "point":
                    c["points"].append(["", "dot"])
                self._groups.append(cls)
            elif tag == "polyline" and a.get("class") == "series-line":
                c["lines"].append(a.get("points", "").split())
            elif tag == "polygon" and a.get("class") == "band":
                c["bands"] += 1
            elif a.get("class", "").startswith("glyph-") and self._groups and self._groups[-1] == "point":
                c["points"][-1][1] = a["class"][len("glyph-"):]
            if tag in ("title", "text"):
                self._in, self._text = tag, ""
        if tag in ("th", "td"):
            self._in, self._text = tag, ""

    def handle_endtag(self, tag):
        if tag == "svg":
            self._chart = None
        elif tag == "g" and self._groups:
            self._groups.pop()
        if tag != self._in:
            return
        text, self._in = self._text, None
        if tag == "th":
            self.headers.append(text)
        elif tag == "td":
            self.cells.append(text)
        elif self._chart is not None and tag == "text":
            self._chart["texts"].append(text)
        elif self._chart is not None and tag == "title":
            self._chart["titles"].append(text)
            group = self._groups[-1] if self._groups else ""
            if group == "errorbar" and not self._chart["errorbars"][-1]:
                self._chart["errorbars"][-1] = text
            elif group == "point" and not self._chart["points"][-1][0]:
                self._chart["points"][-1][0] = text

    def handle_data(self, data):
        if self._in:
            self._text += data


def read_report(path, result=None):
    """The page's text and its parsed charts, after the self-containment checks."""
    st.check(os.path.isfile(path), "%s was not written" % path, result)
    with open(path, encoding="utf-8") as f:
        text = f.read()
    st.check(text.startswith("<!DOCTYPE html>") and text.rstrip().endswith("</html>"), "%s is not a whole HTML page"
             % path, result)
    for pattern, what in ((r"<script", "a script"), (r"(src|href)\s*=\s*[\"']?\s*(https?:)?//", "an external resource"),
                          (r"<link\b", "a <link>"), (r"@import|url\(", "a CSS import"), (r"<iframe|<img", "an embed")):
        st.check(not re.search(pattern, text, re.I), "%s holds %s (must be self-contained)" % (path, what), result)
    parser = ReportParser()
    parser.feed(text)
    # Each chart is well-formed XML as well (inline SVG with every text escaped).
    for svg in re.findall(r"<svg\b.*?</svg>", text, re.S):
        try:
            ET.fromstring(svg)
        except ET.ParseError as e:
            st.fail("%s: an <svg> is not well-formed (%s): %s..." % (path, e, svg[:300]), result)
    for kind, chart in parser.charts.items():
        st.check(chart["attrs"].get("aria-label") and chart["titles"], "chart %s has no title/aria-label" % kind,
                 result)
    return text, parser


def expect_charts(parser, kinds, result=None):
    missing = [k for k in kinds if k not in parser.charts or "chart-" + k not in parser.figures]
    st.check(not missing, "report.html lacks the charts %s (has %s)" % (missing, sorted(parser.charts)), result)


def optional_charts(summaries):
    """The charts the summaries call for beyond the base ones."""
    kinds = []
    if any(isinstance(s.get("time_breakdown_s"), dict) and s["time_breakdown_s"].get("compute") is not None
           for s in summaries):
        kinds.append("breakdown")
    if any(isinstance(s.get("flops"), dict) and s["flops"].get("achieved_tflops_per_device") is not None
           for s in summaries):
        kinds.append("flops")
    return kinds


def colors_of(parser, kinds=WORLD_CHARTS):
    """strategy -> the one colour its lines have in the charts `kinds`; fails on two colours."""
    colors = {}
    for kind in kinds:
        for series, color in parser.charts[kind]["colors"].items():
            if series.startswith("ideal") or series.startswith("baseline "):
                continue
            st.check(colors.setdefault(series, color) == color,
                     "%s has colour %s in the %s chart and %s in another" % (series, color, kind, colors[series]))
    return colors


def tip_range(tip):
    """(min, max) as printed in a tooltip "ddp@2: 1.2 ms (min 1.1 ms, max 1.3 ms; 2 runs)"."""
    m = re.search(r"\(min ([-\d.e+]+)[^,]*, max ([-\d.e+]+)", tip)
    st.check(m, "a tooltip without its range: %r" % tip)
    return float(m.group(1)), float(m.group(2))


def expect_error_bars(parser, cells, result=None):
    """Every chart against world size has an error bar per cell in each panel, each naming its cell."""
    for kind in WORLD_CHARTS:
        bars = parser.charts[kind]["errorbars"]
        st.check(len(bars) == PANELS[kind] * len(cells),
                 "%s chart: %d error bars, expected %d (one per cell and panel)" % (kind, len(bars),
                                                                                    PANELS[kind] * len(cells)), result)
        named = sorted(b.split(":")[0] for b in bars)
        st.check(named == sorted(cells * PANELS[kind]), "%s chart: error bars of %s" % (kind, named), result)


# ---- strata compare ---------------------------------------------------------------------------

_compare = {}
STRATEGIES = ["single", "dp", "ddp", "zero3"]
CELLS = ["single@1", "dp@1", "dp@2", "ddp@1", "ddp@2", "zero3@1", "zero3@2"]


def compare_run():
    """A comparison (made once) of single, dp, ddp and zero3 at world sizes 1 and 2, two repeats."""
    if not _compare:
        text = re.sub(r"(?m)^repeats = .*\n", "", SMALL).replace("[compare]\n", "[compare]\nrepeats = 2\n", 1)
        sweep = write_sweep("small.toml", text)
        out = os.path.join(st.temp_dir("compare"), "cmp")
        result = st.strata("compare", sweep, "--out", out, timeout=600)
        st.expect_exit(result, 0)
        st.expect_no_crash(result)
        with open(os.path.join(out, "results.csv")) as f:
            rows = list(csv.DictReader(f))
        _compare.update(out=out, result=result, rows=rows)
    return _compare


def compare_writes_the_report():
    c = compare_run()
    out, result, rows = c["out"], c["result"], c["rows"]
    st.expect_in("report.html", result.stdout, result, "stdout (the results line names report.html)")
    summaries = [st.load_summary(os.path.dirname(p)) for p in sorted(glob.glob(os.path.join(out, "*", "summary.json")))]
    st.check(len(summaries) == 14, "expected 14 runs, found %d summaries" % len(summaries), result)
    text, parser = read_report(os.path.join(out, "report.html"), result)
    expect_charts(parser, BASE_CHARTS + optional_charts(summaries), result)
    for kind in WORLD_CHARTS:
        got = [s for s in parser.charts[kind]["series"] if not s.startswith("ideal")]
        st.check(got == STRATEGIES * PANELS[kind], "%s chart: series %s, expected %s" % (kind, got, STRATEGIES), result)
    st.check(any(s.startswith("ideal") for s in parser.charts["speedup"]["series"]), "the speedup chart has no ideal line",
             result)
    for title in ("Steady-state step time vs world size", "Throughput vs world size",
                  "Peak memory per rank vs world size", "Peak live tensor memory per rank vs world size"):
        st.expect_in(title, text, result, "report.html (chart titles)")
    # Error bars: one per cell and panel, and their extents are the repeats' min and max.
    expect_error_bars(parser, CELLS, result)
    steady = {}
    for r in rows:
        steady.setdefault("%s@%s" % (r["strategy"], r["world_size"]), []).append(
            st.load_summary(os.path.join(out, r["run_dir"]))["steady_step_time_s"] * 1e3)
    for tip in parser.charts["time"]["errorbars"][:len(CELLS)]:
        cell = tip.split(":")[0]
        low, high = tip_range(tip)
        st.expect_close(low, min(steady[cell]), "%s: the error bar's min (ms)" % cell, rel=0.01)
        st.expect_close(high, max(steady[cell]), "%s: the error bar's max (ms)" % cell, rel=0.01)
    st.check(any(tip_range(t)[1] > tip_range(t)[0] for t in parser.charts["time"]["errorbars"]),
             "no error bar of the time chart has an extent: are the repeats drawn?", result)
    # Loss: one curve per strategy (its runs as a band), a panel each; not one line per run.
    loss = parser.charts["loss"]
    own = [s for s in loss["series"] if not s.startswith("baseline ")]
    st.check(own == STRATEGIES, "loss chart: curves %s, expected one per strategy %s" % (own, STRATEGIES), result)
    st.check(loss["bands"] == len(STRATEGIES), "loss chart: %d bands, expected %d" % (loss["bands"], len(STRATEGIES)),
             result)
    st.check(all(len(points) >= 3 for points in loss["lines"]), "loss chart: a curve of fewer than 3 points", result)
    # Memory: a bar per cell in both panels (model state by part on its own scale, tensor peaks);
    # bus: one per cell.
    st.check(parser.charts["memory"]["bars"] == CELLS * 2, "memory bars %s" % parser.charts["memory"]["bars"], result)
    st.check(parser.charts["bus"]["bars"] == CELLS, "bus bars %s" % parser.charts["bus"]["bars"], result)
    for kind in ("parameters", "gradients", "optimizer state", "model state", "min..max over repeats"):
        st.expect_in(">%s<" % kind, text, result, "the charts' legends")
    # One colour per strategy, distinct between strategies.
    colors = colors_of(parser)
    st.check(len(set(colors.values())) == len(STRATEGIES), "strategies share colours: %s" % colors, result)
    # The tables of results.md, as HTML, ranges under the values.
    for header in ("step ms @1", "speedup @2", "eff. @2", "time s @1", "state @2", "bus/step @2", "loss @1"):
        st.check(header in parser.headers, "report.html tables lack the column %r" % header, result)
    st.expect_in('<span class="range">', text, result, "report.html (the ranges over repeats in the tables)")
    for fragment in ("strong", "LibTorch", "cores", "not run: single-w2"):
        st.expect_in(fragment, text, result, "report.html")


def compare_tensorboard_runs_and_hparams():
    """TensorBoard on the comparison directory: a run per run directory, none named "." (no events
    at the root); the HPARAMS experiment still there; dp's world size its replicas, as in results.csv."""
    c = compare_run()
    out, rows = c["out"], c["rows"]
    stray = [n for n in os.listdir(out) if "tfevents" in n]
    st.check(not stray, "event files at the comparison's root (TensorBoard shows them as a run \".\"): %s" % stray)
    if not st.tensorboard_available():
        raise st.Skip("tensorboard not installed (in %s)" % sys.executable)
    from tensorboard.backend.event_processing import plugin_event_multiplexer
    multiplexer = plugin_event_multiplexer.EventMultiplexer()
    multiplexer.AddRunsFromDirectory(out)
    multiplexer.Reload()
    runs = sorted(multiplexer.Runs())
    st.check(runs == sorted(r["run_dir"] for r in rows), "TensorBoard's runs %s, expected the run directories" % runs)
    events = st.read_events(out)
    st.check([n for n, _ in events["hparams_written"][:2]] == ["strategy", "world_size"],
             "the comparison's HPARAMS experiment is missing: %s" % events["hparams_written"])
    for r in rows:
        hparams = st.read_events(os.path.join(out, r["run_dir"]))["hparams"]
        st.check(hparams.get("world_size") == int(r["world_size"]),
                 "%s: HPARAMS world_size %s, results.csv %s" % (r["run_dir"], hparams.get("world_size"), r["world_size"]))
        if r["strategy"] == "dp":
            st.check(hparams.get("ranks") == 1, "%s: HPARAMS ranks %s, expected 1 (dp's replicas share one process)"
                     % (r["run_dir"], hparams.get("ranks")))


def plot_has_the_compare_colours():
    """`strata plot` of the comparison's runs, all or a few in another order: every strategy keeps
    its colour (a palette keyed by name, not by position)."""
    c = compare_run()
    out, rows = c["out"], c["rows"]
    _, compared = read_report(os.path.join(out, "report.html"))
    want = colors_of(compared)
    work = st.temp_dir("colours")
    for name, pick in (("all", rows), ("few", [r for r in reversed(rows) if r["strategy"] in ("zero3", "ddp")])):
        page = os.path.join(work, name + ".html")
        result = st.strata("plot", *[os.path.join(out, r["run_dir"]) for r in pick], "--out", page)
        st.expect_exit(result, 0)
        _, parser = read_report(page, result)
        got = colors_of(parser)
        st.check(got and all(want[s] == color for s, color in got.items()),
                 "plot (%s runs): colours %s, compare: %s" % (name, got, want), result)


# ---- strata plot ------------------------------------------------------------------------------

_runs = {}


def plot_runs():
    """Three runs made with `strata run` (made once): single, ddp and zero2 on two ranks, one of them
    in a directory whose name needs escaping."""
    if not _runs:
        root = st.temp_dir("runs")
        for name, sets in (("single", ["strategy.name=single"]),
                           ("ddp", ["strategy.name=ddp", "distributed.nproc=2"]),
                           ('zero2 & <2> "x"', ["strategy.name=zero2", "distributed.nproc=2"])):
            out = os.path.join(root, name)
            st.strata_run(st.GOOD_SYNTHETIC, out, "train.steps=6", "train.global_batch_size=24", "log.every=2", *sets)
            _runs[name.split()[0]] = out
    return _runs


def plot_builds_the_report_from_run_directories():
    runs = plot_runs()
    out = os.path.join(st.temp_dir("plot"), "sub", "my report.html")
    result = st.strata("plot", runs["ddp"], runs["zero2"], runs["single"], "--out", out)
    st.expect_exit(result, 0)
    st.expect_no_crash(result)
    st.expect_in("report: " + out, result.stdout, result, "stdout")
    summaries = [st.load_summary(d) for d in runs.values()]
    text, parser = read_report(out, result)
    expect_charts(parser, BASE_CHARTS + optional_charts(summaries), result)
    st.check(parser.charts["time"]["series"][:3] == ["ddp", "zero2", "single"],
             "series in order of the arguments: %s" % parser.charts["time"]["series"], result)
    expect_error_bars(parser, ["ddp@2", "zero2@2", "single@1"], result)
    own = [s for s in parser.charts["loss"]["series"] if not s.startswith("baseline ")]
    st.check(own == ["ddp", "zero2", "single"], "loss chart: curves %s" % own, result)
    # The baseline is the single run (the smallest world size, single first), strong scaling.
    st.expect_in("single (single at world size 1", text, result, "report.html (the baseline)")
    st.expect_in("strong", text, result, "report.html")
    st.expect_in("zero2 &amp; &lt;2&gt; &quot;x&quot;", text, result, "report.html (an escaped directory name)")
    st.expect_not_in('zero2 & <2> "x"', text, result, "report.html (an unescaped directory name)")
    for header in ("step ms @1", "speedup @2", "state @2"):
        st.check(header in parser.headers, "report.html tables lack the column %r" % header, result)


def plot_default_out_and_baseline():
    runs = plot_runs()
    cwd = st.temp_dir("cwd")
    result = st.strata("plot", runs["single"], runs["ddp"], "--baseline", runs["ddp"], cwd=cwd)
    st.expect_exit(result, 0)
    st.expect_in("report: report.html", result.stdout, result, "stdout")
    text, parser = read_report(os.path.join(cwd, "report.html"), result)
    st.expect_in("ddp (ddp at world size 2", text, result, "report.html (--baseline names the baseline)")
    st.expect_in("ideal (N / 2)", text, result, "report.html (the ideal line from the baseline's world size)")
    # A directory as --out gets report.html inside; a baseline outside the runs is added to them.
    result = st.strata("plot", runs["ddp"], "--baseline", runs["single"], "--out", cwd)
    st.expect_exit(result, 0)
    text, parser = read_report(os.path.join(cwd, "report.html"), result)
    st.expect_in("is not among the runs given", text, result, "report.html notes")
    own = [s for s in parser.charts["loss"]["series"] if not s.startswith("baseline ")]
    st.check(own == ["ddp", "single"], "the added baseline is plotted too: %s" % own, result)


def with_step_times(src, dst, strategy, milliseconds):
    """A copy of run `src` at `dst` whose summary says `strategy` and this steady step time."""
    shutil.copytree(src, dst)
    path = os.path.join(dst, "summary.json")
    with open(path) as f:
        summary = json.load(f)
    summary["strategy"] = strategy
    summary["steady_step_time_s"] = milliseconds / 1e3
    summary["steady_samples_per_s"] = summary["global_batch_size"] / (milliseconds / 1e3)
    with open(path, "w") as f:
        json.dump(summary, f)
    return dst


def plot_marks_noise_and_suspects():
    """Repeats with known step times (copies of real runs): the baseline 10-12 ms; ddp@2 9-11.5 ms
    overlaps it (within noise: an open circle and ≈, not ranked); zero2@2 4-4.4 ms on 2 devices is
    an efficiency of 114-150% (suspect: a triangle and !); the intervals pair every run."""
    runs = plot_runs()
    work = st.temp_dir("noise")
    dirs = []
    for strategy, src, times in (("single", runs["single"], (10, 11, 12)), ("ddp", runs["ddp"], (9, 10.5, 11.5)),
                                 ("zero2", runs["zero2"], (4, 4.2, 4.4))):
        for i, ms in enumerate(times):
            dirs.append(with_step_times(src, os.path.join(work, "%s-r%d" % (strategy, i + 1)), strategy, ms))
    page = os.path.join(work, "report.html")
    result = st.strata("plot", *dirs, "--out", page)
    st.expect_exit(result, 0)
    text, parser = read_report(page, result)
    points = {kind: {tip.split(":")[0]: (tip, glyph) for tip, glyph in parser.charts[kind]["points"]}
              for kind in ("speedup", "efficiency")}
    st.check(points["speedup"]["ddp@2"][1] == "hollow" and "within noise of the baseline" in points["speedup"]["ddp@2"][0],
             "speedup chart: ddp@2 should be an open circle, within noise: %s" % (points["speedup"]["ddp@2"],), result)
    st.check(points["speedup"]["zero2@2"][1] == "dot", "zero2@2 is faster than the baseline in every run, yet marked %s"
             % (points["speedup"]["zero2@2"],), result)
    st.check(points["efficiency"]["zero2@2"][1] == "suspect" and "suspect" in points["efficiency"]["zero2@2"][0],
             "efficiency chart: zero2@2 should be a suspect triangle: %s" % (points["efficiency"]["zero2@2"],), result)
    st.check(points["efficiency"]["single@1"][1] == "dot", "the baseline itself is marked: %s"
             % (points["efficiency"]["single@1"],), result)
    for kind, note in (("speedup", "within noise of the"), ("efficiency", "suspect: above 100%")):
        st.check(any(t.startswith(note) for t in parser.charts[kind]["texts"]),
                 "the %s chart's legend does not explain its marks (%r)" % (kind, note), result)
    # The speedup's interval pairs every run with every baseline run: [10 / 4.4, 12 / 4].
    tip = points["speedup"]["zero2@2"][0]
    low, high = tip_range(tip)
    st.expect_close(low, 10 / 4.4, "zero2@2 speedup's low end", rel=0.01)
    st.expect_close(high, 12 / 4, "zero2@2 speedup's high end", rel=0.01)
    # The tables say so too, and say what the marks mean.
    st.check(any(c.startswith("0.95 ≈") or c.startswith("1.05 ≈") for c in parser.cells),
             "the Time table does not mark ddp@2's speedup within noise (≈): %s" % parser.cells[:40], result)
    st.check(any(re.match(r"\d+% !", c) for c in parser.cells), "the Time table does not mark zero2@2's efficiency (!)",
             result)
    st.expect_in("≈: within noise", text, result, "report.html (the Time table's note)")


def plot_refuses_bad_directories():
    runs = plot_runs()
    missing = os.path.join(st.temp_dir("missing"), "nowhere")
    result = st.strata("plot", runs["single"], missing)
    st.expect_clean_failure(result, 2, missing, "does not exist")
    st.expect_not_in("report:", result.stdout, result, "stdout (no report was written)")
    empty = st.temp_dir("empty")
    result = st.strata("plot", empty, runs["single"])
    st.expect_clean_failure(result, 2, empty, "summary.json")
    broken = st.temp_dir("broken")
    with open(os.path.join(broken, "summary.json"), "w") as f:
        f.write("{\"strategy\": ")
    result = st.strata("plot", runs["single"], broken)
    st.expect_clean_failure(result, 2, os.path.join(broken, "summary.json"))
    result = st.strata("plot")
    st.expect_clean_failure(result, 2, "needs run directories")
    cwd = st.temp_dir("cwd")
    st.strata("plot", missing, cwd=cwd)
    st.check(not os.path.exists(os.path.join(cwd, "report.html")), "a refused plot wrote report.html")


# ---- rendering --------------------------------------------------------------------------------

# Added to a copy of the page (the page itself holds no script): measures the layout Chromium made
# and writes it into the DOM, which --dump-dom prints.
MEASURE = """<script>
(function () {
  const out = {viewport: window.innerWidth, page: document.documentElement.scrollWidth, outside: [],
               scrolling: [], overlaps: [], charts: {}};
  const main = document.querySelector("main").getBoundingClientRect();
  for (const el of document.querySelectorAll("main > *, figure, .scroll, p.note")) {
    const r = el.getBoundingClientRect();
    if (r.right > main.right + 1 || r.left < main.left - 1) out.outside.push(el.tagName + "#" + el.id);
  }
  for (const el of document.querySelectorAll(".scroll"))
    if (el.scrollWidth > el.clientWidth + 1) out.scrolling.push(el.previousElementSibling.textContent);
  for (const svg of document.querySelectorAll("svg.chart")) {
    const box = svg.getBoundingClientRect();
    out.charts[svg.dataset.chart] = [box.width, svg.parentElement.getBoundingClientRect().width];
    const texts = Array.from(svg.querySelectorAll("text")).map(t => [t.textContent, t.getBoundingClientRect()]);
    for (const [s, r] of texts)
      if (r.width > 0 && (r.left < box.left - 1 || r.right > box.right + 1 || r.top < box.top - 1 ||
                          r.bottom > box.bottom + 1))
        out.overlaps.push(svg.dataset.chart + ": '" + s + "' sticks out of the chart");
    for (let i = 0; i < texts.length; ++i)
      for (let j = i + 1; j < texts.length; ++j) {
        const a = texts[i][1], b = texts[j][1];
        const w = Math.min(a.right, b.right) - Math.max(a.left, b.left);
        const h = Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top);
        if (w > 2 && h > 2) out.overlaps.push(svg.dataset.chart + ": '" + texts[i][0] + "' on '" + texts[j][0] + "'");
      }
  }
  const pre = document.createElement("pre");
  pre.id = "layout";
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
})();
</script>"""


def browser():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    raise st.Skip("no headless browser (chromium, chromium-browser or google-chrome) on PATH")


def chromium_renders_the_report():
    """The comparison's report at a laptop's width (1280 px): every chart is drawn, the page does not
    scroll sideways, wide tables scroll in their own box, and no text of a chart sits on another."""
    exe = browser()
    c = compare_run()
    work = st.temp_dir("render")
    page = os.path.join(work, "report.html")
    shutil.copy(os.path.join(c["out"], "report.html"), page)
    with open(page, encoding="utf-8") as f:
        text = f.read()
    measured = os.path.join(work, "measured.html")
    with open(measured, "w", encoding="utf-8") as f:
        f.write(text.replace("</body>", MEASURE + "</body>"))
    common = [exe, "--headless", "--disable-gpu", "--no-sandbox", "--hide-scrollbars", "--no-first-run",
              "--user-data-dir=" + os.path.join(work, "profile"), "--window-size=1280,900"]
    env = {"HOME": work, "DBUS_SESSION_BUS_ADDRESS": "disabled:"}
    result = st.run_command(common + ["--dump-dom", "file://" + measured], timeout=180, env=env)
    st.expect_exit(result, 0)
    for kind in BASE_CHARTS:
        st.check(re.search(r'<svg[^>]*data-chart="%s"' % kind, result.stdout),
                 "the rendered DOM lacks the %s chart" % kind, result)
    m = re.search(r'<pre id="layout">(.*?)</pre>', result.stdout, re.S)
    st.check(m, "the layout was not measured (did the script run?)", result)
    layout = json.loads(html.unescape(m.group(1)))
    st.check(layout["viewport"] == 1280, "the window is %s px wide, not 1280" % layout["viewport"], result)
    st.check(layout["page"] <= layout["viewport"], "the page is %d px wide at %d: it scrolls sideways"
             % (layout["page"], layout["viewport"]), result)
    st.check(not layout["outside"], "elements stick out of the page's column: %s" % layout["outside"], result)
    for kind, (chart, box) in layout["charts"].items():
        st.check(chart <= box, "chart %s is %d px wide in a box of %d" % (kind, chart, box), result)
    st.check(not layout["overlaps"], "texts overlap in the charts: %s" % layout["overlaps"][:20], result)
    # A narrow window: the charts shrink with the page, the tables scroll in their boxes.
    result = st.run_command(common[:-1] + ["--window-size=700,900", "--dump-dom", "file://" + measured], timeout=180,
                            env=env)
    st.expect_exit(result, 0)
    layout = json.loads(html.unescape(re.search(r'<pre id="layout">(.*?)</pre>', result.stdout, re.S).group(1)))
    st.check(layout["page"] <= layout["viewport"] and not layout["outside"],
             "at 700 px the page overflows: %s" % layout, result)
    st.check(layout["scrolling"], "at 700 px no table scrolls in its box: %s" % layout, result)
    # The screenshot of the page itself, for a look (kept with STRATA_TEST_KEEP=1).
    shot = os.path.join(work, "report.png")
    result = st.run_command(common[:-1] + ["--screenshot=" + shot, "--window-size=1280,3000", "file://" + page],
                            timeout=180, env=env)
    st.expect_exit(result, 0)
    st.check(os.path.isfile(shot), "no screenshot was written", result)
    with open(shot, "rb") as f:
        data = f.read()
    st.check(data[:8] == b"\x89PNG\r\n\x1a\n", "the screenshot is not a PNG", result)
    width, height = struct.unpack(">II", data[16:24])
    st.check((width, height) == (1280, 3000), "screenshot of %dx%d" % (width, height), result)
    # A blank page of this size compresses to a few kB; charts, text and tables make it much larger.
    st.check(len(data) > 40000, "the screenshot is only %d bytes: nearly blank?" % len(data), result)


if __name__ == "__main__":
    st.main([compare_writes_the_report, compare_tensorboard_runs_and_hparams, plot_has_the_compare_colours,
             plot_builds_the_report_from_run_directories, plot_default_out_and_baseline, plot_marks_noise_and_suspects,
             plot_refuses_bad_directories, chromium_renders_the_report])
