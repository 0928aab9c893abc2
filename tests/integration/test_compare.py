#!/usr/bin/env python3
"""strata compare: a sweep is validated whole before any run (errors at the sweep's file:line),
every combination runs for real below the comparison directory, a failing run is recorded with its
error while the others complete, and results.{csv,json,md} plus each run's hparams come out."""

import csv
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import strata_test as st

# docs/user-guide.md: the columns every results.csv has.
RESULT_COLUMNS = ["strategy", "world_size", "threads", "status", "train_time_s", "step_time_s", "samples_per_s", "speedup",
                  "efficiency", "model_state_bytes", "peak_bytes", "peak_tensor_bytes", "bus_bytes_per_step", "final_loss",
                  "eval_accuracy"]


def write_sweep(name, text):
    path = os.path.join(st.temp_dir("sweep"), name)
    with open(path, "w") as f:
        f.write(text.replace("BASE", st.GOOD_SYNTHETIC))
    return path


def compare(sweep, *args, env=None, expect=0):
    out = os.path.join(st.temp_dir("compare"), "cmp")
    result = st.strata("compare", sweep, "--out", out, *args, env=env, timeout=600)
    st.expect_exit(result, expect)
    st.expect_no_crash(result)
    return out, result


def read_rows(out, result):
    with open(os.path.join(out, "results.csv")) as f:
        rows = list(csv.DictReader(f))
    st.check(rows, "results.csv has no rows", result)
    missing = [c for c in RESULT_COLUMNS if c not in rows[0]]
    st.check(not missing, "results.csv lacks columns %s" % missing, result)
    return rows


SMALL = """
[compare]
base = "BASE"
scaling = "strong"
repeats = 1
baseline = { strategy = "single", world_size = 1 }

[compare.axes]
strategy = ["single", "dp", "ddp", "zero3"]
world_size = [1, 2]

[compare.set]
"train.steps" = 12
"train.global_batch_size" = 24
"log.every" = 4
"""


