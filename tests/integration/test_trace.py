#!/usr/bin/env python3
"""`[train] trace_steps = [first, last]`: every rank writes a profiler trace of those steps
(RUN_DIR/trace/rank_<R>.pt.trace.json, Chrome's trace format) holding Strata's scopes (each step,
micro-batch, unit forward and the optimizer), the ATen ops and the collectives, only for those
steps; summary.json names it; the traced steps stay out of the step-time medians; bad ranges are
config errors (exit 2). bench/trace_overlap.py reads the traces: the collectives per step (as many
as summary.json counts) and, on a GPU trace (here a hand-made one with known intervals), the
communication that ran beside computation and the part that did not.

    STRATA_BIN=build/bin/strata python3 tests/integration/test_trace.py
"""
import json
import os
import re
import sys

import strata_test as st

SETS = ["model.hidden=[64,64]", "dataset.input_shape=[32]", "train.steps=8", "train.global_batch_size=32",
        "log.every=1", "eval.batches=1", "train.threads=1"]


def run(label, *sets, nproc=1, expect=0):
    out = st.temp_dir(label)
    result = st.strata("run", st.GOOD_SYNTHETIC, "--out", out, "--nproc", nproc, *st.set_args(*(SETS + list(sets))))
    st.expect_exit(result, expect)
    st.expect_no_crash(result)
    return out, result


def events_of(out, rank, result):
    path = os.path.join(out, "trace", "rank_%d.pt.trace.json" % rank)
    st.check(os.path.isfile(path), "rank %d wrote no trace at %s" % (rank, path), result)
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    return [e for e in data["traceEvents"] if e.get("ph") == "X"]


def span(events, name):
    """(start, end) of the one complete event called `name`."""
    found = [e for e in events if e["name"] == name]
    st.check(len(found) == 1, "expected one %r event, found %d" % (name, len(found)))
    return found[0]["ts"], found[0]["ts"] + found[0]["dur"]


def inside(events, window, pattern):
    return [e for e in events if re.search(pattern, e["name"]) and window[0] <= e["ts"] <= window[1]]


def check_trace(out, result, nproc, micro_batches, collectives):
    for rank in range(nproc):
        events = events_of(out, rank, result)
        steps = sorted({e["name"] for e in events if e["name"].startswith("strata step ")})
        st.check(steps == ["strata step 3", "strata step 4"], "rank %d traced %s, not steps 3 and 4" % (rank, steps))
        for step in (3, 4):
            window = span(events, "strata step %d" % step)
            names = {e["name"] for e in inside(events, window, r"^strata ")}
            want = {"strata forward layer0", "strata forward layer1", "strata forward head", "strata optimizer"}
            want |= {"strata micro-batch %d" % m for m in range(micro_batches)}
            st.check(want <= names, "rank %d step %d lacks %s" % (rank, step, sorted(want - names)))
            st.check(inside(events, window, r"^aten::(addmm|mm)$"), "rank %d step %d: no matmul" % (rank, step))
            for pattern in collectives:
                st.check(inside(events, window, pattern), "rank %d step %d: no %s event in %s" % (
                    rank, step, pattern, sorted({e["name"] for e in events if "gloo" in e["name"]})))


def traces_two_ddp_ranks():
    # Not log steps: a log step's read of the loss adds an all-reduce that summary.json books apart.
    out, result = run("ddp", "strategy.name=\"ddp\"", "train.trace_steps=[3,4]", "train.timing_warmup_steps=100",
                      "log.every=100", nproc=2)
    check_trace(out, result, 2, 1, [r"^gloo:all_reduce$"])
    st.expect_stdout(result, "trace: steps 3-4")
    st.check("gpuGetDeviceCount" not in result.stdout + result.stderr, "the profiler's GPU probe leaked", result)
    s = st.load_summary(out)
    st.check(s.get("trace") == {"steps": [3, 4], "file": "rank_0.pt.trace.json", "dir": "trace"},
             "summary.json trace: %r" % s.get("trace"))
    # The traced steps are left out of the step-time medians: of 6 steps timed, half (3) are the
    # warm-up left out of the steady median (timing_warmup_steps above is capped at half).
    st.check(s["timing_warmup_steps"] == 3, "timing_warmup_steps %r: the traced steps were timed" %
             s["timing_warmup_steps"])
    rows, result = st.trace_overlap(*(os.path.join(out, "trace", "rank_%d.pt.trace.json" % r) for r in (0, 1)))
    st.check([(r["step"], r["gpu"]) for r in rows] == [(3, False), (4, False)] * 2, "overlap rows %r" % rows, result)
    for r in rows:
        st.check(sum(r["collectives"].values()) == s["comm"]["calls_per_step"],
                 "step %d called %r, summary.json counts %g per step" % (r["step"], r["collectives"],
                                                                       s["comm"]["calls_per_step"]), result)


