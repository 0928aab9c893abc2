#!/usr/bin/env python3
"""Activation checkpointing ([train] activation_checkpointing = "full", _every = k): every
strategy trains to the same model tensor by tensor with and without it (plain SGD, accumulation,
world size 3 for the sharded ones), and the measured peak of tensor memory falls by about the
activations of the checkpointed units. Also the transformer path (a ViT, whose units take a batch
context) and a bad key combination.

    STRATA_BIN=build/bin/strata python3 tests/integration/test_activation_checkpointing.py
"""
import strata_test as st
from test_transformers import VIT_TOML

# Activations dominate: micro-batches of 2100 examples (world 1) through six 128-wide units of linear,
# LayerNorm and GELU (1 MiB per activation tensor, three kept inside each unit besides its input)
# against 0.4 MiB of parameters.
SETS = ["model.hidden=[128,128,128,128,128,128]", "model.layer_norm=true", "model.activation=\"gelu\"",
        "dataset.input_shape=[128]", "dataset.num_classes=8", "dataset.train_size=8400", "dataset.eval_size=64",
        "train.steps=4", "train.global_batch_size=4200", "train.micro_batches=2", "optimizer.name=\"sgd\"",
        "optimizer.lr=0.05", "optimizer.weight_decay=0", "log.every=2", "eval.batches=1", "train.threads=1",
        "train.save_final=true"]
FULL = ["train.activation_checkpointing=\"full\""]

CASES = [("single", 1, []), ("dp", 1, []), ("ddp", 3, []), ("zero1", 2, []),
         ("zero2", 3, []), ("zero3", 3, []), ("fsdp", 2, [])]


def run(label, nproc, *sets, base=SETS, config=st.GOOD_SYNTHETIC):
    out = st.temp_dir(label)
    result = st.strata("run", config, "--out", out, "--nproc", nproc,
                       *st.set_args(*(base + list(sets))), timeout=300)
    st.expect_exit(result, 0)
    st.expect_no_crash(result)
    return out, st.load_summary(out)


def same_model_lower_peak():
    reference, _ = run("single_reference", 1, "strategy.name=\"single\"")
    for name, world, extra in CASES:
        sets = ["strategy.name=\"%s\"" % name] + extra
        plain, p = run(name + "_plain", world, *sets)
        full, f = run(name + "_full", world, *(sets + FULL))
        every2, e = run(name + "_every2", world, *(sets + FULL + ["train.activation_checkpointing_every=2"]))
        # Recomputing a unit's forward reproduces its activations exactly: the models are equal
        # bit for bit to the same strategy without checkpointing, and within rounding to single.
        st.expect_models_equal(plain, full, "%s@%d full checkpointing" % (name, world), rel=0.0)
        st.expect_models_equal(plain, every2, "%s@%d every 2nd unit" % (name, world), rel=0.0)
        st.expect_models_equal(reference, full, "%s@%d full checkpointing against single" % (name, world), rel=1e-5)
        st.expect_close(f["final_loss"], p["final_loss"], "%s final loss" % name, rel=0.0)
        pp, pf, pe = (s["memory"]["peak_tensor_bytes"] for s in (p, f, e))
        print("  %s@%d: peak tensor bytes %.2f MiB plain, %.2f MiB full (%.2f x), %.2f MiB every 2nd (%.2f x)"
              % (name, world, pp / 2**20, pf / 2**20, pf / pp, pe / 2**20, pe / pp))
        # Without checkpointing backward starts with every unit's activations alive (about four
        # 1 MiB tensors per unit); with it, the units' inputs plus one unit's activations.
        st.check(pf < 0.7 * pp, "%s: checkpointing every unit left the peak at %.3f x (expected < 0.7 x)"
                 % (name, pf / pp))
        st.check(pf <= pe <= pp, "%s: every 2nd unit's peak %.2f MiB is not between full's %.2f and none's %.2f"
                 % (name, pe / 2**20, pf / 2**20, pp / 2**20))


def vit_units_with_context():
    # test_transformers.py's small ViT, trained with fsdp and accumulation.
    config = st.temp_dir("vit_config") + "/vit.toml"
    with open(config, "w") as f:
        f.write(VIT_TOML)
    sets = ["strategy.name=\"fsdp\"", "train.steps=4", "train.global_batch_size=32", "train.micro_batches=2",
            "train.threads=1", "train.save_final=true", "eval.batches=1"]
    plain, _ = run("vit_plain", 2, *sets, base=[], config=config)
    full, _ = run("vit_full", 2, *(sets + FULL), base=[], config=config)
    st.expect_models_equal(plain, full, "vit fsdp@2 full checkpointing", rel=0.0)


def every_without_full_is_an_error():
    out = st.temp_dir("bad")
    result = st.strata("run", st.GOOD_SYNTHETIC, "--out", out,
                       *st.set_args("train.activation_checkpointing_every=2"))
    st.expect_clean_failure(result, 2, "activation_checkpointing_every", "activation_checkpointing = \"full\"")


if __name__ == "__main__":
    st.main([same_model_lower_peak, vit_units_with_context, every_without_full_is_an_error])
