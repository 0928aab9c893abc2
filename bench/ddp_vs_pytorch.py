#!/usr/bin/env python3
"""Strata `ddp` against PyTorch-Python DDP: same model, global batch, steps, world size and
backend (Gloo, CPU), runs alternated, median step-time ratio (Strata / PyTorch; below 1.0 means
Strata is faster).

    ~/.cache/strata/venv/bin/python bench/ddp_vs_pytorch.py [--repeats 5] [--steps 300]

Strata's step time is summary.json's `step_time_s` (median over steps: micro-batches through
forward and backward with bucketed all-reduce overlapped, gradient sync, optimizer step, loss
read); the peer (bench/pytorch_ddp_peer.py) times the same span.
"""
import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_strata(args, out):
    cmd = [args.strata, "run", os.path.join(HERE, "ddp_bench.toml"), "--nproc", str(args.world), "--out", out,
           "--set", "train.steps=%d" % args.steps, "--set", "train.global_batch_size=%d" % args.global_batch,
           "--set", "model.hidden=[%s]" % ",".join(map(str, args.hidden))]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    with open(os.path.join(out, "summary.json")) as f:
        return json.load(f)["step_time_s"]


def run_pytorch(args):
    port = str(free_port())
    procs = []
    for rank in range(args.world):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(args.world), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=port, OMP_WAIT_POLICY=os.environ.get("OMP_WAIT_POLICY", "PASSIVE"))
        procs.append(subprocess.Popen(
            [sys.executable, os.path.join(HERE, "pytorch_ddp_peer.py"), "--steps", str(args.steps),
             "--global-batch", str(args.global_batch), "--hidden", *map(str, args.hidden)],
            env=env, stdout=subprocess.PIPE, text=True))
    outputs = [p.communicate()[0] for p in procs]
    if any(p.returncode for p in procs):
        sys.exit("the PyTorch peer failed")
    return json.loads(outputs[0])["step_time_s"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--strata", default=os.path.join(ROOT, "build", "bin", "strata"))
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--global-batch", type=int, default=64)
    ap.add_argument("--hidden", type=int, nargs="+", default=[256, 256])
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    strata_times, torch_times = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.repeats):  # alternate so drift affects both sides alike
            strata_times.append(run_strata(args, os.path.join(tmp, "run%d" % r)))
            torch_times.append(run_pytorch(args))
            print("repeat %d: strata %.3f ms, pytorch %.3f ms" % (r, strata_times[-1] * 1e3, torch_times[-1] * 1e3))
    s, t = statistics.median(strata_times), statistics.median(torch_times)
    print(json.dumps({"strata_step_time_s": s, "pytorch_step_time_s": t, "ratio": s / t, "world": args.world,
                      "steps": args.steps, "global_batch": args.global_batch, "hidden": args.hidden,
                      "repeats": args.repeats}))


if __name__ == "__main__":
    main()
