#!/usr/bin/env python3
"""The mixed-precision policy ([precision]) under every strategy, and full models saved by any
strategy (`[train] save_final`) that `single` loads (`[train] init_from`).

    STRATA_BIN=build/bin/strata python3 tests/integration/test_precision_checkpoint.py
"""
import os
import subprocess
import sys

import strata_test as st
from test_distributed import expect_equivalent, run_with_output

STRATEGIES = (("single", 1), ("ddp", 2), ("zero1", 2), ("zero2", 3), ("zero3", 3), ("fsdp", 2))
BF16 = "precision.param_dtype=bfloat16"


def run(label, *sets, nproc=1):
    return run_with_output(label, *sets, nproc=nproc)


def bf16_trains_under_every_strategy():
    """bf16 compute with float32 masters: close to float32 training (rounding, not a bug: a wrong
    gradient moves the loss by far more), the policy is logged, and the parameter memory holds the
    bf16 copy besides the float32 master."""
    fp32, _ = run("fp32_single")
    for name, world in STRATEGIES:
        for reduce in ("float32", "bfloat16"):
            summary, result = run("bf16_%s_%s" % (name, reduce), "strategy.name=" + name, BF16,
                                  "precision.reduce_dtype=" + reduce, nproc=world)
            what = "%s world %d bf16 (reduce %s)" % (name, world, reduce)
            st.expect_close(summary["final_loss"], fp32["final_loss"], what + " final_loss", abs_tol=5e-3)
            st.expect_close(summary["param_norm"], fp32["param_norm"], what + " param_norm", rel=2e-3)
            st.expect_stdout(result, "precision: parameters bfloat16 in forward and backward, gradients reduced in "
                             + reduce)
            print("  %s: final_loss %.6f (fp32 %.6f) param_norm %.8f (fp32 %.8f) params %d bytes"
                  % (what, summary["final_loss"], fp32["final_loss"], summary["param_norm"], fp32["param_norm"],
                     summary["memory"]["model_state_bytes"]["params"]))
    # single: the replica in bf16 (2 bytes) plus its float32 master (4 bytes) per parameter.
    single, _ = run("bf16_single_mem", BF16)
    params = fp32["memory"]["model_state_bytes"]["params"]
    st.check(single["memory"]["model_state_bytes"]["params"] == params * 3 // 2,
             "single bf16 params %d bytes, expected %d" % (single["memory"]["model_state_bytes"]["params"],
                                                          params * 3 // 2))


def bf16_reduce_halves_the_traffic():
    """Gradients on the wire in bf16: DDP's bus bytes halve."""
    fp32, _ = run("wire_fp32", "strategy.name=ddp", BF16, nproc=2)
    bf16, _ = run("wire_bf16", "strategy.name=ddp", BF16, "precision.reduce_dtype=bfloat16", nproc=2)
    ratio = bf16["comm"]["bus_bytes_per_step"] / fp32["comm"]["bus_bytes_per_step"]
    st.check(abs(ratio - 0.5) < 1e-9, "ddp bf16 / fp32 wire bus bytes ratio %.4f, expected 0.5" % ratio)


def saved_model_norm(path):
    """L2 norm of every tensor in a saved model, read by PyTorch's own loader (None without torch)."""
    code = ("import math,sys,torch; d=torch.load(sys.argv[1], weights_only=False); "
            "print(math.sqrt(sum(float((v.double()**2).sum()) for v in d.values())))")
    result = subprocess.run([sys.executable, "-c", code, path], capture_output=True, text=True)
    return float(result.stdout) if result.returncode == 0 else None


def final_model_round_trips():
    """Each strategy saves its gathered model; `single` starts from it with a negligible learning
    rate and reports the same parameter norm; the file also loads in PyTorch."""
    for name, world in STRATEGIES:
        out = st.temp_dir("save_" + name)
        result = st.strata("run", st.GOOD_SYNTHETIC, "--out", out, "--nproc", world,
                           *st.set_args("strategy.name=" + name, "train.save_final=true", "train.steps=8",
                                        "train.global_batch_size=24"),
                           timeout=120)
        st.expect_exit(result, 0)
        summary = st.load_summary(out)
        model = os.path.join(out, "final_model.pt")
        st.check(summary.get("final_model") == "final_model.pt", "%s: summary has no final_model" % name)
        loaded = run("load_" + name, "train.init_from=" + model, "optimizer.lr=1e-12", "train.steps=1")
        what = "%s world %d saved, single loaded" % (name, world)
        st.expect_close(loaded[0]["param_norm"], summary["param_norm"], what + " param_norm", rel=1e-9)
        norm = saved_model_norm(model)
        if norm is not None:
            st.expect_close(norm, summary["param_norm"], name + " norm of the file read by torch.load", rel=1e-9)
        print("  %s: param_norm %.12g, loaded by single %.12g, torch.load %s"
              % (what, summary["param_norm"], loaded[0]["param_norm"], norm))


def bad_init_file_is_named():
    out = st.temp_dir("bad_init")
    result = st.strata_run(st.GOOD_SYNTHETIC, out, "train.init_from=" + st.GOOD_SYNTHETIC, expect=None)
    st.expect_clean_failure(result, 2, "train.init_from", "is not a saved model")
    st.expect_not_in("train.init_from: train.init_from", result.stderr, result, "stderr")
    missing = st.strata_run(st.GOOD_SYNTHETIC, st.temp_dir("missing_init"), "train.init_from=no_such.pt", expect=None)
    st.expect_clean_failure(missing, 2, "train.init_from", "no model file")


if __name__ == "__main__":
    st.main([bf16_trains_under_every_strategy, bf16_reduce_halves_the_traffic, final_model_round_trips,
             bad_init_file_is_named])
