#!/usr/bin/env python3
"""Resumed runs keep their record: a refused resume changes no byte of the run directory (names,
sizes, mtimes, contents; no failures/), the run's own config.toml resumes it with more steps than
a shipped experiment's clamped warmup allowed, and a run resumed under another strategy and world
size keeps each segment's figures apart (summary.json `segments`, the top-level figures the last
segment's).

    STRATA_BIN=build/bin/strata python3 tests/integration/test_resume.py
"""
import hashlib
import os

import strata_test as st

QUICK = os.path.join(st.REPO, "experiments", "quickstart.toml")
SHORT = ["train.steps=10", "checkpoint.at_end=true", "eval.batches=1", "log.every=5"]


def snapshot(run_dir):
    """Every file and directory below run_dir: {relative path: (kind, size, mtime_ns, sha256)}."""
    out = {}
    for root, dirs, files in os.walk(run_dir):
        for name in dirs + files:
            path = os.path.join(root, name)
            st_ = os.lstat(path)
            digest = ""
            if name in files:
                with open(path, "rb") as f:
                    digest = hashlib.sha256(f.read()).hexdigest()
            out[os.path.relpath(path, run_dir)] = ("dir" if name in dirs else "file", st_.st_size, st_.st_mtime_ns,
                                                   digest)
    return out


def expect_unchanged(before, after, what):
    changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
    st.check(not changed, "%s changed the run directory: %s" % (what, ", ".join(
        "%s %s -> %s" % (k, before.get(k, "(absent)")[:3] if k in before else "(absent)",
                         after.get(k, "(absent)")[:3] if k in after else "(absent)") for k in changed)))


def quick_run(out):
    st.require_fashion_mnist()
    result = st.strata("run", QUICK, "--out", out, *st.set_args(*SHORT), timeout=300)
    st.expect_exit(result, 0)
    return result


def refused_resume_changes_nothing_then_the_runs_config_resumes_it():
    """quickstart.toml's warmup_steps = 50 is clamped in a 10-step trial; the resolved config keeps 50,
    so the run's own config.toml resumes it for 20 steps."""
    out = os.path.join(st.temp_dir("refused"), "run")
    quick_run(out)
    before = snapshot(out)
    for sets, key in ((["optimizer.lr=0.01"], "optimizer.lr"), (["model.hidden=[64]"], "model.hidden"),
                      (["train.steps=5"], "train.steps")):
        result = st.strata("run", QUICK, "--resume", out, *st.set_args(*(SHORT + sets)), timeout=300)
        st.expect_exit(result, 2)
        st.expect_no_crash(result)
        st.expect_stderr(result, key)
        expect_unchanged(before, snapshot(out), "a resume refused at " + key)
    st.check(not os.path.exists(os.path.join(out, "failures")), "a refused resume left failures/")
    # The run's own resolved config resumes it, with more steps than the first segment.
    config = os.path.join(out, "config.toml")
    result = st.strata("run", config, "--resume", out, *st.set_args("train.steps=20", "log.every=5"), timeout=300)
    st.expect_exit(result, 0)
    summary = st.load_summary(out)
    st.check(summary["steps"] == 20, "steps %r after the resume" % summary["steps"], result)
    segments = summary.get("segments", [])
    st.check([(s["from_step"], s["to_step"]) for s in segments] == [(0, 10), (10, 20)],
             "segments %r" % [(s.get("from_step"), s.get("to_step")) for s in segments], result)


def validate_refuses_what_run_refuses():
    """A resumed run is checked before it writes; strata validate of an init_from that does not fit
    the model names train.init_from (the model's options are the fix) without creating anything."""
    out = os.path.join(st.temp_dir("init"), "run")
    result = st.strata("run", st.GOOD_SYNTHETIC, "--out", out,
                       *st.set_args("train.steps=2", "train.save_final=true", "model.hidden=[8]"), timeout=300)
    st.expect_exit(result, 0)
    saved = os.path.join(out, "final_model.pt")
    for command in ("validate", "run"):
        fresh = os.path.join(st.temp_dir("init_" + command), "run")
        args = [command, st.GOOD_SYNTHETIC] + (["--out", fresh] if command == "run" else [])
        result = st.strata(*args, *st.set_args("train.steps=2", "model.hidden=[16]", "train.init_from=" + saved),
                           timeout=300)
        st.expect_exit(result, 2)
        st.expect_no_crash(result)
        st.expect_stderr(result, "train.init_from")
        st.check(not os.path.exists(fresh), "%s of a misfit init_from created %s" % (command, fresh), result)


def segments_keep_strategies_apart():
    """single at world 1 for 10 steps, resumed as zero3 at world 2 for 10 more: one segment each,
    with its own strategy, world size, steps, times, memory and traffic; the top-level figures are
    zero3's."""
    out = os.path.join(st.temp_dir("segments"), "run")
    common = ["train.steps=10", "checkpoint.at_end=true", "log.every=5", "train.global_batch_size=24"]
    result = st.strata("run", st.GOOD_SYNTHETIC, "--out", out, *st.set_args(*common), timeout=300)
    st.expect_exit(result, 0)
    first = st.load_summary(out)
    result = st.strata("run", st.GOOD_SYNTHETIC, "--resume", out, "--nproc", 2,
                       *st.set_args("train.steps=20", "checkpoint.at_end=true", "log.every=5",
                                    "train.global_batch_size=24", "strategy.name=zero3"), timeout=300)
    st.expect_exit(result, 0)
    summary = st.load_summary(out)
    segments = summary["segments"]
    st.check(len(segments) == 2, "%d segments" % len(segments), result)
    a, b = segments
    st.check((a["strategy"], a["world_size"], a["from_step"], a["to_step"], a["steps"]) == ("single", 1, 0, 10, 10),
             "first segment %r" % {k: a.get(k) for k in ("strategy", "world_size", "from_step", "to_step")})
    st.check((b["strategy"], b["world_size"], b["from_step"], b["to_step"], b["steps"]) == ("zero3", 2, 10, 20, 10),
             "second segment %r" % {k: b.get(k) for k in ("strategy", "world_size", "from_step", "to_step")})
    for key in ("train_time_s", "step_time_s", "samples_per_s"):
        st.check(summary[key] == b[key], "top-level %s %r is not the last segment's %r" % (key, summary[key], b[key]))
        st.expect_close(a[key], first[key], "first segment " + key + " against the first run's", rel=1e-9)
    st.check(summary["comm"]["calls_per_step"] == b["comm"]["calls_per_step"] and b["comm"]["calls_per_step"] > 0,
             "comm %r vs segment %r" % (summary["comm"], b["comm"]))
    st.check(a["comm"]["calls_per_step"] == 0, "single's segment has traffic %r" % a["comm"])
    st.check(b["memory"]["model_state_bytes"]["params"] < a["memory"]["model_state_bytes"]["params"],
             "zero3 at world 2 holds %s parameter bytes, single %s" % (
                 b["memory"]["model_state_bytes"]["params"], a["memory"]["model_state_bytes"]["params"]))
    # samples/s of the second segment counts its own 10 steps over its own time.
    expected = 10 * 24 / b["train_time_s"]
    st.expect_close(b["samples_per_s"], expected, "zero3 segment samples_per_s", rel=1e-9)
    print("  segments: single %.0f samples/s, zero3@2 %.0f samples/s" % (a["samples_per_s"], b["samples_per_s"]))


if __name__ == "__main__":
    st.main([refused_resume_changes_nothing_then_the_runs_config_resumes_it, validate_refuses_what_run_refuses,
             segments_keep_strategies_apart])
