#!/usr/bin/env python3
"""A model that has fitted its data, with and without denormals flushed to zero, Strata beside its
PyTorch-Python peer on the same data and weights.

    bench/denormals.py [--fit-steps 300] [--steps 60] [--repeats 3] [--threads 0] [--json FILE]

The 10.5M-parameter MLP of bench/estimate_accuracy.py (3072-2048-2048-10, synthetic data, batch
192, AdamW lr 1e-3) is trained by `strata run` until its loss is 0 (--fit-steps, saved with
save_final). From those weights, --steps more steps are timed in each of four ways, interleaved
--repeats times: Strata with [train] flush_denormals true and false, the PyTorch peer
(bench/pytorch_peer.py --init, one rank of world size 1, AdamW foreach) with and without
torch.set_flush_denormal(True). Gradients and activations of a fitted model underflow to
denormal floats, which many CPUs compute on a slow path. Prints the median steady step times and
Strata's ratio to the peer, both flushed (the goal: at most 0.95).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import estimate_accuracy  # noqa: E402  (its MLP10M experiment)
import peers  # noqa: E402  (machine(), free_port())

STRATA = os.path.join(ROOT, "build", "bin", "strata")


def strata_run(experiment, out, sets):
    args = [STRATA, "run", experiment, "--out", out]
    for s in sets:
        args += ["--set", s]
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL)
    with open(os.path.join(out, "summary.json")) as f:
        return json.load(f)


def peer_run(args, init, flush, steps):
    env = dict(os.environ, RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(peers.free_port()))
    cmd = [sys.executable, os.path.join(HERE, "pytorch_peer.py"), "--strategy", "ddp", "--model", "mlp",
           "--input-shape", "3072", "--hidden", "2048", "2048", "--classes", "10", "--train-size", "4096",
           "--global-batch", "192", "--steps", str(steps), "--lr", "1e-3", "--weight-decay", "0.01",
           "--warmup", "5", "--init", init]
    if args.threads:
        cmd += ["--threads", str(args.threads)]
    if flush:
        cmd.append("--flush-denormals")
    out = subprocess.run(cmd, check=True, env=env, stdout=subprocess.PIPE, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fit-steps", type=int, default=300)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=0, help="intra-op threads (0: LibTorch's default)")
    ap.add_argument("--json", help="write every run's figures here")
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="strata-denormals-")
    experiment = os.path.join(work, "mlp10m.toml")
    with open(experiment, "w") as f:
        f.write(estimate_accuracy.MLP10M)
    threads = ["train.threads=%d" % args.threads] if args.threads else []
    fitted = strata_run(experiment, os.path.join(work, "fit"),
                        ["train.steps=%d" % args.fit_steps, "train.save_final=true", "log.every=100"] + threads)
    init = os.path.join(work, "fit", "final_model.pt")
    print("fitted: %d steps, final loss %.3g" % (args.fit_steps, fitted["final_loss"]), flush=True)
    runs = {k: [] for k in ("strata flushed", "strata kept", "pytorch flushed", "pytorch kept")}
    for r in range(args.repeats):
        for flush in (True, False):
            s = strata_run(experiment, os.path.join(work, "s-%d-%s" % (r, flush)),
                           ["train.steps=%d" % args.steps, "train.init_from=\"%s\"" % init, "train.timing_warmup_steps=5",
                            "train.flush_denormals=%s" % ("true" if flush else "false"), "log.every=1000"] + threads)
            runs["strata " + ("flushed" if flush else "kept")].append(s["steady_step_time_s"])
            p = peer_run(args, init, flush, args.steps)
            runs["pytorch " + ("flushed" if flush else "kept")].append(p["step_time_after_warmup_s"])
            print("round %d, flush %s: strata %.1f ms, pytorch %.1f ms" % (r + 1, flush, 1e3 * s["steady_step_time_s"],
                                                                         1e3 * p["step_time_after_warmup_s"]), flush=True)
    medians = {k: statistics.median(v) for k, v in runs.items()}
    print("\n| | denormals flushed | denormals kept | flushed / kept |\n|:--|--:|--:|--:|")
    for who in ("strata", "pytorch"):
        f, k = medians[who + " flushed"], medians[who + " kept"]
        print("| %s | %.1f ms | %.1f ms | %.2fx |" % (who, 1e3 * f, 1e3 * k, f / k))
    ratio = medians["strata flushed"] / medians["pytorch flushed"]
    print("\nStrata / PyTorch, both flushed: %.3f (goal at most 0.95); machine: %s" % (ratio, peers.machine()))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"runs": runs, "medians": medians, "ratio_flushed": ratio, "machine": peers.machine(),
                       "fit_steps": args.fit_steps, "steps": args.steps, "final_loss": fitted["final_loss"]}, f, indent=1)


if __name__ == "__main__":
    main()
