#!/usr/bin/env python3
"""Your own PyTorch model under every strategy: tools/export_model.py exports nn.Modules written
here (a CNN with BatchNorm and running statistics set, a small transformer with LayerNorm, GELU, a
position buffer and its head tied to its embedding), and `[model] name = "torchscript"` trains
them. The single run equals the same module trained by PyTorch here for 4 steps (1e-5); ddp,
zero3 and fsdp at world 3 with 2 micro-batches and plain SGD end with single's model, tensor by
tensor. The tool refuses modules Strata cannot run as units, and the plugin names the file and the
fix for a missing or mismatched export.

    STRATA_BIN=build/bin/strata ~/.cache/strata/venv/bin/python tests/integration/test_torchscript.py
"""
import json
import os
import subprocess
import sys

import data_files
import strata_test as st

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXPORT = os.path.join(ROOT, "tools", "export_model.py")
RTOL = 1e-5
STEPS, BATCH, MICRO, LR = 4, 24, 2, 0.1

MODELS = '''
import torch
from torch import nn


def block(cin, cout):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU(), nn.MaxPool2d(2))


def bn_cnn():
    model = nn.Sequential(block(1, 4), block(4, 6), nn.Sequential(nn.Flatten(), nn.Linear(6 * 7 * 7, 10)))
    with torch.no_grad():  # running statistics as a trained model has them: kept, and used
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.2, 0.2)
                m.running_var.uniform_(0.5, 1.5)
    return model


class Embed(nn.Module):
    def __init__(self, vocab, dim, seq):
        super().__init__()
        self.tokens = nn.Embedding(vocab, dim)
        self.register_buffer("positions", torch.randn(seq, dim) * 0.1)

    def forward(self, ids):
        return self.tokens(ids) + self.positions[: ids.shape[1]]


class Block(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.up = nn.Linear(dim, 4 * dim)
        self.down = nn.Linear(4 * dim, dim)

    def forward(self, x):
        return x + self.down(nn.functional.gelu(self.up(self.norm(x))))


class Head(nn.Module):
    def __init__(self, dim, vocab):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.out = nn.Linear(dim, vocab, bias=False)

    def forward(self, x):
        return self.out(self.norm(x))


class TinyLM(nn.Module):
    def __init__(self, vocab=256, dim=16, seq=16, layers=2):
        super().__init__()
        self.embed = Embed(vocab, dim, seq)
        self.blocks = nn.ModuleList([Block(dim) for _ in range(layers)])
        self.head = Head(dim, vocab)
        self.head.out.weight = self.embed.tokens.weight  # tied

    def forward(self, ids):
        x = self.embed(ids)
        for b in self.blocks:
            x = b(x)
        return self.head(x)


def tiny_lm():
    return TinyLM()


class Skips(nn.Module):  # its forward is not its children in order
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(784, 10)
        self.b = nn.Linear(10, 10)

    def forward(self, x):
        h = self.a(x.flatten(1))
        return self.b(h) + h


def skips():
    return Skips()


class Loose(nn.Module):  # a parameter outside every child
    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(()))
        self.a = nn.Linear(784, 10)

    def forward(self, x):
        return self.a(x.flatten(1)) * self.scale


def loose():
    return Loose()
'''


def torch_or_skip():
    try:
        import torch
    except ImportError:
        raise st.Skip("torch is not installed in %s (the export tool and the reference training need it)"
                      % sys.executable)
    return torch


_base = None


def base():
    """models.py, Fashion-MNIST-format files of 24 + 12 images and a text file, written once."""
    global _base
    if _base is None:
        _base = st.temp_dir("torchscript")
        with open(os.path.join(_base, "models.py"), "w") as f:
            f.write(MODELS)
        data_files.write_fashion_mnist(os.path.join(_base, "images"), train=BATCH, test=12)
        data_files.write_text_file(os.path.join(_base, "text.txt"), size_bytes=6000)
    return _base


