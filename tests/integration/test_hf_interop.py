#!/usr/bin/env python3
"""Hugging Face interop of the llama model: strata starts from a transformers checkpoint
(`[train] init_from` = a save_pretrained directory) and evaluates it to the loss transformers
computes on the same windows; a safetensors save_final (`[train] save_format = "safetensors"`) is
a directory that transformers' from_pretrained loads with the same logits. config_from reads the
rotary embedding in both layouts transformers writes (4.x: top-level rope_theta and rope_scaling;
5.x: rope_parameters): the venv's transformers writes one, tests/fixtures/hf_llama holds
config.json files written by 4.57.1 and 5.24.0, and each evaluates to the loss of the model it
describes. Keys the llama plugin cannot honour are refused by name.

Needs torch and transformers in the test's interpreter (skipped otherwise) and the llama model and
text dataset plugins (skipped when they are not built).

The fixtures are the configs of hf_config() as written by a transformers version; to add a version:
    python tests/integration/test_hf_interop.py --write-fixtures
"""

import json
import math
import os
import random
import shutil
import sys

import strata_test as st

SEQ_LEN = 32
EVAL_FRACTION = 0.25
VOCAB = 256  # the byte tokenizer
REL = 1e-4
FIXTURES = os.path.join(st.REPO, "tests", "fixtures", "hf_llama")
# The fixtures' layouts: the transformers that wrote them, and where each writes rope_theta.
FIXTURE_LAYOUTS = {"transformers-4.57.1": "the top level", "transformers-5.24.0": "rope_parameters"}
# Llama 3's base: a reader that falls back to 10000 gives a loss 0.7% off (12345 would be 1.4e-5 off
# on these 32 positions, too close to REL to tell).
ROPE_THETA = 500000.0
# Llama 3 scaling that changes the frequencies of SEQ_LEN positions (wavelengths over 16 tokens).
LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 64}
# The rotary embeddings of the layout tests and fixtures: (name, rope_theta, scaling or None).
ROPES = [("rope_theta", ROPE_THETA, None), ("llama3", ROPE_THETA, LLAMA3)]


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


def transformers_major():
    _, transformers = need_transformers()
    return int(transformers.__version__.split(".")[0])


def hf_config(hidden=64, tied=False, vocab=VOCAB, rope_theta=10000.0, rope_scaling=None, **extra):
    """The LlamaConfig of the test models: grouped-query attention, (by default) an untied head. The
    rotary embedding is passed as the installed transformers spells it (5.x: rope_parameters)."""
    _, transformers = need_transformers()
    if transformers_major() >= 5:
        rope = {"rope_parameters": dict({"rope_type": "default", "rope_theta": rope_theta}, **(rope_scaling or {}))}
    else:
        rope = {"rope_theta": rope_theta, "rope_scaling": dict(rope_scaling) if rope_scaling else None}
    args = dict(vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden + 32, num_hidden_layers=3,
                num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4 * SEQ_LEN,
                rms_norm_eps=1e-5, tie_word_embeddings=tied, initializer_range=0.2, **rope)
    args.update(extra)
    return transformers.LlamaConfig(**args)


def hf_checkpoint(directory, hidden=64, seed=0, tied=False, vocab=VOCAB, **rope):
    """A random LlamaForCausalLM of hf_config(), saved with save_pretrained (model.safetensors +
    config.json). A larger initializer_range than the default gives logits far from uniform, so a
    wrong weight shows in the loss."""
    torch, transformers = need_transformers()
    config = hf_config(hidden=hidden, tied=tied, vocab=vocab, **rope)
    torch.manual_seed(seed)
    model = transformers.LlamaForCausalLM(config).float().eval()
    model.save_pretrained(directory)
    st.check(os.path.isfile(os.path.join(directory, "model.safetensors")), "save_pretrained wrote no model.safetensors")
    return model


