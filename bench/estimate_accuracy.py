#!/usr/bin/env python3
"""How close `strata estimate` comes to what `strata compare` measures on this machine.

    bench/estimate_accuracy.py [--workloads cnn,mlp10m,llama] [--world-sizes 2,3,4] [--repeats 3]
                               [--strategies single,dp,ddp,zero1,zero2,zero3,fsdp] [--out DIR]
                               [--reestimate]

For each workload: `strata compare` of every strategy at world size 1 and each of --world-sizes
(strong scaling, --repeats interleaved rounds), with `--estimate` and the network measured here by
`strata bench comms` at each world size. The estimate's profile is the baseline's median run
(`single` at world size 1); nothing else of the measurements reaches the prediction. Prints, per
workload and over all, the median absolute error of step time and of peak memory per rank over
the cells above world size 1, the worst cells, and each cell's figures (markdown, for
BENCHMARKS.md); writes DIR/accuracy.json and DIR/accuracy.md. --reestimate keeps the comparisons
already in DIR and only estimates them again (the same profile run and network files), to measure a
change to the estimator against the same measurements.
"""

import argparse
import csv
import datetime
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
STRATA = os.path.join(ROOT, "build", "bin", "strata")

# The workloads: an experiment (TOML text, [compare.set]-free) each, sized so that a run takes a few
# seconds on 2 CPU cores; every global batch divides by 1, 2, 3 and 4 ranks.
WORKLOADS = {
    "cnn": ("Fashion-MNIST ConvNet (106k parameters), batch 48, AdamW",
            os.path.join(ROOT, "experiments", "fashion_mnist_cnn.toml"),
            {"train.steps": 200, "train.global_batch_size": 48, "eval.every": 0, "eval.batches": 4}),
    "mlp10m": ("MLP 3072-2048-2048-10 (10.5M parameters) on synthetic data, batch 192, AdamW", None,
               {"train.steps": 30}),
    "llama": ("Llama 4 layers, hidden 128 (0.80M parameters), byte tokens, seq 128, batch 24, AdamW",
              os.path.join(ROOT, "experiments", "llama_text.toml"),
              {"train.steps": 30, "train.global_batch_size": 24, "eval.every": 0, "eval.batches": 1,
               "train.warmup_steps": 5, "train.timing_warmup_steps": 5}),
}

MLP10M = """[experiment]
name = "mlp10m"
[model]
name = "mlp"
hidden = [2048, 2048]
[dataset]
name = "synthetic"
train_size = 4096
eval_size = 192
input_shape = [3072]
num_classes = 10
[strategy]
name = "single"
[optimizer]
name = "adamw"
lr = 1e-3
weight_decay = 0.01
[train]
steps = 30
global_batch_size = 192
[eval]
every = 0
batches = 1
"""


def toml_value(v):
    return json.dumps(v) if isinstance(v, str) else repr(v)


def run(args, **kw):
    print("+ " + " ".join(args), flush=True)
    return subprocess.run(args, check=True, **kw)


