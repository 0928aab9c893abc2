#pragma once
// The memory a run on this host may still take: the host's available memory, bounded by the
// memory limit of the process's cgroup (v2 memory.max, v1 memory.limit_in_bytes, at every level
// up to the root, less what the cgroup uses) and by a Slurm job's allocation. In a container the
// cgroup's limit, not the host's memory, is what the kernel's OOM killer enforces.

#include <cstdint>
#include <optional>
#include <string>

namespace strata {

struct HostMemory {
  double bytes = 0;    ///< available to this run now
  std::string source;  ///< what bounds it, for messages: "this host's available memory", ...
};

/// Where the limits are read; tests point them at a directory of their own.
struct HostMemoryFiles {
  std::string meminfo = "/proc/meminfo";
  std::string self_cgroup = "/proc/self/cgroup";
  std::string cgroup_root = "/sys/fs/cgroup";
};

/// The tightest of the host's MemAvailable, the cgroup's limit less its use, and Slurm's allocation
/// (SLURM_MEM_PER_NODE, or SLURM_MEM_PER_CPU x SLURM_CPUS_ON_NODE, in MiB); nullopt where none is
/// known.
std::optional<HostMemory> available_host_memory(const HostMemoryFiles& files = {});

/// The memory limit of this process's cgroup (the tightest level) and the file that sets it, or
/// nullopt where there is none; with the count of OOM kills it has seen (see cgroup_oom_kills;
/// -1 where unknown) and the level's directory, to read that same count again later.
struct CgroupLimit {
  double bytes = 0;
  std::string file;
  std::int64_t oom_kills = -1;
  std::string dir;  ///< the level's cgroup directory
};
std::optional<CgroupLimit> cgroup_memory_limit(const HostMemoryFiles& files = {});

/// The OOM kills the cgroup in `dir` has counted: v2's memory.events.local where the kernel has it
/// (kills of this cgroup's own processes, not its descendants' or siblings'), else memory.events,
/// else v1's memory.oom_control; nullopt where none says.
std::optional<std::int64_t> cgroup_oom_kills(const std::string& dir);

}  // namespace strata
