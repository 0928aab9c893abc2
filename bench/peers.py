#!/usr/bin/env python3
"""Every Strata strategy against its PyTorch-Python peer: same model (unit for unit, same
parameter count, same initialization), same data and visiting order, same global batch split
over the same world size, same backend (Gloo, CPU loopback), same threads per rank,
OMP_WAIT_POLICY=PASSIVE on both sides, AdamW (lr 1e-3 and torch.optim.AdamW's other defaults:
weight decay 0.01 is set on Strata, whose default is 0; the peer passes foreach=True, since on
the CPU torch.optim's default is its per-parameter loop while Strata's AdamW is multi-tensor),
float32, no clipping, no evaluation during training.

    ~/.cache/strata/venv/bin/python bench/peers.py [--strategies ddp,zero1,zero2,zero3,fsdp]
        [--workloads mlp,cnn,mlp10m] [--world 2] [--repeats 5] [--steps N] [--threads T]
        [--json FILE] [--markdown]

Peers (bench/pytorch_peer.py, one process per rank):
  ddp    DistributedDataParallel(bucket_cap_mb=25)
  zero1  DistributedDataParallel + ZeroRedundancyOptimizer(optimizer_class=torch.optim.AdamW)
  zero2  FSDP2 fully_shard(reshard_after_forward=False) per unit, then the root
  zero3  FSDP2 fully_shard (reshard_after_forward=True) per unit, then the root
  fsdp   as zero3
A unit is what Strata's model plugin calls one: each hidden layer and the head of `mlp`, each
conv block, the FC layer and the head of `cnn`.

Step time: Strata's is summary.json's `step_time_s`, the median over all steps (the first
included) of micro-batch fetch, forward, backward with the collectives, gradient finish
(global gradient norm) and optimizer step; the loss stays on the device and is read at the log
steps, outside the span. The peer times the same span (index the batch out of in-memory data,
forward, loss, backward, optimizer step, zero_grad) and reports the median over all steps too.
Each repeat runs both sides, alternating which goes first; a cell is the median over repeats of
the per-run medians, and the ratio is Strata / PyTorch (below 1.0: Strata is faster).

Memory (maximum over ranks): Strata's `memory.peak_tensor_bytes` (live tensor bytes during the
training steps, from its counting allocator) and `memory.peak_bytes` (peak RSS); PyTorch has no
allocator statistics on the CPU, so the peer reports its peak RSS only (ru_maxrss; its RSS
after setup, before the first step, is in the JSON).

Exits non-zero only when a run fails (its stderr is printed) or the two sides of a run disagree
on the parameter count or the threads per rank.
"""
import argparse
import datetime
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import tomllib

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
STRATEGIES = ["ddp", "zero1", "zero2", "zero3", "fsdp"]

# Workloads: the Strata [model] and [dataset] sections, the global batch and the default steps
# (chosen so that one run takes about 5-20 s on 2 CPU cores at world 2).
WORKLOADS = {
    "mlp": {
        "model": {"name": "mlp", "hidden": [256, 256]},
        "input_shape": [784], "classes": 10, "global_batch": 64, "steps": 500,
        "label": "MLP 784-256-256-10",
    },
    "cnn": {
        "model": {"name": "cnn", "channels": [32, 64], "hidden": 128, "groups": 8},
        "input_shape": [1, 28, 28], "classes": 10, "global_batch": 64, "steps": 200,
        "label": "CNN 1x28x28 (conv 32, 64; FC 128)",
    },
    "mlp10m": {
        "model": {"name": "mlp", "hidden": [2048, 2048]},
        "input_shape": [3072], "classes": 10, "global_batch": 256, "steps": 60,
        "label": "MLP 3072-2048-2048-10",
        "parameters": 10510346,
    },
}
TRAIN_SIZE = 4096
LR = 1e-3
WEIGHT_DECAY = 0.01  # torch.optim.AdamW's default; Strata's [optimizer] default is 0
BUCKET_CAP_MB = 25.0
LOG_EVERY = 100


