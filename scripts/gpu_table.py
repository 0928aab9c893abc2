#!/usr/bin/env python3
"""The strategy table of scripts/gpu_check.sh (runs on a GPU machine; needs torch to read models).

For the quickstart MLP and the Fashion-MNIST CNN (the synthetic stand-in with their shapes when
Fashion-MNIST is not installed), every run trains with plain SGD for --steps steps (20: enough for
a wrong gradient to show, few enough that the training does not amplify rounding into noise)
under `train.deterministic = true` (deterministic cuDNN and cuBLAS kernels) and
`train.sync_audit = true` (CUDA's sync debug mode set to error between log steps: any host sync
in the step loop outside the log steps fails the run, and so its row).

Rows, each against `single` on the GPU, final models compared tensor by tensor:
  - `single` again: the spread of the reference against itself (0 when deterministic);
  - `single` with 2 micro-batches: the same sums in another order, which sets the noise band of
    a correct strategy; the tolerance is 10 x the larger of the two (at least 1e-7);
  - every strategy at world size 1 over a real NCCL process group (dp with one replica);
  - forced collectives (`distributed.force_collectives = true`): ddp, zero1, zero2, zero3 and
    fsdp FULL_SHARD / SHARD_GRAD_OP at world size 1 issue every all-gather, reduce-scatter and
    all-reduce a larger job would, over NCCL on their own streams; a row also fails if its
    summary counts no collective per step;
  - two ranks sharing the GPU over Gloo (ddp, zero2, zero3, fsdp).
Each row: median step time and its ratio to single's, the caching allocator's peaks (reserved:
peak_bytes; allocated: peak_tensor_bytes), the device memory in use as the driver sees it
(device_used_bytes: NCCL's buffers and the CUDA context live outside the allocator), collective
calls per step, the largest relative difference from single's model, and PASS/FAIL.
"""
import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORLD1 = [("dp", ["strategy.replicas=1"]), ("ddp", []), ("zero1", []), ("zero2", []), ("zero3", []),
          ("fsdp", []), ("fsdp", ["strategy.sharding_strategy=SHARD_GRAD_OP"])]
FORCED = [("ddp", []), ("zero1", []), ("zero2", []), ("zero3", []), ("fsdp", []),
          ("fsdp", ["strategy.sharding_strategy=SHARD_GRAD_OP"])]
GLOO = ["ddp", "zero2", "zero3", "fsdp"]


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
    with open(out + ".log", "w") as f:
        f.write(" ".join(args) + "\n" + proc.stdout)
    if proc.returncode != 0:
        lines = [l for l in proc.stdout.splitlines() if l.startswith("error") or "error:" in l]
        return None, (lines[0] if lines else (proc.stdout.strip().splitlines() or ["failed"])[-1])[:200]
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
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--floor", type=float, default=1e-7, help="smallest tolerance (relative)")
    a = p.parse_args()
    os.makedirs(a.out, exist_ok=True)
    common = ["train.steps=%d" % a.steps, "train.device=cuda", "train.save_final=true", "eval.every=0",
              "eval.batches=2", "train.warmup_steps=0", "train.lr_schedule=constant", "optimizer.name=sgd",
              "optimizer.momentum=0", "optimizer.lr=0.05", "optimizer.weight_decay=0", "train.clip_grad_norm=0",
              "train.deterministic=true", "train.sync_audit=true", "log.every=5"]
    rows, failed = [], 0
    for name, config, stand_in, note in experiments():
        base = common + stand_in
        ref_dir = os.path.join(a.out, name + "-single")
        ref, err = run(a.strata, config, ref_dir, base)
        if ref is None:
            rows.append((name, "single", 1, "-", None, err))
            failed += 1
            continue
        rows.append((name, "single", 1, "local", ref, 0.0, "reference", note))
        band = []
        for label, extra in (("single again", []), ("single 2 micro", ["train.micro_batches=2"])):
            out = os.path.join(a.out, "%s-%s" % (name, label.replace(" ", "-")))
            s, err = run(a.strata, config, out, base + extra)
            if s is None:
                rows.append((name, label, 1, "local", None, err))
                failed += 1
                continue
            diff = model_difference(ref_dir, out)
            band.append(diff)
            rows.append((name, label, 1, "local", s, diff, "band", ""))
        tol = max(10 * max(band or [0.0]), a.floor)
        cases = [(s, x + ["distributed.backend=nccl"], 1, "nccl", False) for s, x in WORLD1]
        cases += [(s, x + ["distributed.backend=nccl", "distributed.force_collectives=true"], 1, "nccl forced", True)
                  for s, x in FORCED]
        cases += [(s, ["distributed.backend=gloo", "train.device=cuda:0"], 2, "gloo", False) for s in GLOO]
        for strategy, extra, world, backend, forced in cases:
            label = strategy + ("" if not any("SHARD_GRAD_OP" in x for x in extra) else " SHARD_GRAD_OP")
            out = os.path.join(a.out, "%s-%s-w%d-%s" % (name, label.replace(" ", "-"), world, backend.replace(" ", "-")))
            summary, err = run(a.strata, config, out, base + ["strategy.name=" + strategy] + extra, nproc=world)
            if summary is None:
                rows.append((name, label, world, backend, None, err))
                failed += 1
                continue
            diff = model_difference(ref_dir, out)
            verdict = "PASS" if diff <= tol else "FAIL (tolerance %.1e)" % tol
            calls = summary["comm"]["calls_per_step"]
            if forced and calls <= 0:
                verdict = "FAIL (no collective per step)"
            failed += not verdict.startswith("PASS")
            rows.append((name, label, world, backend, summary, diff, verdict, ""))
    header = ("| workload | run | world | backend | step ms | vs single | peak reserved MiB | peak allocated MiB "
              "| device used MiB | calls/step | max rel diff | result |")
    print(header)
    print("|" + "---|" * 12)
    ref_time = {}
    for r in rows:
        name, label, world, backend, s = r[:5]
        if s is None:
            print("| %s | %s | %d | %s | | | | | | | | FAIL: %s |" % (name, label, world, backend, r[5]))
            continue
        diff, verdict, note = r[5:]
        if label == "single":
            ref_time[name] = s["step_time_s"]
        ratio = s["step_time_s"] / ref_time[name] if ref_time.get(name) else float("nan")
        m = s["memory"]
        print("| %s | %s | %d | %s | %.2f | %.2f | %s | %s | %s | %.0f | %.1e | %s |"
              % (name, label, world, backend, 1e3 * s["step_time_s"], ratio, mib(m["peak_bytes"]),
                 mib(m.get("peak_tensor_bytes")), mib(m.get("device_used_bytes")), s["comm"]["calls_per_step"],
                 diff, verdict + (" (" + note + ")" if note else "")))
    print("Tolerance per workload: 10 x the larger difference of `single` against itself and against itself with "
          "2 micro-batches (the band rows), at least %.0e. Every row ran with train.sync_audit = true: a host sync "
          "between log steps fails the run." % a.floor)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
