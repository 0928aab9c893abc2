#!/usr/bin/env python3
"""Every strategy ends with `single`'s model, tensor by tensor (save_final, 1e-5 relative to each
tensor's largest value), with plain SGD (which sees the scale of the gradients, unlike AdamW) and
AdamW, at world sizes 2 and 3 (padded shards), with and without accumulation, on synthetic and on
real Fashion-MNIST data, for the MLP and the CNN. Also equal: the gradient norm (clipping active in
one case), the eval loss and accuracy; and every rank's replica (replica strategies). Ranks seeded
differently still end equal: the setup broadcast is what makes them start alike.

    STRATA_BIN=build/bin/strata python3 tests/integration/test_equivalence.py
"""
import os

import strata_test as st
from test_distributed import CNN_SETS

RTOL = 1e-5
SGD = ["optimizer.name=sgd", "optimizer.momentum=0", "optimizer.weight_decay=0", "optimizer.lr=0.1"]
COMMON = ["train.steps=24", "train.global_batch_size=24", "log.every=4", "train.save_final=true"]
# name, overrides, world sizes it runs at (dp: replicas in one process)
STRATEGIES = [
    ("ddp", [], None), ("zero1", [], None), ("zero2", [], None), ("zero3", [], None), ("fsdp", [], None),
    ("dp", [], "replicas"), ("local_sgd", ["strategy.sync_every=1"], None),
]
REPLICAS = ("ddp", "zero1", "zero2", "dp", "local_sgd")
FASHION = ["train.global_batch_size=48"]
FASHION_TOML = """# test_equivalence.py: the first examples of Fashion-MNIST
[experiment]
name = "equivalence_fashion_mnist"
[model]
name = "mlp"
[dataset]
name = "fashion_mnist"
train_limit = 2400
eval_limit = 480
[strategy]
name = "single"
[optimizer]
name = "sgd"
[train]
seed = 0
[eval]
every = 0
batches = 0
"""


def fashion_config():
    path = os.path.join(st.temp_dir("fashion"), "fashion.toml")
    with open(path, "w") as f:
        f.write(FASHION_TOML)
    return path


def run(label, sets, world=1, replicas=False, config=st.GOOD_SYNTHETIC, env=None):
    out = st.temp_dir(label)
    args = ["run", config, "--out", out]
    sets = COMMON + list(sets)
    if world > 1 and replicas:
        sets.append("strategy.replicas=%d" % world)
    elif world > 1:
        args += ["--nproc", world]
    result = st.strata(*args, *st.set_args(*sets), env=env, timeout=300)
    st.expect_exit(result, 0)
    st.expect_no_crash(result)
    return st.load_summary(out), out


def expect_same(single, single_dir, summary, out, what, name):
    diff = st.expect_models_equal(single_dir, out, what, rel=RTOL)
    if name != "local_sgd":  # local SGD reports its own rank's gradient norm, by design
        st.expect_close(summary["final_grad_norm"], single["final_grad_norm"], what + " final_grad_norm", rel=RTOL)
    st.expect_close(summary["eval"]["loss"], single["eval"]["loss"], what + " eval loss", rel=RTOL)
    st.expect_close(summary["eval"]["accuracy"], single["eval"]["accuracy"], what + " eval accuracy", abs_tol=1e-9)
    if name in REPLICAS:
        st.check(summary.get("replicas_equal") is True, "%s: the replicas differ: %s" % (what, summary.get(
            "replica_digests")))
    return diff


def matrix(label, model_sets, worlds, micros, strategies=STRATEGIES, env=None, config=st.GOOD_SYNTHETIC):
    for micro in micros:
        sets = model_sets + ["train.micro_batches=%d" % micro]
        single, single_dir = run("%s_single_m%d" % (label, micro), sets, env=env, config=config)
        for name, extra, placement in strategies:
            for world in worlds:
                what = "%s %s world %d micro %d" % (label, name, world, micro)
                summary, out = run("%s_%s_w%d_m%d" % (label, name, world, micro),
                                   sets + ["strategy.name=" + name] + extra, world, placement == "replicas", env=env,
                                   config=config)
                diff = expect_same(single, single_dir, summary, out, what, name)
                print("  %s: max rel diff %.1e, grad norm %.9g (single %.9g)"
                      % (what, diff, summary["final_grad_norm"], single["final_grad_norm"]))


def sgd_mlp_synthetic():
    """Plain SGD, worlds 2 and 3 (the MLP's 676 parameters pad at 3), micro-batches 1 and 2."""
    matrix("sgd_mlp", SGD, (2, 3), (1, 2))


def adamw_cnn_clipped():
    """AdamW on the CNN with the gradient norm clipped (to 1: below the norms of every step here),
    world 3, two micro-batches; and on the MLP at world 2. local_sgd is AdamW-approximate by design
    and sits these out."""
    strategies = [s for s in STRATEGIES if s[0] != "local_sgd"]
    matrix("adamw_cnn_clip", CNN_SETS + ["train.clip_grad_norm=1.0"], (3,), (2,), strategies)
    matrix("adamw_mlp", [], (2,), (1,), strategies)


def fashion_mnist_mlp_and_cnn():
    """Real data: the MLP and the CNN on Fashion-MNIST, world 3, two micro-batches, plain SGD."""
    st.require_fashion_mnist()
    config = fashion_config()
    matrix("fmnist_mlp", FASHION + SGD + ["model.hidden=[64]"], (3,), (2,), config=config)
    matrix("fmnist_cnn", FASHION + SGD + ["model.name=cnn", "model.channels=[4,8]", "model.hidden=16",
                                          "model.groups=2"], (3,), (2,), config=config)


def ranks_seeded_differently_end_equal():
    """fixture_quirks with rank_init shifts every parameter by 0.01 x RANK: without the setup
    broadcast from rank 0 the ranks would train different models."""
    env = {"STRATA_PLUGIN_PATH": st.fixture_plugin_dir("quirks_model")}
    st.fixture_libraries("quirks_model")
    model = ["model.name=fixture_quirks", "model.rank_init=true"] + SGD
    strategies = [s for s in STRATEGIES if s[0] in ("ddp", "zero1", "zero2", "zero3", "fsdp", "local_sgd")]
    matrix("rank_init", model, (3,), (1,), strategies, env=env)


if __name__ == "__main__":
    st.main([sgd_mlp_synthetic, adamw_cnn_clipped, fashion_mnist_mlp_and_cnn, ranks_seeded_differently_end_equal])