def reestimate(out, sweep, networks):
    """The estimate of `sweep` again from the profile run its comparison in `out` used, paired with
    that comparison's measurements as `strata compare --estimate` pairs them (medians over repeats;
    dp's process figure on the CPU)."""
    with open(os.path.join(out, "estimate", "estimate.json")) as f:
        profile = json.load(f)["profile"]["run_dir"]
    again = os.path.join(out, "estimate-again")
    shutil.rmtree(again, ignore_errors=True)  # an earlier re-estimate's runs: `strata run` keeps a run's directory
    run([STRATA, "estimate", sweep, "--profile", profile, "--network", ",".join(networks), "--out", again],
        stdout=subprocess.DEVNULL)
    with open(os.path.join(again, "estimate.json")) as f:
        predicted = {(r["strategy"], r["world_size"]): r for r in json.load(f)["rows"] if r["applicable"]}
    measured = {}
    with open(os.path.join(out, "results.csv")) as f:
        for r in csv.DictReader(f):
            if r["status"] == "ok":
                measured.setdefault((r["strategy"], int(r["world_size"])), []).append(r)
    rows = []
    for key, runs in measured.items():
        if key not in predicted:
            continue
        p = predicted[key]
        step = statistics.median(float(r["steady_step_time_s"]) for r in runs)
        peak = statistics.median(float(r["peak_tensor_bytes"]) for r in runs)
        bytes_ = p["memory"].get("process_peak_bytes") or p["memory"]["peak_bytes"]
        rows.append({"strategy": key[0], "world_size": str(key[1]), "predicted_step_time_s": p["step_time_s"],
                     "measured_step_time_s": step, "step_time_error": (p["step_time_s"] - step) / step,
                     "predicted_peak_bytes": bytes_, "measured_peak_bytes": peak,
                     "memory_error": (bytes_ - peak) / peak})
    return sorted(rows, key=lambda r: (int(r["world_size"]), r["strategy"]))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workloads", default="cnn,mlp10m,llama")
    ap.add_argument("--world-sizes", default="2,3,4")
    ap.add_argument("--strategies", default="single,dp,ddp,zero1,zero2,zero3,fsdp")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--reestimate", action="store_true",
                    help="keep the comparisons already in --out; only estimate again (the same profile run and "
                         "networks) and pair the predictions with their measurements")
    ap.add_argument("--out", default=os.path.join(ROOT, "runs", "estimate_accuracy",
                                                  datetime.datetime.utcnow().strftime("%Y%m%dT%H%M%SZ")))
    a = ap.parse_args()
    worlds = [int(w) for w in a.world_sizes.split(",")]
    os.makedirs(a.out, exist_ok=True)

    networks = []
    for n in worlds:
        path = os.path.join(a.out, f"comms{n}.json")
        if not a.reestimate:
            run([STRATA, "bench", "comms", "--nproc", str(n), "--max-bytes", "64M", "--iters", "10", "--json", path],
                stdout=subprocess.DEVNULL)
        networks.append(path)

    results = {}
    for name in a.workloads.split(","):
        label, base, sets = WORKLOADS[name]
        if base is None:
            base = os.path.join(a.out, f"{name}.toml")
            with open(base, "w") as f:
                f.write(MLP10M)
        sweep = os.path.join(a.out, f"{name}_sweep.toml")
        with open(sweep, "w") as f:
            f.write(f'[compare]\nbase = {json.dumps(base)}\nrepeats = {a.repeats}\n'
                    f'baseline = {{ strategy = "single", world_size = 1 }}\n[compare.axes]\n'
                    f'strategy = {json.dumps(a.strategies.split(","))}\nworld_size = {[1] + worlds}\n[compare.set]\n')
            for k, v in sets.items():
                f.write(f'"{k}" = {toml_value(v)}\n')
        out = os.path.join(a.out, name)
        if a.reestimate:
            rows = reestimate(out, sweep, networks)
        else:
            subprocess.run([STRATA, "compare", sweep, "--estimate", "--network", ",".join(networks), "--out", out],
                           check=False)
            with open(os.path.join(out, "accuracy.csv")) as f:
                rows = [r for r in csv.DictReader(f)]
        results[name] = {"label": label, "rows": rows}

    def medians(rows):
        above = [r for r in rows if int(r["world_size"]) > 1]
        t = [abs(float(r["step_time_error"])) for r in above]
        m = [abs(float(r["memory_error"])) for r in above]
        return (statistics.median(t) if t else float("nan"), statistics.median(m) if m else float("nan"), len(above))

    every = [r for w in results.values() for r in w["rows"]]
    lines = [f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} hardware threads; "
             f"{datetime.datetime.utcnow():%Y-%m-%d %H:%M} UTC; world sizes {a.world_sizes}, {a.repeats} rounds.", "",
             "| workload | cells | median abs. error, step time | median abs. error, peak memory | worst step time |",
             "|:---|---:|---:|---:|:---|"]
    for name, w in list(results.items()) + [("all", {"label": "all", "rows": every})]:
        t, m, k = medians(w["rows"])
        worst = sorted((r for r in w["rows"] if int(r["world_size"]) > 1),
                       key=lambda r: -abs(float(r["step_time_error"])))[:3]
        lines.append(f"| {name} | {k} | {100 * t:.1f}% | {100 * m:.1f}% | " +
                     ", ".join(f"{r['strategy']}@{r['world_size']} {100 * float(r['step_time_error']):+.0f}%"
                               for r in worst) + " |")
    lines += ["", "| workload | strategy | N | predicted ms | measured ms | error | predicted MiB | measured MiB | error |",
              "|:---|:---|--:|--:|--:|--:|--:|--:|--:|"]
    for name, w in results.items():
        for r in w["rows"]:
            lines.append(f"| {name} | {r['strategy']} | {r['world_size']} | {1e3 * float(r['predicted_step_time_s']):.2f} | "
                         f"{1e3 * float(r['measured_step_time_s']):.2f} | {100 * float(r['step_time_error']):+.1f}% | "
                         f"{float(r['predicted_peak_bytes']) / 2**20:.2f} | {float(r['measured_peak_bytes']) / 2**20:.2f} | "
                         f"{100 * float(r['memory_error']):+.1f}% |")
    text = "\n".join(lines)
    print("\n" + text)
    with open(os.path.join(a.out, "accuracy.json"), "w") as f:
        json.dump({"results": results, "table": text}, f, indent=1)
    with open(os.path.join(a.out, "accuracy.md"), "w") as f:
        f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
