#pragma once
// Where this process sits in a job: rank discovery from the environment of the common launchers
// (torchrun, Slurm's srun, OpenMPI's mpirun) or from strata's own spawner.

#include <functional>
#include <optional>
#include <string>

namespace strata {

/// This process's place in the job.
struct WorldInfo {
  int rank = 0;                ///< global rank, 0 <= rank < world_size
  int world_size = 1;          ///< number of ranks in the job
  int local_rank = 0;          ///< rank among the processes on this host (selects the GPU)
  int local_world_size = 1;    ///< processes on this host
  /// The launcher said how many processes run on this host (LOCAL_WORLD_SIZE, which strata's own
  /// launcher sets, SLURM_NTASKS_PER_NODE / SLURM_TASKS_PER_NODE, OMPI_COMM_WORLD_LOCAL_SIZE);
  /// false where local_world_size is only a default (a job started by hand with RANK and
  /// WORLD_SIZE alone may span hosts).
  bool local_world_size_known = false;
  std::string master_addr = "127.0.0.1";  ///< host of rank 0's TCPStore
  int master_port = 0;         ///< port of rank 0's TCPStore
  std::string launcher = "none";  ///< "torchrun", "slurm", "openmpi", "strata" (our spawner) or "none"
  /// torchrun's agent hosts the store at MASTER_ADDR:MASTER_PORT (TORCHELASTIC_USE_AGENT_STORE=True):
  /// every rank, rank 0 included, connects to it as a client.
  bool agent_store = false;
  /// The variables the world was read from, for messages: "RANK=0 WORLD_SIZE=2 LOCAL_WORLD_SIZE=2".
  std::string source;
};

/// One node of a job whose per-node launcher is strata itself: a Kubeflow PyTorchJob pod runs
/// `strata run` once per node, and strata starts that node's ranks (as torchrun would).
struct NodeLaunch {
  int nnodes = 1;          ///< PET_NNODES
  int node_rank = 0;       ///< PET_NODE_RANK (Kubeflow's RANK is this node rank, not a process rank)
  int nproc_per_node = 0;  ///< PET_NPROC_PER_NODE; 0: "auto"/"gpu", one rank per visible GPU (1 without)
  std::string master_addr;
  int master_port = 0;
  std::string source;      ///< the variables, for messages
};

/// A Slurm allocation this process runs in without being one of a step's tasks (the batch
/// script of sbatch, salloc's shell): its tasks are started with srun, not by strata.
struct SlurmAllocation {
  std::string job_id;
  int ntasks = 0;          ///< SLURM_NTASKS, 0 when unset
  std::string where;       ///< "the batch step of Slurm job 42" / "Slurm allocation 42 (salloc)"
};

/// Reads an environment variable; std::nullopt when unset. Injected so tests need not touch
/// the real environment.
using EnvLookup = std::function<std::optional<std::string>(const std::string& name)>;
/// The process environment.
EnvLookup process_environment();

/// The world described by the environment, or std::nullopt when no launcher variables are set.
/// Precedence: torchrun-style (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR,
/// MASTER_PORT; also what strata's spawner sets; TORCHELASTIC_USE_AGENT_STORE), unless it is a
/// Kubeflow node (see node_launch_from_environment), then Slurm tasks of a step (SLURM_PROCID, SLURM_NTASKS,
/// SLURM_LOCALID, SLURM_NTASKS_PER_NODE / SLURM_TASKS_PER_NODE, only with a SLURM_STEP_ID that
/// is not the batch, extern or interactive step; master from MASTER_ADDR or the
/// first host of SLURM_JOB_NODELIST, port from MASTER_PORT or derived from SLURM_JOB_ID), then
/// OpenMPI (OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK, _LOCAL_SIZE; MASTER_ADDR required when the
/// world spans hosts). Throws UsageError (exit 2) naming the variables when they are
/// inconsistent (missing partner, not an integer, rank >= size, size < 1, ...).
std::optional<WorldInfo> world_from_environment(const EnvLookup& env = process_environment());

/// A Kubeflow PyTorchJob node (PET_NPROC_PER_NODE set, no torchrun or strata rank variables),
/// std::nullopt otherwise. Throws UsageError for malformed values.
std::optional<NodeLaunch> node_launch_from_environment(const EnvLookup& env = process_environment());

/// The Slurm allocation this process is in while not a step's task (SLURM_JOB_ID set, and no
/// SLURM_STEP_ID or the batch, extern or interactive step), std::nullopt otherwise.
std::optional<SlurmAllocation> slurm_allocation(const EnvLookup& env = process_environment());

/// First host of a Slurm node list such as "node[03-05,07],gpu12" -> "node03".
std::string first_slurm_host(const std::string& nodelist);

}  // namespace strata
