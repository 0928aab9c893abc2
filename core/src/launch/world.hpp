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
  std::string master_addr = "127.0.0.1";  ///< host of rank 0's TCPStore
  int master_port = 0;         ///< port of rank 0's TCPStore
  std::string launcher = "none";  ///< "torchrun", "slurm", "openmpi", "strata" (our spawner) or "none"
};

/// Reads an environment variable; std::nullopt when unset. Injected so tests need not touch
/// the real environment.
using EnvLookup = std::function<std::optional<std::string>(const std::string& name)>;
/// The process environment.
EnvLookup process_environment();

/// The world described by the environment, or std::nullopt when no launcher variables are set.
/// Precedence: torchrun-style (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR,
/// MASTER_PORT; also what strata's spawner sets), then Slurm (SLURM_PROCID, SLURM_NTASKS,
/// SLURM_LOCALID, SLURM_NTASKS_PER_NODE / SLURM_TASKS_PER_NODE; master from MASTER_ADDR or the
/// first host of SLURM_JOB_NODELIST, port from MASTER_PORT or derived from SLURM_JOB_ID), then
/// OpenMPI (OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK, _LOCAL_SIZE; MASTER_ADDR required when the
/// world spans hosts). Throws UsageError (exit 2) naming the variables when they are
/// inconsistent (missing partner, not an integer, rank >= size, size < 1, ...).
std::optional<WorldInfo> world_from_environment(const EnvLookup& env = process_environment());

/// First host of a Slurm node list such as "node[03-05,07],gpu12" -> "node03".
std::string first_slurm_host(const std::string& nodelist);

}  // namespace strata
