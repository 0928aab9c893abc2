#!/usr/bin/env python3
"""The training stall of a checkpoint save, synchronous against asynchronous ([checkpoint] async).

Runs one experiment (a large MLP on synthetic data, AdamW: masters, two moments) with a
checkpoint every --every steps, once with each kind of save, alternating which goes first,
--repeats times. Per run it reads summary.json's checkpoint figures:
  stall per save    checkpoint.stall_s / saves: what the saves cost the training thread (a
                    synchronous save: all of it, written and committed; an asynchronous one: the
                    copy of the rank's state to host memory, then a writer thread does the rest)
  write per save    checkpoint.save_time_s / saves: the save's own time, wherever it ran
  run wall time     the whole `strata run` (the writer's competition for the cores included)
and prints a table of the medians and the async / sync ratio of the stall.

    ~/.cache/strata/venv/bin/python bench/async_checkpoint.py [--strata build/bin/strata] \\
        [--hidden 4096,4096,4096] [--steps 40] [--every 10] [--repeats 3] [--world 1]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

EXPERIMENT = """[experiment]
name = "async_checkpoint_bench"

[model]
name = "mlp"
hidden = [{hidden}]

[dataset]
name = "synthetic"
train_size = 4096
eval_size = 64
input_shape = [784]
num_classes = 10

[strategy]
name = "{strategy}"

[optimizer]
name = "adamw"
lr = 1e-4

[train]
steps = {steps}
global_batch_size = 64
seed = 0
device = "cpu"

[eval]
every = 0
batches = 1

[checkpoint]
every = {every}
keep = 2
async = {async_}

[log]
every = 1000
"""


def run_once(args, tmp, async_, repeat):
    config = os.path.join(tmp, "bench_%s_%d.toml" % ("async" if async_ else "sync", repeat))
    with open(config, "w", encoding="utf-8") as f:
        f.write(EXPERIMENT.format(hidden=args.hidden, steps=args.steps, every=args.every,
                                  async_="true" if async_ else "false",
                                  strategy="single" if args.world == 1 else args.strategy))
    out = os.path.join(tmp, "run_%s_%d" % ("async" if async_ else "sync", repeat))
    cmd = [args.strata, "run", config, "--out", out] + (["--nproc", str(args.world)] if args.world > 1 else [])
    t0 = time.monotonic()
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=args.timeout)
    wall = time.monotonic() - t0
    if proc.returncode != 0:
        print(proc.stdout[-3000:], proc.stderr[-3000:], file=sys.stderr)
        sys.exit("async_checkpoint: the run failed (exit %d): %s" % (proc.returncode, " ".join(cmd)))
    with open(os.path.join(out, "summary.json"), encoding="utf-8") as f:
        s = json.load(f)
    c = s["checkpoint"]
    return {"stall_s": c["stall_s"] / c["saves"], "write_s": c["save_time_s"] / c["saves"], "wall_s": wall,
            "step_s": s["step_time_s"], "bytes_per_rank": c["bytes_per_rank"], "saves": c["saves"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--strata", default=os.path.join(REPO, "build", "bin", "strata"))
    ap.add_argument("--hidden", default="4096,4096,4096", help="the MLP's hidden widths")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--every", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--world", type=int, default=1)
    ap.add_argument("--strategy", default="ddp", help="the strategy at --world above 1")
    ap.add_argument("--timeout", type=int, default=1800)
    ap.add_argument("--json", help="write every run's figures to this file")
    args = ap.parse_args()
    runs = {"sync": [], "async": []}
    with tempfile.TemporaryDirectory(prefix="strata-async-ckpt-") as tmp:
        for r in range(args.repeats):
            for async_ in ((False, True) if r % 2 == 0 else (True, False)):
                got = run_once(args, tmp, async_, r)
                runs["async" if async_ else "sync"].append(got)
                print("repeat %d %-5s stall %.3f s/save, write %.3f s/save, %.1f MiB per rank, run %.1f s" % (
                    r, "async" if async_ else "sync", got["stall_s"], got["write_s"],
                    (got["bytes_per_rank"] or 0) / 2 ** 20, got["wall_s"]), flush=True)
    med = {k: {f: statistics.median(x[f] for x in v) for f in ("stall_s", "write_s", "wall_s", "step_s")}
           for k, v in runs.items()}
    print("\n| save | repeats | stall per save | write per save | step (median) | run wall time |")
    print("|---|---|---|---|---|---|")
    for k in ("sync", "async"):
        m = med[k]
        print("| %s | %d | %.3f s | %.3f s | %.1f ms | %.1f s |" % (k, args.repeats, m["stall_s"], m["write_s"],
                                                                  1e3 * m["step_s"], m["wall_s"]))
    print("\nasync / sync stall: %.3f" % (med["async"]["stall_s"] / med["sync"]["stall_s"]))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"runs": runs, "medians": med}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