def text_splits(text_path):
    """The text dataset's splits: consecutive windows of SEQ_LEN + 1 bytes, the last EVAL_FRACTION
    of them (rounded half away from zero, at least one, leaving one for training) held out for
    evaluation; (training windows, eval windows)."""
    torch, _ = need_transformers()
    with open(text_path, "rb") as f:
        tokens = list(f.read())
    window = SEQ_LEN + 1
    count = len(tokens) // window
    held_out = min(max(int(math.floor(count * EVAL_FRACTION + 0.5)), 1), count - 1)
    windows = torch.tensor(tokens[:count * window], dtype=torch.long).view(count, window)
    return windows[:count - held_out], windows[count - held_out:]


def eval_windows(text_path):
    """The text dataset's eval split (text_splits)."""
    return text_splits(text_path)[1]


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


# The Llama family's small differences, as transformers builds them: Mistral (a sliding window,
# here longer than the sequences), Qwen2 (biases on q/k/v_proj only; a tied head) and Qwen3 (q and
# k RMSNorm over each head, an explicit head_dim).
FAMILIES = [("mistral", "MistralConfig", dict(sliding_window=4 * SEQ_LEN)),
            ("qwen2", "Qwen2Config", dict(tie_word_embeddings=True)),
            ("qwen3", "Qwen3Config", dict(head_dim=24))]
FAMILY_STEPS, FAMILY_LR = 4, 0.05


def family_checkpoint(directory, config_class, extra, seed=0):
    torch, transformers = need_transformers()
    if transformers_major() >= 5:
        rope = {"rope_parameters": {"rope_type": "default", "rope_theta": ROPE_THETA}}
    else:
        rope = {"rope_theta": ROPE_THETA}
    args = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=160, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, max_position_embeddings=4 * SEQ_LEN, rms_norm_eps=1e-5,
                tie_word_embeddings=False, initializer_range=0.2, **rope)
    args.update(extra)
    config = getattr(transformers, config_class)(**args)
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(config).float().eval()
    model.save_pretrained(directory)
    return model


def llama_family_configs_load_train_and_export():
    """Mistral, Qwen2 and Qwen3 checkpoints: strata evaluates each to transformers' loss (its
    logits), trains it 4 full-batch SGD steps (in micro-batches) to the parameters transformers
    reaches with the same steps within 1e-4, and its safetensors save_final loads back as the same
    family in transformers."""
    torch, transformers = need_transformers()
    need_plugins()
    for family, config_class, extra in FAMILIES:
        base = st.temp_dir(family)
        hf_dir = os.path.join(base, "hf")
        original = family_checkpoint(hf_dir, config_class, extra)
        text = write_text(base)
        train, windows = text_splits(text)
        out0 = os.path.join(base, "run_s0")
        st.strata_run(experiment(base, hf_dir, text, "steps = 0"), out0)
        ours, theirs = st.lookup(st.load_summary(out0), "eval.loss"), hf_loss(original, windows)
        st.expect_close(ours, theirs, "%s: strata's eval loss of the checkpoint against transformers'" % family, rel=REL)
        # Full-batch steps: every step sees the whole training split, whatever the order.
        out = os.path.join(base, "run_s%d" % FAMILY_STEPS)
        micro = next(m for m in (3, 2, 1) if len(train) % m == 0)
        st.strata_run(experiment(base, hf_dir, text, "steps = %d" % FAMILY_STEPS, "micro_batches = %d" % micro,
                                 "save_final = true", 'save_format = "safetensors"'),
                      out, "train.global_batch_size=%d" % len(train), "optimizer.name=sgd", "optimizer.lr=%g" % FAMILY_LR, "optimizer.momentum=0",
                      "optimizer.weight_decay=0")
        reference = transformers.AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32).eval()
        optimizer = torch.optim.SGD(reference.parameters(), lr=FAMILY_LR)
        for _ in range(FAMILY_STEPS):
            optimizer.zero_grad()
            logits = reference(train[:, :-1]).logits
            torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), train[:, 1:].reshape(-1)).backward()
            optimizer.step()
        saved = os.path.join(out, "final_model")
        with open(os.path.join(saved, "config.json"), encoding="utf-8") as f:
            st.check(json.load(f).get("model_type") == family, "%s: final_model/config.json names another model_type"
                     % family)
        loaded = transformers.AutoModelForCausalLM.from_pretrained(saved, dtype=torch.float32).eval()
        st.check(type(loaded).__name__ == type(reference).__name__, "%s: final_model loads as %s, not %s"
                 % (family, type(loaded).__name__, type(reference).__name__))
        theirs_state, ours_state = reference.state_dict(), loaded.state_dict()
        st.check(sorted(theirs_state) == sorted(ours_state), "%s: tensors differ: %s against %s"
                 % (family, sorted(theirs_state), sorted(ours_state)))
        worst = 0.0
        for name, tensor in theirs_state.items():
            diff = float((ours_state[name].double() - tensor.double()).abs().max()) / (float(tensor.abs().max()) or 1e-30)
            worst = max(worst, diff)
            st.check(diff <= REL, "%s: %s after %d steps differs from transformers' by %.3g (relative)"
                     % (family, name, FAMILY_STEPS, diff))
        print("  %s: eval loss %.6f (transformers %.6f); after %d SGD steps max rel diff %.1e over %d tensors"
              % (family, ours, theirs, FAMILY_STEPS, worst, len(theirs_state)))


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


