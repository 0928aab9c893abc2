#!/usr/bin/env python3
"""PyTorch-Python DDP peer of Strata's `ddp` for bench/ddp_vs_pytorch.py.

One rank of a Gloo job (torchrun-style variables: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT).
It trains the same model as Strata's `mlp` plugin (Linear+ReLU per hidden layer, then a linear
head; PyTorch's default initialization), with AdamW, the same global batch split over the ranks,
and data already in memory, and prints the median step time (forward, backward with DDP's
bucketed all-reduce, optimizer step) as JSON on rank 0.
"""
import argparse
import json
import os
import statistics
import time

import torch
import torch.distributed as dist
import torch.nn as nn


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hidden", type=int, nargs="+", default=[256, 256])
    ap.add_argument("--inputs", type=int, default=784)
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--global-batch", type=int, default=64)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--bucket-cap-mb", type=float, default=25.0)
    ap.add_argument("--threads", type=int, default=0)
    args = ap.parse_args()

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    threads = args.threads or max(1, os.cpu_count() // world)  # what strata does per local rank
    torch.set_num_threads(threads)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    layers, width = [nn.Flatten()], args.inputs
    for h in args.hidden:
        layers += [nn.Linear(width, h), nn.ReLU()]
        width = h
    layers.append(nn.Linear(width, args.classes))
    model = nn.parallel.DistributedDataParallel(nn.Sequential(*layers), bucket_cap_mb=args.bucket_cap_mb)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    per_rank = args.global_batch // world
    g = torch.Generator().manual_seed(1)
    data = torch.randn(4096, args.inputs, generator=g)
    labels = torch.randint(0, args.classes, (4096,), generator=g)
    loss_fn = nn.CrossEntropyLoss()
    times = []
    for step in range(args.steps):
        t0 = time.perf_counter()
        start = (step * args.global_batch + rank * per_rank) % (4096 - per_rank)
        x, y = data[start:start + per_rank], labels[start:start + per_rank]
        loss = loss_fn(model(x), y)
        optimizer.zero_grad(set_to_none=False)
        loss.backward()
        optimizer.step()
        loss_value = loss.item()  # strata reads the loss every step too
        times.append(time.perf_counter() - t0)
    dist.barrier()
    if rank == 0:
        print(json.dumps({"step_time_s": statistics.median(times), "final_loss": loss_value, "threads": threads}))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
