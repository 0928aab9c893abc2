#!/usr/bin/env python3
"""Measured peaks of tensor memory (memory.peak_tensor_bytes: a counting CPU allocator) show the
sharding of docs/user-guide.md during training steps, backward included: at world size 4, an MLP
of eight 512-wide layers with AdamW and a small batch, zero3 and fsdp peak at most 0.5 x ddp's,
zero2 (1 MiB buckets) at most 0.8 x, and ddp at least its parameters + gradients + optimizer state.

    STRATA_BIN=build/bin/strata python3 tests/integration/test_memory.py
"""
import strata_test as st

WORLD = 4
SETS = ["model.hidden=[512,512,512,512,512,512,512,512]", "dataset.input_shape=[512]", "dataset.num_classes=10",
        "dataset.train_size=256", "dataset.eval_size=64", "train.steps=4", "train.global_batch_size=32",
        "optimizer.name=adamw", "log.every=2", "eval.batches=1", "train.threads=1"]


def run(label, *sets):
    out = st.temp_dir(label)
    result = st.strata("run", st.GOOD_SYNTHETIC, "--out", out, "--nproc", WORLD, *st.set_args(*(SETS + list(sets))),
                       timeout=300)
    st.expect_exit(result, 0)
    st.expect_no_crash(result)
    return st.load_summary(out)


def peaks_show_sharding():
    ddp = run("ddp", "strategy.name=ddp")
    mem = ddp["memory"]
    st.check(mem["tensor_source"] == "cpu_counting_allocator", "tensor source %r" % mem["tensor_source"])
    state = sum(mem["model_state_bytes"].values())
    peak = mem["peak_tensor_bytes"]
    print("  ddp: peak %.2f MiB, model state %.2f MiB, setup peak %.2f MiB"
          % (peak / 2**20, state / 2**20, mem["peak_setup_bytes"] / 2**20))
    st.check(peak >= state, "ddp's peak %d B is below the model state it holds (%d B)" % (peak, state))
    for name, sets, limit in (("zero3", [], 0.5), ("fsdp", [], 0.5), ("zero2", ["strategy.reduce_bucket_mb=1"], 0.8)):
        s = run(name, "strategy.name=" + name, *sets)
        ratio = s["memory"]["peak_tensor_bytes"] / peak
        print("  %s: peak %.2f MiB = %.3f x ddp's (limit %.1f), setup peak %.2f MiB"
              % (name, s["memory"]["peak_tensor_bytes"] / 2**20, ratio, limit,
                 s["memory"]["peak_setup_bytes"] / 2**20))
        st.check(ratio <= limit, "%s: peak tensor bytes %.3f x ddp's, expected at most %.1f" % (name, ratio, limit))
        st.check(s["memory"]["peak_setup_bytes"] < mem["peak_setup_bytes"] or name == "zero2",
                 "%s: setup peak %d B not below ddp's %d B" % (name, s["memory"]["peak_setup_bytes"],
                                                               mem["peak_setup_bytes"]))


if __name__ == "__main__":
    st.main([peaks_show_sharding])
