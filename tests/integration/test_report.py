#!/usr/bin/env python3
"""report.html: `strata compare` writes one self-contained page (inline SVG and CSS, no scripts, no
network) with a chart per figure (time, speedup, efficiency, memory, bus, loss; breakdown and flops
when the summaries have them) and the tables of results.md; `strata plot RUN_DIR...` builds the same
page from separate run directories, refusing a directory without a readable summary.json (exit 2);
headless Chromium, where installed, renders it."""

import glob
import html.parser
import os
import re
import shutil
import struct
import xml.etree.ElementTree as ET

import strata_test as st
from test_compare import SMALL, write_sweep

BASE_CHARTS = ["time", "speedup", "efficiency", "memory", "bus", "loss"]


class ReportParser(html.parser.HTMLParser):
    """The charts of a report: kind -> {"attrs", "series" (data-series names), "lines" (points of
    each polyline), "bars" (data-label of each bar), "titles"}, and the tables' header cells."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.charts, self.headers, self.tags = {}, [], []
        self._chart, self._in_title, self._in_th = None, False, False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.append((tag, a))
        if tag == "svg" and "chart" in a.get("class", ""):
            self._chart = self.charts.setdefault(a.get("data-chart"), {"attrs": a, "series": [], "lines": [],
                                                                      "bars": [], "titles": []})
        elif self._chart is not None:
            if tag == "g" and a.get("class") == "series":
                self._chart["series"].append(a.get("data-series"))
            elif tag == "polyline" and a.get("class") == "series-line":
                self._chart["lines"].append(a.get("points", "").split())
            elif tag == "g" and a.get("class") == "bar":
                self._chart["bars"].append(a.get("data-label"))
            elif tag == "title":
                self._in_title = True
        if tag == "th":
            self._in_th = True

    def handle_endtag(self, tag):
        if tag == "svg":
            self._chart = None
        self._in_title = self._in_title and tag != "title"
        self._in_th = self._in_th and tag != "th"

    def handle_data(self, data):
        if self._in_title and self._chart is not None:
            self._chart["titles"].append(data)
        if self._in_th:
            self.headers.append(data)


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
    missing = [k for k in kinds if k not in parser.charts]
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


# ---- strata compare ---------------------------------------------------------------------------

def compare_writes_the_report():
    sweep = write_sweep("small.toml", SMALL.replace('["single", "dp", "ddp", "zero3"]', '["single", "ddp", "zero3"]'))
    out = os.path.join(st.temp_dir("compare"), "cmp")
    result = st.strata("compare", sweep, "--out", out, timeout=600)
    st.expect_exit(result, 0)
    st.expect_no_crash(result)
    st.expect_in("report.html", result.stdout, result, "stdout (the results line names report.html)")
    summaries = [st.load_summary(os.path.dirname(p)) for p in sorted(glob.glob(os.path.join(out, "*", "summary.json")))]
    st.check(len(summaries) == 5, "expected 5 runs, found %d summaries" % len(summaries), result)
    text, parser = read_report(os.path.join(out, "report.html"), result)
    expect_charts(parser, BASE_CHARTS + optional_charts(summaries), result)
    strategies = ["single", "ddp", "zero3"]
    cells = ["single@1", "ddp@1", "ddp@2", "zero3@1", "zero3@2"]
    for kind in ("time", "speedup", "efficiency"):
        got = parser.charts[kind]["series"]
        st.check(got[:3] == strategies, "%s chart: series %s, expected %s first" % (kind, got, strategies), result)
    st.check(any(s.startswith("ideal") for s in parser.charts["speedup"]["series"]), "the speedup chart has no ideal line",
             result)
    loss = parser.charts["loss"]["lines"]
    st.check(len(loss) == 5 and all(len(points) >= 3 for points in loss),
             "loss chart: %d lines with %s points, expected 5 lines of 3+ points" % (len(loss), [len(p) for p in loss]),
             result)
    # Memory: a bar per run in both panels (model state by part, process peak); bus: one per run.
    st.check(parser.charts["memory"]["bars"] == cells * 2, "memory bars %s" % parser.charts["memory"]["bars"], result)
    st.check(parser.charts["bus"]["bars"] == cells, "bus bars %s" % parser.charts["bus"]["bars"], result)
    for kind in ("parameters", "gradients", "optimizer state", "peak tensor bytes"):
        st.expect_in(">%s<" % kind, text, result, "the memory chart's legend")
    # The tables of results.md, as HTML.
    for header in ("time s @1", "speedup @2", "eff. @2", "state @2", "bus/step @2", "loss @1"):
        st.check(header in parser.headers, "report.html tables lack the column %r" % header, result)
    for fragment in ("strong", "LibTorch", "cores", "not run: single-w2"):
        st.expect_in(fragment, text, result, "report.html")


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
    st.check(parser.charts["time"]["series"] == ["ddp", "zero2", "single"],
             "series in order of the arguments: %s" % parser.charts["time"]["series"], result)
    st.check(len(parser.charts["loss"]["lines"]) == 3, "loss chart: %d lines" % len(parser.charts["loss"]["lines"]),
             result)
    # The baseline is the single run (the smallest world size, single first), strong scaling.
    st.expect_in("single (single at world size 1", text, result, "report.html (the baseline)")
    st.expect_in("strong", text, result, "report.html")
    st.expect_in("zero2 &amp; &lt;2&gt; &quot;x&quot;", text, result, "report.html (an escaped directory name)")
    st.expect_not_in('zero2 & <2> "x"', text, result, "report.html (an unescaped directory name)")
    for header in ("time s @1", "speedup @2", "state @2"):
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
    st.check(len(parser.charts["loss"]["lines"]) == 2, "the added baseline is plotted too", result)


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

def browser():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    raise st.Skip("no headless browser (chromium, chromium-browser or google-chrome) on PATH")


def chromium_renders_the_report():
    exe = browser()
    runs = plot_runs()
    work = st.temp_dir("render")
    page = os.path.join(work, "report.html")
    st.expect_exit(st.strata("plot", runs["single"], runs["ddp"], runs["zero2"], "--out", page), 0)
    common = [exe, "--headless", "--disable-gpu", "--no-sandbox", "--hide-scrollbars", "--no-first-run",
              "--user-data-dir=" + os.path.join(work, "profile")]
    result = st.run_command(common + ["--dump-dom", "file://" + page], timeout=180,
                            env={"HOME": work, "DBUS_SESSION_BUS_ADDRESS": "disabled:"})
    st.expect_exit(result, 0)
    for kind in BASE_CHARTS:
        st.check(re.search(r'<svg[^>]*data-chart="%s"' % kind, result.stdout),
                 "the rendered DOM lacks the %s chart" % kind, result)
    st.check(result.stdout.count("<polyline") >= 3, "the rendered DOM has no loss curves", result)
    shot = os.path.join(work, "report.png")
    result = st.run_command(common + ["--screenshot=" + shot, "--window-size=1200,3000", "file://" + page],
                            timeout=180, env={"HOME": work, "DBUS_SESSION_BUS_ADDRESS": "disabled:"})
    st.expect_exit(result, 0)
    st.check(os.path.isfile(shot), "no screenshot was written", result)
    with open(shot, "rb") as f:
        data = f.read()
    st.check(data[:8] == b"\x89PNG\r\n\x1a\n", "the screenshot is not a PNG", result)
    width, height = struct.unpack(">II", data[16:24])
    st.check((width, height) == (1200, 3000), "screenshot of %dx%d" % (width, height), result)
    # A blank page of this size compresses to a few kB; charts, text and tables make it much larger.
    st.check(len(data) > 40000, "the screenshot is only %d bytes: nearly blank?" % len(data), result)


if __name__ == "__main__":
    st.main([compare_writes_the_report, plot_builds_the_report_from_run_directories, plot_default_out_and_baseline,
             plot_refuses_bad_directories, chromium_renders_the_report])
