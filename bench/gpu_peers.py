#!/usr/bin/env python3
"""Strata against PyTorch-Python peers on one GPU: `single` training of mlp, cnn and vit over a
micro-batch sweep, and TinyLlama-1.1B in bfloat16, each against eager PyTorch and torch.compile.

    python3 bench/gpu_peers.py [--strata build/bin/strata] [--workloads mlp,cnn,vit,vit_bf16,llama]
        [--micro-batches 32,64,128,256] [--steps N] [--repeats 3] [--no-compile] [--device cuda]
        [--quick] [--optimizer foreach|fused] [--peer-data device|host] [--bf16-peer masters|autocast]
        [--variant 'NAME KEY=VALUE ...'] [--no-eager] [--json FILE] [--keep DIR]
    python3 bench/gpu_peers.py --report FILE.json [FILE.json ...]   # the table of earlier runs

Workloads (the shapes of the experiments they are named after; Strata's `synthetic` data of the
same shapes, so no files are needed):
  mlp       experiments/quickstart.toml's MLP 784-256-128-10 on [1, 28, 28], float32
  cnn       experiments/fashion_mnist_cnn.toml's CNN (conv 16, 32, GroupNorm 8, FC 64), float32
  vit       experiments/vit_cifar10.toml's ViT on [3, 32, 32] (patch 4, dim 192, depth 6, 3 heads,
            MLP 768, class token; 2,693,578 parameters), clipping 1.0, float32
  vit_bf16  the same ViT with bfloat16 parameters and float32 masters
  llama     TinyLlama-1.1B (preset tinyllama-1.1b: 1,100,048,384 parameters) on sequences of 2048
            bytes of a generated text file (the `text` dataset, byte tokenizer), global batch 8 in
            2 micro-batches of 4, AdamW, clipping 1.0, bfloat16 parameters with float32 masters
mlp, cnn and vit run once per micro-batch size of the sweep (global batch = micro-batch, one
micro-batch per step); llama runs its one shape. `--quick` shrinks vit (dim 48, depth 2) and llama
(preset debug, sequences of 64) so that the whole script runs on a CPU in minutes.

Each cell runs Strata (`strata run` of a generated experiment: strategy single, [train] device,
evaluation only once after training, outside the timing), the eager peer and the compiled peer
(bench/gpu_peer.py, which reads the same experiment file), in an order rotated every repeat, so
drift of the machine and warm caches hit every side alike; a cell is the median over repeats of
each run's median step time, and a ratio is Strata / peer (below 1.0: Strata is faster).

`--variant 'NAME KEY=VALUE ...'` (repeatable) adds a Strata side to every cell: the same experiment
run with those `--set` overrides, e.g. `--variant 'fused model.fused_ops=true
llama:model.loss_chunk_tokens=4096'` (an override prefixed with a workload's name applies to that
workload's cells only) or `--variant 'zero3 strategy.name=zero3'` (a strategy at world size 1: over
NCCL on a GPU, Gloo on the CPU). Variants alternate with the other sides like any side; the
table gives each its own row, with its ratio to the peers and to Strata's plain run of the cell.

Same on every side: the model layer for layer (parameter counts checked against each other and
against the figure stated for the full shapes; initialization drawn from the same seeded
generator in the same order, so the step-1 losses agree, which is checked and warned about),
the data and its visiting order, the global batch and micro-batches, AdamW (lr, weight decay,
betas, eps; Strata's multi-tensor kernels against foreach=True, or with --optimizer fused
Strata's `[optimizer] fused` against fused=True), clipping, PyTorch's default TF32 and cuDNN
settings (neither side changes them), constant learning rate, the loss read at the same log steps.

Step time: Strata's summary.json `step_time_s`, on CUDA from CUDA events around each step (its
`step_timing` must say "cuda events"); the peer records CUDA events around the same span. Both
are medians over all steps, the first ones included (the peer's median after its warm-up steps is
in the JSON, to show how little the first steps move the median). Memory: the caching
allocator's peaks over the training steps, reset after setup on both sides: allocated
(Strata's `peak_tensor_bytes`, the peer's max_memory_allocated) and reserved (`peak_bytes`,
max_memory_reserved); the peer leaves out its resident training set, which Strata keeps on the host.

Exits non-zero when a run fails (its output is printed), or when the sides disagree on the
parameter count, or Strata ran another strategy, on another device or timed otherwise than asked.
"""
import argparse
import datetime
import json
import os
import random
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from peers import machine, tail, toml_value  # noqa: E402  (bench/peers.py: the CPU benchmark)

SWEEP = [32, 64, 128, 256]
TRAIN_SIZE = 4096  # synthetic training examples: 16 steps an epoch at micro-batch 256
TEXT_TRAIN_WINDOWS = 64
TEXT_EVAL_WINDOWS = 8

