#!/usr/bin/env python3
"""`strata estimate`'s bus bytes per step against measured runs, for every strategy and option the
check knows: one profile run on one device, then for each case and world size a real `strata run`
and `strata estimate --profile` of the same experiment, and the relative error of the prediction.
Both read the strategy's schedule the same way `strata check` does, so this is the estimate's side
of "one description": what is simulated is what runs.

    ~/.cache/strata/venv/bin/python bench/estimate_bus_bytes.py [--strata build/bin/strata]
        [--world-sizes 2,3,4] [--out DIR]

Prints one line per case and world size and the worst relative error; exits 1 when it is over 2%.
The experiment is tests/fixtures/configs/good_synthetic.toml (an MLP on synthetic images), global
batch 48 in 2 micro-batches, 8 steps.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
EXPERIMENT = os.path.join(REPO, "tests", "fixtures", "configs", "good_synthetic.toml")
SETS = ["train.global_batch_size=48", "train.steps=8", "train.micro_batches=2"]
# (strategy, its options): every built-in, fsdp's sharding strategies, and the plugins built beside them.
CASES = [("ddp", []), ("zero1", []), ("zero2", []), ("zero3", []), ("fsdp", []),
         ("fsdp", ['strategy.sharding_strategy="SHARD_GRAD_OP"']), ("fsdp", ['strategy.sharding_strategy="NO_SHARD"']),
         ("fsdp", ['strategy.sharding_strategy="HYBRID_SHARD"', "strategy.shard_group_size=2"]),
         ("hpz", ["strategy.secondary_group_size=2"]), ("zeropp", []), ("zeropp", ["strategy.secondary_group_size=2"]),
         ("zeropp", ['strategy.gradient_dtype="int4"', "strategy.secondary_group_size=2"]),
         ("zeropp", ["strategy.quantize_weights=false"]),
         ("diloco", []), ("powersgd", ["strategy.start_step=0"]), ("dp", [])]


def sets(*extra):
    args = []
    for s in SETS + list(extra):
        args += ["--set", s]
    return args


def run(command):
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError("%s failed (exit %d): %s" % (" ".join(command[:2]), result.returncode,
                                                        (result.stdout + result.stderr)[-600:]))
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--strata", default=os.path.join(REPO, "build", "bin", "strata"))
    parser.add_argument("--world-sizes", default="2,3,4")
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    out = args.out or tempfile.mkdtemp(prefix="estimate-bus-bytes-")
    os.makedirs(out, exist_ok=True)
    profile = os.path.join(out, "profile")
    run([args.strata, "run", EXPERIMENT, "--out", profile] + sets())
    worst = 0.0
    for c, (name, options) in enumerate(CASES):
        for n in (int(w) for w in args.world_sizes.split(",")):
            label = "%s %s" % (name, " ".join(options))
            if "strategy.shard_group_size=2" in options or "strategy.secondary_group_size=2" in options:
                if n % 2:
                    continue  # groups of 2 do not divide an odd world
            world = ["--set", "strategy.replicas=%d" % n] if name == "dp" else ["--set", "distributed.nproc=%d" % n]
            measured_dir = os.path.join(out, "case%d_run%d" % (c, n))
            run([args.strata, "run", EXPERIMENT, "--out", measured_dir] + sets("strategy.name=" + name, *options) + world)
            with open(os.path.join(measured_dir, "summary.json")) as f:
                measured = json.load(f)["comm"]["bus_bytes_per_step"]
            estimate_dir = os.path.join(out, "case%d_estimate%d" % (c, n))
            run([args.strata, "estimate", EXPERIMENT, "--world-sizes", str(n), "--strategies", name, "--profile", profile,
                 "--out", estimate_dir] + sets(*options))
            with open(os.path.join(estimate_dir, "estimate.json")) as f:
                predicted = [r for r in json.load(f)["rows"] if r["strategy"] == name][0]["bus_bytes_per_step"]
            error = abs(predicted - measured) / max(measured, 1e-9)
            worst = max(worst, error)
            print("%-60s N=%d: predicted %10.1f, measured %10.1f, error %.2f%%" % (label, n, predicted, measured,
                                                                                   100 * error), flush=True)
    print("worst error: %.2f%% (runs in %s)" % (100 * worst, out))
    return 0 if worst <= 0.02 else 1


if __name__ == "__main__":
    sys.exit(main())
