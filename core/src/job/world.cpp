// Rank discovery from launcher environments. Pure string logic (no LibTorch), so that it compiles
// in seconds and every rule is unit-testable with an injected environment.

#include "job/world.hpp"

#include <charconv>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "strata/errors.hpp"
#include "text/suggest.hpp"

namespace strata {
namespace {

/// What to print after every launcher-environment error.
constexpr const char* kUnsetHint =
    " Or unset the launcher variables and use `--nproc N` to let strata start the ranks itself.";

[[noreturn]] void inconsistent(const std::string& message, const std::string& fix) {
  throw UsageError("inconsistent launcher environment: " + message, fix + kUnsetHint);
}

/// "NAME=value" for messages; values are quoted so that empty or padded ones show.
std::string shown(const std::string& name, const std::string& value) { return name + "='" + detail::shown(value) + "'"; }

/// A non-negative decimal integer, or std::nullopt for anything else ("", "-1", "1x", " 1",
/// values beyond int).
std::optional<int> parse_count(std::string_view text) {
  if (text.empty() || text.front() < '0' || text.front() > '9') return std::nullopt;
  int value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc{} || end != text.data() + text.size()) return std::nullopt;
  return value;
}

/// The integer value of `name`, std::nullopt when unset; a set but malformed value is an error
/// (silently ignoring `RANK=1x` would start a job with the wrong layout).
std::optional<int> read_count(const EnvLookup& env, const std::string& name) {
  auto text = env(name);
  if (!text) return std::nullopt;
  auto value = parse_count(*text);
  if (!value) {
    inconsistent(shown(name, *text) + " is not a non-negative integer.",
                 "Set " + name + " to a whole number such as 0, 1 or 4.");
  }
  return value;
}

/// "NAME=4" for a variable, "4 tasks per node (...)" for a described default.
std::string describe_variable(const std::string& name, int value) {
  if (name.find(' ') == std::string::npos) return name + "=" + std::to_string(value);
  return std::to_string(value) + " " + name;
}

/// One launcher's rank variables, with their names for the messages.
struct RankVars {
  const char* rank;
  const char* size;
  const char* local_rank;
  const char* local_size;
};

constexpr RankVars kTorchrunVars{"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"};
constexpr RankVars kSlurmVars{"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE"};
constexpr RankVars kOpenMpiVars{"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
                                "OMPI_COMM_WORLD_LOCAL_SIZE"};

/// Local rank when its variable is unset: on one host it equals the global rank; across hosts
/// nothing tells which GPU to take, so it is an error.
int default_local_rank(const WorldInfo& w, const RankVars& v, const std::string& local_size_name) {
  if (w.local_world_size == w.world_size) return w.rank;
  inconsistent(std::string(v.local_rank) + " is unset while the job spans hosts (" +
                   describe_variable(local_size_name, w.local_world_size) + " < " + v.size + "=" +
                   std::to_string(w.world_size) + ").",
               std::string("Set ") + v.local_rank + " to this process's rank on its host.");
}

/// Checks the counts against each other and fills in the local rank (`local_rank` as read, may
/// be unset). `local_size_name` names where the local size came from (it may be derived, e.g.
/// from SLURM_TASKS_PER_NODE).
void settle_ranks(WorldInfo& w, std::optional<int> local_rank, const RankVars& v,
                  const std::string& local_size_name) {
  auto val = [](int x) { return std::to_string(x); };
  if (w.world_size < 1) {
    inconsistent(std::string(v.size) + "=" + val(w.world_size) + " must be at least 1.",
                 std::string("Set ") + v.size + " to the number of processes in the job.");
  }
  if (w.rank >= w.world_size) {
    inconsistent(std::string(v.rank) + "=" + val(w.rank) + " is not below " + v.size + "=" + val(w.world_size) + ".",
                 std::string("Give each process a distinct ") + v.rank + " in 0.." + val(w.world_size - 1) + ".");
  }
  if (w.local_world_size < 1 || w.local_world_size > w.world_size) {
    inconsistent(describe_variable(local_size_name, w.local_world_size) + " must be between 1 and " + v.size + "=" +
                     val(w.world_size) + ".",
                 "Set " + local_size_name + " to the number of processes on this host.");
  }
  w.local_rank = local_rank ? *local_rank : default_local_rank(w, v, local_size_name);
  if (w.local_rank >= w.local_world_size) {
    inconsistent(std::string(v.local_rank) + "=" + val(w.local_rank) + " is not below " +
                     describe_variable(local_size_name, w.local_world_size) + ".",
                 std::string("Give each process on a host a distinct ") + v.local_rank + " in 0.." +
                     val(w.local_world_size - 1) + ".");
  }
}

/// MASTER_ADDR, defaulting to loopback only when every rank is on this host.
std::string master_addr(const EnvLookup& env, const WorldInfo& w, const RankVars& v,
                        const std::string& local_size_name, const std::string& fallback_host = {}) {
  if (auto addr = env("MASTER_ADDR")) {
    if (addr->empty()) inconsistent("MASTER_ADDR is set but empty.", "Set MASTER_ADDR to the host of rank 0.");
    return *addr;
  }
  if (!fallback_host.empty()) return fallback_host;
  if (w.local_world_size == w.world_size) return "127.0.0.1";
  inconsistent("MASTER_ADDR is unset while the job spans hosts (" + describe_variable(local_size_name, w.local_world_size) +
                   " < " + v.size + "=" + std::to_string(w.world_size) + ").",
               "Set MASTER_ADDR to the hostname or address of the host that runs rank 0.");
}

/// MASTER_PORT if set (validated), else `fallback` (0: none).
int master_port(const EnvLookup& env, int fallback) {
  auto text = env("MASTER_PORT");
  if (!text) return fallback;
  auto port = parse_count(*text);
  if (!port || *port < 1 || *port > 65535) {
    inconsistent(shown("MASTER_PORT", *text) + " is not a TCP port.", "Set MASTER_PORT to a number in 1..65535.");
  }
  return *port;
}

/// Rank, size, local rank and size and master address of a launcher whose variables follow the
/// torchrun pattern (torchrun, OpenMPI); std::nullopt when neither rank nor size is set. Without a
/// local size the job is taken to be on one host (torchrun's single-node default; a multi-host
/// launcher always sets it).
std::optional<WorldInfo> paired_world(const EnvLookup& env, const RankVars& v, const std::string& fix) {
  auto rank = read_count(env, v.rank);
  auto size = read_count(env, v.size);
  if (!rank && !size) return std::nullopt;
  if (!rank || !size)
    inconsistent(std::string(rank ? v.rank : v.size) + " is set but " + (rank ? v.size : v.rank) + " is not.", fix);
  WorldInfo w;
  w.rank = *rank;
  w.world_size = *size;
  const auto local_size = read_count(env, v.local_size);
  w.local_world_size = local_size.value_or(w.world_size);
  w.local_world_size_known = local_size.has_value();
  settle_ranks(w, read_count(env, v.local_rank), v, v.local_size);
  w.master_addr = master_addr(env, w, v, v.local_size);
  w.source = describe_variable(v.rank, w.rank) + " " + describe_variable(v.size, w.world_size) + " " +
             describe_variable(v.local_size, w.local_world_size);
  return w;
}

std::optional<WorldInfo> torchrun_world(const EnvLookup& env) {
  auto found = paired_world(env, kTorchrunVars, "Set both RANK and WORLD_SIZE (torchrun and strata set them together).");
  if (!found) return std::nullopt;
  WorldInfo& w = *found;
  w.master_port = master_port(env, 0);
  if (w.world_size > 1 && w.master_port == 0) {
    inconsistent("MASTER_PORT is unset while WORLD_SIZE=" + std::to_string(w.world_size) + ".",
                 "Set MASTER_PORT to a free TCP port on MASTER_ADDR (the same on every rank).");
  }
  w.launcher = env("STRATA_SPAWNED").value_or("") == "1" ? "strata" : "torchrun";
  // torch.distributed's rendezvous compares with Python's str(True).
  w.agent_store = env("TORCHELASTIC_USE_AGENT_STORE").value_or("") == "True";
  return found;
}

/// The task count of node `index` in a Slurm tasks-per-node list such as "4(x2),3": counts,
/// each optionally repeated "(xK)" times. std::nullopt when malformed or too short.
std::optional<int> slurm_tasks_on_node(const std::string& list, int index) {
  std::string_view rest = list;
  while (!rest.empty()) {
    auto comma = rest.find(',');
    std::string_view item = rest.substr(0, comma);
    rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(comma + 1);
    int repeat = 1;
    if (auto paren = item.find("(x"); paren != std::string_view::npos) {
      if (item.back() != ')') return std::nullopt;
      auto r = parse_count(item.substr(paren + 2, item.size() - paren - 3));
      if (!r || *r < 1) return std::nullopt;
      repeat = *r;
      item = item.substr(0, paren);
    }
    auto count = parse_count(item);
    if (!count) return std::nullopt;
    if (index < repeat) return count;
    index -= repeat;
  }
  return std::nullopt;
}

/// Processes on this node: SLURM_NTASKS_PER_NODE, else this node's count (SLURM_NODEID, else
/// the first) in SLURM_TASKS_PER_NODE, else 1. Sets `source` to the variable used.
int slurm_local_size(const EnvLookup& env, std::string& source) {
  source = "SLURM_NTASKS_PER_NODE";
  if (auto n = read_count(env, source)) return *n;
  if (auto list = env("SLURM_TASKS_PER_NODE")) {
    source = "SLURM_TASKS_PER_NODE";
    const int node = read_count(env, "SLURM_NODEID").value_or(0);
    if (auto n = slurm_tasks_on_node(*list, node)) return *n;
    inconsistent(shown(source, *list) + " has no task count for node " + std::to_string(node) + ".",
                 "Launch with srun, which sets it as e.g. '4(x2),3'.");
  }
  source = "task per node (the default: SLURM_NTASKS_PER_NODE and SLURM_TASKS_PER_NODE are unset)";
  return 1;
}

/// SLURM_STEP_ID (older releases: SLURM_STEPID), std::nullopt when unset.
std::optional<std::string> slurm_step_id(const EnvLookup& env) {
  if (auto id = env("SLURM_STEP_ID")) return id;
  return env("SLURM_STEPID");
}

/// Whether this process is a task of a step srun started: a step id that is not one of Slurm's
/// special steps. The batch script (SLURM_STEP_ID unset, or "batch"/0xfffffffb), the extern step
/// and salloc's interactive step have SLURM_PROCID=0 and the allocation's SLURM_NTASKS, but they
/// are one process, not rank 0 of a job of SLURM_NTASKS ranks.
bool in_slurm_step(const EnvLookup& env) {
  const auto id = slurm_step_id(env);
  if (!id || id->empty() || *id == "batch" || *id == "extern" || *id == "interactive") return false;
  std::uint64_t value = 0;
  auto [end, ec] = std::from_chars(id->data(), id->data() + id->size(), value);
  if (ec != std::errc{} || end != id->data() + id->size()) return true;  // a name we do not know: trust srun
  return value < 0xfffffff0ULL;  // SLURM_PENDING_STEP .. SLURM_BATCH_SCRIPT, SLURM_EXTERN_CONT, ...
}

std::optional<WorldInfo> slurm_world(const EnvLookup& env) {
  const auto& v = kSlurmVars;
  // Both must be set, in a step: SLURM_NTASKS alone describes an allocation (salloc, sbatch) in
  // which the user may run one process, not a step of several ranks started by srun.
  if (!env(v.rank) || !env(v.size) || !in_slurm_step(env)) return std::nullopt;
  WorldInfo w;
  w.rank = *read_count(env, v.rank);
  w.world_size = *read_count(env, v.size);
  std::string local_size_name;
  w.local_world_size = slurm_local_size(env, local_size_name);
  // srun's per-node counts; the default of one task per node is a guess.
  w.local_world_size_known = local_size_name == "SLURM_NTASKS_PER_NODE" || local_size_name == "SLURM_TASKS_PER_NODE";
  settle_ranks(w, read_count(env, v.local_rank), v, local_size_name);
  // Rank 0 runs on the first node of the step; the job's list is the fallback outside a step.
  std::string first_host;
  for (const char* name : {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"}) {
    if (auto list = env(name); list && !list->empty()) {
      first_host = first_slurm_host(*list);
      break;
    }
  }
  w.master_addr = master_addr(env, w, v, local_size_name, first_host);
  // Every rank derives the same port from the job id without communicating; 20000..39999 stays
  // below the usual ephemeral range (32768+ on some systems overlaps; collisions there are rare
  // and MASTER_PORT overrides). Two concurrent steps of one job need distinct MASTER_PORTs.
  int fallback_port = 0;
  if (auto job = env("SLURM_JOB_ID")) {
    auto id = parse_count(*job);
    if (!id) inconsistent(shown("SLURM_JOB_ID", *job) + " is not a job number.", "Set MASTER_PORT explicitly.");
    fallback_port = 20000 + *id % 20000;
  }
  w.master_port = master_port(env, fallback_port);
  if (w.world_size > 1 && w.master_port == 0) {
    inconsistent("MASTER_PORT and SLURM_JOB_ID are both unset while SLURM_NTASKS=" + std::to_string(w.world_size) + ".",
                 "Set MASTER_PORT to a free TCP port on the first node (the same on every rank).");
  }
  w.launcher = "slurm";
  w.source = describe_variable(v.rank, w.rank) + " " + describe_variable(v.size, w.world_size) + " " +
             describe_variable(local_size_name, w.local_world_size) + " SLURM_STEP_ID=" + slurm_step_id(env).value_or("");
  return w;
}

/// PET_NPROC_PER_NODE: a count, or "auto"/"gpu" (0: one rank per visible GPU, decided later).
int parse_nproc_per_node(const std::string& text) {
  if (text == "auto" || text == "gpu") return 0;
  auto n = parse_count(text);
  if (!n || *n < 1)
    inconsistent(shown("PET_NPROC_PER_NODE", text) + " is not a process count.",
                 "Set nprocPerNode in the PyTorchJob to a number such as 1 or 8 (or \"auto\": one per GPU).");
  return *n;
}

std::optional<WorldInfo> openmpi_world(const EnvLookup& env) {
  auto found = paired_world(env, kOpenMpiVars, "Start the job with mpirun, which sets both.");
  if (!found) return std::nullopt;
  WorldInfo& w = *found;
  // mpirun has no rendezvous port of its own; 29500 is torchrun's default, so a job needs no
  // extra variable unless two share a host.
  w.master_port = master_port(env, 29500);
  w.launcher = "openmpi";
  return found;
}

}  // namespace

std::optional<NodeLaunch> node_launch_from_environment(const EnvLookup& env) {
  auto per_node = env("PET_NPROC_PER_NODE");
  // A rank started by torchrun inside the pod (or by strata for this node) has LOCAL_RANK.
  if (!per_node || env("LOCAL_RANK") || env("TORCHELASTIC_RUN_ID")) return std::nullopt;
  NodeLaunch n;
  n.nproc_per_node = parse_nproc_per_node(*per_node);
  auto nnodes = env("PET_NNODES").value_or("1");
  if (auto colon = nnodes.find(':'); colon != std::string::npos) {
    // Elastic "min:max": strata's node launcher is not elastic; a fixed size is min == max.
    if (nnodes.substr(0, colon) != nnodes.substr(colon + 1))
      inconsistent(shown("PET_NNODES", nnodes) + " is an elastic range.",
                   "Give the PyTorchJob a fixed number of replicas (no elasticPolicy), or run torchrun in the pod.");
    nnodes = nnodes.substr(0, colon);
  }
  auto count = parse_count(nnodes);
  if (!count || *count < 1)
    inconsistent(shown("PET_NNODES", nnodes) + " is not a node count.", "Set PET_NNODES to the number of pods.");
  n.nnodes = *count;
  const char* rank_name = env("PET_NODE_RANK") ? "PET_NODE_RANK" : "RANK";
  n.node_rank = read_count(env, rank_name).value_or(0);
  if (n.node_rank >= n.nnodes)
    inconsistent(std::string(rank_name) + "=" + std::to_string(n.node_rank) + " is not below PET_NNODES=" +
                     std::to_string(n.nnodes) + ".",
                 "Each pod of the PyTorchJob needs a distinct node rank below the replica count.");
  n.master_addr = env("PET_MASTER_ADDR").value_or(env("MASTER_ADDR").value_or(""));
  if (n.master_addr.empty()) {
    if (n.nnodes > 1)
      inconsistent("MASTER_ADDR is unset in a PyTorchJob of " + std::to_string(n.nnodes) + " nodes.",
                   "Let the training operator set it (it does for every replica), or set MASTER_ADDR to the master pod.");
    n.master_addr = "127.0.0.1";
  }
  const char* port_name = env("PET_MASTER_PORT") ? "PET_MASTER_PORT" : "MASTER_PORT";
  if (auto text = env(port_name)) {
    auto port = parse_count(*text);
    if (!port || *port < 1 || *port > 65535)
      inconsistent(shown(port_name, *text) + " is not a TCP port.", std::string("Set ") + port_name + " to 1..65535.");
    n.master_port = *port;
  } else if (n.nnodes > 1) {
    inconsistent("MASTER_PORT is unset in a PyTorchJob of " + std::to_string(n.nnodes) + " nodes.",
                 "Let the training operator set it, or set MASTER_PORT to a free port of the master pod.");
  }
  n.source = "PET_NNODES=" + std::to_string(n.nnodes) + " " + rank_name + "=" + std::to_string(n.node_rank) +
             " PET_NPROC_PER_NODE=" + *per_node;
  return n;
}

std::optional<SlurmAllocation> slurm_allocation(const EnvLookup& env) {
  auto job = env("SLURM_JOB_ID");
  if (!job || in_slurm_step(env)) return std::nullopt;
  SlurmAllocation a;
  a.job_id = *job;
  if (auto text = env("SLURM_NTASKS")) a.ntasks = parse_count(*text).value_or(0);
  const auto step = slurm_step_id(env);
  a.where = step && !step->empty() ? "step " + *step + " of Slurm job " + *job
                                   : "Slurm job " + *job + " outside a step (the batch script or salloc's shell)";
  return a;
}

EnvLookup process_environment() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* value = std::getenv(name.c_str());
    if (value == nullptr) return std::nullopt;
    return std::string(value);
  };
}