def layout_of(config):
    """Where a config.json keeps rope_theta: "the top level" (transformers 4.x) or "rope_parameters" (5.x)."""
    if "rope_theta" in (config.get("rope_parameters") or {}) and "rope_theta" not in config:
        return "rope_parameters"
    if "rope_theta" in config and not config.get("rope_parameters"):
        return "the top level"
    return "both places"


def strata_reads_both_config_layouts():
    """config_from a config.json in each layout (written now by the installed transformers, and by
    4.57.1 and 5.24.0 in tests/fixtures/hf_llama), next to the same weights: with rope_theta 500000,
    and with it and Llama 3 scaling, strata's eval loss is the loss of the model the file describes.
    Reading rope_theta as 10000 or dropping the scaling would give a loss further off than REL."""
    torch, transformers = need_transformers()
    need_plugins()
    base = st.temp_dir("layouts")
    text = write_text(base)
    windows = eval_windows(text)
    layouts = sorted(FIXTURE_LAYOUTS.values())
    st.check(layouts == ["rope_parameters", "the top level"], "the fixtures cover the layouts %s" % layouts)
    for name, theta, scaling in ROPES:
        live = os.path.join(base, name, "live")
        model = hf_checkpoint(live, rope_theta=theta, rope_scaling=scaling)
        expected = hf_loss(model, windows)
        # The same weights as a reader would compute them that took rope_theta for 10000, or dropped
        # the scaling: each loss must be further from the right one than the test's tolerance.
        misreads = [hf_config(rope_scaling=scaling)] + ([hf_config(rope_theta=theta)] if scaling else [])
        for wrong in misreads:
            other = transformers.LlamaForCausalLM(wrong).float().eval()
            other.load_state_dict(model.state_dict())
            misread = hf_loss(other, windows)
            st.check(abs(misread - expected) > 20 * REL * expected, "%s: a misread rotary embedding gives loss %.6f, "
                     "too close to %.6f for the test to tell them apart" % (name, misread, expected))
        with open(os.path.join(live, "config.json"), encoding="utf-8") as f:
            directories = [("transformers %s (now)" % transformers.__version__, layout_of(json.load(f)), live)]
        for fixture, layout in sorted(FIXTURE_LAYOUTS.items()):
            directory = os.path.join(base, name, fixture)
            os.makedirs(directory)
            shutil.copy(os.path.join(FIXTURES, fixture, name, "config.json"), directory)
            shutil.copy(os.path.join(live, "model.safetensors"), directory)
            with open(os.path.join(directory, "config.json"), encoding="utf-8") as f:
                written = layout_of(json.load(f))
            st.check(written == layout, "%s/%s/config.json keeps rope_theta in %s, expected %s"
                     % (fixture, name, written, layout))
            directories.append((fixture, layout, directory))
        for label, layout, directory in directories:
            out = os.path.join(base, name, "run_" + os.path.basename(directory))
            result = st.strata_run(experiment(base, directory, text, "steps = 0"), out)
            st.expect_stdout(result, "model initialized from")
            strata_loss = st.lookup(st.load_summary(out), "eval.loss")
            print("  %s, config of %s (rope_theta: %s): eval loss strata %.9f, transformers %.9f (rel %.1e)"
                  % (name, label, layout, strata_loss, expected, abs(strata_loss - expected) / expected))
            st.expect_close(strata_loss, expected, "%s: strata's eval loss with the config of %s" % (name, label),
                            rel=REL)
            # The file means that model to transformers too (4.x reads only its own layout).
            if transformers_major() >= 5 or layout == "the top level":
                loaded = transformers.LlamaForCausalLM.from_pretrained(directory, dtype=torch.float32).eval()
                st.expect_close(hf_loss(loaded, windows), expected, "%s: transformers' loss with the config of %s"
                                % (name, label), rel=1e-6)


