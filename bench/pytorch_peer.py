#!/usr/bin/env python3
"""PyTorch-Python peer of a Strata strategy, one rank of a Gloo job (bench/peers.py starts it).

Reads torchrun-style variables (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT). Trains the layers
of Strata's `mlp` or `cnn` plugin, unit for unit, on the data of Strata's `synthetic` dataset in
memory (same generator calls, same seed: the same tensors), visits the examples in the order of
Strata's sampler, and prints one JSON line on rank 0: the median step time, the parameter count,
the threads, the peak RSS (maximum over ranks) and the global-batch loss at the log steps.

Strategies (torch.optim.AdamW, its defaults but lr, with foreach=True in every case: on the CPU
torch.optim's own default is the per-parameter loop, while Strata's AdamW is multi-tensor):
  ddp    DistributedDataParallel(bucket_cap_mb)
  zero1  DistributedDataParallel + ZeroRedundancyOptimizer(optimizer_class=torch.optim.AdamW)
  zero2  FSDP2: fully_shard(unit, reshard_after_forward=False) per unit, then the root
  zero3  FSDP2: fully_shard(unit) (reshard_after_forward=True) per unit, then the root
  fsdp   same as zero3

Timed span of a step (Strata's summary.json `step_time_s`): index the batch out of the
in-memory data, forward, loss, backward with the strategy's collectives, optimizer step,
zero_grad. The loss stays a tensor; it is read (averaged over ranks) at the log steps, outside
the span, as Strata does. The reported median covers every step, the first ones included, as
Strata's does; the median after `--warmup` steps is reported beside it.
"""
import argparse
import json
import os
import resource
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

MASK64 = (1 << 64) - 1


def splitmix64(state):
    """Strata's splitmix64 (core/src/data/sampler.cpp): (next state, output)."""
    state = (state + 0x9E3779B97F4A7C15) & MASK64
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return state, z ^ (z >> 31)


def strata_permutation(n, seed, epoch):
    """The order in which Strata's BatchSampler visits the training set in `epoch`."""
    _, perm_seed = splitmix64((seed * 0x9E3779B97F4A7C15 + epoch) & MASK64)
    p, state = list(range(n)), perm_seed
    for i in range(n - 1, 0, -1):
        state, r = splitmix64(state)
        j = (r * (i + 1)) >> 64
        p[i], p[j] = p[j], p[i]
    return torch.tensor(p, dtype=torch.int64)


def synthetic_train(n, shape, classes, noise, seed):
    """Strata's `synthetic` training split: centers, labels, noise from one CPU generator."""
    g = torch.Generator().manual_seed(seed)
    centers = torch.randn([classes, *shape], generator=g)
    targets = torch.randint(classes, (n,), generator=g)
    inputs = centers.index_select(0, targets).add_(torch.randn([n, *shape], generator=g).mul_(noise))
    return inputs, targets


def mlp_units(inputs, hidden, classes):
    """Strata's `mlp`: one unit per hidden layer (Linear, ReLU; the first flattens), and the head."""
    units, width = [], inputs
    for i, h in enumerate(hidden):
        layers = ([nn.Flatten()] if i == 0 else []) + [nn.Linear(width, h), nn.ReLU()]
        units.append(nn.Sequential(*layers))
        width = h
    units.append(nn.Sequential(nn.Flatten(), nn.Linear(width, classes)))
    return units


def cnn_units(shape, channels, hidden, groups, classes):
    """Strata's `cnn`: conv 3x3 (padding 1), GroupNorm, ReLU, max-pool 2 per block; FC + ReLU; head."""
    c, h, w = shape
    units = []
    for out in channels:
        layers = [nn.Conv2d(c, out, 3, padding=1)]
        if groups > 0:
            layers.append(nn.GroupNorm(groups, out))
        layers += [nn.ReLU(), nn.MaxPool2d(2)]
        units.append(nn.Sequential(*layers))
        c, h, w = out, h // 2, w // 2
    width = c * h * w
    if hidden > 0:
        units.append(nn.Sequential(nn.Flatten(), nn.Linear(width, hidden), nn.ReLU()))
        width = hidden
    units.append(nn.Sequential(nn.Flatten(), nn.Linear(width, classes)))
    return units