std::optional<WorldInfo> world_from_environment(const EnvLookup& env) {
  // A Kubeflow pod sets RANK to its node rank: not a process rank (strata starts the node's ranks).
  if (node_launch_from_environment(env)) return std::nullopt;
  // torchrun first: under srun or mpirun it is the innermost launcher, and its variables describe
  // the processes that actually exist.
  if (auto w = torchrun_world(env)) return w;
  if (auto w = slurm_world(env)) return w;
  return openmpi_world(env);
}

std::string first_slurm_host(const std::string& nodelist) {
  // The first host is the first entry at bracket depth 0, with each bracket group replaced by its
  // first value: "rack[1-2]-n[03-05,07],gpu12" -> "rack1-n03". Zero padding is kept as written.
  std::string host;
  std::size_t i = 0;
  while (i < nodelist.size() && nodelist[i] != ',') {
    if (nodelist[i] != '[') {
      host += nodelist[i++];
      continue;
    }
    auto close = nodelist.find(']', i);
    if (close == std::string::npos) close = nodelist.size();
    std::string_view group(nodelist.data() + i + 1, close - i - 1);
    host += group.substr(0, group.find_first_of(",-"));
    i = close == nodelist.size() ? close : close + 1;
  }
  return host;
}

}  // namespace strata