def small_sweep_end_to_end():
    out, result = compare(write_sweep("small.toml", SMALL))
    rows = read_rows(out, result)
    got = [(r["strategy"], r["world_size"]) for r in rows]
    want = [("single", "1"), ("dp", "1"), ("dp", "2"), ("ddp", "1"), ("ddp", "2"), ("zero3", "1"), ("zero3", "2")]
    st.check(got == want, "runs %s, expected %s (single runs at world size 1 only)" % (got, want), result)
    st.expect_in("single-w2", result.stdout, result, "stdout (the skipped combination is named)")
    for i in range(1, len(want) + 1):
        st.expect_in("[%d/%d]" % (i, len(want)), result.stdout, result, "stdout (progress)")
    reference = rows[0]
    # [compare] cpu_threads = "equal" (the default): every rank computes with the same threads at
    # world sizes 1 and 2 (the host's over 2; dp's one process too), and the files say so.
    threads = {r["threads"] for r in rows}
    expected = str(max(1, (os.cpu_count() or 1) // 2))
    st.check(threads == {expected}, "threads per rank %s, expected %s everywhere" % (threads, expected), result)
    with open(os.path.join(out, "results.md")) as f:
        md = f.read()
    st.expect_in("CPU threads: every rank computes with %s thread" % expected, md, result, "results.md")
    st.expect_in("intra-op threads per rank (summary.json `threads`): @1 %s, @2 %s" % (expected, expected), md, result,
                 "results.md")
    with open(os.path.join(out, "report.html")) as f:
        html = f.read()
    st.expect_in("<dt>CPU threads</dt><dd>every rank computes with %s thread" % expected, html, result, "report.html")
    st.expect_in("<dt>intra-op threads per rank (summary.json `threads`)</dt><dd>@1 %s, @2 %s</dd>"
                 % (expected, expected), html, result, "report.html")
    for r in rows:
        what = "%s world %s" % (r["strategy"], r["world_size"])
        st.check(r["status"] == "ok", what + ": status " + r["status"], result)
        st.check(r["segments"] == "1", what + ": segments %r, expected 1 (not resumed)" % r["segments"], result)
        # Same global batch and steps: every strategy reproduces the baseline's training.
        st.expect_close(float(r["final_loss"]), float(reference["final_loss"]), what + " final_loss", abs_tol=1e-4)
        # Speedup from the steady-state step time (docs/user-guide.md), never from train_time_s.
        speedup, efficiency = float(r["speedup"]), float(r["efficiency"])
        st.expect_close(speedup, float(reference["steady_step_time_s"]) / float(r["steady_step_time_s"]),
                        what + " speedup", rel=1e-9)
        summary_steady = st.load_summary(os.path.join(out, r["run_dir"]))["steady_step_time_s"]
        st.expect_close(float(r["steady_step_time_s"]), summary_steady, what + " steady_step_time_s", rel=1e-12)
        st.check(r["timing"] == "steady", what + ": timing %r" % r["timing"], result)
        # One repeat: every spread is that run's value.
        for figure in ("steady_step_time_s", "train_time_s", "peak_bytes"):
            st.check(r[figure + "_min"] == r[figure + "_median"] == r[figure + "_max"] == r[figure],
                     what + ": %s spread of one run %s" % (figure, [r[figure + k] for k in ("_min", "_median", "_max")]),
                     result)
        st.expect_close(efficiency, speedup / int(r["world_size"]), what + " efficiency", rel=1e-9)
        st.check(float(r["model_state_bytes"]) > 0 and float(r["peak_bytes"]) > 0 and float(r["peak_tensor_bytes"]) > 0,
                 what + ": memory missing", result)
        st.check((float(r["bus_bytes_per_step"]) > 0) == (r["world_size"] == "2"), what + ": bus bytes "
                 + r["bus_bytes_per_step"], result)
        run_dir = os.path.join(out, r["run_dir"])
        summary = st.load_summary(run_dir)
        st.check(summary["strategy"] == r["strategy"] and summary["devices"] == int(r["world_size"]),
                 what + ": summary says %s on %s devices" % (summary["strategy"], summary["devices"]))
        hparams = st.read_events(run_dir)["hparams"]
        st.check(hparams.get("strategy") == r["strategy"] and hparams.get("devices") == int(r["world_size"]),
                 what + ": TensorBoard hparams %s" % hparams)
    st.expect_close(float(reference["speedup"]), 1.0, "baseline speedup", rel=1e-12)
    hparams_tab_shows_the_axes(out, rows, result)
    with open(os.path.join(out, "results.json")) as f:
        results = json.load(f)
    st.check(len(results["runs"]) == len(want) and results["scaling"] == "strong", "results.json: %s" % results)
    st.check(all(r["segments"] == 1 for r in results["runs"]), "results.json segments: %s"
             % [r["segments"] for r in results["runs"]])
    with open(os.path.join(out, "results.md")) as f:
        markdown = f.read()
    st.check(sorted(results["rounds"][0]) == sorted(r["run_dir"] for r in rows) and len(results["rounds"]) == 1,
             "results.json rounds: %s" % results["rounds"], result)
    st.check(results["warmup"]["status"] == "ok" and results["warmup"]["combination"] == results["rounds"][0][0]
             and results["warmup"]["discarded"], "results.json warmup: %s" % results["warmup"], result)
    st.check(os.listdir(os.path.join(out, "warmup")) == ["output.log"], "the warm-up run's directory keeps %s"
             % os.listdir(os.path.join(out, "warmup")), result)
    st.expect_in("warm-up: 10 steps of %s (discarded from the figures): ok" % results["rounds"][0][0], result.stdout,
                 result, "stdout (the warm-up line)")
    for fragment in ("| strategy |", "time s @1", "speedup @2", "state @2", "| zero3 ", "not run: single-w2",
                     "### Ranking by steady step time", "### Noise", "warm-up run: 10 steps of"):
        st.expect_in(fragment, markdown, result, "results.md")
        st.expect_in(fragment, result.stdout, result, "stdout (the table is printed)")
    # report.html (its charts are checked in test_report.py) is written and named.
    st.check(os.path.isfile(os.path.join(out, "report.html")), "no report.html in %s" % out, result)
    st.expect_in("report.html", result.stdout, result, "stdout (the results line)")


# results.csv's figures that are the runs' summary/* scalars and the HPARAMS tab's metrics.
FIGURES = ["train_time_s", "step_time_s", "samples_per_s", "model_state_bytes", "peak_bytes", "peak_tensor_bytes",
           "bus_bytes_per_step", "final_loss", "eval_accuracy", "params_bytes", "grads_bytes", "optimizer_bytes",
           "payload_bytes_per_step", "calls_per_step", "comm_time_s", "eval_loss", "param_norm"]


def hparams_tab_shows_the_axes(out, rows, result):
    """TensorBoard on the comparison directory: the experiment compare wrote lists strategy and world_size
    first, as differing; its metrics are the figures of results.csv, each run's equal to its row."""
    if not st.tensorboard_available():
        raise st.Skip("tensorboard not installed (in %s)" % sys.executable)
    events = st.read_events(out)
    written = events["hparams_written"]
    st.check([n for n, _ in written[:2]] == ["strategy", "world_size"] and written[0][1] and written[1][1],
             "the comparison's experiment should start with strategy and world_size, differing: %s" % written, result)
    experiment = events["hparams_experiment"]
    differs = sorted(n for n, d in experiment["hparams"] if d)
    st.check(differs == ["devices", "strategy", "world_size"],
             "TensorBoard shows %s as differing, expected the axes (strategy, world_size and its devices)" % differs)
    st.check(experiment["metrics"] == ["summary/" + f for f in FIGURES], "metrics %s" % experiment["metrics"])
    for r in rows:
        scalars = st.read_events(os.path.join(out, r["run_dir"]))["scalars"]
        for f in FIGURES:
            if r[f] == "":
                continue
            points = scalars.get("summary/" + f)
            st.check(points, "%s: no summary/%s scalar" % (r["run_dir"], f))
            st.expect_close(points[-1][1], float(r[f]), "%s: summary/%s vs results.csv" % (r["run_dir"], f),
                            rel=1e-6, abs_tol=1e-30)


def weak_scaling_grows_the_batch():
    sweep = write_sweep("weak.toml", SMALL.replace('"strong"', '"weak"').replace(
        '["single", "dp", "ddp", "zero3"]', '["single", "ddp"]').replace('"train.global_batch_size" = 24',
                                                                         '"train.global_batch_size" = 12'))
    out, result = compare(sweep)
    rows = read_rows(out, result)
    for r in rows:
        summary = st.load_summary(os.path.join(out, r["run_dir"]))
        st.check(summary["global_batch_size"] == 12 * int(r["world_size"]),
                 "weak scaling: %s world %s ran global batch %s" % (r["strategy"], r["world_size"],
                                                                    summary["global_batch_size"]), result)
        base = rows[0]
        speedup = float(r["steady_samples_per_s"]) / float(base["steady_samples_per_s"])
        st.expect_close(float(r["speedup"]), speedup, "weak speedup (throughput ratio)", rel=1e-9)
        st.expect_close(float(r["efficiency"]), speedup / int(r["world_size"]), "weak efficiency", rel=1e-9)


def failing_run_is_recorded_and_the_others_complete():
    """A model with a parameter that gets no gradient: ddp and zero2 refuse it at run time, single
    trains; every combination still runs and the failures carry their error."""
    env = {"STRATA_PLUGIN_PATH": st.fixture_plugin_dir("unused_param_model")}
    st.fixture_libraries("unused_param_model")
    sweep = write_sweep("failing.toml", SMALL.replace('["single", "dp", "ddp", "zero3"]', '["single", "ddp", "zero2"]')
                        .replace('"log.every" = 4', '"log.every" = 4\n"model.name" = "fixture_unused"'))
    out, result = compare(sweep, env=env, expect=1)
    rows = read_rows(out, result)
    status = {(r["strategy"], r["world_size"]): r for r in rows}
    st.check(len(rows) == 5, "expected 5 rows, got %d" % len(rows), result)
    st.check(status[("single", "1")]["status"] == "ok", "single failed: %s" % status[("single", "1")], result)
    for key in (("ddp", "1"), ("ddp", "2"), ("zero2", "1"), ("zero2", "2")):
        st.check(status[key]["status"] == "failed", "%s: status %s" % (key, status[key]["status"]), result)
        st.expect_in("received no gradient", status[key]["error"], result, "the error column of %s" % (key,))
        log = os.path.join(out, status[key]["run_dir"], "output.log")
        st.check(os.path.isfile(log), "no output.log for the failed run %s" % (key,), result)
    st.expect_stderr(result, "4 of 5 runs failed")
    with open(os.path.join(out, "results.md")) as f:
        st.expect_in("ddp-w2 failed", f.read(), result, "results.md notes")


BAD_SWEEPS = [
    # (name, text, fragments of stderr; "FILE" is replaced by the sweep's path)
    ("typo_key", '[compare]\nbase = "BASE"\nrepeat = 2\n', ["FILE:3:1", "repeat", "Did you mean 'repeats'"]),
    ("no_base", '[compare]\nscaling = "strong"\n', ["FILE:1:1", "compare.base"]),
    ("missing_base", '[compare]\nbase = "nowhere.toml"\n', ["FILE:2:8", "not found"]),
    ("bad_scaling", '[compare]\nbase = "BASE"\nscaling = "linear"\n', ["FILE:3:11", "strong", "weak"]),
    ("unknown_strategy", '[compare]\nbase = "BASE"\n[compare.axes]\nstrategy = ["single", "ddpp"]\n',
     ["FILE:4:23", "unknown strategy 'ddpp'", "Did you mean 'ddp'"]),
    ("bad_world", '[compare]\nbase = "BASE"\n[compare.axes]\nworld_size = [1, 0]\n', ["FILE:4:18", "positive"]),
    ("baseline_not_run", '[compare]\nbase = "BASE"\nbaseline = { strategy = "zero1" }\n[compare.axes]\n'
     'strategy = ["single", "ddp"]\n', ["FILE:3:25", "not among the axis values"]),
    ("bad_set_key", '[compare]\nbase = "BASE"\n[compare.set]\n"train.stpes" = 5\n',
     ["FILE:4:17", "train.stpes", "Did you mean 'steps'"]),
    ("bad_axis_value", '[compare]\nbase = "BASE"\n[compare.axes]\nstrategy = ["ddp"]\n'
     '"optimizer.lr" = [0.01, -1.0]\n', ["FILE:5:25", "run ddp-w1-lr-1.0", "optimizer.lr"]),
    # A check of the base experiment that a sweep value breaks: at the sweep's value, naming the run.
    ("batch_not_divisible", '[compare]\nbase = "BASE"\n[compare.axes]\nstrategy = ["ddp"]\nworld_size = [1, 5]\n',
     ["FILE:5:18", "run ddp-w5 (strategy ddp, world_size 5)", "not divisible by world size 5"]),
    ("other_table", '[compare]\nbase = "BASE"\n[train]\nsteps = 3\n', ["FILE:3:2", "only a [compare] table"]),
    ("nproc_key", '[compare]\nbase = "BASE"\n[compare.set]\n"distributed.nproc" = 2\n',
     ["FILE:4:23", "world_size"]),
]


def sweep_errors_name_file_and_line():
    """compare and validate refuse each bad sweep alike: exit 2, the sweep's file:line:column and key."""
    for name, text, fragments in BAD_SWEEPS:
        sweep = write_sweep(name + ".toml", text)
        out = os.path.join(st.temp_dir("bad"), "cmp")
        result = st.strata("compare", sweep, "--out", out, timeout=120)
        st.expect_clean_failure(result, 2, *[f.replace("FILE", sweep) for f in fragments])
        st.check(not os.path.exists(out), "%s: the invalid sweep created %s" % (name, out), result)
        result = st.strata("validate", sweep, timeout=120)
        st.expect_clean_failure(result, 2, *[f.replace("FILE", sweep) for f in fragments])


def validate_checks_every_combination():
    """`strata validate SWEEP`: each combination's experiment as compare builds it, a line each, nothing run;
    a bad axis value is an error at its line in the sweep, with the known names."""
    sweep = write_sweep("valid.toml", SMALL)
    scratch = st.temp_dir("validate")
    result = st.strata("validate", sweep, "--set", "train.steps=2", timeout=120, cwd=scratch)
    st.expect_exit(result, 0)
    listed = re.findall(r"^  ok: (\S+) ", result.stdout, re.M)
    want = ["single-w1", "dp-w1", "dp-w2", "ddp-w1", "ddp-w2", "zero3-w1", "zero3-w2"]
    st.check(listed == want, "validate listed %s, expected %s" % (listed, want), result)
    st.expect_in("not run: single-w2", result.stdout, result, "stdout (the combination that does not apply)")
    st.expect_in("7 combinations valid", result.stdout, result, "stdout")
    st.check(not os.listdir(scratch), "validate of a sweep wrote %s" % os.listdir(scratch), result)
    # A value of the base experiment's range, broken by one axis value: that value's line, the run, the key.
    bad = write_sweep("bad_lr.toml", SMALL.replace('world_size = [1, 2]', 'world_size = [1, 2]\n"optimizer.lr" = [0.1, -2.0]'))
    result = st.strata("validate", bad, timeout=120)
    st.expect_clean_failure(result, 2, bad + ":11:24", "optimizer.lr", "run single-w1-lr-2.0")
    bad = write_sweep("bad_name.toml", SMALL.replace('"zero3"]', '"nosuch"]'))
    result = st.strata("validate", bad, timeout=120)
    st.expect_clean_failure(result, 2, bad + ":9:36", "compare.axes.strategy", "unknown strategy 'nosuch'",
                            "Available: ", "zero3")
    # --nproc is no way to set a sweep's world sizes.
    result = st.strata("validate", sweep, "--nproc", "2")
    st.expect_clean_failure(result, 2, "--nproc", "compare.axes.world_size")


def set_changes_the_sweep():
    """--set compare.KEY=VALUE changes the sweep (axes in place, a new axis last, repeats, baseline), a plain
    --set every run; errors name the override."""
    sweep = write_sweep("over.toml", SMALL)
    sets = ["--set", "compare.axes.world_size=[2]", "--set", 'compare.axes.strategy=["zero3", "ddp"]',
            "--set", 'compare.axes."optimizer.lr"=[0.1, 0.2]', "--set", "compare.repeats=2",
            "--set", "compare.baseline.strategy=ddp", "--set", "compare.baseline.world_size=2", "--set", "train.steps=3"]
    result = st.strata("compare", sweep, "--dry-run", *sets, timeout=120)
    st.expect_exit(result, 0)
    labels = re.findall(r"^  (\S+): strata run ", result.stdout, re.M)
    combinations = ["zero3-w2-lr0.1", "zero3-w2-lr0.2", "ddp-w2-lr0.1", "ddp-w2-lr0.2"]
    # Listed in the order they run: round 1 of every combination (shuffled), then round 2.
    want = [sorted(c + "-r1" for c in combinations), sorted(c + "-r2" for c in combinations)]
    st.check([sorted(labels[:4]), sorted(labels[4:])] == want, "runs %s after the overrides, expected the rounds %s"
             % (labels, want), result)
    for fragment in ("--set optimizer.lr=0.2", "--set train.steps=3", "--set distributed.nproc=2"):
        st.expect_in(fragment, result.stdout, result, "stdout (the runs' commands)")
    st.expect_not_in("train.steps=12", result.stdout, result, "stdout (--set train.steps replaces [compare.set]'s)")
    result = st.strata("validate", sweep, *sets, timeout=120)
    st.expect_exit(result, 0)
    st.expect_in("4 combinations valid, 8 runs", result.stdout, result, "stdout")
    for override, fragments in (("compare.axes.world_size=[1, 0]", ["must be >= 1"]),
                                ("compare.repeat=2", ["compare.repeat", "Did you mean 'repeats'"]),
                                ('compare.axes.strategy=["single", "ddpp"]', ["Did you mean 'ddp'"]),
                                ("compare.axes.world_size=[4]", [sweep + ":6:", "not among the axis values (4)",
                                                                 "compare.baseline.world_size"]),
                                ("strategy.name=ddp", ["the axis 'strategy'"])):
        result = st.strata("validate", sweep, "--set", override, timeout=120)
        located = [] if fragments[0].startswith(sweep) else ["--set " + override]
        st.expect_clean_failure(result, 2, *(located + fragments))


def dry_run_lists_runs_and_starts_none():
    sweep = write_sweep("dry.toml", SMALL)
    out = os.path.join(st.temp_dir("dry"), "cmp")
    result = st.strata("compare", sweep, "--out", out, "--dry-run", "--set", "train.steps=2", timeout=120)
    st.expect_exit(result, 0)
    for label in ("single-w1", "dp-w2", "ddp-w2", "zero3-w1"):
        st.expect_in(label + ": strata run", result.stdout, result, "stdout")
    st.expect_in("strategy.replicas=2", result.stdout, result, "stdout (dp's world size is its replicas)")
    st.expect_in("train.steps=2", result.stdout, result, "stdout (--set reaches every run)")
    st.check(not os.path.exists(out), "--dry-run created %s" % out, result)


def auto_repeat_adds_rounds_until_tight_or_the_limit():
    """--until-tight REL adds interleaved rounds until every combination's steady step time is within REL, else
    up to --max-repeats (naming the combinations left loose); --budget stops the rounds that would end past it."""
    sweep = write_sweep("tight.toml", SMALL.replace('["single", "dp", "ddp", "zero3"]', '["single", "ddp"]')
                        .replace("[1, 2]", "[1]").replace('"train.steps" = 12', '"train.steps" = 16'))

    def results(out):
        with open(os.path.join(out, "results.json")) as f:
            return json.load(f)

    # Nothing is that tight: max_repeats rounds, then the loose ones named.
    out, result = compare(sweep, "--until-tight", "0.000001", "--max-repeats", "3")
    j = results(out)
    st.check([sorted(r) for r in j["rounds"]] == [["ddp-w1-r%d" % i, "single-w1-r%d" % i] for i in (1, 2, 3)],
             "rounds %s, expected 3 of both combinations" % j["rounds"], result)
    st.check(len(j["runs"]) == 6 and all(r["status"] == "ok" for r in j["runs"]), "runs %s" % j["runs"], result)
    st.expect_in("max_repeats 3 reached", j["stopped"] or "", result, "results.json stopped")
    st.check(sorted(l.split(" ")[0] for l in j["loose"]) == ["ddp@1", "single@1"], "loose %s" % j["loose"], result)
    st.expect_stderr(result, "still loose: ")
    st.expect_in("round 2: still loose: ", result.stdout, result, "stdout (why another round runs)")
    # Loose enough: the second round (the first range) settles it.
    out, result = compare(sweep, "--until-tight", "5")
    j = results(out)
    st.check(len(j["rounds"]) == 2 and j["loose"] == [], "rounds %s, loose %s: expected 2 rounds, none loose"
             % (j["rounds"], j["loose"]), result)
    st.expect_in("within 5 ", j["stopped"] or "", result, "results.json stopped")
    # A budget that the first round already spends: no second round.
    out, result = compare(sweep, "--budget", "0.5", "--set", "compare.warmup_run_steps=0")
    j = results(out)
    st.check(len(j["rounds"]) == 1 and j["warmup"] is None, "rounds %s, warmup %s" % (j["rounds"], j["warmup"]), result)
    st.expect_in("past the budget of 0.5 s", j["stopped"] or "", result, "results.json stopped")
    # The options are checked as the sweep's keys.
    result = st.strata("compare", sweep, "--until-tight", "-1", "--dry-run")
    st.expect_clean_failure(result, 2, "--set compare.until_tight=-1", "until_tight must be >= 0")


def plot_shows_the_last_segment():
    """A resumed run (summary.json `segments`, one per process that trained it; its top-level figures are
    the last segment's): `strata plot` shows the top-level figures, never a blend of segments, marks the run
    resumed and names the earlier segments (strategy@world); a summary without `segments` is one segment."""
    plain = st.temp_dir("plain")
    st.strata_run(st.GOOD_SYNTHETIC, plain, "train.steps=4")
    summary = st.load_summary(plain)
    resumed = os.path.join(st.temp_dir("resumed"), "resumed")
    shutil.copytree(plain, resumed)
    keys = ("backend", "device", "step_time_s", "samples_per_s", "memory", "comm")
    last = dict({k: summary[k] for k in keys}, strategy="ddp", world_size=1, from_step=2, to_step=4, steps=2,
                train_time_s=7.25)
    first = json.loads(json.dumps(last))
    first.update(strategy="zero2", world_size=4, from_step=0, to_step=2, train_time_s=100.0)
    first["memory"]["peak_tensor_bytes"] = 5 * 2 ** 40  # 5 TiB: shown only if the first segment leaks in
    summary.update(strategy="ddp", train_time_s=7.25, segments=[first, last])
    with open(os.path.join(resumed, "summary.json"), "w") as f:
        json.dump(summary, f)
    out = os.path.join(st.temp_dir("plot"), "report.html")
    result = st.strata("plot", plain, resumed, "--baseline", plain, "--out", out)
    st.expect_exit(result, 0)
    with open(out) as f:
        html = f.read()
    time_table = html[html.index("<h3>Time</h3>"):]
    time_table = time_table[:time_table.index("</table>")]
    # The "time s" column (train_time_s) of the ddp row, found by its header.
    headers = re.findall(r"<th[^>]*>([^<]*)</th>", time_table)
    row = re.search(r'<tr><td class="l">ddp</td>(.*?)</tr>', time_table)
    cells = re.findall(r"<td[^>]*>([^<]*)</td>", row.group(1)) if row else []
    column = next((i for i, h in enumerate(headers) if h.startswith("time s")), None)
    cell = cells[column - 1] if column and len(cells) >= column else None
    st.check(cell == "7.25", "the resumed run's time is %r, expected its last segment's 7.25 (headers %s, cells %s)"
             % (cell, headers, cells), result)
    st.expect_not_in("TiB", html, result, "report.html (the first segment's memory)")
    st.expect_in("resumed was resumed (2 segments)", html, result, "report.html notes")
    st.expect_in("before it: zero2@4 (steps 0-2)", html, result, "report.html notes")
    st.expect_in("ddp@1 (steps 2-4), 2 steps", html, result, "report.html notes")
    # Its speedup covers the last segment's 2 steps, not the baseline's 4: noted as unequal work.
    st.expect_in("resumed ran 2 steps of global batch", html, result, "report.html notes")
    runs = html[html.index('<section id="runs">'):]
    st.check(runs.count("(resumed)") == 1 and '<td class="r">2 (resumed)</td>' in runs
             and '<td class="r">1</td>' in runs,
             "the runs table should mark the resumed run (2 segments) and the plain one (1 segment)", result)


def interrupt_keeps_finished_runs():
    """SIGINT stops the running run (and its ranks) and still writes the results, exit 130."""
    # In the sweep's order, no warm-up run: the test stops the first run.
    sweep = write_sweep("long.toml", SMALL.replace("repeats = 1", "repeats = 1\nshuffle = false\nwarmup_run_steps = 0")
                        .replace('["single", "dp", "ddp", "zero3"]', '["ddp", "zero3"]')
                        .replace('"train.steps" = 12', '"train.steps" = 10000000').replace("[1, 2]", "[2]")
                        .replace('strategy = "single", world_size = 1', 'strategy = "ddp", world_size = 2'))
    out = os.path.join(st.temp_dir("interrupt"), "cmp")
    proc = subprocess.Popen([st.strata_bin(), "compare", sweep, "--out", out], stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=st._clean_env()[0],
                            start_new_session=True, text=True)
    try:
        deadline = time.monotonic() + 120
        ranks = []
        while time.monotonic() < deadline and len(ranks) < 2 and proc.poll() is None:
            time.sleep(0.5)
            runs = [c for c in st.child_pids(proc.pid)]
            ranks = [r for run in runs for r in st.child_pids(run)]
            if os.path.exists(os.path.join(out, "ddp-w2", "summary.json")):
                break
        st.check(len(ranks) == 2, "the first run did not start 2 ranks within 120 s (exit %s)" % proc.poll())
        time.sleep(2)  # into training
        proc.send_signal(signal.SIGINT)
        output, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    st.check(proc.returncode == 130, "exit code %s after SIGINT, expected 130\n%s" % (proc.returncode, output))
    st.check(not any(st.alive(r) for r in ranks), "ranks %s outlived the interrupted comparison" % ranks)
    with open(os.path.join(out, "results.csv")) as f:
        rows = list(csv.DictReader(f))
    st.expect_in("interrupted (SIGINT)", rows[-1]["error"], None, "the cause of the run not started")
    rows = {r["strategy"]: r["status"] for r in rows}
    st.check(rows == {"ddp": "interrupted", "zero3": "not started"}, "results after SIGINT: %s\n%s" % (rows, output))
    st.expect_in("interrupted", output, None, "output")


RESUMABLE = """
[compare]
base = "BASE"
scaling = "strong"
repeats = 1
shuffle = false
warmup_run_steps = 0
baseline = { strategy = "single", world_size = 1 }

[compare.axes]
strategy = ["single", "ddp"]
world_size = [1]
"train.steps" = [6, 12]

[compare.set]
"train.global_batch_size" = 24
"log.every" = 2
"checkpoint.every" = 8
"""


def resume_runs_what_did_not_finish():
    """--resume DIR: the runs that ended ok are kept (their directories untouched), the failed one
    runs again (what it left moved to DIR/discarded/), and the tables hold every run; a resume
    with other combinations, a second --out into a finished comparison and --resume beside another
    --out are refused (exit 2) with the fix."""
    sweep = write_sweep("resumable.toml", RESUMABLE)
    out = os.path.join(st.temp_dir("resume"), "cmp")
    # The 12-step runs reach the checkpoint of step 8 and are killed there; the 6-step ones end ok.
    first = st.strata("compare", sweep, "--out", out, env={"STRATA_FAULT": "kill-in-save:8:0"}, timeout=600)
    st.expect_exit(first, 1)
    label_of = lambda r: "%s-w%s-steps%s" % (r["strategy"], r["world_size"], r["train.steps"])  # the run's directory
    rows = {label_of(r): r["status"] for r in read_rows(out, first)}
    ok = sorted(label for label, status in rows.items() if status == "ok")
    failed = sorted(label for label, status in rows.items() if status != "ok")
    st.check(len(ok) == 2 and len(failed) == 2, "first session: %s" % rows, first)
    kept_summary = {label: open(os.path.join(out, label, "summary.json")).read() for label in ok}

    refused = st.strata("compare", sweep, "--out", out)
    st.expect_clean_failure(refused, 2, "already holds a comparison", "--resume " + out)
    other = st.strata("compare", sweep, "--resume", out, "--set", "train.global_batch_size=48")
    st.expect_clean_failure(other, 2, "ran other combinations", "comparison.json")
    both = st.strata("compare", sweep, "--resume", out, "--out", out + "-elsewhere")
    st.expect_clean_failure(both, 2, "--resume continues the comparison in its own directory")

    second = st.strata("compare", sweep, "--resume", out, timeout=600)
    st.expect_exit(second, 0)
    for label in ok:
        st.expect_in("%s: kept" % label, second.stdout, second, "output")
        with open(os.path.join(out, label, "summary.json")) as f:
            st.check(f.read() == kept_summary[label], "%s's summary.json changed on resume" % label, second)
    for label in failed:
        st.check(os.path.isdir(os.path.join(out, "discarded", label)),
                 "the failed run %s was not set aside in discarded/" % label, second)
    rows = read_rows(out, second)
    st.check(sorted(label_of(r) for r in rows) == sorted(ok + failed) and all(r["status"] == "ok" for r in rows),
             "after the resume: %s" % [(label_of(r), r["status"]) for r in rows], second)
    with open(os.path.join(out, "results.md")) as f:
        st.expect_in("2 runs kept from an earlier session", f.read(), second, "results.md")


def wait_for(what, condition, timeout=120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.3)
    st.fail("%s did not happen within %d s" % (what, timeout))


def killed_runs_say_so():
    """A run whose process is SIGKILLed is recorded with the signal (no summary could be written), a run
    whose rank is SIGKILLed with the launcher's verdict (signal, failed rank), and after Ctrl-C the run
    that was going is interrupted and the rest are not started, each with its cause in every table."""
    sweep = write_sweep("killed.toml", SMALL.replace("repeats = 1", "repeats = 1\nshuffle = false\nwarmup_run_steps = 0")
                        .replace('["single", "dp", "ddp", "zero3"]', '["ddp", "zero1"]')
                        .replace('"train.steps" = 12', '"train.steps" = 10000000')
                        .replace('strategy = "single", world_size = 1', 'strategy = "ddp", world_size = 1'))
    out = os.path.join(st.temp_dir("killed"), "cmp")
    proc = subprocess.Popen([st.strata_bin(), "compare", sweep, "--out", out], stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=st._clean_env()[0],
                            start_new_session=True, text=True)
    try:
        def training(label):
            return lambda: any("tfevents" in n for n in os.listdir(os.path.join(out, label))) \
                if os.path.isdir(os.path.join(out, label)) else False
        # ddp-w1: the run's own process (it trains itself) is killed.
        wait_for("ddp-w1 training", training("ddp-w1"))
        run = wait_for("the ddp-w1 process", lambda: st.child_pids(proc.pid))[0]
        time.sleep(1)
        os.kill(run, signal.SIGKILL)
        # ddp-w2: rank 1 of the launcher's two is killed.
        wait_for("ddp-w2 training", training("ddp-w2"))
        launcher = wait_for("the ddp-w2 launcher", lambda: [p for p in st.child_pids(proc.pid) if p != run])[0]
        ranks = wait_for("ddp-w2's ranks", lambda: len(st.child_pids(launcher)) == 2 and st.child_pids(launcher))
        victim = wait_for("ddp-w2's rank 1", lambda: [r for r in ranks if st.rank_of_process(r) == 1])[0]
        time.sleep(1)
        os.kill(victim, signal.SIGKILL)
        # zero1-w1: Ctrl-C to the comparison; zero1-w2 is then never started.
        wait_for("zero1-w1 training", training("zero1-w1"))
        time.sleep(1)
        proc.send_signal(signal.SIGINT)
        output, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    st.check(proc.returncode == 130, "exit code %s after SIGINT, expected 130\n%s" % (proc.returncode, output))
    with open(os.path.join(out, "results.csv")) as f:
        rows = {r["run_dir"]: r for r in csv.DictReader(f)}
    want = {"ddp-w1": ("failed", "SIGKILL", "", "killed by signal 9 (SIGKILL)"),
            "ddp-w2": ("failed", "SIGKILL", "1", "SIGKILL"),
            "zero1-w1": ("interrupted", "", "", "interrupted"),
            "zero1-w2": ("not started", "", "", "interrupted (SIGINT) before this run")}
    with open(os.path.join(out, "results.json")) as f:
        runs = {r["run_dir"]: r for r in json.load(f)["runs"]}
    with open(os.path.join(out, "results.md")) as f:
        markdown = f.read()
    with open(os.path.join(out, "report.html")) as f:
        html = f.read()
    for label, (status, sig, rank, cause) in want.items():
        r = rows[label]
        got = (r["status"], r["signal"], r["failed_rank"])
        st.check(got == (status, sig, rank), "%s: (status, signal, failed_rank) %s, expected %s\n%s"
                 % (label, got, (status, sig, rank), output))
        st.expect_in(cause, r["error"], None, "the cause of %s" % label)
        st.check("samples/s" not in r["error"], "%s: the cause is progress output: %r" % (label, r["error"]))
        st.check(runs[label]["status"] == status and runs[label]["error"] == r["error"]
                 and runs[label]["signal"] == (sig or None), "results.json of %s: %s" % (label, runs[label]))
        st.expect_in("%s %s: %s" % (label, status, r["error"][:40]), markdown, None, "results.md notes")
        st.expect_in(cause.replace("(", "").split()[0], html, None, "report.html")
    st.expect_in("killed by signal 9 (SIGKILL)", html, None, "report.html (the runs table's cause)")


if __name__ == "__main__":
    st.main([sweep_errors_name_file_and_line, validate_checks_every_combination, set_changes_the_sweep,
             dry_run_lists_runs_and_starts_none, plot_shows_the_last_segment, small_sweep_end_to_end,
             auto_repeat_adds_rounds_until_tight_or_the_limit,
             weak_scaling_grows_the_batch, failing_run_is_recorded_and_the_others_complete,
             interrupt_keeps_finished_runs, killed_runs_say_so, resume_runs_what_did_not_finish])