VIT = {"name": "vit", "patch_size": 4, "dim": 192, "depth": 6, "heads": 3, "mlp_ratio": 4.0, "pooling": "cls"}
CIFAR = {"name": "synthetic", "input_shape": [3, 32, 32], "num_classes": 10}
MNIST = {"name": "synthetic", "input_shape": [1, 28, 28], "num_classes": 10}

# Per workload: Strata's [model] and [dataset] (+ what --quick changes), the precision, the
# optimizer and clipping, whether it sweeps micro-batches (else its fixed global batch and
# micro-batches), default steps, log interval, the peer's warm-up window, and the parameter count
# of the full shapes (checked on both sides).
WORKLOADS = {
    "mlp": dict(label="MLP 784-256-128-10", model={"name": "mlp", "hidden": [256, 128]}, dataset=MNIST,
                precision="float32", lr=2e-3, weight_decay=0.01, clip=0.0, sweep=True, steps=300, log_every=100,
                warmup=10, parameters=235146),
    "cnn": dict(label="CNN 1x28x28 (conv 16, 32; FC 64)",
                model={"name": "cnn", "channels": [16, 32], "hidden": 64, "groups": 8}, dataset=MNIST,
                precision="float32", lr=2e-3, weight_decay=0.01, clip=0.0, sweep=True, steps=300, log_every=100,
                warmup=10, parameters=105962),
    "vit": dict(label="ViT 3x32x32 (patch 4, dim 192, depth 6)", model=VIT, dataset=CIFAR,
                quick_model={"dim": 48, "depth": 2}, quick_label="ViT 3x32x32 (patch 4, dim 48, depth 2)",
                precision="float32", lr=1e-3, weight_decay=0.05, clip=1.0,
                sweep=True, steps=200, log_every=100, warmup=10, parameters=2693578),
    "vit_bf16": dict(label="ViT 3x32x32 (patch 4, dim 192, depth 6)", model=VIT, dataset=CIFAR,
                     quick_model={"dim": 48, "depth": 2}, quick_label="ViT 3x32x32 (patch 4, dim 48, depth 2)",
                     precision="bfloat16", lr=1e-3, weight_decay=0.05,
                     clip=1.0, sweep=True, steps=200, log_every=100, warmup=10, parameters=2693578),
    "llama": dict(label="TinyLlama-1.1B (seq 2048)", model={"name": "llama", "preset": "tinyllama-1.1b"},
                  dataset={"name": "text", "tokenizer": "byte", "seq_len": 2048},
                  quick_model={"preset": "debug"}, quick_dataset={"seq_len": 64},
                  quick_label="Llama preset debug (seq 64)", precision="bfloat16",
                  lr=1e-4, weight_decay=0.1, clip=1.0, sweep=False, global_batch=8, micro_batches=2, steps=30,
                  log_every=10, warmup=3, parameters=1100048384),
}


class RunFailed(Exception):
    pass


def text_file(directory, seq_len):
    """A file of random printable ASCII (UTF-8, no NUL) of exactly TEXT_TRAIN_WINDOWS +
    TEXT_EVAL_WINDOWS windows of seq_len + 1 bytes, and the eval_fraction that holds out the last
    TEXT_EVAL_WINDOWS of them."""
    path = os.path.join(directory, "text_%d.txt" % seq_len)
    windows = TEXT_TRAIN_WINDOWS + TEXT_EVAL_WINDOWS
    if not os.path.exists(path):
        alphabet = [chr(c) for c in range(32, 127)] + ["\n"]
        with open(path, "w", encoding="ascii") as f:
            f.write("".join(random.Random(seq_len).choices(alphabet, k=windows * (seq_len + 1))))
    return path, TEXT_EVAL_WINDOWS / windows


