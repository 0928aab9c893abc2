#!/usr/bin/env python3
"""Hugging Face interop of the llama model: strata starts from a transformers checkpoint
(`[train] init_from` = a save_pretrained directory) and evaluates it to the loss transformers
computes on the same windows; a safetensors save_final (`[train] save_format = "safetensors"`) is
a directory that transformers' from_pretrained loads with the same logits.

Needs torch and transformers in the test's interpreter (skipped otherwise) and the llama model and
text dataset plugins (skipped when they are not built).
"""

import json
import math
import os
import random
import sys

import strata_test as st

SEQ_LEN = 32
EVAL_FRACTION = 0.25
VOCAB = 256  # the byte tokenizer
REL = 1e-4


def need_transformers():
    try:
        import torch
        import transformers
    except ImportError as e:
        raise st.Skip("torch and transformers are needed in %s (%s)" % (sys.executable, e))
    transformers.utils.logging.disable_progress_bar()
    return torch, transformers


def need_plugins():
    for lib in ("libstrata_model_llama.so", "libstrata_dataset_text.so"):
        path = os.path.join(st.plugins_dir(), lib)
        if not os.path.isfile(path):
            raise st.Skip("%s is not built" % path)


def write_text(directory):
    """About 8 KB of ASCII words from a fixed seed: 240 windows of SEQ_LEN + 1 bytes."""
    rng = random.Random(0)
    words = ["strata", "shard", "gather", "reduce", "token", "layer", "rank", "the", "a", "of", "model", "step"]
    text = " ".join(rng.choice(words) for _ in range(1400))
    path = os.path.join(directory, "corpus.txt")
    with open(path, "w", encoding="ascii") as f:
        f.write(text)
    return path


def hf_checkpoint(directory, hidden=64, seed=0, tied=False, vocab=VOCAB):
    """A random LlamaForCausalLM with grouped-query attention and (by default) an untied head, saved with
    save_pretrained (model.safetensors + config.json). A larger initializer_range than the default
    gives logits far from uniform, so a wrong weight shows in the loss."""
    torch, transformers = need_transformers()
    config = transformers.LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden + 32,
                                      num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
                                      max_position_embeddings=4 * SEQ_LEN, rms_norm_eps=1e-5, rope_theta=10000.0,
                                      tie_word_embeddings=tied, initializer_range=0.2)
    torch.manual_seed(seed)
    model = transformers.LlamaForCausalLM(config).float().eval()
    model.save_pretrained(directory)
    st.check(os.path.isfile(os.path.join(directory, "model.safetensors")), "save_pretrained wrote no model.safetensors")
    return model


def eval_windows(text_path):
    """The text dataset's eval split: consecutive windows of SEQ_LEN + 1 bytes, the last
    EVAL_FRACTION of them (rounded half away from zero, at least one, leaving one for training)."""
    torch, _ = need_transformers()
    with open(text_path, "rb") as f:
        tokens = list(f.read())
    window = SEQ_LEN + 1
    count = len(tokens) // window
    held_out = min(max(int(math.floor(count * EVAL_FRACTION + 0.5)), 1), count - 1)
    windows = torch.tensor(tokens[:count * window], dtype=torch.long).view(count, window)
    return windows[count - held_out:]


def hf_loss(model, windows):
    """Mean cross-entropy over every target token of `windows` (inputs window[:-1], targets window[1:])."""
    torch, _ = need_transformers()
    with torch.no_grad():
        logits = model(windows[:, :-1]).logits.double()
        return float(torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), windows[:, 1:].reshape(-1)))


