#!/usr/bin/env python3
"""Optimizer offload (`strategy.offload = "optimizer"`, strata/offload.hpp) of every sharded
strategy: on the CPU the host is the device, so a run with offload must equal the same strategy
without it bit for bit (plain SGD and AdamW, world 3 with padded shards, two micro-batches), report
its optimizer state and its host copies of the masters as host model state, and resume exactly.

    STRATA_BIN=build/bin/strata python3 tests/integration/test_offload.py
"""
import os

import strata_test as st

COMMON = ["train.steps=12", "train.global_batch_size=24", "train.micro_batches=2", "log.every=4",
          "train.save_final=true"]
SGD = ["optimizer.name=sgd", "optimizer.momentum=0", "optimizer.weight_decay=0", "optimizer.lr=0.1"]
# The CNN of the equivalence tests: its groups pad at world 3.
CNN = ["model.name=cnn", "model.channels=[4,8]", "model.hidden=16", "model.groups=2",
       "dataset.input_shape=[1,12,12]"]
OFFLOAD = "strategy.offload=\"optimizer\""


def run(label, sets, world=3, extra=()):
    out = st.temp_dir(label)
    args = ["run", st.GOOD_SYNTHETIC, "--out", out, "--nproc", world] + list(extra)
    result = st.strata(*args, *st.set_args(*(COMMON + list(sets))), timeout=300)
    st.expect_exit(result, 0)
    st.expect_no_crash(result)
    return st.load_summary(out), out


def state(summary):
    return summary["memory"]["model_state_bytes"]


def pair(label, sets):
    """The strategy with and without offload: bit-equal models, and the optimizer's bytes moved to
    the host."""
    plain, plain_dir = run(label, sets)
    host, host_dir = run(label + "_offload", sets + [OFFLOAD])
    diff = st.expect_models_equal(plain_dir, host_dir, label + " with offload", rel=0.0)
    st.expect_close(host["eval"]["loss"], plain["eval"]["loss"], label + " eval loss", rel=0.0)
    a, b = state(plain), state(host)
    st.check(b.get("optimizer") == 0, "%s: offload leaves optimizer state on the device: %s" % (label, b))
    st.check(b.get("host_optimizer") == a.get("optimizer"),
             "%s: host optimizer state %s, the device's without offload %s" % (label, b.get("host_optimizer"),
                                                                               a.get("optimizer")))
    st.check(b.get("params") == a.get("params") and b.get("grads") == a.get("grads"),
             "%s: the device's parameters and gradients changed with offload: %s vs %s" % (label, b, a))
    st.check(b.get("host_masters", 0) > 0, "%s: no host copy of the masters reported: %s" % (label, b))
    print("  %s: bit for bit (diff %g); host optimizer %d B, host masters %d B"
          % (label, diff, b["host_optimizer"], b["host_masters"]))
    return host, host_dir


def sgd_every_sharded_strategy():
    """Plain SGD on the MLP, world 3, two micro-batches: zero1, zero2, zero3, fsdp (FULL_SHARD and
    SHARD_GRAD_OP) and hpz."""
    for label, sets in [("zero1", ["strategy.name=zero1"]), ("zero2", ["strategy.name=zero2"]),
                        ("zero3", ["strategy.name=zero3"]), ("fsdp", ["strategy.name=fsdp"]),
                        ("fsdp_grad_op", ["strategy.name=fsdp", "strategy.sharding_strategy=\"SHARD_GRAD_OP\""]),
                        ("hpz", ["strategy.name=hpz", "strategy.secondary_group_size=1"])]:
        pair("sgd_" + label, SGD + sets)


def adamw_cnn():
    """AdamW (state of 8 bytes per owned element) on the CNN, world 3: zero1, zero3, fsdp; the host
    holds the optimizer state and a float32 copy of the owned masters with their gradients."""
    for name in ("zero1", "zero3", "fsdp"):
        host, _ = pair("adamw_" + name, CNN + ["strategy.name=" + name])
        st.check(host["memory"]["model_state_bytes"]["host_optimizer"] > 0, "adamw %s: no optimizer state" % name)


def resume_is_exact():
    """zero3 with offload and AdamW, checkpointed at step 6 and resumed there: bit for bit the run
    that did not stop (the host state is loaded from the checkpoint, not kept from the device)."""
    sets = CNN + ["strategy.name=zero3", OFFLOAD, "checkpoint.every=6"]
    _, full = run("resume_full", sets)
    step = os.path.join(full, "checkpoints", "step_%08d" % 6)
    _, resumed = run("resume_resumed", sets, extra=["--resume", step])
    diff = st.expect_models_equal(full, resumed, "zero3 offload resumed at 6", rel=0.0)
    print("  zero3 offload resumed at step 6: bit for bit (diff %g)" % diff)


def option_is_checked():
    """offload is one of "none" and "optimizer"; a strategy without sharded state has no such option."""
    result = st.strata("validate", st.GOOD_SYNTHETIC, *st.set_args("strategy.name=zero3", "strategy.offload=\"gpu\""))
    st.expect_exit(result, 2)
    st.expect_in("offload", result.stderr, result)
    result = st.strata("validate", st.GOOD_SYNTHETIC, *st.set_args("strategy.name=ddp", OFFLOAD))
    st.expect_exit(result, 2)
    st.expect_in("offload", result.stderr, result)


if __name__ == "__main__":
    st.main([option_is_checked, sgd_every_sharded_strategy, adamw_cnn, resume_is_exact])
