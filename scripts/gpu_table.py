#!/usr/bin/env python3
"""The strategy table of scripts/gpu_check.sh (runs on a GPU machine; needs torch to read models).

For the quickstart MLP and the Fashion-MNIST CNN (the synthetic stand-in with their shapes when
Fashion-MNIST is not installed): `single` on cuda, then every strategy at world size 1 over NCCL
(`distributed.backend = "nccl"` gives a real process group even for one rank; dp runs one replica),
then two ranks sharing the GPU over Gloo (ddp, zero2, zero3, fsdp). Each row: median step time and
its ratio to single's, the caching allocator's peaks (reserved: peak_bytes; allocated:
peak_tensor_bytes), the largest relative difference of the final model from single's, tensor by
tensor, and PASS/FAIL at --rtol.
"""
import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NCCL_STRATEGIES = [("dp", ["strategy.replicas=1"]), ("ddp", []), ("zero1", []), ("zero2", []), ("zero3", []),
                   ("fsdp", [])]
GLOO_STRATEGIES = ["ddp", "zero2", "zero3", "fsdp"]


def experiments():
    fmnist = os.environ.get("STRATA_FASHION_MNIST_DIR") or "/usr/share/datasets/fashion-mnist"
    real = os.path.isdir(fmnist)
    stand_in = [] if real else ["dataset.name=synthetic", "dataset.input_shape=[1,28,28]", "dataset.num_classes=10",
                                "dataset.train_size=8192", "dataset.eval_size=1024"]
    note = "Fashion-MNIST" if real else "synthetic stand-in (Fashion-MNIST not installed)"
    return [("quickstart", os.path.join(ROOT, "experiments", "quickstart.toml"), stand_in, note),
            ("cnn", os.path.join(ROOT, "experiments", "fashion_mnist_cnn.toml"), stand_in, note)]


def run(strata, config, out, sets, nproc=1):
    args = [strata, "run", config, "--out", out, "--nproc", str(nproc)]
    for s in sets:
        args += ["--set", s]
    proc = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    with open(os.path.join(os.path.dirname(out), os.path.basename(out) + ".log"), "w") as f:
        f.write(" ".join(args) + "\n" + proc.stdout)
    if proc.returncode != 0:
        lines = [l for l in proc.stdout.splitlines() if l.startswith("error") or "error:" in l]
        return None, (lines[0] if lines else proc.stdout.strip().splitlines()[-1:] or ["failed"])[0][:160]
    with open(os.path.join(out, "summary.json")) as f:
        return json.load(f), None


def model_difference(a_dir, b_dir):
    import torch
    a = torch.load(os.path.join(a_dir, "final_model.pt"), weights_only=False)
    b = torch.load(os.path.join(b_dir, "final_model.pt"), weights_only=False)
    if sorted(a) != sorted(b):
        return float("inf")
    worst = 0.0
    for k in a:
        x, y = a[k].double(), b[k].double()
        if x.shape != y.shape:
            return float("inf")
        worst = max(worst, float((x - y).abs().max() / x.abs().max().clamp(min=1e-12)))
    return worst


def mib(x):
    return "%.1f" % (x / 2**20) if isinstance(x, (int, float)) else "n/a"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--strata", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--rtol", type=float, default=1e-5)
    a = p.parse_args()
    os.makedirs(a.out, exist_ok=True)
    common = ["train.steps=%d" % a.steps, "train.device=cuda", "train.save_final=true", "eval.every=0",
              "eval.batches=5", "train.warmup_steps=0"]
    rows, failed = [], 0
    for name, config, stand_in, note in experiments():
        base = common + stand_in
        ref_dir = os.path.join(a.out, name + "-single")
        ref, err = run(a.strata, config, ref_dir, base)
        if ref is None:
            rows.append((name, "single", 1, "-", "FAIL: " + err))
            failed += 1
            continue
        rows.append((name, "single", 1, "local", ref, 0.0, "PASS", note))
        cases = [(s, extra + ["distributed.backend=nccl"], 1, "nccl") for s, extra in NCCL_STRATEGIES]
        cases += [(s, ["distributed.backend=gloo", "train.device=cuda:0"], 2, "gloo") for s in GLOO_STRATEGIES]
        for strategy, extra, world, backend in cases:
            out = os.path.join(a.out, "%s-%s-w%d-%s" % (name, strategy, world, backend))
            summary, err = run(a.strata, config, out, base + ["strategy.name=" + strategy] + extra, nproc=world)
            if summary is None:
                rows.append((name, strategy, world, backend, "FAIL: " + err))
                failed += 1
                continue
            diff = model_difference(ref_dir, out)
            verdict = "PASS" if diff <= a.rtol else "FAIL"
            failed += verdict == "FAIL"
            rows.append((name, strategy, world, backend, summary, diff, verdict, ""))
    header = ("| workload | strategy | world | backend | step ms | vs single | peak reserved MiB | peak allocated MiB "
              "| max rel diff | result |")
    print(header)
    print("|" + "---|" * 10)
    ref_time = {}
    for r in rows:
        if len(r) == 5:
            print("| %s | %s | %d | %s | | | | | | %s |" % r)
            continue
        name, strategy, world, backend, s, diff, verdict, note = r
        if strategy == "single":
            ref_time[name] = s["step_time_s"]
        ratio = s["step_time_s"] / ref_time[name] if ref_time.get(name) else float("nan")
        print("| %s | %s | %d | %s | %.2f | %.2f | %s | %s | %.1e | %s |"
              % (name, strategy, world, backend, 1e3 * s["step_time_s"], ratio, mib(s["memory"]["peak_bytes"]),
                 mib(s["memory"].get("peak_tensor_bytes")), diff, verdict + (" (" + note + ")" if note else "")))
    print("Gloo on CUDA tensors: the gloo rows run all_reduce, reduce_scatter, all_gather and broadcast on cuda:0; "
          "a collective Gloo lacks would fail its row with the c10d error.")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
