#!/usr/bin/env python3
"""strata compare on a busy machine (docs/user-guide.md, Compare strategies): with a CPU-heavy process beside it, a sweep of single, ddp,
zero1, zero3 and fsdp at world sizes 1 and 2 with 3 repeats runs its rounds interleaved in the order its seed
gives (the order results.json records is the order the runs ran in), every timing carries its spread, the
world-size-1 strategies (identical work) either agree within the noise threshold or are named with their
figures, and no efficiency above 100% is shown without a mark."""

import csv
import json
import math
import os
import re
import shutil
import subprocess
import sys

import strata_test as st
from test_compare import compare, write_sweep

NOISY = """
[compare]
base = "BASE"
repeats = 3
baseline = { strategy = "single", world_size = 1 }

[compare.axes]
strategy = ["single", "ddp", "zero1", "zero3", "fsdp"]
world_size = [1, 2]

[compare.set]
"train.steps" = 20
"train.global_batch_size" = 32
"log.every" = 10
"""

THRESHOLD = 0.10  # [compare] noise_threshold's default

# The timings of results.csv, each with its combination's spread.
TIMINGS = ["steady_step_time_s", "steady_samples_per_s", "train_time_s", "step_time_s", "samples_per_s", "comm_time_s"]


def planned_rounds(sweep, *args):
    """The warm-up run and the rounds `--dry-run` announces: (warm-up label, [[labels of round 1], ...])."""
    result = st.strata("compare", sweep, "--dry-run", *args, timeout=120)
    st.expect_exit(result, 0)
    warmup = re.search(r"^  warm-up \(\d+ steps of (\S+), discarded\)", result.stdout, re.M)
    rounds = []
    for line in result.stdout.splitlines():
        if re.match(r"^round \d+", line):
            rounds.append([])
        elif rounds and re.match(r"^  \S+: strata run ", line):
            rounds[-1].append(line.split(":")[0].strip())
    st.check(warmup and len(rounds) == 3, "the dry run lists no warm-up run or not 3 rounds", result)
    return warmup.group(1), rounds