def wrap(strategy, units, args, world):
    """The model and optimizer of the strategy's PyTorch peer."""
    model = nn.Sequential(*units)
    adamw = dict(lr=args.lr, weight_decay=args.weight_decay)
    if args.optimizer == "foreach":
        # torch.optim picks the multi-tensor kernels by itself only on CUDA-like devices; on the CPU
        # its default is the per-parameter loop (and with FSDP2's DTensors, through DTensor dispatch
        # per tensor op). Strata's AdamW runs multi-tensor kernels on every device.
        adamw["foreach"] = True
    if strategy == "ddp":
        model = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=args.bucket_cap_mb)
        return model, torch.optim.AdamW(model.parameters(), **adamw)
    if strategy == "zero1":
        from torch.distributed.optim import ZeroRedundancyOptimizer
        model = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=args.bucket_cap_mb)
        return model, ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.AdamW, **adamw)
    if strategy in ("zero2", "zero3", "fsdp"):
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard
        mesh = init_device_mesh("cpu", (world,))
        reshard = strategy != "zero2"
        for unit in units:
            fully_shard(unit, mesh=mesh, reshard_after_forward=reshard)
        fully_shard(model, mesh=mesh, reshard_after_forward=reshard)
        if args.fsdp_prefetch:  # Strata's prefetch of one unit ahead, forward and backward
            for i, unit in enumerate(units):
                if i + 1 < len(units):
                    unit.set_modules_to_forward_prefetch([units[i + 1]])
                if i > 0:
                    unit.set_modules_to_backward_prefetch([units[i - 1]])
        return model, torch.optim.AdamW(model.parameters(), **adamw)
    raise SystemExit("unknown strategy " + strategy)