def export(factory, out, *args, expect=0):
    command = [sys.executable, EXPORT, os.path.join(base(), "models.py") + ":" + factory, "--out",
               os.path.join(base(), out)] + list(args)
    result = st.run_command(command, timeout=300)
    st.expect_exit(result, expect)
    return result


_exported = set()


def exported(name):
    """The export of bn_cnn ("cnn") or tiny_lm ("lm"), made once."""
    if name not in _exported:
        if name == "cnn":
            export("bn_cnn", "cnn", "--input-shape", "1,28,28", "--num-classes", "10")
        else:
            export("tiny_lm", "lm", "--input-shape", "16", "--vocab-size", "256")
        _exported.add(name)
    return os.path.join(base(), name)


def config(model, dataset_lines, name=None):
    path = os.path.join(base(), "%s.toml" % (name or model))
    with open(path, "w") as f:
        f.write('[model]\nname = "torchscript"\npath = "%s"\n\n[dataset]\n%s\n\n[strategy]\nname = "single"\n\n'
                '[optimizer]\nname = "sgd"\nlr = %g\nmomentum = 0\nweight_decay = 0\n\n'
                '[train]\nsteps = %d\nglobal_batch_size = %d\nmicro_batches = %d\nsave_final = true\nseed = 0\n\n'
                '[eval]\nevery = 0\n\n[log]\nevery = 1\n' % (model, dataset_lines, LR, STEPS, BATCH, MICRO))
    return path


def cnn_config():
    exported("cnn")
    return config("cnn", 'name = "fashion_mnist"\npath = "images"\nnormalize = false')


def lm_config():
    exported("lm")
    return config("lm", 'name = "text"\npath = "text.txt"\nseq_len = 16')


def run(config_path, label, *sets, world=1):
    out = st.temp_dir(label)
    args = ["run", config_path, "--out", out] + (["--nproc", world] if world > 1 else [])
    result = st.strata(*args, *st.set_args(*sets), timeout=300)
    st.expect_exit(result, 0)
    st.expect_no_crash(result)
    return out


def strategies_match_single(config_path, label, strategies, worlds=(3,)):
    single = run(config_path, label + "_single")
    for world in worlds:
        for strategy in strategies:
            out = run(config_path, "%s_%s_w%d" % (label, strategy, world), "strategy.name=" + strategy, world=world)
            diff = st.expect_models_equal(single, out, "%s %s world %d, %d micro-batches"
                                          % (label, strategy, world, MICRO), rel=RTOL)
            print("  %s %s at world %d: max rel diff %.1e" % (label, strategy, world, diff))
    return single


def export_tool_writes_the_sidecar_and_refuses_what_cannot_run():
    """model.json holds the units, their parameters (a tied one counted once), the tie, measured
    activations and FLOPs; a module whose forward is not its children in order, or that holds a
    parameter outside them, is refused with the fix (exit 2)."""
    torch_or_skip()
    with open(os.path.join(exported("lm"), "model.json")) as f:
        sidecar = json.load(f)
    st.check([u["name"] for u in sidecar["units"]] == ["embed", "blocks.0", "blocks.1", "head"],
             "lm units: %s" % sidecar["units"])
    st.check(sidecar["units"][3]["parameters"] == 32, "the head's tied weight counts in embed only: %s" % sidecar["units"])
    st.check(sidecar["tied"] == [["head.out.weight", "embed.tokens.weight"]], "tied: %s" % sidecar["tied"])
    st.check(sidecar["activation_bytes_per_sample"] > 0 and sidecar["flops_per_sample"] > 0,
             "activations and FLOPs measured: %s" % sidecar)
    result = export("skips", "skips", "--input-shape", "1,28,28", "--num-classes", "10", expect=2)
    st.expect_stderr(result, "is not its units (a, b) run in order")
    result = export("loose", "loose", "--input-shape", "1,28,28", "--num-classes", "10", expect=2)
    st.expect_stderr(result, "tensors outside every unit: scale")
    result = export("bn_cnn", "wrong", "--input-shape", "1,28,28", "--num-classes", "7", expect=2)
    st.expect_stderr(result, "expected [2, 7]")


