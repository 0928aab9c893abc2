#!/usr/bin/env python3
"""Export a PyTorch nn.Module for Strata's `torchscript` model plugin.

    python tools/export_model.py my_model.py:make_model --input-shape 1,28,28 --num-classes 10 --out my_model
    python tools/export_model.py lm.py:build --input-shape 64 --vocab-size 256 --out lm   # token ids in, next-token logits out

FILE.py:FACTORY names a Python file and a function in it that returns the module (called with no
arguments). The tool writes OUT/model.pt (TorchScript, scripted, or traced where scripting fails)
and OUT/model.json, the sidecar the plugin reads: the input it expects, the units, their parameter
counts, the tied parameters, the activations and FLOPs per sample (measured here), and where the
model came from. Then in an experiment file:

    [model]
    name = "torchscript"
    path = "my_model"          # relative to the experiment file

What the module must be, checked here before anything is written:
  * its forward is its units run in order: by default the top-level children (a ModuleList child
    counts as its elements), or the ones --units lists (dotted paths, e.g. embed,blocks.0,blocks.1,head);
    every parameter and buffer lives inside a unit;
  * it maps a batch of inputs [n, *input-shape] (float32 images, or int64 token ids with
    --vocab-size) to logits [n, classes] (or [n, T, vocab]); Strata applies the summed
    cross-entropy loss, as for its built-in models;
  * it runs in eval mode (Strata trains the module with its `training` flag off: no dropout, and
    BatchNorm normalizes with its running statistics), so that every strategy reproduces
    single-process training exactly.

TorchScript is deprecated upstream (torch.export is its successor); the exported file loads with
the LibTorch this Strata was built with.
"""

import argparse
import importlib.util
import json
import os
import sys

FORMAT = "strata-torchscript"
VERSION = 1


class ExportError(Exception):
    pass


def load_factory(spec):
    path, sep, name = spec.rpartition(":")
    if not sep or not path or not name:
        raise ExportError("%r: expected FILE.py:FACTORY, e.g. my_model.py:make_model" % spec)
    if not os.path.isfile(path):
        raise ExportError("%s: no such file (the FILE of FILE.py:FACTORY)" % path)
    module_spec = importlib.util.spec_from_file_location("strata_export_source", path)
    module = importlib.util.module_from_spec(module_spec)
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    module_spec.loader.exec_module(module)
    factory = getattr(module, name, None)
    if not callable(factory):
        raise ExportError("%s defines no function %r (the FACTORY of FILE.py:FACTORY)" % (path, name))
    return factory


def submodule(model, dotted):
    current = model
    for part in dotted.split("."):
        children = dict(current.named_children())
        if part not in children:
            raise ExportError("--units: the model has no submodule %r (children of %s: %s)"
                              % (dotted, type(current).__name__, ", ".join(children) or "none"))
        current = children[part]
    return current


def default_units(model, nn):
    units = []
    for name, child in model.named_children():
        if isinstance(child, nn.ModuleList):
            units += ["%s.%s" % (name, sub) for sub, _ in child.named_children()]
        else:
            units.append(name)
    return units


def check_units_cover(model, units):
    """Every parameter and buffer of the model inside one of the units."""
    inside = set()
    for unit in units:
        for prefix in (unit + ".",):
            inside.update(n for n, _ in model.named_parameters(remove_duplicate=False) if n.startswith(prefix))
            inside.update(n for n, _ in model.named_buffers(remove_duplicate=False) if n.startswith(prefix))
    outside = [n for n, _ in model.named_parameters(remove_duplicate=False) if n not in inside]
    outside += [n for n, _ in model.named_buffers(remove_duplicate=False) if n not in inside]
    if outside:
        raise ExportError("tensors outside every unit: %s. Strata places parameters unit by unit; move them into "
                          "a submodule that is a unit, or list the units with --units." % ", ".join(outside))


def example_input(torch, shape, vocab, batch=2):
    generator = torch.Generator().manual_seed(0)
    if vocab:
        return torch.randint(vocab, [batch] + shape, generator=generator)
    return torch.randn([batch] + shape, generator=generator)


def run_units(model, units, x):
    for unit in units:
        x = submodule(model, unit)(x)
    return x


def tied_parameters(model):
    """(alias, first name) for every parameter registered under a second name."""
    first = {}
    tied = []
    for name, p in model.named_parameters(remove_duplicate=False):
        if id(p) in first:
            tied.append([name, first[id(p)]])
        else:
            first[id(p)] = name
    return tied


def activation_bytes(torch, model, x):
    """Float bytes per sample of every leaf module's output (what autograd keeps between forward
    and backward, as the built-in models count it), measured on the example batch."""
    total = [0]

    def hook(_module, _inputs, output):
        outputs = output if isinstance(output, (tuple, list)) else [output]
        for t in outputs:
            if isinstance(t, torch.Tensor) and t.is_floating_point():
                total[0] += t.numel() * t.element_size()

    handles = [m.register_forward_hook(hook) for m in model.modules() if not list(m.children())]
    try:
        with torch.no_grad():
            model(x)
    finally:
        for h in handles:
            h.remove()
    if not x.is_floating_point():
        return total[0] / x.shape[0]
    return (total[0] + x.numel() * x.element_size()) / x.shape[0]


def flops_per_sample(torch, model, x):
    """Forward and backward FLOPs per sample, counted by torch.utils.flop_counter (matmuls and
    convolutions); 0 when the counter is unavailable."""
    try:
        from torch.utils.flop_counter import FlopCounterMode
    except ImportError:
        return 0
    counter = FlopCounterMode(display=False)
    with counter:
        out = model(x)
        out.float().sum().backward()
    model.zero_grad(set_to_none=True)
    return counter.get_total_flops() // x.shape[0]


