#!/usr/bin/env python3
"""How long a process takes to start, Strata beside its PyTorch-Python peer.

    bench/startup.py [--repeats 20] [--strata build/bin/strata] [--json FILE]

Every `strata` command and every rank of a job is a process that loads LibTorch before it does
anything. Timed here, interleaved --repeats times, median wall clock of each:
  - `strata --version` (load, print, exit), as it runs on this machine: on one without an NVIDIA
    GPU the host leaves LibTorch's CUDA library (libtorch_cuda, cuBLAS, cuDNN, NCCL) unloaded;
  - the same with STRATA_CUDA=1, which loads it as on a GPU machine;
  - `strata validate experiments/quickstart.toml` (plugins loaded, the experiment checked);
  - the peer: `python -c "import torch"`, what every rank of a torchrun job pays before its script;
  - a job of two CPU ranks on this host that trains one step (`strata run --nproc 2` of the quick
    start as ddp: its data read, one step, the evaluation and the summary), its ranks forked by the launcher (the default for
    ranks of one thread) and started afresh (STRATA_FORK_RANKS=0); the peer: `torchrun --standalone
    --nproc-per-node 2` of a script that joins a Gloo process group and passes one barrier;
  - `strata check zero1 --world-sizes 1,2` (17 runs: its conformance suite), its runs forked from
    the check's own process (the default) and each started afresh (STRATA_FORK_RUNS=0).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import peers  # noqa: E402  (machine())


PEER_JOB = """import torch.distributed as dist
dist.init_process_group("gloo")
dist.barrier()
dist.destroy_process_group()
"""


def timed(command, env):
    if callable(command):
        command = command()
    start = time.perf_counter()
    subprocess.run(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, cwd=ROOT)
    return time.perf_counter() - start


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--strata", default=os.path.join(ROOT, "build", "bin", "strata"))
    ap.add_argument("--python", default=sys.executable, help="the peer's interpreter (with torch)")
    ap.add_argument("--json", help="also write the medians here")
    a = ap.parse_args()
    base = dict(os.environ)
    base.pop("STRATA_CUDA", None)
    cases = [
        ("strata --version", [a.strata, "--version"], base),
        ("strata --version, STRATA_CUDA=1", [a.strata, "--version"], dict(base, STRATA_CUDA="1")),
        ("strata validate experiments/quickstart.toml", [a.strata, "validate", "experiments/quickstart.toml"], base),
        ("python -c 'import torch' (peer)", [a.python, "-c", "import torch"], base),
    ]
    scratch = tempfile.mkdtemp(prefix="strata-startup-")
    peer_job = os.path.join(scratch, "peer_job.py")
    with open(peer_job, "w") as f:
        f.write(PEER_JOB)
    runs = iter(range(1 << 30))

    def job(**extra):  # a fresh --out each time
        return lambda: [a.strata, "run", "experiments/quickstart.toml", "--nproc", "2", "--out",
                        os.path.join(scratch, "run%d" % next(runs)), "--set", "train.steps=1",
                        "--set", "train.warmup_steps=0", "--set", "strategy.name=ddp"]
    cases += [
        ("strata run --nproc 2, one step (ranks forked)", job(), base),
        ("strata run --nproc 2, one step (STRATA_FORK_RANKS=0: ranks started afresh)", job(),
         dict(base, STRATA_FORK_RANKS="0")),
        ("torchrun --nproc-per-node 2, Gloo init + barrier (peer)",
         [a.python, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", peer_job], base),
        ("strata check zero1 --world-sizes 1,2 (runs forked)", [a.strata, "check", "zero1", "--world-sizes", "1,2"],
         base),
        ("strata check zero1 --world-sizes 1,2 (STRATA_FORK_RUNS=0: runs started afresh)",
         [a.strata, "check", "zero1", "--world-sizes", "1,2"], dict(base, STRATA_FORK_RUNS="0")),
    ]
    for _, command, env in cases:  # warm the page cache
        timed(command, env)
    times = {name: [] for name, _, _ in cases}
    for _ in range(a.repeats):
        for name, command, env in cases:
            times[name].append(timed(command, env))
    medians = {name: statistics.median(t) for name, t in times.items()}
    print(f"machine: {peers.machine()}; {a.repeats} interleaved repeats, median wall clock")
    print("| process | median | spread (max-min) |")
    print("|---|---:|---:|")
    for name, t in times.items():
        print(f"| {name} | {1e3 * medians[name]:.0f} ms | {1e3 * (max(t) - min(t)):.0f} ms |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"machine": peers.machine(), "repeats": a.repeats, "median_s": medians}, f, indent=1)


if __name__ == "__main__":
    main()