def toml_value(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    return repr(v)


def strata_toml(name, strategy, steps, threads):
    w = WORKLOADS[name]
    strategy_section = {"name": strategy}
    if strategy == "ddp":
        strategy_section["bucket_cap_mb"] = BUCKET_CAP_MB
    sections = {
        "experiment": {"name": "peers_%s_%s" % (name, strategy)},
        "model": w["model"],
        "dataset": {"name": "synthetic", "train_size": TRAIN_SIZE, "eval_size": w["global_batch"],
                    "input_shape": w["input_shape"], "num_classes": w["classes"]},
        "strategy": strategy_section,
        "optimizer": {"name": "adamw", "lr": LR, "weight_decay": WEIGHT_DECAY},
        "train": {"steps": steps, "global_batch_size": w["global_batch"], "threads": threads, "device": "cpu",
                  "seed": 0, "clip_grad_norm": 0.0},
        "precision": {"param_dtype": "float32", "reduce_dtype": "float32"},
        "distributed": {"backend": "gloo"},
        "eval": {"every": 0, "batches": 1},
        "log": {"every": LOG_EVERY},
    }
    lines = ["# Generated by bench/peers.py: workload %s, strategy %s." % (name, strategy)]
    for section, values in sections.items():
        lines.append("\n[%s]" % section)
        lines += ["%s = %s" % (k, toml_value(v)) for k, v in values.items()]
    return "\n".join(lines) + "\n"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RunFailed(Exception):
    pass


def tail(text, n=60):
    return "\n".join(text.splitlines()[-n:])


def run_strata(args, name, strategy, steps, threads, out):
    os.makedirs(out, exist_ok=True)
    config = os.path.join(out, "bench.toml")
    with open(config, "w") as f:
        f.write(strata_toml(name, strategy, steps, threads))
    run_dir = os.path.join(out, "run")
    cmd = [args.strata, "run", config, "--nproc", str(args.world), "--out", run_dir]
    env = dict(os.environ, OMP_WAIT_POLICY=os.environ.get("OMP_WAIT_POLICY", "PASSIVE"))
    try:
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.timeout)
    except subprocess.TimeoutExpired as e:
        raise RunFailed("strata %s/%s timed out after %d s\n%s" % (name, strategy, args.timeout, e.stderr or ""))
    except OSError as e:
        raise RunFailed("strata %s/%s could not start: %s" % (name, strategy, e))
    if p.returncode != 0:
        raise RunFailed("strata %s/%s failed (exit %d): %s\n--- stderr ---\n%s\n--- stdout ---\n%s" % (
            name, strategy, p.returncode, " ".join(cmd), tail(p.stderr), tail(p.stdout)))
    with open(os.path.join(run_dir, "summary.json")) as f:
        s = json.load(f)
    with open(os.path.join(run_dir, "config.toml"), "rb") as f:
        resolved = tomllib.load(f)
    return {
        "step_time_s": s["step_time_s"],
        "parameters": s["parameters"],
        "threads": resolved["train"]["threads"],
        "world_size": s["world_size"],
        "backend": s["backend"],
        "device": s["device"],
        "peak_tensor_bytes": s["memory"]["peak_tensor_bytes"],
        "peak_rss_bytes": s["memory"]["peak_bytes"],
        "peak_source": s["memory"]["peak_source"],
        "first_loss": s["loss_curve"][0][1] if s.get("loss_curve") else None,
        "final_loss": s["final_loss"],
    }


