#!/usr/bin/env bash
# Strata under torchrun on several hosts: run this script once on every host (2 x 4 GPUs here),
# with the same RDZV_HOST, e.g. through ssh or pdsh.
#
#   RDZV_HOST=node01 examples/launch/torchrun.sh experiments/fashion_mnist_cnn.toml
#
# c10d rendezvous: the hosts' torchrun agents meet at RDZV_HOST:RDZV_PORT (one of the hosts, as the
# others reach it; its agent hosts the store, which strata's ranks join as clients) and number the
# nodes themselves. Each rank gets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR and
# MASTER_PORT. --no-python: strata is a program, not a Python script; `--` ends torchrun's own
# options (its parser would take strata's --nproc for --nproc-per-node).
#
# On one host:
#   torchrun --standalone --nproc-per-node 2 --no-python -- strata run experiments/fashion_mnist_cnn.toml
set -euo pipefail

EXPERIMENT=${1:-experiments/fashion_mnist_cnn.toml}
RDZV_HOST=${RDZV_HOST:?set RDZV_HOST to one host of the job, the same on every host}
RDZV_PORT=${RDZV_PORT:-29400}
NNODES=${NNODES:-2}
NPROC_PER_NODE=${NPROC_PER_NODE:-4}   # one rank per GPU
STRATA=${STRATA:-$(command -v strata)}

# --max-restarts 1 with checkpoints and `--resume auto`: after a failure every rank restarts from
# the latest complete checkpoint in --out (a directory every host sees).
exec torchrun --nnodes "$NNODES" --nproc-per-node "$NPROC_PER_NODE" \
  --rdzv-backend c10d --rdzv-endpoint "$RDZV_HOST:$RDZV_PORT" --rdzv-id "${RDZV_ID:-strata}" \
  --max-restarts 1 --no-python -- \
  "$STRATA" run "$EXPERIMENT" --set strategy.name=ddp --set checkpoint.every=200 \
  --out runs/strata-torchrun --resume auto