def single_equals_pytorch():
    """4 steps of SGD, 2 micro-batches, BatchNorm with its running statistics: Strata's single run
    ends with the parameters PyTorch reaches with the same module and data, within 1e-5; the
    buffers are the exported ones."""
    torch = torch_or_skip()
    out = run(cnn_config(), "cnn_single")
    sys.path.insert(0, base())
    import models
    torch.manual_seed(0)  # as the tool, before calling the factory
    model = models.bn_cnn().float().eval()
    images = data_files._read_idx_file(os.path.join(base(), "images", "train-images-idx3-ubyte.gz"))
    labels = data_files._read_idx_file(os.path.join(base(), "images", "train-labels-idx1-ubyte.gz"))
    x = torch.tensor(list(images[16:]), dtype=torch.float32).reshape(-1, 1, 28, 28) / 255.0  # past the IDX header
    y = torch.tensor(list(labels[8:]), dtype=torch.int64)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    for _ in range(STEPS):  # the global batch is the whole split: every step sees all of it
        optimizer.zero_grad()
        for xs, ys in zip(x.chunk(MICRO), y.chunk(MICRO)):
            (torch.nn.functional.cross_entropy(model(xs), ys, reduction="sum") / BATCH).backward()
        optimizer.step()
    ours = st.load_model(out)
    theirs = {k: v.double() for k, v in model.state_dict().items() if not k.endswith("num_batches_tracked")}
    worst = 0.0
    for name, tensor in theirs.items():
        st.check(name in ours, "%s is not in Strata's final model (%s)" % (name, sorted(ours)))
        diff = float((ours[name] - tensor).abs().max()) / (float(tensor.abs().max()) or 1e-30)
        worst = max(worst, diff)
        st.check(diff <= RTOL, "%s differs from PyTorch's by %.3g (relative)" % (name, diff))
    print("  single against PyTorch after %d steps: max rel diff %.1e over %d tensors" % (STEPS, worst, len(theirs)))


def cnn_under_every_strategy():
    """The BatchNorm CNN under ddp, zero3 and fsdp at worlds 2 and 3 (12 and 8 examples a rank, 2
    micro-batches) ends with single's model, tensor by tensor."""
    torch_or_skip()
    strategies_match_single(cnn_config(), "cnn", ["ddp", "zero3", "fsdp"], worlds=(2, 3))


def tied_transformer_under_every_strategy():
    """The transformer, head tied to embedding, under ddp, zero3 and fsdp at world 3 ends with
    single's model, tensor by tensor; the tied weight is one tensor (both names hold it)."""
    torch_or_skip()
    single = strategies_match_single(lm_config(), "lm", ["ddp", "zero3", "fsdp"])
    model = st.load_model(single)
    st.check("embed.tokens.weight" in model, "final model names: %s" % sorted(model))


def bad_exports_are_named():
    """A missing export, a damaged model.json and an export for other data: exit 2, the file, the fix."""
    torch_or_skip()
    path = cnn_config()
    result = st.strata("validate", path, "--set", "model.path=nowhere")
    st.expect_clean_failure(result, 2, "model.json", "tools/export_model.py")
    damaged = os.path.join(base(), "damaged")
    os.makedirs(damaged, exist_ok=True)
    with open(os.path.join(damaged, "model.json"), "w") as f:
        f.write('{"format": "strata-torchscript", "version": 1, "input_shape": [1, 28')
    result = st.strata("validate", path, "--set", "model.path=damaged")
    st.expect_clean_failure(result, 2, os.path.join("damaged", "model.json"), "not valid JSON")
    exported("lm")
    mismatched = config("lm", 'name = "fashion_mnist"\npath = "images"', name="lm_on_images")
    result = st.strata("validate", mismatched)
    st.expect_clean_failure(result, 2, "exported for token ids", "--vocab-size")


if __name__ == "__main__":
    st.main([export_tool_writes_the_sidecar_and_refuses_what_cannot_run, single_equals_pytorch,
             cnn_under_every_strategy, tied_transformer_under_every_strategy, bad_exports_are_named])
