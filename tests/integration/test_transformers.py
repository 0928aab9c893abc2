#!/usr/bin/env python3
"""The transformer workloads under every strategy: a ViT on images, a Llama decoder on padded token
sequences of uneven length (causal LM; micro-batches carry different numbers of target tokens), a
Llama sequence classifier on MRPC pairs padded to the longest of each batch. Plain SGD at world
sizes 2 and 3 with two micro-batches, every strategy against `single` with ONE micro-batch,
tensor by tensor: a loss normalized per micro-batch or per rank instead of over the global batch,
or padding that leaks into the result, makes them differ. Then `strata check --models
transformers` on fsdp, the data plugins' errors on damaged files, and `steps = 0`.

    STRATA_BIN=build/bin/strata python3 tests/integration/test_transformers.py
"""
import os

import data_files
import strata_test as st

RTOL = 1e-5
SGD = ["optimizer.name=sgd", "optimizer.momentum=0", "optimizer.weight_decay=0"]
COMMON = ["train.steps=6", "train.global_batch_size=24", "log.every=3", "train.save_final=true",
          "train.lr_schedule=constant", "train.warmup_steps=0", "eval.every=0", "eval.batches=0"]
STRATEGIES = ["ddp", "zero1", "zero2", "zero3", "fsdp"]

VIT_TOML = """# test_transformers.py: a small ViT on synthetic images
[experiment]
name = "vit_equivalence"
[model]
name = "vit"
patch_size = 4
dim = 32
depth = 2
heads = 2
[dataset]
name = "synthetic"
train_size = 480
eval_size = 96
input_shape = [3, 8, 8]
num_classes = 4
[strategy]
name = "single"
[optimizer]
name = "sgd"
lr = 0.1
[train]
seed = 0
"""

LLAMA_TOML = """# test_transformers.py: the Llama debug preset on padded token sequences of uneven length
[experiment]
name = "llama_equivalence"
[model]
name = "llama"
preset = "debug"
[dataset]
name = "synthetic_text"
train_size = 480
eval_size = 48
vocab_size = 64
seq_len = 16
min_len = 2
padding = "{padding}"
[strategy]
name = "single"
[optimizer]
name = "sgd"
lr = 0.5
[train]
seed = 0
"""

MRPC_TOML = """# test_transformers.py: a Llama sequence classifier on MRPC pairs padded to the batch's longest
# (lr 0.05: at 0.2 six SGD steps amplify the 5e-7 reduction-order differences of the first to 5e-5)
[experiment]
name = "mrpc_equivalence"
[model]
name = "llama"
preset = "debug"
[dataset]
name = "mrpc"
path = "{path}"
seq_len = 96
[strategy]
name = "single"
[optimizer]
name = "sgd"
lr = 0.05
[train]
seed = 0
"""


def write(name, text):
    path = os.path.join(st.temp_dir(name), name + ".toml")
    with open(path, "w") as f:
        f.write(text)
    return path


def run(config, label, sets, world=1, expect=0):
    out = st.temp_dir(label)
    args = ["run", config, "--out", out] + (["--nproc", world] if world > 1 else [])
    result = st.strata(*args, *st.set_args(*(COMMON + list(sets))), timeout=300)
    st.expect_exit(result, expect)
    st.expect_no_crash(result)
    return (st.load_summary(out) if expect == 0 else result), out


def matrix(label, config, sets, worlds=(2, 3)):
    """Every strategy at `worlds` with two micro-batches against single with one."""
    single, single_dir = run(config, label + "_single", sets + ["train.micro_batches=1"])
    st.check(single["final_loss"] == single["final_loss"], label + ": single has no final loss")
    for name in STRATEGIES:
        for world in worlds:
            what = "%s %s world %d, 2 micro-batches" % (label, name, world)
            summary, out = run(config, "%s_%s_w%d" % (label, name, world),
                               sets + ["train.micro_batches=2", "strategy.name=" + name], world)
            diff = st.expect_models_equal(single_dir, out, what, rel=RTOL)
            st.expect_close(summary["final_loss"], single["final_loss"], what + " final loss", rel=RTOL)
            st.expect_close(summary["eval"]["loss"], single["eval"]["loss"], what + " eval loss", rel=RTOL)
            print("  %s: max rel diff %.1e, loss %.9g (single %.9g)" % (what, diff, summary["final_loss"],
                                                                        single["final_loss"]))
    return single


def vit_every_strategy():
    matrix("vit", write("vit", VIT_TOML), SGD)


def llama_padded_tokens_every_strategy():
    """Right padding at world 3, left padding at world 2: positions and masks must follow."""
    single = matrix("llama_right", write("llama_right", LLAMA_TOML.format(padding="right")), SGD, (3,))
    for key in ("perplexity", "bits_per_token", "accuracy"):
        st.check(key in single["eval"], "llama causal LM: eval.%s missing from summary.json" % key)
    matrix("llama_left", write("llama_left", LLAMA_TOML.format(padding="left")), SGD, (2,))