def grad_norm(model):
    """The global gradient norm, as Strata computes it every step (off unless --grad-norm)."""
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    norm = torch.nn.utils.get_total_norm(grads)
    if hasattr(norm, "full_tensor"):  # FSDP2: a DTensor partial over the shards
        norm = norm.full_tensor()
    return norm


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--strategy", default="ddp", choices=["ddp", "zero1", "zero2", "zero3", "fsdp"])
    ap.add_argument("--model", default="mlp", choices=["mlp", "cnn"])
    ap.add_argument("--input-shape", type=int, nargs="+", default=[784])
    ap.add_argument("--hidden", type=int, nargs="+", default=[256, 256], help="mlp hidden widths")
    ap.add_argument("--channels", type=int, nargs="+", default=[32, 64], help="cnn block channels")
    ap.add_argument("--cnn-hidden", type=int, default=128)
    ap.add_argument("--groups", type=int, default=8)
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--train-size", type=int, default=4096)
    ap.add_argument("--noise", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--global-batch", type=int, default=64)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--weight-decay", type=float, default=0.01)
    ap.add_argument("--bucket-cap-mb", type=float, default=25.0)
    ap.add_argument("--log-every", type=int, default=100)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--threads", type=int, default=0, help="0: cores / world, as Strata's launcher")
    ap.add_argument("--grad-norm", action="store_true", help="compute the global gradient norm every step")
    ap.add_argument("--fsdp-prefetch", action="store_true", help="FSDP2: explicit one-unit prefetch")
    ap.add_argument("--init", help="start from a Strata final_model.pt of the same mlp (bench/denormals.py)")
    ap.add_argument("--flush-denormals", action="store_true",
                    help="torch.set_flush_denormal(True) before any thread computes (Strata's [train] flush_denormals)")
    ap.add_argument("--optimizer", choices=["foreach", "default"], default="foreach",
                    help="AdamW kernels: foreach=True (Strata's multi-tensor path), or torch's own choice")
    args = ap.parse_args()

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    threads = args.threads or max(1, (os.cpu_count() or 1) // world)
    if args.flush_denormals:
        torch.set_flush_denormal(True)  # this thread; the intra-op pool, created later, inherits it
    torch.set_num_threads(threads)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    if args.global_batch % world:
        raise SystemExit("the global batch must be a multiple of the world size")
    per_rank = args.global_batch // world

    shape = args.input_shape
    data, labels = synthetic_train(args.train_size, shape, args.classes, args.noise, args.seed)
    torch.manual_seed(args.seed)  # Strata seeds the global generator with [train] seed before the model
    if args.model == "mlp":
        inputs = 1
        for d in shape:
            inputs *= d
        units = mlp_units(inputs, args.hidden, args.classes)
    else:
        if len(shape) != 3:
            raise SystemExit("cnn needs --input-shape C H W")
        units = cnn_units(shape, args.channels, args.cnn_hidden, args.groups, args.classes)
    if args.init:
        if args.model != "mlp":
            raise SystemExit("--init takes an mlp's final_model.pt")
        saved = torch.load(args.init, weights_only=False)
        names = ["layer%d" % i for i in range(len(args.hidden))] + ["head"]
        linears = [m for u in units for m in u if isinstance(m, nn.Linear)]
        with torch.no_grad():
            for name, linear in zip(names, linears):
                linear.weight.copy_(saved[name + ".linear.weight"])
                linear.bias.copy_(saved[name + ".linear.bias"])
    parameters = sum(p.numel() for u in units for p in u.parameters())
    model, optimizer = wrap(args.strategy, units, args, world)

    # The visiting order (Strata's sampler), computed ahead: Python would take milliseconds per
    # epoch, Strata's C++ microseconds.
    steps_per_epoch = args.train_size // args.global_batch
    epochs = (args.steps - 1) // steps_per_epoch + 1 if args.steps else 0
    perms = [strata_permutation(args.train_size, args.seed, e) for e in range(epochs)]
    setup_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

    times, pending, curve = [], [], []
    for step in range(args.steps):
        t0 = time.perf_counter()
        start = (step % steps_per_epoch) * args.global_batch + rank * per_rank
        index = perms[step // steps_per_epoch][start:start + per_rank]
        x, y = data.index_select(0, index), labels.index_select(0, index)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        if args.grad_norm:
            _norm = grad_norm(model)  # kept on the device, like Strata's, never read
        optimizer.step()
        optimizer.zero_grad()
        pending.append(loss.detach())
        times.append(time.perf_counter() - t0)
        step1 = step + 1
        if step1 == 1 or step1 % args.log_every == 0 or step1 == args.steps:  # Strata's log steps
            losses = torch.stack(pending)
            dist.all_reduce(losses)
            curve.append([step1, losses[-1].item() / world])
            pending = []

    peak = torch.tensor([resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, setup_rss], dtype=torch.int64)
    dist.all_reduce(peak, op=dist.ReduceOp.MAX)
    if rank == 0:
        after = times[args.warmup:] or times
        print(json.dumps({
            "step_time_s": statistics.median(times),
            "step_time_after_warmup_s": statistics.median(after),
            "warmup": args.warmup,
            "parameters": parameters,
            "threads": torch.get_num_threads(),
            "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", ""),
            "peak_rss_bytes": int(peak[0]),
            "setup_rss_bytes": int(peak[1]),
            "loss_curve": curve,
            "optimizer": args.optimizer,
            "torch": torch.__version__,
        }), flush=True)
    # Every rank has its figures: leave without tearing the process group down. With Gloo, the
    # teardown at exit (DDP and the optimizers still hold the group) now and then aborts a rank
    # with "terminate called without an active exception" after all work is done.
    dist.barrier()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
