#!/usr/bin/env python3
"""On a GPU (label `gpu`): every strategy trains on CUDA at world size 1 over a real NCCL process
group and ends with `single`'s model tensor by tensor; two ranks sharing the GPU over Gloo do the
same with ddp, zero2, zero3 and fsdp; summary.json says how memory and step time were measured.
Without a usable CUDA device it prints why and exits 77 (CTest: skipped).

    STRATA_BIN=build/bin/strata python3 tests/integration/test_gpu.py
"""
import sys

import strata_test as st

RTOL = 1e-5
COMMON = ["train.device=cuda", "train.save_final=true", "train.steps=24", "train.global_batch_size=24",
          "log.every=4", "optimizer.name=sgd", "optimizer.momentum=0", "optimizer.lr=0.1", "train.micro_batches=2"]


def gpu_or_skip():
    result = st.strata("validate", st.GOOD_SYNTHETIC, "--set", "train.device=cuda", timeout=120)
    if result.returncode != 0:
        print("skipped: no usable CUDA device (strata validate --set train.device=cuda: exit %s)"
              % result.returncode)
        sys.exit(77)


def run(label, *sets, nproc=1):
    out = st.temp_dir(label)
    result = st.strata("run", st.GOOD_SYNTHETIC, "--out", out, "--nproc", nproc, *st.set_args(*(COMMON + list(sets))),
                       timeout=300)
    st.expect_exit(result, 0)
    st.expect_no_crash(result)
    return st.load_summary(out), out


def strategies_match_single_on_cuda():
    single, single_dir = run("single")
    st.check(single["device"].startswith("cuda"), "single ran on %s" % single["device"])
    st.check(single["memory"]["peak_source"] == "cuda_reserved", "peak source %r" % single["memory"]["peak_source"])
    st.check(single["memory"]["tensor_source"] == "cuda_allocated", "tensor source %r" % single["memory"]["tensor_source"])
    st.check(single["step_timing"] == "cuda events", "step timing %r" % single["step_timing"])
    cases = [(name, ["distributed.backend=nccl"], 1) for name in ("ddp", "zero1", "zero2", "zero3", "fsdp")]
    cases += [("dp", ["strategy.replicas=1"], 1)]
    cases += [(name, ["distributed.backend=gloo", "train.device=cuda:0"], 2) for name in ("ddp", "zero2", "zero3", "fsdp")]
    for name, sets, world in cases:
        summary, out = run("%s_w%d" % (name, world), "strategy.name=" + name, *sets, nproc=world)
        what = "%s world %d (%s)" % (name, world, summary["backend"])
        st.expect_models_equal(single_dir, out, what, rel=RTOL)
        print("  %s: step %.2f ms (single %.2f), peak allocated %d B" % (
            what, 1e3 * summary["step_time_s"], 1e3 * single["step_time_s"], summary["memory"]["peak_tensor_bytes"]))


if __name__ == "__main__":
    gpu_or_skip()
    st.main([strategies_match_single_on_cuda])
