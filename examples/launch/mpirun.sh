#!/usr/bin/env bash
# Strata under OpenMPI's mpirun: the hosts of examples/launch/hostfile, 2 x 4 GPUs, 8 ranks.
#
#   examples/launch/mpirun.sh experiments/fashion_mnist_cnn.toml
#
# mpirun only starts the processes (strata does not use MPI): each reads OMPI_COMM_WORLD_RANK,
# _SIZE, _LOCAL_RANK and _LOCAL_SIZE and meets the others at rank 0's store, MASTER_ADDR:MASTER_PORT.
# MASTER_ADDR must be the host of rank 0 (the hostfile's first) under a name or address the other
# hosts reach: never localhost or 127.0.0.1 across hosts. Strata requires it when the job spans
# hosts; on one host it defaults to 127.0.0.1, and MASTER_PORT to 29500.
#
# On one host (as root, e.g. in a container, add --allow-run-as-root):
#   mpirun -np 2 --oversubscribe strata run experiments/fashion_mnist_cnn.toml --set strategy.name=ddp
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
HOSTFILE=${HOSTFILE:-$HERE/hostfile}
EXPERIMENT=${1:-experiments/fashion_mnist_cnn.toml}
STRATA=${STRATA:-$(command -v strata)}   # an absolute path, the same on every host
NP=${NP:-8}

MASTER_ADDR=${MASTER_ADDR:-$(awk '!/^[[:space:]]*(#|$)/ {print $1; exit}' "$HOSTFILE")}
MASTER_PORT=${MASTER_PORT:-29500}
export MASTER_ADDR MASTER_PORT

# -x exports a variable to the ranks on every host. --bind-to none: by default OpenMPI binds each
# rank to a core or a socket, where LibTorch's threads (data loading, CPU ranks) would crowd.
exec mpirun -np "$NP" --hostfile "$HOSTFILE" --bind-to none \
  -x MASTER_ADDR -x MASTER_PORT \
  "$STRATA" run "$EXPERIMENT" --set strategy.name=ddp --out runs/strata-mpirun