def cell_config(args, name, micro_batch, steps, base):
    """The experiment of one cell, as a dict of TOML sections (Strata runs it, the peer reads it)."""
    w = WORKLOADS[name]
    model = dict(w["model"], **(w.get("quick_model", {}) if args.quick else {}))
    if name == "llama" and args.loss_chunk_tokens > 0:
        model["loss_chunk_tokens"] = args.loss_chunk_tokens
    if model["name"] in ("llama", "vit") and args.fused_ops:
        model["fused_ops"] = True
    dataset = dict(w["dataset"], **(w.get("quick_dataset", {}) if args.quick else {}))
    if w["sweep"]:
        global_batch, micros = micro_batch, 1
    else:
        global_batch, micros = w["global_batch"], w["micro_batches"]
    if dataset["name"] == "synthetic":
        dataset.update(train_size=TRAIN_SIZE, eval_size=global_batch)
    else:
        dataset["path"], dataset["eval_fraction"] = text_file(base, dataset["seq_len"])
    train = {"steps": steps, "global_batch_size": global_batch, "micro_batches": micros, "device": args.device,
             "seed": 0, "clip_grad_norm": w["clip"], "lr_schedule": "constant"}
    if args.device == "cpu":
        train["threads"] = os.cpu_count() or 1  # the peer sets the same
    if args.peak_tflops > 0:
        train["peak_tflops"] = args.peak_tflops
    return {
        "experiment": {"name": "gpu_peers_%s_mb%d" % (name, global_batch // micros)},
        "model": model,
        "dataset": dataset,
        "strategy": {"name": "single"},
        "optimizer": {"name": "adamw", "lr": w["lr"], "weight_decay": w["weight_decay"],
                      "fused": args.optimizer == "fused"},
        "train": train,
        "precision": {"param_dtype": w["precision"], "reduce_dtype": "float32"},
        "eval": {"every": 0, "batches": 1, "batch_size": global_batch // micros},
        "log": {"every": w["log_every"]},
    }


def write_toml(path, sections, comment):
    lines = ["# " + comment]
    for section, values in sections.items():
        lines.append("\n[%s]" % section)
        lines += ["%s = %s" % (k, toml_value(v)) for k, v in values.items()]
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def overrides(args, side, workload):
    """The --set overrides of a Strata side in a cell of `workload`: none for the plain run; a
    variant's, less those prefixed with another workload's name ("llama:KEY=VALUE")."""
    name, out = variant_name(side), []
    for override in (args.variants[name] if name else []):
        prefix, _, rest = override.partition(":")
        if prefix in WORKLOADS:
            if prefix == workload:
                out.append(rest)
        else:
            out.append(override)
    return out


def run_strata(args, config, out, side, workload):
    """Strata's run of a cell: the plain side ("strata") or a variant ("strata:NAME", its --set overrides)."""
    name = variant_name(side)
    run_dir = os.path.join(out, "strata-" + name if name else "strata")
    cmd = [args.strata, "run", config, "--out", run_dir]
    for override in overrides(args, side, workload):
        cmd += ["--set", override]
    env = dict(os.environ, OMP_WAIT_POLICY=os.environ.get("OMP_WAIT_POLICY", "PASSIVE"))
    try:
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.timeout)
    except subprocess.TimeoutExpired as e:
        raise RunFailed("strata timed out after %d s: %s\n%s" % (args.timeout, " ".join(cmd),
                                                                  tail(str(e.stderr or ""))))
    except OSError as e:
        raise RunFailed("strata could not start: %s (%s)" % (" ".join(cmd), e))
    if p.returncode != 0:
        raise RunFailed("strata failed (exit %d): %s\n--- stderr ---\n%s\n--- stdout ---\n%s" % (
            p.returncode, " ".join(cmd), tail(p.stderr), tail(p.stdout)))
    with open(os.path.join(run_dir, "summary.json")) as f:
        s = json.load(f)
    flops = s.get("flops") or {}
    return {
        "step_time_s": s["step_time_s"],
        "step_timing": s.get("step_timing"),
        "parameters": s["parameters"],
        "device": s["device"],
        "strategy": s["strategy"],
        "peak_tensor_bytes": s["memory"]["peak_tensor_bytes"],
        "peak_bytes": s["memory"]["peak_bytes"],
        "peak_source": s["memory"].get("peak_source"),
        "tensor_source": s["memory"].get("tensor_source"),
        "achieved_tflops": flops.get("achieved_tflops_per_device"),
        "mfu": flops.get("mfu"),
        "first_loss": s["loss_curve"][0][1] if s.get("loss_curve") else None,
        "final_loss": s["final_loss"],
        "time_breakdown_steady_s": s.get("time_breakdown_steady_s"),
        "time_breakdown_timing": s.get("time_breakdown_timing"),
        "versions": s.get("versions"),
    }


def variant_name(side):
    """NAME of a variant's side "strata:NAME"; None for the base side and the peers."""
    return side.split(":", 1)[1] if side.startswith("strata:") else None


def expected_strategy(args, side, workload):
    """The strategy a Strata side must report: a variant's strategy.name override, else single."""
    for override in overrides(args, side, workload):
        key, _, value = override.partition("=")
        if key.strip() == "strategy.name":
            return value.strip().strip("'\"")
    return "single"


def run_peer(args, config, compiled, warmup):
    cmd = [args.python, os.path.join(HERE, "gpu_peer.py"), config, "--data", args.peer_data, "--bf16",
           args.bf16_peer, "--warmup", str(warmup)] + (["--compile"] if compiled else [])
    env = dict(os.environ, OMP_WAIT_POLICY=os.environ.get("OMP_WAIT_POLICY", "PASSIVE"))
    with tempfile.TemporaryFile(mode="w+") as log:  # a file, not a pipe: chatty compile logs cannot block
        try:
            p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=log, text=True, timeout=args.timeout)
        except subprocess.TimeoutExpired:
            raise RunFailed("the peer timed out after %d s: %s" % (args.timeout, " ".join(cmd)))
        log.seek(0)
        err = log.read()
    lines = p.stdout.strip().splitlines()
    if p.returncode != 0 or not lines:
        raise RunFailed("the peer failed (exit %d): %s\n--- stderr ---\n%s\n--- stdout ---\n%s" % (
            p.returncode, " ".join(cmd), tail(err), tail(p.stdout)))
    r = json.loads(lines[-1])
    r["first_loss"] = r["loss_curve"][0][1] if r["loss_curve"] else None
    r["final_loss"] = r["loss_curve"][-1][1] if r["loss_curve"] else None
    return r


def environment(args):
    """What the machine is: the peer interpreter's torch and device, the driver, the date."""
    probe = ("import json, torch\n"
             "d = {'torch': torch.__version__, 'cuda': torch.version.cuda, 'cuda_available': torch.cuda.is_available(),"
             " 'cudnn': torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None}\n"
             "if d['cuda_available'] and %r.startswith('cuda'):\n"
             "    d['gpu'] = torch.cuda.get_device_name(%r)\n"
             "    d['gpu_memory_bytes'] = torch.cuda.get_device_properties(%r).total_memory\n"
             "try:\n    import transformers; d['transformers'] = transformers.__version__\n"
             "except ImportError as e:\n    d['transformers'] = None; d['transformers_error'] = str(e)\n"
             "try:\n    import triton; d['triton'] = triton.__version__\n"
             "except ImportError as e:\n    d['triton'] = None\n"
             "print(json.dumps(d))\n") % (args.device, args.device, args.device)
    p = subprocess.run([args.python, "-c", probe], capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit("gpu_peers: %s cannot import torch:\n%s" % (args.python, tail(p.stderr)))
    env = json.loads(p.stdout.strip().splitlines()[-1])
    env["date"] = datetime.date.today().isoformat()
    env["host"] = machine()
    env["driver"] = None
    if shutil.which("nvidia-smi"):
        q = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                           capture_output=True, text=True)
        if q.returncode == 0 and q.stdout.strip():
            env["driver"] = q.stdout.strip().splitlines()[0]
    return env


def describe_machine(env, strata_versions):
    if env.get("gpu"):
        where = "%s (%.0f GiB), driver %s" % (env["gpu"], env.get("gpu_memory_bytes", 0) / 2**30,
                                              env.get("driver") or "unknown (no nvidia-smi)")
    else:
        where = env["host"]
    peer = "peers: torch %s (CUDA %s, cuDNN %s)" % (env["torch"], env.get("cuda"), env.get("cudnn"))
    if env.get("transformers"):
        peer += ", transformers %s" % env["transformers"]
    text = "%s; %s; %s" % (env["date"], where, peer)
    if strata_versions:
        text += "; Strata %s (%s, LibTorch %s, CUDA %s)" % (strata_versions.get("strata"),
                                                             strata_versions.get("commit"),
                                                             strata_versions.get("libtorch"),
                                                             strata_versions.get("cuda"))
    return text


def ms(s):
    return "%.2f ms" % (s * 1e3) if s is not None else "-"


def mib(b):
    return "%.0f" % (b / 2**20) if b is not None else "-"


def memory_of(allocated, reserved):
    return "-" if allocated is None and reserved is None else "%s / %s MiB" % (mib(allocated), mib(reserved))


def memory(row, side):
    return memory_of(row.get(side + "_peak_tensor_bytes"), row.get(side + "_peak_bytes"))


def ratio(x):
    return "**%.2f**" % x if x is not None else "-"


def short_machine(env):
    """The machine column: the GPU (or the host), the driver, the peers' torch and CUDA."""
    if env.get("gpu"):
        return "%s, driver %s, torch %s (CUDA %s)" % (env["gpu"], env.get("driver") or "unknown", env["torch"],
                                                     env.get("cuda"))
    return "%s, torch %s" % (env["host"], env["torch"])


def markdown(data):
    """The table for BENCHMARKS.md, a row per cell and Strata side (its plain run, then each
    --variant), under a line naming everything measured."""
    date, where = data["machine"]["date"], short_machine(data["machine"])
    out = ["Measured " + data["machine_text"] + ".", "",
           "| date | machine | model | precision | micro-batch | steps | repeats | parameters | Strata run | Strata "
           "step | MFU | eager step | Strata / eager | compiled step | Strata / compiled | Strata / plain Strata | "
           "memory, allocated / reserved (peak): Strata | eager | compiled |",
           "|---" * 19 + "|"]
    for row in data["results"]:
        mb = str(row["micro_batch"])
        if row["micro_batches"] > 1:
            mb = "%d x %d" % (row["micro_batch"], row["micro_batches"])
        plain = {k[len("strata_"):] if k.startswith("strata_") else k: v for k, v in row.items()
                 if k.startswith("strata_") or k.startswith("ratio_")}
        sides = [("plain", plain, None)]
        for name, v in (row.get("variants") or {}).items():
            sides.append(("%s (`%s`)" % (name, " ".join(v["overrides"])), v, v.get("ratio_strata")))
        for label, side, to_plain in sides:
            out.append("| %s | %s | %s | %s | %s | %d | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s "
                       "| %s |" % (
                           date, where, row["model"], row["precision"], mb, row["steps"], row["repeats"],
                           format(row["parameters"], ","), label, ms(side.get("step_time_s")),
                           "%.1f%%" % (100 * side["mfu"]) if side.get("mfu") is not None else "-",
                           ms(row.get("eager_step_time_s")), ratio(side.get("ratio_eager")),
                           ms(row.get("compiled_step_time_s")), ratio(side.get("ratio_compiled")),
                           ratio(to_plain), memory_of(side.get("peak_tensor_bytes"), side.get("peak_bytes")),
                           memory(row, "eager"), memory(row, "compiled")))
    s = data["settings"]
    out += ["", "Settings: AdamW %s, peer data on the %s, bfloat16 peer `%s`, device `%s`%s%s%s." % (
        s["optimizer"], s["peer_data"], s["bf16_peer"], s["device"], ", quick shapes" if s["quick"] else "",
        (", Strata's llama with loss_chunk_tokens = %d" % s["loss_chunk_tokens"] if s.get("loss_chunk_tokens") else "")
        + (", Strata's llama and vit with fused_ops" if s.get("fused_ops") else ""),
        "; on the CPU Strata's memory is live tensors / peak RSS and the peers report none (RSS in the JSON)"
        if s["device"] == "cpu" else "")]
    return "\n".join(out)


def summarize(cell, sides, name, micro_batch, steps, repeats_done, quick, variant_overrides):
    """One cell's row: the peers' medians, Strata's plain run (strata_* keys, ratio_eager and
    ratio_compiled, as rows have always had them) and each variant's (`variants`, with the
    overrides `variant_overrides` gives it in this workload)."""
    w = WORKLOADS[name]
    med = lambda side, key: (statistics.median(x[key] for x in cell[side])  # noqa: E731
                             if cell.get(side) and all(x.get(key) is not None for x in cell[side]) else None)
    row = {"workload": name, "model": w.get("quick_label", w["label"]) if quick else w["label"],
           "precision": w["precision"], "steps": steps,
           "repeats": repeats_done, "micro_batch": micro_batch,
           "micro_batches": 1 if w["sweep"] else w["micro_batches"],
           "parameters": cell["strata"][0]["parameters"]}

    def strata_side(side):
        r = {"step_time_s": med(side, "step_time_s"), "peak_tensor_bytes": med(side, "peak_tensor_bytes"),
             "peak_bytes": med(side, "peak_bytes"), "achieved_tflops": med(side, "achieved_tflops"),
             "mfu": med(side, "mfu")}
        for peer in ("eager", "compiled"):
            t = row.get(peer + "_step_time_s")
            r["ratio_" + peer] = r["step_time_s"] / t if t and r["step_time_s"] is not None else None
        return r

    for side in ("eager", "compiled"):
        for key in ("step_time_s", "peak_tensor_bytes", "peak_bytes", "step_time_after_warmup_s"):
            row["%s_%s" % (side, key)] = med(side, key)
    base = strata_side("strata")
    for key, value in base.items():
        row[key if key.startswith("ratio_") else "strata_" + key] = value
    row["variants"] = {}
    for side in sides:
        variant = variant_name(side)
        if variant:
            v = strata_side(side)
            v["ratio_strata"] = v["step_time_s"] / base["step_time_s"] if v["step_time_s"] and base["step_time_s"] \
                else None
            v["overrides"] = variant_overrides[variant]
            row["variants"][variant] = v
    row["runs"] = {side: cell[side] for side in sides}
    return row


def report(files):
    merged = None
    for path in files:
        with open(path) as f:
            data = json.load(f)
        if merged is None:
            merged = data
            continue
        if data["machine_text"].split(";", 1)[1:] != merged["machine_text"].split(";", 1)[1:]:
            print("warning: %s was measured elsewhere: %s" % (path, data["machine_text"]), file=sys.stderr)
        merged["results"] += data["results"]
        merged["failures"] += data["failures"]
    print(markdown(merged))
    if merged["failures"]:
        print("\n%d cell(s) failed: %s" % (len(merged["failures"]), ", ".join(
            "%s/%s" % (f["workload"], f["micro_batch"]) for f in merged["failures"])))


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--strata", default=os.path.join(ROOT, "build", "bin", "strata"))
    ap.add_argument("--python", default=sys.executable, help="interpreter of the peers (torch, transformers)")
    ap.add_argument("--workloads", default=",".join(WORKLOADS), help="comma-separated subset of " + ",".join(WORKLOADS))
    ap.add_argument("--micro-batches", default=",".join(map(str, SWEEP)),
                    help="micro-batch sweep of mlp, cnn and vit (llama keeps its 2 x 4)")
    ap.add_argument("--steps", type=int, default=0, help="steps of every run; 0: per workload (" +
                    ", ".join("%s %d" % (k, v["steps"]) for k, v in WORKLOADS.items()) + "; a tenth, at least 5, "
                    "with --quick)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--no-compile", action="store_true", help="leave out the torch.compile peer")
    ap.add_argument("--no-eager", action="store_true", help="leave out the eager peer")
    ap.add_argument("--variant", action="append", default=[], metavar="'NAME KEY=VALUE ...'",
                    help="another Strata side in every cell: the cell's experiment with these --set overrides, "
                    "e.g. 'fused model.fused_ops=true llama:model.loss_chunk_tokens=4096' (WORKLOAD:KEY=VALUE: only "
                    "in that workload's cells) or 'fsdp strategy.name=fsdp' (repeatable)")
    ap.add_argument("--device", default="cuda", help="cuda, cuda:N, or cpu (a smoke test of the script)")
    ap.add_argument("--quick", action="store_true", help="tiny vit and llama shapes (parameter counts not checked "
                    "against the full shapes' figures)")
    ap.add_argument("--optimizer", choices=["foreach", "fused"], default="foreach",
                    help="AdamW kernels on both sides: foreach (Strata's default multi-tensor path; the peer's "
                    "foreach=True) or fused (Strata's [optimizer] fused; the peer's fused=True)")
    ap.add_argument("--peer-data", choices=["device", "host"], default="device",
                    help="the peers' training set: resident on the device (default) or pinned on the host")
    ap.add_argument("--bf16-peer", choices=["masters", "autocast"], default="masters",
                    help="bfloat16 cells: the peer trains bfloat16 parameters with float32 masters as Strata "
                    "does (default), or float32 parameters under torch.autocast(bfloat16)")
    ap.add_argument("--loss-chunk-tokens", type=int, default=0,
                    help="llama: Strata's [model] loss_chunk_tokens (lm_head fused with the cross-entropy, this many "
                    "tokens at a time; 0: logits, then the loss, as the peers)")
    ap.add_argument("--fused-ops", action="store_true",
                    help="llama and vit: Strata's [model] fused_ops (its CUDA kernels: llama's RMSNorm with the "
                    "residual add, RoPE in place and SwiGLU; vit's residual add with LayerNorm; the peers run their "
                    "own ops, eager or compiled)")
    ap.add_argument("--peak-tflops", type=float, default=0.0,
                    help="Strata's [train] peak_tflops, for MFU on a GPU its table lacks (Strata refuses to run "
                    "there otherwise)")
    ap.add_argument("--json", help="write the machine, the settings, every run and the medians to this file "
                    "(rewritten after every cell, so an interrupted run keeps what it measured)")
    ap.add_argument("--keep", help="keep the generated experiments and Strata's run directories under this directory")
    ap.add_argument("--timeout", type=int, default=1200, help="seconds one run may take")
    ap.add_argument("--report", nargs="+", metavar="JSON", help="print the table of earlier --json files and exit")
    args = ap.parse_args()
    if args.report:
        return args
    args.workload_list = [w for w in args.workloads.split(",") if w]
    args.variants = {}
    for spec in args.variant:
        try:
            words = shlex.split(spec)
        except ValueError as e:
            ap.error("--variant %r: %s" % (spec, e))
        if len(words) < 2 or not re.fullmatch(r"[A-Za-z0-9_.-]+", words[0]) or words[0] == "plain":
            ap.error("--variant takes 'NAME KEY=VALUE ...' (a name of letters, digits, '_', '.' or '-', other than "
                     "'plain', then at least one override), got %r" % spec)
        if words[0] in args.variants:
            ap.error("--variant %s is given twice" % words[0])
        bad = [o for o in words[1:] if "=" not in o or not o.split("=", 1)[0].split(":", 1)[-1].strip()]
        if bad:
            ap.error("--variant %s: %s is no KEY=VALUE override (as strata run --set takes)" % (words[0], bad[0]))
        args.variants[words[0]] = words[1:]
    for w in args.workload_list:
        if w not in WORKLOADS:
            ap.error("unknown workload %r (known: %s)" % (w, ", ".join(WORKLOADS)))
    try:
        args.sweep = [int(b) for b in args.micro_batches.split(",") if b]
    except ValueError:
        ap.error("--micro-batches takes comma-separated integers, got %r" % args.micro_batches)
    if not args.sweep or min(args.sweep) < 1 or max(args.sweep) > TRAIN_SIZE:
        ap.error("--micro-batches must lie in [1, %d]" % TRAIN_SIZE)
    if args.repeats < 1 or args.steps < 0:
        ap.error("--repeats must be at least 1 and --steps at least 0")
    return args


def preflight(args):
    """The machine, or exit with what is missing: Strata, a device the peers' torch can use,
    transformers for llama, triton for torch.compile on CUDA."""
    if not (os.path.isfile(args.strata) and os.access(args.strata, os.X_OK)):
        sys.exit("gpu_peers: no Strata executable at %s (build it first, or pass --strata; scripts/gpu_check.sh "
                 "builds into build-gpu/bin/strata)" % args.strata)
    env = environment(args)
    if args.device.startswith("cuda") and not env["cuda_available"]:
        sys.exit("gpu_peers: --device %s, but %s's torch %s sees no CUDA device (torch.cuda.is_available() is "
                 "false). Run on a GPU machine, or smoke-test with --device cpu." % (args.device, args.python,
                                                                                      env["torch"]))
    if "llama" in args.workload_list and not env["transformers"]:
        sys.exit("gpu_peers: the llama peer needs transformers in %s (%s); install it or leave llama out of "
                 "--workloads." % (args.python, env.get("transformers_error")))
    if not args.no_compile and args.device.startswith("cuda") and not env["triton"]:
        sys.exit("gpu_peers: torch.compile on CUDA needs triton, which %s lacks; install it or pass --no-compile."
                 % args.python)
    return env


def run_cell(args, w, mb, r, order, steps, base):
    """Every side of one cell once, in `order`: (micro-batch size, {side: result})."""
    spec = WORKLOADS[w]
    sections = cell_config(args, w, mb, steps, base)
    micro = sections["train"]["global_batch_size"] // sections["train"]["micro_batches"]
    out = os.path.join(base, "%s-mb%d-r%d" % (w, micro, r))
    os.makedirs(out, exist_ok=True)
    config = os.path.join(out, "experiment.toml")
    write_toml(config, sections, "Generated by bench/gpu_peers.py: workload %s, repeat %d." % (w, r))
    got = {}
    for side in order:
        t0 = time.monotonic()
        if side.startswith("strata"):
            got[side] = run_strata(args, config, out, side, w)
        else:
            got[side] = run_peer(args, config, side == "compiled", spec["warmup"])
        got[side]["wall_s"] = time.monotonic() - t0
    return micro, got


def problems_of(args, w, got):
    """What makes a run of a cell unusable: parameter counts, the device, the timing."""
    st, spec, problems = got["strata"], WORKLOADS[w], []
    counts = {side: r["parameters"] for side, r in got.items()}
    if len(set(counts.values())) != 1:
        problems.append("parameter counts differ: " + ", ".join("%s %d" % kv for kv in counts.items()))
    if not args.quick and st["parameters"] != spec["parameters"]:
        problems.append("Strata has %d parameters, the full shapes have %d" % (st["parameters"], spec["parameters"]))
    for side, r in got.items():
        if not side.startswith("strata"):
            continue
        want = expected_strategy(args, side, w)
        if r["strategy"] != want or not r["device"].startswith(args.device.split(":")[0]):
            problems.append("Strata (%s) ran %s on %s, asked %s on %s" % (side, r["strategy"], r["device"], want,
                                                                          args.device))
    if args.device.startswith("cuda"):
        for side, r in got.items():
            if r["step_timing"] != "cuda events":
                problems.append("%s timed with %s, not cuda events" % (side, r["step_timing"]))
    return problems


def warn_first_loss(w, micro, got):
    """Same initialization and first batch: the step-1 losses agree unless the sides no longer
    train the same thing (a warning: the timings stay comparable)."""
    tolerance = 2e-2 if WORKLOADS[w]["precision"] == "bfloat16" else 1e-3
    a = got["strata"]["first_loss"]
    for side, r in got.items():
        if side != "strata" and abs(a - r["first_loss"]) > tolerance * abs(a):
            print("warning: %s micro-batch %d: step-1 loss Strata %.6f, %s %.6f (tolerance %g relative): the model, "
                  "its initialization or the data no longer match" % (w, micro, a, side, r["first_loss"], tolerance),
                  file=sys.stderr, flush=True)


def main():
    args = parse_args()
    if args.report:
        report(args.report)
        return
    env = preflight(args)
    sides = (["strata"] + ["strata:" + name for name in args.variants] + ([] if args.no_eager else ["eager"]) +
             ([] if args.no_compile else ["compiled"]))
    cells = [(w, mb) for w in args.workload_list for mb in (args.sweep if WORKLOADS[w]["sweep"] else [None])]
    steps_of = {w: args.steps or (max(5, WORKLOADS[w]["steps"] // 10) if args.quick else WORKLOADS[w]["steps"])
                for w in args.workload_list}
    state = {c: dict({side: [] for side in sides}, failed=None, micro=None) for c in cells}
    failures, versions = [], {}

    def collected():
        results = [summarize(cell, sides, w, cell["micro"], steps_of[w], len(cell["strata"]), args.quick,
                             {name: overrides(args, "strata:" + name, w) for name in args.variants})
                   for (w, mb), cell in state.items() if cell["strata"]]
        return {
            "machine": env, "strata_versions": versions.get("strata"),
            "machine_text": describe_machine(env, versions.get("strata")),
            "settings": {"device": args.device, "optimizer": args.optimizer, "peer_data": args.peer_data,
                         "bf16_peer": args.bf16_peer, "compile": not args.no_compile, "quick": args.quick,
                         "repeats": args.repeats, "loss_chunk_tokens": args.loss_chunk_tokens,
                         "fused_ops": args.fused_ops, "eager": not args.no_eager, "variants": args.variants,
                         "command": " ".join([os.path.relpath(sys.argv[0], ROOT)] + sys.argv[1:])},
            "results": results,
            "failures": [{"workload": w, "micro_batch": micro, "error": msg} for w, micro, msg in failures],
        }

    def save():
        if args.json:
            with open(args.json + ".tmp", "w") as f:
                json.dump(collected(), f, indent=2)
            os.replace(args.json + ".tmp", args.json)

    print("gpu_peers: %s; %d cell(s) x %d repeat(s), sides %s" % (
        describe_machine(env, None), len(cells), args.repeats, ", ".join(sides)), flush=True)
    started = time.monotonic()
    tmp = tempfile.TemporaryDirectory(prefix="gpu_peers_")
    base = os.path.abspath(args.keep) if args.keep else tmp.name
    os.makedirs(base, exist_ok=True)
    for r in range(args.repeats):
        order = sides[r % len(sides):] + sides[:r % len(sides)]  # rotated every repeat
        for (w, mb) in cells:
            cell = state[(w, mb)]
            if cell["failed"]:
                continue
            micro = mb or WORKLOADS[w]["global_batch"] // WORKLOADS[w]["micro_batches"]
            try:
                micro, got = run_cell(args, w, mb, r, order, steps_of[w], base)
                problems = problems_of(args, w, got)
            except RunFailed as e:
                problems = ["repeat %d: %s" % (r, e)]
            if problems:
                msg = "%s micro-batch %d: %s" % (w, micro, "; ".join(problems))
                print(msg, file=sys.stderr, flush=True)
                cell["failed"] = msg
                failures.append((w, micro, msg))
                save()
                continue
            versions.setdefault("strata", got["strata"].get("versions"))
            cell["micro"] = micro
            for side in sides:
                cell[side].append(got[side])
            print("repeat %d %-8s micro-batch %4d  params %s  step %s  loss step 1 %s  wall %s  (%.0f s in all)" % (
                r, w, micro, format(got["strata"]["parameters"], ","),
                ", ".join("%s %s" % (side, ms(got[side]["step_time_s"])) for side in sides),
                " / ".join("%.5f" % got[side]["first_loss"] for side in sides),
                " / ".join("%.0f s" % got[side]["wall_s"] for side in sides), time.monotonic() - started),
                flush=True)
            for side in sides:
                parts = got[side].get("time_breakdown_steady_s" if side.startswith("strata") else
                                      "time_breakdown_after_warmup_s")
                if parts:
                    print("    %-14s step %s; steady steps: %s (%s)" % (
                        side, ms(got[side]["step_time_s"]), ", ".join("%s %s" % (k, ms(v)) for k, v in parts.items()),
                        got[side].get("time_breakdown_timing") or got[side].get("step_timing")), flush=True)
            warn_first_loss(w, micro, got)
            save()

    print("\n%.0f s in all; medians over repeats of each run's median step time\n" % (time.monotonic() - started))
    print(markdown(collected()))
    save()
    tmp.cleanup()
    if failures:
        sys.exit("gpu_peers: %d cell(s) failed: %s" % (len(failures), ", ".join(
            "%s micro-batch %d" % (w, micro) for w, micro, msg in failures)))


if __name__ == "__main__":
    main()