def run_peer(args, name, strategy, steps, threads):
    w = WORKLOADS[name]
    model = w["model"]
    cmd = [args.python, os.path.join(HERE, "pytorch_peer.py"), "--strategy", strategy, "--model", model["name"],
           "--input-shape", *map(str, w["input_shape"]), "--classes", str(w["classes"]),
           "--train-size", str(TRAIN_SIZE), "--global-batch", str(w["global_batch"]), "--steps", str(steps),
           "--lr", repr(LR), "--weight-decay", repr(WEIGHT_DECAY), "--bucket-cap-mb", repr(BUCKET_CAP_MB),
           "--log-every", str(LOG_EVERY), "--warmup", str(args.warmup), "--threads", str(threads)]
    if model["name"] == "mlp":
        cmd += ["--hidden", *map(str, model["hidden"])]
    else:
        cmd += ["--channels", *map(str, model["channels"]), "--cnn-hidden", str(model["hidden"]),
                "--groups", str(model["groups"])]
    if args.peer_grad_norm:
        cmd.append("--grad-norm")
    if args.peer_fsdp_prefetch:
        cmd.append("--fsdp-prefetch")
    cmd += ["--optimizer", args.peer_optimizer]
    port = str(free_port())
    procs, logs = [], []
    for rank in range(args.world):
        env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(args.world),
                   LOCAL_WORLD_SIZE=str(args.world), MASTER_ADDR="127.0.0.1", MASTER_PORT=port,
                   OMP_WAIT_POLICY=os.environ.get("OMP_WAIT_POLICY", "PASSIVE"))
        log = tempfile.TemporaryFile(mode="w+")  # a file, not a pipe: a chatty rank cannot block
        logs.append(log)
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE if rank == 0 else subprocess.DEVNULL,
                                      stderr=log, text=True))
    try:
        out = procs[0].communicate(timeout=args.timeout)[0]
        for p in procs[1:]:
            p.wait(timeout=args.timeout)
    except subprocess.TimeoutExpired:
        for p in procs:
            p.kill()
            p.wait()
        raise RunFailed("the PyTorch peer %s/%s timed out after %d s" % (name, strategy, args.timeout))
    failed = [(r, p.returncode) for r, p in enumerate(procs) if p.returncode != 0]
    if failed or not out.strip():
        parts = []
        for r, log in enumerate(logs):
            log.seek(0)
            parts.append("--- rank %d stderr (exit %s) ---\n%s" % (r, procs[r].returncode, tail(log.read())))
        raise RunFailed("the PyTorch peer %s/%s failed: %s\n%s" % (name, strategy, " ".join(cmd), "\n".join(parts)))
    for log in logs:
        log.close()
    r = json.loads(out.strip().splitlines()[-1])
    r["first_loss"] = r["loss_curve"][0][1] if r["loss_curve"] else None
    r["final_loss"] = r["loss_curve"][-1][1] if r["loss_curve"] else None
    return r


def machine():
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(l.split(":", 1)[1].strip() for l in f if l.startswith("model name"))
    except (OSError, StopIteration):
        pass
    mem, system = "", platform.system()
    try:
        with open("/proc/meminfo") as f:
            kib = int(next(l for l in f if l.startswith("MemTotal")).split()[1])
        mem = ", %d GiB" % round(kib / 2**20)
        with open("/etc/os-release") as f:
            system = next(l.split("=", 1)[1].strip().strip('"') for l in f if l.startswith("PRETTY_NAME"))
    except (OSError, StopIteration):
        pass
    return "%d-core %s%s, %s" % (os.cpu_count() or 1, cpu, mem, system)


def torch_version(python):
    p = subprocess.run([python, "-c", "import torch; print(torch.__version__)"], capture_output=True, text=True)
    return p.stdout.strip() or "?"


def ms(s):
    return "%.2f ms" % (s * 1e3) if s is not None else "-"