def experiment(directory, hf_dir, text_path, *train_lines):
    path = os.path.join(directory, "hf_interop.toml")
    with open(path, "w", encoding="utf-8") as f:
        f.write("""[experiment]
name = "hf_interop"

[model]
name = "llama"
config_from = "{hf}"

[dataset]
name = "text"
path = "{text}"
tokenizer = "byte"
seq_len = {seq_len}
eval_fraction = {eval_fraction}

[strategy]
name = "single"

[optimizer]
name = "adamw"
lr = 1e-3

[train]
global_batch_size = 8
device = "cpu"
init_from = "{hf}"
{train}

[eval]
every = 0
batches = 0

[log]
every = 1
""".format(hf=hf_dir, text=text_path, seq_len=SEQ_LEN, eval_fraction=EVAL_FRACTION, train="\n".join(train_lines)))
    return path


def strata_evaluates_a_transformers_checkpoint():
    """steps = 0: the eval loss of the initial model, loaded from a save_pretrained directory (one
    file; shards with an index; bf16 weights; tied embeddings), equals transformers' on the same windows."""
    torch, transformers = need_transformers()
    need_plugins()
    base = st.temp_dir("load")
    hf_dir = os.path.join(base, "hf")
    model = hf_checkpoint(hf_dir)
    variants = [("model.safetensors", hf_dir)]
    sharded = os.path.join(base, "sharded")
    model.save_pretrained(sharded, max_shard_size="100KB")
    st.check(os.path.isfile(os.path.join(sharded, "model.safetensors.index.json")), "save_pretrained wrote no index")
    variants.append(("shards and index", sharded))
    bf16 = os.path.join(base, "bf16")
    model.to(torch.bfloat16).save_pretrained(bf16)
    variants.append(("bfloat16 weights", bf16))
    tied = os.path.join(base, "tied")
    hf_checkpoint(tied, tied=True)  # save_pretrained leaves lm_head.weight out
    variants.append(("tied embeddings", tied))
    text = write_text(base)
    windows = eval_windows(text)
    for label, directory in variants:
        out = os.path.join(base, "run_" + os.path.basename(directory))
        result = st.strata_run(experiment(base, directory, text, "steps = 0"), out)
        st.expect_stdout(result, "model initialized from")
        strata_loss = st.lookup(st.load_summary(out), "eval.loss")
        # transformers' own float32 load of the same directory (bf16 weights widened, as strata does).
        reference = transformers.LlamaForCausalLM.from_pretrained(directory, dtype=torch.float32).eval()
        expected = hf_loss(reference, windows)
        st.check(abs(expected - math.log(VOCAB)) > 0.1, "the test model's loss %.4f is too close to uniform's to "
                 "tell weights apart" % expected)
        print("  %s: eval loss strata %.9f, transformers %.9f (rel %.1e)"
              % (label, strata_loss, expected, abs(strata_loss - expected) / expected))
        st.expect_close(strata_loss, expected, "%s: strata's eval loss of the transformers checkpoint" % label,
                        rel=REL)


def transformers_loads_a_safetensors_save_final():
    """save_format = "safetensors": final_model/ (model.safetensors + config.json) loads with
    from_pretrained; with steps = 0 its logits equal the original's exactly, after training its loss
    on the eval windows equals strata's final eval loss."""
    torch, transformers = need_transformers()
    need_plugins()
    base = st.temp_dir("save")
    hf_dir = os.path.join(base, "hf")
    original = hf_checkpoint(hf_dir)
    text = write_text(base)
    windows = eval_windows(text)
    for steps in (0, 3):
        out = os.path.join(base, "run_s%d" % steps)
        st.strata_run(experiment(base, hf_dir, text, "steps = %d" % steps, "save_final = true",
                                 'save_format = "safetensors"'), out)
        summary = st.load_summary(out)
        st.check(summary.get("final_model") == "final_model", "summary.json final_model is %r, expected "
                 "\"final_model\"" % summary.get("final_model"))
        saved = os.path.join(out, "final_model")
        for name in ("model.safetensors", "config.json"):
            st.check(os.path.isfile(os.path.join(saved, name)), "%s has no %s" % (saved, name))
        with open(os.path.join(saved, "config.json"), encoding="utf-8") as f:
            config = json.load(f)
        for key in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                    "num_key_value_heads", "tie_word_embeddings"):
            st.check(config.get(key) == getattr(original.config, key),
                     "config.json %s = %r, the original has %r" % (key, config.get(key), getattr(original.config, key)))
        loaded = transformers.AutoModelForCausalLM.from_pretrained(saved, dtype=torch.float32).eval()
        if steps == 0:
            with torch.no_grad():
                a, b = original(windows[:, :-1]).logits, loaded(windows[:, :-1]).logits
            diff = float((a - b).abs().max())
            st.check(diff == 0.0, "logits of the re-loaded model differ from the original's by %g" % diff)
        else:
            st.check(summary.get("steps") == steps,
                     "the run made %r steps, expected %d" % (summary.get("steps"), steps))
            ours, theirs = st.lookup(summary, "eval.loss"), hf_loss(loaded, windows)
            print("  after %d steps: eval loss strata %.9f, transformers on final_model %.9f (rel %.1e)"
                  % (steps, ours, theirs, abs(ours - theirs) / theirs))
            st.expect_close(theirs, ours, "transformers' loss of the trained final_model against strata's eval loss",
                            rel=REL)


