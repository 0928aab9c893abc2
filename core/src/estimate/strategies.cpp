#include "estimate/strategies.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include <fmt/format.h>

namespace strata::estimate {

namespace {

double element_bytes(const std::string& dtype) {
  return dtype == "bfloat16" || dtype == "float16" || dtype == "half" ? 2.0 : 4.0;
}

/// Ranks of a job of `world` on one host: all of them, or a node's on a cluster.
int ranks_on_host(const Network& net, int world) {
  return std::max(1, net.gpus_per_node > 0 ? std::min(world, net.gpus_per_node) : world);
}

/// A replica that does not communicate: what a strategy that declares no schedule is predicted as.
Schedule replica_schedule(const ScheduleInput& in) {
  Schedule s;
  const int micro = std::max(1, in.micro_batches);
  for (int m = 0; m < micro; ++m) {
    for (std::size_t u = 0; u < in.units.size(); ++u) s.compute(fmt::format("forward {} (micro {})", u, m), in.units[u].forward_s);
    for (std::size_t u = in.units.size(); u-- > 0;) s.compute(fmt::format("backward {} (micro {})", u, m), in.units[u].backward_s);
  }
  s.compute("optimizer", in.optimizer_s);
  const double psi = in.parameters();
  s.memory.params = psi * (in.param_bytes < 4 ? in.param_bytes + 4.0 : 4.0);
  s.memory.grads = psi * 4.0;
  s.memory.optimizer = psi * in.optimizer_bytes;
  s.memory.transient_step = psi * 4.0;
  s.note = "declares no schedule: memory as a full replica, communication not predicted";
  return s;
}

}  // namespace

double prediction_uncertainty(const Profile& p) {
  const double noise = std::max(p.step_spread, p.reference_spread);
  return std::sqrt(kModelError * kModelError + noise * noise);
}

int rank_threads(const Profile& p, const Network& net, int world) {
  if (p.rank_threads > 0) return p.rank_threads;
  return std::max(1, p.host_threads / ranks_on_host(net, world));
}

bool collectives_share_cores(const Profile& p, const Network& net, int world) {
  if (p.device != "cpu" || p.host_threads <= 0 || world <= 1) return false;
  return ranks_on_host(net, world) * rank_threads(p, net, world) >= p.host_threads;
}

double host_compute_factor(const Profile& p, const Network& net, int world) {
  if (p.device != "cpu" || p.threads <= 0 || p.host_threads <= 0) return 1.0;
  const int local = ranks_on_host(net, world);
  const int threads = rank_threads(p, net, world);
  // L ranks of `threads` threads on T hardware threads run in ceil(L x threads / T) rounds: a rank's
  // threads are scheduled whole, so 3 one-thread ranks on 2 cores take two rounds, not one and a half.
  const double oversubscribed =
      std::max(1.0, std::ceil(static_cast<double>(local) * threads / static_cast<double>(p.host_threads)));
  const double work = p.work_s();
  const auto measured = p.compute_by_threads.find(threads);
  const double slower = threads == p.threads ? 1.0
                        : measured != p.compute_by_threads.end() && work > 0 ? measured->second / work
                                                                             : static_cast<double>(p.threads) / threads;
  return slower * oversubscribed;
}

double MemoryEstimate::peak() const {
  return state() + std::max({activations + gathered + buffers, after_backward, transient_step});
}

double optimizer_bytes_per_param(const Profile& p) {
  if (p.optimizer == "sgd") return p.momentum != 0 ? 4.0 : 0.0;
  return 8.0;
}

Topology topology_on(const Network& network, int world) { return {world, ranks_on_host(network, world)}; }

Schedule strategy_schedule(const RegistryEntry& entry, const Options& options, const ScheduleInput& input) {
  try {
    return entry.scheduler(options, input);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw PluginError(entry.library,
                      fmt::format("strategy '{}' failed while making its schedule (Registry::set_schedule): {}", entry.name,
                                  e.what()),
                      "The error is the plugin's: report it to its authors, or check its options (`strata describe " +
                          entry.name + "`).");
  }
}

StrategyModel strategy_model(const Registry& registry, const std::string& name, const Options& options) {
  StrategyModel m;
  const RegistryEntry* entry = registry.find(PluginKind::kStrategy, name);
  if (entry == nullptr) return m;
  m.one_device = entry->traits.placement.kind == Placement::Kind::kOneDevice;
  if (entry->scheduler)
    m.schedule = [entry, options](const ScheduleInput& in) { return strategy_schedule(*entry, options, in); };
  return m;
}

std::vector<std::pair<std::size_t, std::size_t>> tied_units(const std::vector<UnitProfile>& units) {
  std::vector<std::pair<std::size_t, std::size_t>> tied;
  for (std::size_t u = 0; u < units.size(); ++u)
    for (const auto holder : units[u].reads_from) tied.emplace_back(u, holder);
  return tied;
}

ScheduleInput schedule_input(const EstimateInput& in) {
  const Profile& p = *in.profile;
  const int n = std::max(1, in.world_size);
  ScheduleInput s;
  s.topology = topology_on(*in.network, n);
  s.micro_batches = std::max(1, p.micro_batches);
  const double slowdown = host_compute_factor(p, *in.network, n);
  // A rank's compute per micro-batch: its share of the global batch, on its share of the host.
  const double scale = in.batch_scale / n * slowdown / s.micro_batches;
  double total = 0;
  for (const auto& u : p.units) total += u.params;
  if (p.units.empty()) {
    s.units.push_back({"model", p.parameters, {}, scale * p.compute_s / 3.0, scale * p.compute_s * 2.0 / 3.0});
  } else {
    for (const auto& u : p.units) {
      const double share = total > 0 ? u.params / total : 1.0 / static_cast<double>(p.units.size());
      const bool timed = p.per_unit_times && u.forward_s >= 0 && u.backward_s >= 0;
      s.units.push_back({u.name, u.params, u.tensors, scale * (timed ? u.forward_s : p.compute_s * share / 3.0),
                         scale * (timed ? u.backward_s : p.compute_s * share * 2.0 / 3.0)});
    }
  }
  s.tied = tied_units(p.units);
  s.param_bytes = element_bytes(p.param_dtype);
  s.reduce_bytes = element_bytes(p.reduce_dtype);
  s.optimizer_bytes = optimizer_bytes_per_param(p);
  s.optimizer_s = p.optimizer_s * slowdown;
  s.cpu = p.device == "cpu";
  return s;
}

StrategyEstimate estimate_strategy(const std::string& strategy, const EstimateInput& in, const StrategyModel& model) {
  StrategyEstimate e;
  e.strategy = strategy;
  e.world_size = in.world_size;
  const Profile& p = *in.profile;
  const int n = std::max(1, in.world_size);
  // A strategy on one device does not run above world size 1: its figures at 1, for a row that
  // still shows something.
  EstimateInput at = in;
  if (model.one_device && n != 1) {
    e.applicable = false;
    e.note = strategy + " runs at world size 1 only";
    at.world_size = 1;
  }
  const ScheduleInput input = schedule_input(at);
  e.schedule = model.schedule ? model.schedule(input) : replica_schedule(input);
  e.coarse = !model.schedule;
  if (!e.schedule.applicable) {
    e.applicable = false;
    e.note = e.schedule.option.empty() ? e.schedule.note
                                       : fmt::format("strategy.{}: {}", e.schedule.option, e.schedule.note);
  } else if (!e.schedule.note.empty() && e.note.empty()) {
    e.note = e.schedule.note;
  }
  const ScheduleMemory& m = e.schedule.memory;
  e.memory.params = m.params;
  e.memory.grads = m.grads;
  e.memory.optimizer = m.optimizer;
  for (const auto& [name, bytes] : m.extra)
    (name.rfind("host_", 0) == 0 && p.device != "cpu" ? e.memory.host : e.memory.extra) += bytes;
  e.memory.transient_step = m.transient_step;
  if (e.memory.host > 0) e.memory.transient_step = 0;  // an offloaded optimizer's step runs on the host
  e.memory.gathered = m.gathered;
  e.memory.buffers = m.buffers;
  e.memory.after_backward = m.after_backward;
  const int ranks = model.one_device ? 1 : n;
  e.memory.activations = p.activation_bytes_per_sample * p.global_batch * in.batch_scale / ranks / input.micro_batches;
  // One process holding several devices' replicas on the host: theirs, activations included.
  if (m.process_extra > 0) e.process_peak = e.memory.peak() + m.process_extra + (ranks - 1) * e.memory.activations;

  const Simulation sim = simulate(e.schedule, *in.network);
  e.compute_s = sim.busy_s.count("compute") ? sim.busy_s.at("compute") : 0.0;
  e.exposed_comm_s = sim.exposed_comm_s;
  for (const auto& [stream, busy] : sim.busy_s)
    if (stream != "compute") e.comm_s += busy;
  double step = sim.step_s;
  if (collectives_share_cores(p, *in.network, ranks) && e.compute_s + e.comm_s > step) {
    // The collectives need the cores the ranks compute on: the step is their sum, not their overlap.
    step = e.compute_s + e.comm_s;
    e.exposed_comm_s = e.comm_s;
  }
  // Fetching a batch computes on the rank's threads; the rest of the step (fixed host work) does not scale.
  const double data_share = e.schedule.data_share >= 0 ? e.schedule.data_share : 1.0 / ranks;
  e.step_s = step + p.data_s * data_share * in.batch_scale * host_compute_factor(p, *in.network, ranks) + p.other_s;
  const double u = prediction_uncertainty(p);
  e.step_low_s = e.step_s * (1.0 - u);
  e.step_high_s = e.step_s * (1.0 + u);
  e.bus_bytes = sim.bus_bytes;
  e.payload_bytes = sim.payload_bytes;
  e.collectives = sim.collectives;
  return e;
}

}  // namespace strata::estimate