def busy_process():
    """A process that keeps a core busy for as long as it lives."""
    if shutil.which("sha256sum"):
        return subprocess.Popen(["sha256sum", "/dev/zero"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return subprocess.Popen([sys.executable, "-c", "while True: pass"])


def ms(seconds):
    """As results.md shows a step time: three significant digits, in ms."""
    v = 1e3 * seconds
    return "%.*f ms" % (max(0, 2 - int(math.floor(math.log10(abs(v))))), v)


def relative_range(values):
    values = sorted(values)
    n = len(values)
    median = values[n // 2] if n % 2 else (values[n // 2 - 1] + values[n // 2]) / 2
    return (values[-1] - values[0]) / median


def comparison_on_a_busy_machine():
    sweep = write_sweep("noisy.toml", NOISY)
    warmup, planned = planned_rounds(sweep)
    _, reseeded = planned_rounds(sweep, "--set", "compare.seed=1")
    st.check(reseeded != planned, "seed 1 gave the same order as seed 0: %s" % planned)
    hog = busy_process()
    try:
        out, result = compare(sweep)
    finally:
        hog.kill()
        hog.wait()
    with open(os.path.join(out, "results.json")) as f:
        j = json.load(f)
    with open(os.path.join(out, "results.csv")) as f:
        rows = list(csv.DictReader(f))
    with open(os.path.join(out, "results.md")) as f:
        markdown = f.read()
    print(markdown)  # the figures this machine gave, in the test's log
    combinations = sorted({r["run_dir"].rsplit("-r", 1)[0] for r in rows})
    st.check(len(combinations) == 9 and len(rows) == 27 and all(r["status"] == "ok" for r in rows),
             "expected 27 successful runs of 9 combinations: %s" % [(r["run_dir"], r["status"]) for r in rows], result)

    # Interleaving: the rounds the seed announced, each holding every combination once; the runs ran in that
    # order (their summaries were written in it), round r of every combination before round r + 1.
    st.check(j["rounds"] == planned, "results.json rounds %s, the dry run announced %s" % (j["rounds"], planned), result)
    for r, labels in enumerate(j["rounds"], 1):
        st.check(sorted(l.rsplit("-r", 1)[0] for l in labels) == combinations and all(l.endswith("-r%d" % r) for l in labels),
                 "round %d holds %s" % (r, labels), result)
    by_order = [r["run_dir"] for r in sorted(rows, key=lambda r: int(r["order"]))]
    st.check(by_order == [l for labels in planned for l in labels], "the order column %s" % by_order, result)
    by_time = sorted(rows, key=lambda r: os.path.getmtime(os.path.join(out, r["run_dir"], "summary.json")))
    st.check([r["run_dir"] for r in by_time] == by_order, "the runs finished in the order %s, results.json says %s"
             % ([r["run_dir"] for r in by_time], by_order), result)
    # The warm-up run: the first run of round 1, discarded but recorded.
    st.check(j["warmup"]["combination"] == warmup == planned[0][0] and j["warmup"]["status"] == "ok"
             and j["warmup"]["discarded"], "results.json warmup %s" % j["warmup"], result)
    st.expect_in("warm-up: 10 steps of %s (discarded from the figures): ok" % warmup, result.stdout, result, "stdout")
    st.check(all(r["run_dir"] != "warmup" for r in rows), "the warm-up run is among the figures", result)

    # Spread everywhere: per combination, min <= median <= max over its runs' own values, in every file.
    groups = {}
    for r in rows:
        groups.setdefault(r["run_dir"].rsplit("-r", 1)[0], []).append(r)
    for name, group in groups.items():
        for t in TIMINGS:
            values = sorted(float(r[t]) for r in group)
            for r in group:
                low, mid, high = (float(r[t + s]) for s in ("_min", "_median", "_max"))
                st.check(low == values[0] and high == values[-1] and low <= mid <= high,
                         "%s: %s spread %s of the values %s" % (name, t, (low, mid, high), values), result)
        r = group[0]
        st.check(float(r["speedup_min"]) <= float(r["speedup_median"]) <= float(r["speedup_max"]),
                 "%s: speedup interval %s" % (name, [r["speedup" + s] for s in ("_min", "_median", "_max")]), result)
    for c in j["combinations"]:
        for t in TIMINGS:
            s = c[t]
            st.check(s["n"] == 3 and s["min"] <= s["median"] <= s["max"], "results.json %s %s: %s" % (c["name"], t, s))
    time_table = markdown[markdown.index("### Time"):]
    time_table = time_table[:time_table.index("\n\n", time_table.index("|"))]
    cells = re.findall(r"\|\s*([0-9.]+) (?:[≈!] )?\(([0-9.]+)–([0-9.]+)\)", time_table)
    st.check(len(cells) >= 9, "the Time table of results.md shows %d ranges: %s" % (len(cells), time_table), result)

    # Identical work at world size 1: within the threshold, or named with their figures.
    world1 = {name: [float(r["steady_step_time_s"]) for r in g] for name, g in groups.items() if name.endswith("-w1")}
    medians = {name: sorted(v)[1] for name, v in world1.items()}
    spread = relative_range(list(medians.values()))
    finding = [f for f in j["noise"] if f["what"].startswith("world-size-1")]
    print("world-size-1 medians (ms): %s; relative range %.0f%%" % (
        {k: round(1e3 * v, 3) for k, v in medians.items()}, 100 * spread))
    if spread > THRESHOLD:
        st.check(len(finding) == 1 and sorted(m["label"] for m in finding[0]["members"])
                 == sorted(n.split("-")[0] + "@1" for n in medians),
                 "the world-size-1 medians spread %.0f%%: expected them named, got %s" % (100 * spread, j["noise"]), result)
        line = next(l for l in markdown.splitlines() if "world-size-1 runs of the same work" in l)
        for name, median in medians.items():
            st.expect_in("%s@1 %s" % (name.split("-")[0], ms(median)), line, result, "results.md's warning (the run "
                         "and its figure)")
        st.expect_in("world-size-1 runs of the same work", result.stdout, result, "stdout")
        st.expect_stderr(result, "run more repeats")
    else:
        st.check(not finding, "medians within %.0f%% reported as noisy: %s" % (100 * spread, finding), result)
    for name, values in groups.items():
        noisy = relative_range([float(r["steady_step_time_s"]) for r in values]) > THRESHOLD
        named = [f for f in j["noise"] if f["what"] == "repeats of %s@%s" % (name.split("-w")[0], name.split("-w")[1])]
        st.check(noisy == bool(named) == (values[0]["noisy"] == "true"),
                 "%s: repeats noisy %s, reported %s" % (name, noisy, named), result)
        if named:
            st.expect_in("warning: repeats of %s@%s" % tuple(name.split("-w")), markdown, result, "results.md")

    # No efficiency above 100% without a mark: each run's, each combination's, in every file.
    for r in rows:
        if float(r["efficiency"]) > 1 or float(r["efficiency_median"]) > 1:
            st.check(r["efficiency_flag"] in ("suspect", "within noise of 100%"),
                     "%s: efficiency %s (median %s) with the flag %r" % (r["run_dir"], r["efficiency"],
                                                                           r["efficiency_median"], r["efficiency_flag"]),
                     result)
        if float(r["efficiency_min"]) > 1:
            st.check(r["efficiency_flag"] == "suspect", "%s: efficiency above 100%% in every pairing, flag %r"
                     % (r["run_dir"], r["efficiency_flag"]), result)
    for percent, mark in re.findall(r"\|\s*(\d+)% ([≈!]?)", time_table):
        st.check(int(percent) <= 100 or mark, "results.md shows an efficiency of %s%% unmarked:\n%s"
                 % (percent, time_table), result)
    # The verdict against the baseline: ranges that overlap are within noise.
    base = [float(r["steady_step_time_s"]) for r in groups["single-w1"]]
    for name, g in groups.items():
        own = [float(r["steady_step_time_s"]) for r in g]
        overlap = min(own) <= max(base) and min(base) <= max(own)
        verdict = g[0]["vs_baseline"]
        st.check(verdict == "baseline" if name == "single-w1" else (verdict == "within noise") == overlap,
                 "%s: ranges %s and the baseline's %s, verdict %r" % (name, own, base, verdict), result)


if __name__ == "__main__":
    st.main([comparison_on_a_busy_machine])