def a_checkpoint_of_other_shapes_is_named():
    """init_from a checkpoint of another width: a clean error listing mis-shaped tensors."""
    need_transformers()
    need_plugins()
    base = st.temp_dir("mismatch")
    hf_dir, other = os.path.join(base, "hf"), os.path.join(base, "other")
    hf_checkpoint(hf_dir)
    hf_checkpoint(other, hidden=32)
    text = write_text(base)
    path = experiment(base, hf_dir, text, "steps = 0")
    result = st.strata_run(path, os.path.join(base, "run"), "train.init_from=" + other, expect=None)
    st.expect_clean_failure(result, 2, "train.init_from", "does not fit the model", "model.embed_tokens.weight = embed.weight",
                            "[256, 32]", "[256, 64]")


def tinyllama_mrpc_runs_on_small_files():
    """experiments/tinyllama_mrpc.toml as shipped, pointed at small files: a random Llama saved with
    save_pretrained (vocabulary 259 for mrpc's byte tokens) in place of TinyLlama, and MRPC files
    of uneven sentence lengths. init_partial loads everything but lm_head and starts the classifier
    head fresh; validate, then two fsdp steps with bf16 parameters."""
    need_transformers()
    need_plugins()
    import data_files
    base = st.temp_dir("tinyllama_mrpc")
    hf_dir, data = os.path.join(base, "hf"), os.path.join(base, "mrpc")
    hf_checkpoint(hf_dir, vocab=259)
    data_files.write_mrpc(data, train_pairs=48, eval_pairs=16)
    config = os.path.join(st.REPO, "experiments", "tinyllama_mrpc.toml")
    sets = st.set_args("model.config_from=" + hf_dir, "train.init_from=" + hf_dir, "dataset.path=" + data,
                       "dataset.tokenizer=byte", "train.steps=2", "train.warmup_steps=0",
                       "train.global_batch_size=8", "eval.every=0", "log.every=1")
    result = st.strata("validate", config, *sets)
    st.expect_exit(result, 0)
    out = os.path.join(base, "run")
    result = st.strata("run", config, "--out", out, *sets, timeout=300)
    st.expect_exit(result, 0)
    st.expect_in("kept their fresh initialization: head.score.weight", result.stderr, result, "stderr")
    st.expect_in("not used from the file: lm_head.weight", result.stderr, result, "stderr")
    summary = st.load_summary(out)
    st.check("f1" in summary["eval"] and summary["strategy"] == "fsdp", "unexpected summary: %s" % summary["eval"])


if __name__ == "__main__":
    st.main([strata_evaluates_a_transformers_checkpoint, transformers_loads_a_safetensors_save_final,
             a_checkpoint_of_other_shapes_is_named, tinyllama_mrpc_runs_on_small_files])
