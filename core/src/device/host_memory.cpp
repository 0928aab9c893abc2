#include "device/host_memory.hpp"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <vector>

#include <fmt/format.h>

#include "text/units.hpp"

namespace strata {

namespace {

constexpr double kMiB = 1024.0 * 1024;
/// A v1 cgroup without a limit reports about 2^63 (rounded to pages): anything above this is none.
constexpr double kUnlimited = 1e18;

std::optional<double> read_number(const std::string& file) {
  std::ifstream in(file);
  std::string word;
  if (!(in >> word) || word == "max") return std::nullopt;
  char* end = nullptr;
  const double value = std::strtod(word.c_str(), &end);
  if (end == word.c_str() || value <= 0 || value >= kUnlimited) return std::nullopt;
  return value;
}


/// This process's cgroup path for v2 ("0::/path") and for v1's memory controller.
struct SelfCgroup {
  std::optional<std::string> v2, v1_memory;
};

SelfCgroup self_cgroup(const std::string& file) {
  SelfCgroup out;
  std::ifstream in(file);
  for (std::string line; std::getline(in, line);) {
    const auto a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    if (line.compare(0, a, "0") == 0 && controllers.empty()) out.v2 = path;
    std::istringstream list(controllers);
    for (std::string c; std::getline(list, c, ',');)
      if (c == "memory") out.v1_memory = path;
  }
  return out;
}

/// Every directory from `root`/`path` up to `root`, innermost first (a namespaced container sees its
/// own cgroup at the root, and "/" as its path).
std::vector<std::string> levels(const std::string& root, std::string path) {
  std::vector<std::string> out;
  while (true) {
    out.push_back(root + (path == "/" ? "" : path));
    if (path.empty() || path == "/") break;
    const auto cut = path.find_last_of('/');
    path = cut == 0 || cut == std::string::npos ? std::string("/") : path.substr(0, cut);
  }
  return out;
}

/// The tightest level: its limit, its room left (limit - usage), its limit file.
struct Level {
  double limit = 0, room = 0;
  std::string file, dir;
};

std::optional<Level> tightest(const HostMemoryFiles& files) {
  const auto self = self_cgroup(files.self_cgroup);
  std::optional<Level> best;
  const auto consider = [&](const std::string& dir, const char* limit_file, const char* usage_file,
                            const char* cache_key) {
    const auto limit = read_number(dir + "/" + limit_file);
    if (!limit) return;
    // The usage counts page cache the kernel reclaims before it kills (a data set read once): the
    // working set is the usage less the inactive file pages, as the kubelet counts it.
    double used = read_number(dir + "/" + usage_file).value_or(0);
    std::ifstream stat(dir + "/memory.stat");
    std::string key;
    double value = 0;
    while (stat >> key >> value)
      if (key == cache_key) used = std::max(0.0, used - value);
    const double room = std::max(0.0, *limit - used);
    if (!best || room < best->room) best = Level{*limit, room, dir + "/" + limit_file, dir};
  };
  if (self.v2) {
    // A hybrid host mounts the v2 hierarchy at unified/.
    std::ifstream hybrid(files.cgroup_root + "/unified/cgroup.controllers");
    const std::string root = hybrid ? files.cgroup_root + "/unified" : files.cgroup_root;
    for (const auto& dir : levels(root, *self.v2)) consider(dir, "memory.max", "memory.current", "inactive_file");
  }
  if (self.v1_memory)
    for (const auto& dir : levels(files.cgroup_root + "/memory", *self.v1_memory))
      consider(dir, "memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file");
  return best;
}

}  // namespace

std::optional<CgroupLimit> cgroup_memory_limit(const HostMemoryFiles& files) {
  const auto level = tightest(files);
  if (!level) return std::nullopt;
  return CgroupLimit{level->limit, level->file, cgroup_oom_kills(level->dir).value_or(-1), level->dir};
}

std::optional<std::int64_t> cgroup_oom_kills(const std::string& dir) {
  // v2's memory.events is hierarchical (a kill anywhere below counts); .local (Linux 5.2+) only
  // this cgroup's own.
  for (const char* file : {"memory.events.local", "memory.events", "memory.oom_control"}) {
    std::ifstream in(dir + "/" + file);
    std::string key;
    std::int64_t value = 0;
    while (in >> key >> value)
      if (key == "oom_kill") return value;
  }
  return std::nullopt;
}

std::optional<HostMemory> available_host_memory(const HostMemoryFiles& files) {
  std::optional<HostMemory> out;
  const auto take = [&](double bytes, std::string source) {
    if (!out || bytes < out->bytes) out = HostMemory{bytes, std::move(source)};
  };
  {
    std::ifstream meminfo(files.meminfo);
    std::string key, unit;
    double kib = 0;
    while (meminfo >> key >> kib >> unit)
      if (key == "MemAvailable:") take(kib * 1024, "this host's available memory");
  }
  if (const auto level = tightest(files))
    take(level->room, fmt::format("what this process's cgroup still allows (its limit {} in {}, less what it uses)",
                                  gib(level->limit), level->file));
  const auto mib = [](const char* name) -> std::optional<double> {
    const char* v = std::getenv(name);
    if (v == nullptr || *v == '\0') return std::nullopt;
    char* end = nullptr;
    const double value = std::strtod(v, &end);
    return end != v && value > 0 ? std::optional<double>(value) : std::nullopt;
  };
  if (const auto node = mib("SLURM_MEM_PER_NODE"))
    take(*node * kMiB, fmt::format("the Slurm job's memory ({} in SLURM_MEM_PER_NODE)", gib(*node * kMiB)));
  else if (const auto cpu = mib("SLURM_MEM_PER_CPU"); cpu && mib("SLURM_CPUS_ON_NODE"))
    take(*cpu * *mib("SLURM_CPUS_ON_NODE") * kMiB,
         fmt::format("the Slurm job's memory ({} from SLURM_MEM_PER_CPU x SLURM_CPUS_ON_NODE)",
                     gib(*cpu * *mib("SLURM_CPUS_ON_NODE") * kMiB)));
  return out;
}

}  // namespace strata
