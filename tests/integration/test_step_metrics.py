#!/usr/bin/env python3
"""Where the step time goes and how fast the model computes: summary.json's time_breakdown_s
(data, compute, exposed communication, optimizer), flops (achieved TFLOP/s per device and MFU
against a named peak) and the matching TensorBoard scalars; on a CPU, MFU only against a peak the
user gives or `strata bench gemm` measured.

    STRATA_BIN=build/bin/strata python3 tests/integration/test_step_metrics.py
"""
import os

import strata_test as st

SETS = ["model.hidden=[256,256]", "dataset.input_shape=[256]", "dataset.train_size=2048", "train.steps=12",
        "train.global_batch_size=128", "log.every=4", "eval.batches=1", "train.threads=1"]


def run(label, *sets, nproc=1, env=None):
    out = st.temp_dir(label)
    result = st.strata("run", st.GOOD_SYNTHETIC, "--out", out, "--nproc", nproc, *st.set_args(*(SETS + list(sets))),
                       env=env)
    st.expect_exit(result, 0)
    st.expect_no_crash(result)
    return out, st.load_summary(out), result


def breakdown_adds_up():
    for strategy, nproc in (("single", 1), ("ddp", 2), ("fsdp", 2)):
        out, s, _ = run(strategy, "strategy.name=\"%s\"" % strategy, nproc=nproc)
        b = s["time_breakdown_s"]
        st.check(b is not None and sorted(b) == ["comm_wait", "compute", "data", "optimizer"],
                 "%s: time_breakdown_s is %r" % (strategy, b))
        st.check(all(v >= 0 for v in b.values()), "%s: negative phase in %r" % (strategy, b))
        st.check(s["time_breakdown_timing"] == "host clock", "%s: time_breakdown_timing %r on the CPU"
                 % (strategy, s["time_breakdown_timing"]))
        mean_step = s["train_time_s"] / s["steps"]
        total = sum(b.values())
        print("  %s@%d: data %.2f ms, compute %.2f ms, comm wait %.2f ms, optimizer %.2f ms; sum %.2f ms against "
              "a mean step of %.2f ms" % (strategy, nproc, *(1e3 * b[k] for k in ("data", "compute", "comm_wait",
                                                                                  "optimizer")),
                                          1e3 * total, 1e3 * mean_step))
        # The phases cover the step but for the few host operations between them.
        st.check(0.8 * mean_step <= total <= 1.05 * mean_step,
                 "%s: the phases sum to %.4f s per step, the steps took %.4f s" % (strategy, total, mean_step))
        if nproc == 1:
            st.check(b["comm_wait"] == 0, "single: %g s of communication waits" % b["comm_wait"])
        else:
            st.check(b["comm_wait"] > 0, "%s: no communication wait measured" % strategy)
        events = st.read_events(out)
        for tag in ("perf/time_data_s", "perf/time_compute_s", "perf/time_comm_wait_s", "perf/time_optimizer_s",
                    "perf/tflops_per_device"):
            st.check(tag in events.get("scalars", {}), "%s: no TensorBoard scalar %s" % (strategy, tag))


def mfu_against_given_peak():
    out, s, result = run("peak", "train.peak_tflops=0.5")
    f = s["flops"]
    st.check(f["per_sample"] == s["flops_per_sample"] > 0, "flops.per_sample %r" % f["per_sample"])
    st.check("in x out" in (f["formula"] or ""), "flops.formula %r" % f["formula"])
    expected = f["per_sample"] * s["global_batch_size"] / s["step_time_s"] / s["devices"] / 1e12
    st.expect_close(f["achieved_tflops_per_device"], expected, "achieved TFLOP/s per device", rel=1e-9)
    st.expect_close(f["mfu"], expected / 0.5, "mfu", rel=1e-9)
    st.check(f["peak_tflops"] == 0.5 and f["peak_source"] == "[train] peak_tflops", "peak %r" % f)
    st.expect_in("flops: ", result.stdout + result.stderr, result)
    events = st.read_events(out)
    st.check("perf/mfu" in events.get("scalars", {}), "no TensorBoard scalar perf/mfu")


def cpu_mfu_needs_a_measured_peak():
    cache = st.temp_dir("cache")
    env = {"STRATA_CACHE_DIR": cache}
    _, s, _ = run("no_peak", env=env)
    st.check(s["flops"]["mfu"] is None, "MFU %r without any peak" % s["flops"]["mfu"])
    st.expect_in("strata bench gemm", s["flops"]["peak_source"])
    # The peak of the rank's thread count (train.threads = 1) is the one MFU is read against.
    bench = st.strata("bench", "gemm", "-m", "64", "-n", "64", "-k", "64", "--steps", "2", "--threads", "2", env=env)
    st.expect_exit(bench, 0)
    _, s, _ = run("other_threads", env=env)
    st.check(s["flops"]["mfu"] is None, "MFU %r against the peak of another thread count" % s["flops"]["mfu"])
    bench = st.strata("bench", "gemm", "-m", "64", "-n", "64", "-k", "64", "--steps", "2", "--threads", "1", env=env)
    st.expect_exit(bench, 0)
    st.check(os.listdir(cache), "strata bench gemm recorded nothing in %s" % cache)
    _, s, _ = run("measured_peak", env=env)
    f = s["flops"]
    st.check(f["mfu"] is not None and f["mfu"] > 0, "MFU %r after strata bench gemm" % f["mfu"])
    st.expect_in("strata bench gemm", f["peak_source"])


if __name__ == "__main__":
    st.main([breakdown_adds_up, mfu_against_given_peak, cpu_mfu_needs_a_measured_peak])