def export(args):
    import torch
    from torch import nn

    shape = [int(v) for v in args.input_shape.split(",") if v.strip()]
    if not shape or any(v < 1 for v in shape):
        raise ExportError("--input-shape %r: expected positive integers separated by commas, e.g. 1,28,28" % args.input_shape)
    if args.vocab_size and len(shape) != 1:
        raise ExportError("--vocab-size: token inputs are one sequence per sample, so --input-shape is T alone")
    if args.num_classes < 0 or args.vocab_size < 0 or (args.num_classes == 0) == (args.vocab_size == 0):
        raise ExportError("give exactly one of --num-classes N (labels) and --vocab-size V (token ids, next-token targets)")

    torch.manual_seed(args.seed)
    model = load_factory(args.factory)()
    if not isinstance(model, nn.Module):
        raise ExportError("%s returned %s, not a torch.nn.Module" % (args.factory, type(model).__name__))
    model = model.float().eval()
    units = [u for u in args.units.split(",") if u] if args.units else default_units(model, nn)
    if not units:
        raise ExportError("the model has no children to be units; give --units")
    for unit in units:
        submodule(model, unit)
    check_units_cover(model, units)

    x = example_input(torch, shape, args.vocab_size)
    not_in_order = ("the model's forward is not its units (%s) run in order: Strata runs the units one after "
                    "another. List the units with --units, or make forward call them in order" % ", ".join(units))
    try:
        with torch.no_grad():
            whole = model(x)
    except Exception as error:
        raise ExportError("the model fails on an example batch shaped [%s] (%s): check --input-shape and --vocab-size"
                          % (", ".join(str(d) for d in x.shape), str(error).strip().splitlines()[-1]))
    try:
        with torch.no_grad():
            chained = run_units(model, units, x)
    except Exception as error:
        raise ExportError("%s (running them so fails: %s)." % (not_in_order, str(error).strip().splitlines()[-1]))
    if not isinstance(whole, torch.Tensor) or whole.shape != chained.shape or not torch.allclose(whole, chained, rtol=1e-5, atol=1e-6):
        raise ExportError(not_in_order + ".")
    classes = args.vocab_size or args.num_classes
    want = [x.shape[0]] + ([shape[0]] if args.vocab_size else []) + [classes]
    if list(whole.shape) != want:
        raise ExportError("the model maps [%s] to logits shaped %s; expected %s (%s)" % (
            ", ".join(str(d) for d in x.shape), list(whole.shape), want,
            "next-token logits over --vocab-size" if args.vocab_size else "one logit per class of --num-classes"))

    how = "scripted"
    try:
        scripted = torch.jit.script(model)
    except Exception as error:  # scripting fails on Python constructs TorchScript lacks: trace instead
        how = "traced (scripting failed: %s)" % str(error).strip().splitlines()[0]
        scripted = torch.jit.trace(model, x, check_trace=False)
    with torch.no_grad():
        again = run_units(scripted, units, x)
    if not torch.allclose(again, whole, rtol=1e-5, atol=1e-6):
        raise ExportError("the %s module's units do not reproduce the model (largest difference %.3g)"
                          % (how.split()[0], (again - whole).abs().max().item()))

    os.makedirs(args.out, exist_ok=True)
    model_path = os.path.join(args.out, "model.pt")
    torch.jit.save(scripted, model_path + ".tmp")
    os.replace(model_path + ".tmp", model_path)
    unit_entries = []
    counted = set()  # a tied parameter counts in the first unit that holds it, as Strata places it
    for unit in units:
        fresh = [p for p in submodule(model, unit).parameters() if p.requires_grad and id(p) not in counted]
        counted.update(id(p) for p in fresh)
        unit_entries.append({"name": unit, "parameters": sum(p.numel() for p in fresh)})
    sidecar = {
        "format": FORMAT,
        "version": VERSION,
        "input_shape": shape,
        "input_dtype": "int64" if args.vocab_size else "float32",
        "num_classes": args.num_classes,
        "vocab_size": args.vocab_size,
        "units": unit_entries,
        "tied": tied_parameters(model),
        "activation_bytes_per_sample": activation_bytes(torch, model, x),
        "flops_per_sample": flops_per_sample(torch, model, x),
        "source": args.factory,
        "how": how,
        "torch_version": torch.__version__,
    }
    sidecar_path = os.path.join(args.out, "model.json")
    with open(sidecar_path + ".tmp", "w") as f:
        json.dump(sidecar, f, indent=2)
        f.write("\n")
    os.replace(sidecar_path + ".tmp", sidecar_path)
    params = sum(e["parameters"] for e in unit_entries)
    print("wrote %s (%s, %d units, %s parameters) and %s" % (model_path, how, len(units), format(params, ","), sidecar_path))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    parser.add_argument("factory", metavar="FILE.py:FACTORY", help="a Python file and the function in it returning the nn.Module")
    parser.add_argument("--input-shape", required=True, help="one sample's shape, e.g. 1,28,28 (images) or 64 (tokens)")
    parser.add_argument("--num-classes", type=int, default=0, help="label targets: the number of classes")
    parser.add_argument("--vocab-size", type=int, default=0, help="token ids in [0, V), next-token targets")
    parser.add_argument("--units", default="", help="comma-separated dotted submodule paths run in order (default: the top-level children, ModuleLists expanded)")
    parser.add_argument("--seed", type=int, default=0, help="torch.manual_seed before FACTORY is called (default 0)")
    parser.add_argument("--out", required=True, help="directory to write model.pt and model.json into")
    args = parser.parse_args(argv)
    try:
        export(args)
    except ExportError as error:
        print("export_model: %s" % error, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