def overlap_of_a_gpu_trace():
    """A trace shaped as Kineto writes a GPU run's: device work joined to its launch by correlation
    id; communication is what a collective's op launched on its thread (an NCCL kernel, or the copy
    NCCL makes of a collective at world size 1). Step 1: three compute kernels (one launched by
    autograd's thread while the all-gather's op was open on the main one), an all-gather kernel, a
    reduce-scatter's copy and a batch copy; step 2: one compute kernel."""
    def x(name, ts, dur, cat="cpu_op", tid=1, **args):
        return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "tid": tid, "args": args}

    def launch(ts, correlation, tid=1, name="cudaLaunchKernel"):
        return x(name, ts, 1, "cuda_runtime", tid, correlation=correlation)
    events = [
        x("strata step 1", 0, 100), x("strata step 2", 100, 50), x("nccl:all_gather", 20, 10),
        x("nccl:reduce_scatter", 35, 10),
        launch(10, 1), launch(15, 2), launch(22, 3, name="cudaLaunchKernelExC"), launch(37, 4, name="cudaMemcpyAsync"),
        launch(25, 6, tid=2), launch(12, 7, name="cudaMemcpyAsync"), launch(110, 5),
        x("sm90_gemm", 100, 100, "kernel", correlation=1, stream=7),
        x("elementwise", 250, 50, "kernel", correlation=2, stream=7),
        x("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)", 150, 110, "kernel", correlation=3,
          stream=20),
        x("Memcpy DtoD (Device -> Device)", 310, 20, "gpu_memcpy", correlation=4, stream=20),
        x("backward kernel", 340, 10, "kernel", correlation=6, stream=7),
        x("Memcpy HtoD (Pinned -> Device)", 90, 5, "gpu_memcpy", correlation=7, stream=9),
        x("step 2's kernel", 320, 20, "kernel", correlation=5, stream=7),
    ]
    path = os.path.join(st.temp_dir("gpu_trace"), "rank_0.pt.trace.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"traceEvents": events}, f)
    rows, result = st.trace_overlap(path)
    first = rows[0]
    expected = {"step": 1, "gpu": True, "span_us": 260, "compute_us": 160, "comm_us": 130, "exposed_comm_us": 70,
                "comm_device_work": {"nccl:all_gather": 1, "nccl:reduce_scatter": 1},
                "collectives": {"nccl:all_gather": 1, "nccl:reduce_scatter": 1}}
    st.check({k: first[k] for k in expected} == expected, "step 1: %r, expected %r" % (first, expected), result)
    st.check(rows[1]["compute_us"] == 20 and rows[1]["comm_us"] == 0, "step 2: %r" % rows[1], result)
    st.expect_stdout(result, "| 1 | 0.260 ms | 0.160 ms | 0.130 ms | 0.070 ms | 46% |")
    bad = os.path.join(st.temp_dir("bad_trace"), "x.json")
    with open(bad, "w", encoding="utf-8") as f:
        f.write("{}")
    result = st.run_command([sys.executable, st.TRACE_OVERLAP, bad])
    st.expect_exit(result, 2)
    st.expect_stderr(result, "not a trace")


def traces_sharded_accumulation():
    out, result = run("fsdp", "strategy.name=\"fsdp\"", "train.micro_batches=2", "train.trace_steps=[3,4]", nproc=2)
    # Gloo has no reduce-scatter of its own: Strata's is an all-reduce there (comm/process_group.cpp).
    check_trace(out, result, 2, 2, [r"^gloo:all_gather$", r"^gloo:all_reduce$"])
    # The schedule: each micro-batch gathers its 3 units in forward, and in backward all but the
    # last, which stays gathered from its forward into its backward.
    rows, result = st.trace_overlap(os.path.join(out, "trace", "rank_1.pt.trace.json"))
    for r in rows:
        for m in (0, 1):
            gathers = [r["schedule"].get("micro-batch %d %s" % (m, part), {}).get("gloo:all_gather", 0)
                       for part in ("forward", "backward")]
            st.check(gathers == [3, 2], "step %d micro-batch %d: all-gathers in forward and backward %r, expected "
                     "[3, 2]: %r" % (r["step"], m, gathers, r["schedule"]), result)
    st.expect_stdout(result, "| 3 | micro-batch 0 forward | gloo:all_gather x3 |")


def no_trace_by_default():
    out, result = run("plain")
    st.check(not os.path.exists(os.path.join(out, "trace")), "a trace directory without trace_steps", result)
    st.check("trace" not in st.load_summary(out), "summary.json has a trace without trace_steps")


def bad_ranges_are_config_errors():
    for value, says in (("[5]", "[first, last]"), ("[4,3]", "got [4, 3]"), ("[2,9]", "<= steps (8)"),
                        ("[0,2]", ">= 1")):
        _, result = run("bad", "train.trace_steps=%s" % value, expect=2)
        st.expect_clean_failure(result, 2, "train.trace_steps", says)
    config = os.path.join(st.temp_dir("file"), "bad_trace.toml")
    with open(st.GOOD_SYNTHETIC, encoding="utf-8") as f:
        text = f.read()
    with open(config, "w", encoding="utf-8") as f:
        f.write(text.replace("[train]\n", "[train]\ntrace_steps = [3, 1]\n", 1))
    result = st.strata("run", config, "--out", st.temp_dir("bad_file"))
    st.expect_clean_failure(result, 2, "bad_trace.toml", "trace_steps")


if __name__ == "__main__":
    st.main([traces_two_ddp_ranks, traces_sharded_accumulation, no_trace_by_default, bad_ranges_are_config_errors,
             overlap_of_a_gpu_trace])