def llama_fused_loss_every_kind_of_strategy():
    """[model] loss_chunk_tokens (lm_head fused with the cross-entropy, 7 tokens at a time: uneven
    chunks, padding targets skipped) trains the model the unfused single run trains, through a
    replicated strategy and a sharded one (whose head unit is gathered into the loss) at world 3
    with 2 micro-batches; and so does [model] fused_ops with it, under activation checkpointing."""
    config = write("llama_fused", LLAMA_TOML.format(padding="right"))
    _, reference = run(config, "llama_fused_reference", SGD + ["train.micro_batches=1"])
    for name, world in (("single", 1), ("ddp", 3), ("zero3", 3)):
        what = "llama loss_chunk_tokens=7 %s world %d, 2 micro-batches" % (name, world)
        _, out = run(config, "llama_fused_%s" % name,
                     SGD + ["train.micro_batches=2", "strategy.name=" + name, "model.loss_chunk_tokens=7"], world)
        diff = st.expect_models_equal(reference, out, what, rel=RTOL)
        print("  %s: max rel diff %.1e against unfused single" % (what, diff))
    # [model] fused_ops too (RMSNorm with its residual add, RoPE in place, SwiGLU), under activation
    # checkpointing: every block's forward runs again in backward, rotating fresh projections in place.
    what = "llama fused_ops and loss_chunk_tokens=7, activation checkpointing, zero3 world 3, 2 micro-batches"
    _, out = run(config, "llama_fused_ops", SGD + ["train.micro_batches=2", "strategy.name=zero3",
                                                    "model.loss_chunk_tokens=7", "model.fused_ops=true",
                                                    "train.activation_checkpointing=full"], 3)
    diff = st.expect_models_equal(reference, out, what, rel=RTOL)
    print("  %s: max rel diff %.1e against unfused single" % (what, diff))


def mrpc_uneven_padding_every_strategy():
    data = st.temp_dir("mrpc_data")
    data_files.write_mrpc(data, train_pairs=96, eval_pairs=30)
    single = matrix("mrpc", write("mrpc", MRPC_TOML.format(path=data)), SGD, (3,))
    st.check("f1" in single["eval"], "mrpc: eval.f1 missing from summary.json: %s" % single["eval"])


def steps_zero_evaluates_only():
    config = write("steps0", VIT_TOML)
    summary, out = run(config, "steps0", ["train.steps=0", "train.warmup_steps=10", "train.save_final=false"])
    st.check(summary["steps"] == 0, "steps = 0 trained %s steps" % summary["steps"])
    st.check(summary["eval"]["loss"] is not None and summary["eval"]["examples"] == 96,
             "steps = 0: no evaluation of the initial model: %s" % summary["eval"])


def vit_cifar10_runs_on_small_files():
    """experiments/vit_cifar10.toml as shipped (augmentation on), on small files in CIFAR-10's
    binary format: validate, then two steps under fsdp at world 2."""
    data = st.temp_dir("cifar10")
    data_files.write_cifar10(data)
    config = os.path.join(st.REPO, "experiments", "vit_cifar10.toml")
    sets = st.set_args("dataset.path=" + data, "train.steps=2", "train.warmup_steps=0", "train.global_batch_size=16",
                       "eval.every=0", "strategy.name=fsdp")
    st.expect_exit(st.strata("validate", config, *sets), 0)
    out = st.temp_dir("vit_cifar10")
    result = st.strata("run", config, "--out", out, "--nproc", 2, *sets, timeout=300)
    st.expect_exit(result, 0)
    summary = st.load_summary(out)
    st.check(summary["steps"] == 2 and summary["eval"]["examples"] == 20, "unexpected summary: %s" % summary)


def check_command_on_transformers():
    out = st.temp_dir("check_fsdp")
    os.rmdir(out)
    result = st.strata("check", "fsdp", "--models", "transformers", "--world-sizes", "3", "--out", out, timeout=600)
    st.expect_exit(result, 0)
    st.expect_in("llama/adamw", result.stdout, result)
    st.expect_in("vit/sgd", result.stdout, result)


BAD_DATA_TOML = """# test_transformers.py: a damaged {dataset} file
[experiment]
name = "bad_{dataset}"
[model]
name = "{model}"
[dataset]
name = "{dataset}"
path = "{path}"
[strategy]
name = "single"
"""


def damaged_data_files_are_named():
    """validate reads the data: a damaged file is exit 2 naming the file and what is wrong."""
    cases = []
    for label, damage in (("label", data_files.damage_cifar10_label), ("size", data_files.damage_cifar10_truncate)):
        d = st.temp_dir("cifar_" + label)
        data_files.write_cifar10(d)
        cases.append(("cifar10", "cnn", d, damage(d)))
    for label, damage in (("columns", data_files.damage_mrpc_columns), ("label", data_files.damage_mrpc_label)):
        d = st.temp_dir("mrpc_" + label)
        data_files.write_mrpc(d)
        cases.append(("mrpc", "llama", d, damage(d)))
    d = st.temp_dir("text_latin1")
    data_files.write_text_corpus(d)
    cases.append(("text", "llama", d, data_files.damage_text_latin1(d)))
    for dataset, model, path, damage in cases:
        config = write("bad_" + dataset, BAD_DATA_TOML.format(dataset=dataset, model=model, path=path))
        result = st.strata("validate", config)
        st.expect_clean_failure(result, 2, damage.file_name, damage.message)
        print("  %s: %s" % (dataset, damage.message))


if __name__ == "__main__":
    st.main([steps_zero_evaluates_only, vit_every_strategy, llama_padded_tokens_every_strategy,
             llama_fused_loss_every_kind_of_strategy,
             mrpc_uneven_padding_every_strategy, damaged_data_files_are_named, vit_cifar10_runs_on_small_files,
             check_command_on_transformers])
