#!/usr/bin/env bash
# Multi-node training under Slurm: one ctune rank per task. Submit with e.g.
#   sbatch --nodes 2 --ntasks-per-node 4 --cpus-per-task 8 scripts/srun_train.sh recipes/my.yaml [k=v ...]
# srun sets SLURM_PROCID / SLURM_NTASKS / SLURM_LOCALID / SLURM_STEP_TASKS_PER_NODE; ctune takes the
# first host of the node list as the master (docs/distributed.md). Set GLOO_SOCKET_IFNAME when
# the nodes have several network interfaces. Across nodes, distributed.strategy=hybrid_shard
# shards parameters within each node; only the reduced gradient shards cross between nodes:
#   sbatch --nodes 2 --ntasks-per-node 4 scripts/srun_train.sh recipes/my.yaml distributed.strategy=hybrid_shard
#SBATCH --job-name=ctune
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: sbatch [options] $0 RECIPE [key=value ...]" >&2; exit 2; }
CTUNE=${CTUNE:-$(dirname "$0")/../build/bin/ctune}
export MASTER_PORT=${MASTER_PORT:-$((20000 + ${SLURM_JOB_ID:-0} % 20000))}
exec srun --kill-on-bad-exit=1 "$CTUNE" train "$@"