def unsupported_config_keys_are_refused():
    """A config.json written by the installed transformers with a key whose value the llama plugin
    cannot honour (another rope scaling, activation, MLP biases, dropout, partial rotation): strata
    validate refuses it with exit 2, naming the file and the key, instead of building another model."""
    need_transformers()
    need_plugins()
    base = st.temp_dir("refused")
    text = write_text(base)
    # (label, hf_config arguments, fragments of the error)
    cases = [
        ("linear", dict(rope_scaling={"rope_type": "linear", "factor": 2.0}), ['rope_type "linear"']),
        ("dynamic", dict(rope_scaling={"rope_type": "dynamic", "factor": 2.0}), ['rope_type "dynamic"']),
        ("yarn", dict(rope_scaling={"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 64}),
         ['rope_type "yarn"']),
        ("longrope", dict(rope_scaling={"rope_type": "longrope", "short_factor": [1.0] * 8, "long_factor": [2.0] * 8,
                                        "original_max_position_embeddings": 64}), ['rope_type "longrope"']),
        ("gelu", dict(hidden_act="gelu"), ['hidden_act is "gelu"']),
        ("mlp_bias", dict(mlp_bias=True), ["mlp_bias is true"]),
        ("dropout", dict(attention_dropout=0.1), ["attention_dropout is 0.1"]),
        ("partial", dict(partial_rotary_factor=0.5), ["partial_rotary_factor", "0.5"]),
    ]
    for label, args, fragments in cases:
        directory = os.path.join(base, label)
        hf_config(**args).save_pretrained(directory)
        config = os.path.join(directory, "config.json")
        path = experiment(base, directory, text, "steps = 0")
        with open(path, encoding="utf-8") as f:  # a config alone: no weights to start from
            toml = f.read().replace('init_from = "%s"\n' % directory, "")
        st.check("init_from" not in toml, "the experiment still starts from weights:\n" + toml)
        with open(path, "w", encoding="utf-8") as f:
            f.write(toml)
        result = st.strata("validate", path)
        st.expect_clean_failure(result, 2, "model.config_from", config, *fragments)


def write_fixtures():
    """Writes the config.json of each ROPES model as the installed transformers writes it, under
    tests/fixtures/hf_llama/transformers-VERSION/NAME/."""
    _, transformers = need_transformers()
    for name, theta, scaling in ROPES:
        directory = os.path.join(FIXTURES, "transformers-" + transformers.__version__, name)
        hf_config(rope_theta=theta, rope_scaling=scaling).save_pretrained(directory)
        print("wrote %s" % os.path.join(directory, "config.json"))


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
    if sys.argv[1:] == ["--write-fixtures"]:
        write_fixtures()
        sys.exit(0)
    st.main([strata_evaluates_a_transformers_checkpoint, transformers_loads_a_safetensors_save_final,
             llama_family_configs_load_train_and_export, a_checkpoint_of_other_shapes_is_named, strata_reads_both_config_layouts,
             unsupported_config_keys_are_refused, tinyllama_mrpc_runs_on_small_files])