def mib(b):
    return "%.0f MiB" % (b / 2**20) if b is not None else "-"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--strategies", default=",".join(STRATEGIES), help="comma-separated subset of " +
                    ",".join(STRATEGIES))
    ap.add_argument("--workloads", default=",".join(WORKLOADS), help="comma-separated subset of " +
                    ",".join(WORKLOADS))
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--steps", type=int, default=0,
                    help="steps of every run; 0: per workload (" +
                    ", ".join("%s %d" % (k, v["steps"]) for k, v in WORKLOADS.items()) + ")")
    ap.add_argument("--threads", type=int, default=0, help="intra-op threads per rank; 0: cores / world")
    ap.add_argument("--warmup", type=int, default=10,
                    help="peer: steps left out of its second median (step_time_after_warmup_s, JSON only)")
    ap.add_argument("--json", help="write every run and the medians to this file")
    ap.add_argument("--markdown", action="store_true", help="print rows ready for BENCHMARKS.md")
    ap.add_argument("--strata", default=os.path.join(ROOT, "build", "bin", "strata"))
    ap.add_argument("--python", default=sys.executable, help="interpreter of the PyTorch peer")
    ap.add_argument("--timeout", type=int, default=900, help="seconds one run may take")
    ap.add_argument("--keep", help="keep the Strata run directories under this directory")
    ap.add_argument("--peer-grad-norm", action="store_true",
                    help="peer also computes the global gradient norm every step, as Strata does")
    ap.add_argument("--peer-fsdp-prefetch", action="store_true",
                    help="FSDP2 peers prefetch one unit ahead explicitly (Strata's default prefetch)")
    ap.add_argument("--peer-optimizer", choices=["foreach", "default"], default="foreach",
                    help="peer AdamW kernels: foreach=True (default; Strata's AdamW is multi-tensor), or torch's "
                    "own choice, which on the CPU is the per-parameter loop")
    args = ap.parse_args()

    strategies = [s for s in args.strategies.split(",") if s]
    workloads = [w for w in args.workloads.split(",") if w]
    for s in strategies:
        if s not in STRATEGIES:
            ap.error("unknown strategy %r (known: %s)" % (s, ", ".join(STRATEGIES)))
    for w in workloads:
        if w not in WORKLOADS:
            ap.error("unknown workload %r (known: %s)" % (w, ", ".join(WORKLOADS)))
    if not os.access(args.strata, os.X_OK):
        sys.exit("no Strata executable at %s (build it first, or pass --strata)" % args.strata)
    threads = args.threads or max(1, (os.cpu_count() or 1) // args.world)
    steps_of = {w: args.steps or WORKLOADS[w]["steps"] for w in workloads}
    cells = {(w, s): {"strata": [], "pytorch": [], "failed": None} for w in workloads for s in strategies}
    failures = []

    started = time.monotonic()
    tmp = tempfile.TemporaryDirectory()
    base = args.keep or tmp.name
    for r in range(args.repeats):
        for w in workloads:
            for s in strategies:
                cell = cells[(w, s)]
                if cell["failed"]:
                    continue
                try:
                    # Alternate which side goes first, so drift and warm caches hit both alike.
                    sides = ["strata", "pytorch"] if r % 2 == 0 else ["pytorch", "strata"]
                    got = {}
                    for side in sides:
                        t0 = time.monotonic()
                        if side == "strata":
                            got[side] = run_strata(args, w, s, steps_of[w], threads,
                                                   os.path.join(base, "%s-%s-r%d" % (w, s, r)))
                        else:
                            got[side] = run_peer(args, w, s, steps_of[w], threads)
                        got[side]["wall_s"] = time.monotonic() - t0
                except RunFailed as e:
                    print(str(e), file=sys.stderr, flush=True)
                    cell["failed"] = str(e)
                    failures.append((w, s))
                    continue
                st, pt = got["strata"], got["pytorch"]
                problems = []
                if st["parameters"] != pt["parameters"]:
                    problems.append("parameter counts differ: Strata %d, PyTorch %d" % (st["parameters"],
                                                                                         pt["parameters"]))
                if "parameters" in WORKLOADS[w] and st["parameters"] != WORKLOADS[w]["parameters"]:
                    problems.append("Strata has %d parameters, expected %d" % (st["parameters"],
                                                                                WORKLOADS[w]["parameters"]))
                if st["threads"] != pt["threads"] or st["threads"] != threads:
                    problems.append("threads differ: Strata %s, PyTorch %s, asked %d" % (st["threads"],
                                                                                          pt["threads"], threads))
                if st["world_size"] != args.world or st["backend"] != "gloo" or st["device"] != "cpu":
                    problems.append("Strata ran world %s, %s, %s" % (st["world_size"], st["backend"], st["device"]))
                if problems:
                    msg = "%s/%s: %s" % (w, s, "; ".join(problems))
                    print(msg, file=sys.stderr, flush=True)
                    cell["failed"] = msg
                    failures.append((w, s))
                    continue
                cell["strata"].append(st)
                cell["pytorch"].append(pt)
                print("repeat %d %-6s %-5s  params %d = %d  threads %d = %d  loss first %.6f / %.6f, last %.3g / "
                      "%.3g  step strata %s, pytorch %s" % (
                          r, w, s, st["parameters"], pt["parameters"], st["threads"], pt["threads"], st["first_loss"],
                          pt["first_loss"], st["final_loss"], pt["final_loss"], ms(st["step_time_s"]),
                          ms(pt["step_time_s"])), flush=True)
                # Same initialization and the same first batch: the step-1 losses agree unless the two
                # sides no longer train the same thing (a warning: timings stay comparable).
                if abs(st["first_loss"] - pt["first_loss"]) > 1e-4 * abs(st["first_loss"]):
                    print("warning: %s/%s: the step-1 losses differ (Strata %.6f, PyTorch %.6f): the model, its "
                          "initialization or the data no longer match" % (w, s, st["first_loss"], pt["first_loss"]),
                          file=sys.stderr, flush=True)

    results = []
    for (w, s), cell in cells.items():
        if not cell["strata"]:
            continue
        med = lambda side, key: statistics.median(x[key] for x in cell[side])
        row = {
            "workload": w, "strategy": s, "model": WORKLOADS[w]["label"], "global_batch": WORKLOADS[w]["global_batch"],
            "steps": steps_of[w], "repeats": len(cell["strata"]), "world": args.world, "threads": threads,
            "parameters": cell["strata"][0]["parameters"],
            "strata_step_time_s": med("strata", "step_time_s"),
            "pytorch_step_time_s": med("pytorch", "step_time_s"),
            "strata_peak_tensor_bytes": med("strata", "peak_tensor_bytes"),
            "strata_peak_rss_bytes": med("strata", "peak_rss_bytes"),
            "pytorch_peak_rss_bytes": med("pytorch", "peak_rss_bytes"),
            "pytorch_setup_rss_bytes": med("pytorch", "setup_rss_bytes"),
            "pytorch_step_time_after_warmup_s": med("pytorch", "step_time_after_warmup_s"),
            "runs": {"strata": cell["strata"], "pytorch": cell["pytorch"]},
        }
        row["ratio"] = row["strata_step_time_s"] / row["pytorch_step_time_s"]
        results.append(row)

    header = ("| workload | strategy | parameters | Strata step | PyTorch step | ratio | Strata live tensors (peak) "
              "| Strata RSS (peak) | PyTorch RSS (peak) |")
    print("\nworld %d, %d thread(s) per rank, median over repeats of each run's median step time; memory: maximum "
          "over ranks; %.0f s in all\n" % (args.world, threads, time.monotonic() - started))
    print(header)
    print("|---" * 9 + "|")
    for row in results:
        print("| %s | %s | %d | %s | %s | %.2f | %s | %s | %s |" % (
            row["workload"], row["strategy"], row["parameters"], ms(row["strata_step_time_s"]),
            ms(row["pytorch_step_time_s"]), row["ratio"], mib(row["strata_peak_tensor_bytes"]),
            mib(row["strata_peak_rss_bytes"]), mib(row["pytorch_peak_rss_bytes"])))

    version = torch_version(args.python)
    if args.markdown and results:
        date = datetime.date.today().isoformat()
        where = "%s, torch %s" % (machine(), version)
        print("\n| date | machine | model | strategy | global batch | steps | repeats | Strata step | PyTorch step "
              "| ratio | Strata live tensors (peak) | Strata RSS (peak) | PyTorch RSS (peak) |")
        print("|---" * 13 + "|")
        for row in results:
            print("| %s | %s | %s | `%s` | %d | %d | %d | %s | %s | **%.2f** | %s | %s | %s |" % (
                date, where, row["model"], row["strategy"], row["global_batch"], row["steps"], row["repeats"],
                ms(row["strata_step_time_s"]), ms(row["pytorch_step_time_s"]), row["ratio"],
                mib(row["strata_peak_tensor_bytes"]), mib(row["strata_peak_rss_bytes"]),
                mib(row["pytorch_peak_rss_bytes"])))

    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": machine(), "torch": version, "world": args.world, "threads": threads,
                       "repeats": args.repeats, "peer_grad_norm": args.peer_grad_norm,
                       "peer_fsdp_prefetch": args.peer_fsdp_prefetch,
                       "peer_optimizer": args.peer_optimizer, "results": results,
                       "failures": [{"workload": w, "strategy": s, "error": cells[(w, s)]["failed"]}
                                    for w, s in failures]}, f, indent=2)
    tmp.cleanup()
    if failures:
        sys.exit("%d run(s) failed: %s" % (len(failures), ", ".join("%s/%s" % f for f in failures)))


if __name__ == "__main__":
    main()
