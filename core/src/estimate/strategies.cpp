#include "estimate/strategies.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace strata::estimate {

namespace {

constexpr double kMiB = 1024.0 * 1024.0;

double element_bytes(const std::string& dtype) {
  return dtype == "bfloat16" || dtype == "float16" || dtype == "half" ? 2.0 : 4.0;
}

double padded(double elements, int n) {
  if (n <= 1) return elements;
  return std::ceil(elements / n) * n;
}

/// The step's shape on this rank.
struct Shape {
  const Profile& p;
  int n;
  int micro;
  std::vector<double> unit_params;  ///< elements, forward order
  std::vector<double> forward_s;    ///< per micro-batch on this rank
  std::vector<double> backward_s;
  double param_bytes;   ///< per element held: the parameter (and its float32 master when it is narrower)
  double gather_bytes;  ///< per element gathered (the parameter dtype)
  double reduce_bytes;  ///< per element reduced (the reduce dtype)
  double opt_bytes;     ///< optimizer state per element

  double batch_scale;  ///< this world size's global batch over the profile's
  double slowdown;     ///< host_compute_factor(): a rank's compute against the profile's, same work
  bool shared_cores = false;  ///< collectives_share_cores(): communication does not overlap compute

  /// At `world` ranks (or devices) that share the global batch equally.
  Shape(const EstimateInput& in, int world)
      : Shape(*in.profile, world, in.batch_scale / world, in.batch_scale,
              host_compute_factor(*in.profile, *in.network, world)) {
    shared_cores = collectives_share_cores(*in.profile, *in.network, world);
  }

  Shape(const Profile& profile, int world, double batch_share, double global_scale, double factor)
      : p(profile), n(world), micro(std::max(1, profile.micro_batches)), batch_scale(global_scale), slowdown(factor) {
    if (p.units.empty()) unit_params.push_back(p.parameters);
    for (const auto& u : p.units) unit_params.push_back(u.params);
    const double total = std::accumulate(unit_params.begin(), unit_params.end(), 0.0);
    const double scale = batch_share * slowdown / micro;
    for (std::size_t u = 0; u < unit_params.size(); ++u) {
      const double share = total > 0 ? unit_params[u] / total : 1.0 / static_cast<double>(unit_params.size());
      const UnitProfile* up = p.units.empty() ? nullptr : &p.units[u];
      const bool timed = up != nullptr && p.per_unit_times && up->forward_s >= 0 && up->backward_s >= 0;
      forward_s.push_back(scale * (timed ? up->forward_s : p.compute_s * share / 3.0));
      backward_s.push_back(scale * (timed ? up->backward_s : p.compute_s * share * 2.0 / 3.0));
    }
    const double pe = element_bytes(p.param_dtype);
    param_bytes = pe < 4 ? pe + 4.0 : 4.0;  // narrower parameters keep float32 masters
    gather_bytes = pe;
    reduce_bytes = element_bytes(p.reduce_dtype);
    opt_bytes = optimizer_bytes_per_param(p);
  }
  std::size_t units() const { return unit_params.size(); }
  double total() const { return std::accumulate(unit_params.begin(), unit_params.end(), 0.0); }
  double activations() const { return p.activation_bytes_per_sample * p.global_batch * batch_scale / n / micro; }
  /// The optimizer step over `share` of the parameters, on this rank.
  double optimizer_s(double share) const { return p.optimizer_s * share * slowdown; }
  double largest_unit() const { return *std::max_element(unit_params.begin(), unit_params.end()); }
};

/// Flat gradient groups in reverse parameter order of about `cap_bytes` of parameters (the engine
/// fills them by the parameters' bytes), each ready when the backward of its last (lowest) unit
/// ends. A unit larger than the cap is cut.
struct Group {
  double elements = 0;
  std::size_t ready_unit = 0;  ///< the unit whose backward completes it (its first unit)
  std::size_t last_unit = 0;   ///< its last unit (the first backward reaches)
};
std::vector<Group> reverse_groups(const Shape& s, double cap_bytes) {
  std::vector<Group> groups;
  const double cap = std::max(1.0, cap_bytes / s.gather_bytes);
  Group open;
  for (std::size_t k = s.units(); k-- > 0;) {
    double left = s.unit_params[k];
    while (left > 0) {
      if (open.elements == 0) open.last_unit = k;
      const double take = std::min(left, cap - open.elements);
      open.elements += take;
      open.ready_unit = k;
      left -= take;
      if (open.elements >= cap) {
        groups.push_back(open);
        open = {};
      }
    }
  }
  if (open.elements > 0) groups.push_back(open);
  return groups;
}

/// Forward of every unit on the compute stream; returns their ids.
std::vector<int> forward_pass(Schedule& s, const Shape& sh, int m, std::vector<int> first_deps = {}) {
  std::vector<int> ids;
  for (std::size_t u = 0; u < sh.units(); ++u)
    ids.push_back(s.compute(fmt::format("forward {} (micro {})", u, m), sh.forward_s[u], u == 0 ? first_deps : std::vector<int>{}));
  return ids;
}

StrategyEstimate finish(StrategyEstimate e, const Shape& sh, const Network& net, double data_share) {
  const Simulation sim = simulate(e.schedule, net);
  e.compute_s = sim.busy_s.count("compute") ? sim.busy_s.at("compute") : 0.0;
  e.exposed_comm_s = sim.exposed_comm_s;
  for (const auto& [stream, busy] : sim.busy_s)
    if (stream != "compute") e.comm_s += busy;
  double step = sim.step_s;
  if (sh.shared_cores && e.compute_s + e.comm_s > step) {
    // The collectives need the cores the ranks compute on: the step is their sum, not their overlap.
    step = e.compute_s + e.comm_s;
    e.exposed_comm_s = e.comm_s;
  }
  // Fetching a batch computes on the rank's threads; the rest of the step (fixed host work) does not scale.
  e.step_s = step + sh.p.data_s * data_share * sh.batch_scale * sh.slowdown + sh.p.other_s;
  e.bus_bytes = sim.bus_bytes;
  e.payload_bytes = sim.payload_bytes;
  e.collectives = sim.collectives;
  return e;
}

StrategyEstimate start(const std::string& name, const EstimateInput& in) {
  StrategyEstimate e;
  e.strategy = name;
  e.world_size = in.world_size;
  return e;
}

// ---- single and dp --------------------------------------------------------------------------------

/// Replicas whose gradients stay local (single): no communication. `one_device`: world size 1 only.
StrategyEstimate build_local(const std::string& name, bool one_device, const EstimateInput& in) {
  auto e = start(name, in);
  const Shape sh = one_device ? Shape(*in.profile, 1, 1.0, 1.0, 1.0) : Shape(in, in.world_size);
  if (one_device && in.world_size != 1) {
    e.applicable = false;
    e.note = name + " runs at world size 1 only";
  }
  for (int m = 0; m < sh.micro; ++m) {
    forward_pass(e.schedule, sh, m);
    for (std::size_t k = sh.units(); k-- > 0;) e.schedule.compute(fmt::format("backward {} (micro {})", k, m), sh.backward_s[k]);
  }
  e.schedule.compute("optimizer", sh.optimizer_s(1.0));
  const double psi = sh.total();
  e.memory.params = psi * sh.param_bytes;
  e.memory.grads = psi * 4.0;
  e.memory.optimizer = psi * sh.opt_bytes;
  e.memory.activations = sh.activations();
  e.memory.transient_step = psi * 4.0;
  return finish(std::move(e), sh, *in.network, 1.0);
}

/// dp: K replicas in one process, computing at once; gradients copied to device 0 after every
/// micro-batch, parameters copied back to the replicas after the step.
StrategyEstimate build_dp(const std::string& name, const EstimateInput& in) {
  auto e = start(name, in);
  const int k = in.world_size;
  const Shape sh(in, k);
  const double psi = sh.total();
  std::vector<int> reduces;
  for (int m = 0; m < sh.micro; ++m) {
    forward_pass(e.schedule, sh, m);
    int last = -1;
    for (std::size_t u = sh.units(); u-- > 0;)
      last = e.schedule.compute(fmt::format("backward {} (micro {})", u, m), sh.backward_s[u]);
    if (k > 1)  // (K-1) copies of the gradients to device 0: one device-to-device link each
      reduces.push_back(e.schedule.collective(fmt::format("gradients to device 0 (micro {})", m), Collective::kBroadcast,
                                              (k - 1) * psi * 4.0, 2, {last}));
  }
  const int opt = e.schedule.compute("optimizer", sh.optimizer_s(1.0), reduces);
  if (k > 1)
    e.schedule.collective("parameters to the replicas", Collective::kBroadcast, (k - 1) * psi * sh.gather_bytes, 2, {opt});
  e.memory.params = psi * sh.param_bytes;
  e.memory.grads = psi * 4.0;
  e.memory.optimizer = psi * sh.opt_bytes;
  e.memory.activations = sh.activations();
  e.memory.buffers = k > 1 ? psi * 4.0 : 0.0;  // a replica's gradients arriving on device 0
  e.memory.transient_step = psi * 4.0;
  e.note = "one process: replicas on devices of one node";
  if (sh.p.device == "cpu" && k > 1)  // every replica in the process's memory: K-1 more parameters, gradients, activations
    e.process_peak = e.memory.peak() + (k - 1) * (psi * sh.param_bytes + psi * 4.0 + e.memory.activations);
  return finish(std::move(e), sh, *in.network, 1.0);
}

// ---- ddp and zero1/zero2: replicas with flat gradient groups -----------------------------------------

enum class Replicated { kDdp, kZero1, kZero2 };

StrategyEstimate build_replicated(const std::string& name, Replicated kind, const PlanOutline& plan, const EstimateInput& in) {
  auto e = start(name, in);
  const int n = in.world_size;
  const Shape sh(in, n);
  const bool ddp = kind == Replicated::kDdp;
  const double cap = plan.group_bytes > 0 ? static_cast<double>(plan.group_bytes) : 25.0 * kMiB;
  const bool overlap = plan.overlap;
  auto groups = reverse_groups(sh, cap);
  // 0: every group's reduction may be in flight at once (their buffers are the gradients anyway).
  const int in_flight = plan.reductions_in_flight > 0 ? plan.reductions_in_flight : static_cast<int>(groups.size());
  if (!ddp)
    for (auto& g : groups) g.elements = padded(g.elements, n);
  const Collective reduce = ddp ? Collective::kAllReduce : Collective::kReduceScatter;
  // zero1/zero2: the all-gathers refreshing the parameters after the optimizer step, one call per
  // group or consecutive groups together up to allgather_bytes, as the engine issues them. With
  // wait_params_per_unit they are issued in forward order and each unit's next forward waits for
  // its own: in the steady state they run at the start of the step, beside its first forwards.
  struct GatherCall {
    double bytes = 0;
    std::vector<std::size_t> groups;
  };
  std::vector<GatherCall> calls;
  const bool per_unit = !ddp && plan.wait_params_per_unit;
  if (!ddp) {
    double filled = 0;
    for (std::size_t k = 0; k < groups.size(); ++k) {
      const std::size_t g = per_unit ? groups.size() - 1 - k : k;
      const double bytes = groups[g].elements * sh.gather_bytes;
      if (calls.empty() || plan.allgather_bytes <= 0 || filled + bytes > static_cast<double>(plan.allgather_bytes)) {
        calls.emplace_back();
        filled = 0;
      }
      calls.back().bytes += bytes;
      calls.back().groups.push_back(g);
      filled += bytes;
    }
  }
  auto gather_name = [](const GatherCall& c) {
    return c.groups.size() == 1 ? fmt::format("all_gather group {}", c.groups.front())
                                : fmt::format("all_gather groups {}", fmt::join(c.groups, ","));
  };
  std::vector<std::vector<int>> waits(sh.units());  // per unit: the calls its first forward waits for
  if (per_unit && n > 1)
    for (const auto& c : calls) {
      const int id = e.schedule.collective(gather_name(c) + " (the previous step's)", Collective::kAllGather, c.bytes, n);
      for (auto g : c.groups)
        for (std::size_t u = groups[g].ready_unit; u <= groups[g].last_unit; ++u) waits[u].push_back(id);
    }
  std::vector<int> reductions;
  for (int m = 0; m < sh.micro; ++m) {
    if (m == 0 && per_unit)
      for (std::size_t u = 0; u < sh.units(); ++u)
        e.schedule.compute(fmt::format("forward {} (micro {})", u, m), sh.forward_s[u], waits[u]);
    else
      forward_pass(e.schedule, sh, m);
    // ddp and zero1 communicate after the last micro-batch only (no_sync); zero2 after every one.
    const bool communicate = kind == Replicated::kZero2 || m == sh.micro - 1;
    std::vector<int> backward(sh.units(), -1);
    std::vector<int> pass;  // this micro-batch's reductions, in issue order
    std::vector<int> stagers;
    std::size_t next_group = 0;
    for (std::size_t u = sh.units(); u-- > 0;) {
      backward[u] = e.schedule.compute(fmt::format("backward {} (micro {})", u, m), sh.backward_s[u]);
      if (!communicate || !overlap) continue;
      while (next_group < groups.size() && groups[next_group].ready_unit == u) {
        const auto& g = groups[next_group];
        pass.push_back(e.schedule.collective(fmt::format("{} group {} (micro {})", collective_name(reduce), next_group, m),
                                             reduce, g.elements * sh.reduce_bytes, n, {backward[u]}));
        stagers.push_back(backward[u]);
        ++next_group;
      }
    }
    if (communicate && !overlap)
      for (std::size_t k = 0; k < groups.size(); ++k)
        pass.push_back(e.schedule.collective(fmt::format("{} group {} (micro {})", collective_name(reduce), k, m), reduce,
                                             groups[k].elements * sh.reduce_bytes, n, {backward[0]}));
    reductions.insert(reductions.end(), pass.begin(), pass.end());
    // zero2: the next micro-batch's backward stages into buffers that the reductions in flight free.
    if (kind == Replicated::kZero2 && m + 1 < sh.micro && !pass.empty()) e.schedule.compute("wait for reductions", 0.0, pass);
  }
  const double psi = sh.total();
  const double psi_padded = ddp ? psi : std::accumulate(groups.begin(), groups.end(), 0.0,
                                                        [](double a, const Group& g) { return a + g.elements; });
  const double owned = ddp ? psi : psi_padded / n;
  const int opt = e.schedule.compute("optimizer", sh.optimizer_s(owned / psi), reductions);
  if (!per_unit)
    for (const auto& c : calls) e.schedule.collective(gather_name(c), Collective::kAllGather, c.bytes, n, {opt});
  // Memory: parameters whole on every rank; float32 masters of the owned chunk when narrower.
  const double pe = element_bytes(sh.p.param_dtype);
  e.memory.params = ddp ? psi * sh.param_bytes : psi_padded * pe + (pe < 4 ? owned * 4.0 : 0.0);
  e.memory.grads = kind == Replicated::kZero2 ? owned * 4.0 : psi_padded * 4.0;
  e.memory.optimizer = owned * sh.opt_bytes;
  e.memory.activations = sh.activations();
  if (kind == Replicated::kZero2) {
    // Autograd's gradients of the unit whose backward runs, until they are staged and reduced.
    double largest_group = 0;
    for (const auto& g : groups) largest_group = std::max(largest_group, g.elements);
    e.memory.buffers = std::min(sh.largest_unit(), in_flight * largest_group) * 4.0;
  }
  if (!ddp && sh.p.device == "cpu" && n > 1) {
    // Gloo reduce-scatters into a separate chunk by all-reducing a clone of the input
    // (dist/process_group.cpp): the reductions in flight at the end of backward each hold a copy
    // of their group, and zero2's its staged input besides (zero1's input is the gradients).
    std::vector<double> sizes;
    for (const auto& g : groups) sizes.push_back(g.elements);
    std::sort(sizes.rbegin(), sizes.rend());
    const std::size_t alive = std::min<std::size_t>(sizes.size(), static_cast<std::size_t>(in_flight));
    const double in_flight_elements =
        std::accumulate(sizes.begin(), sizes.begin() + static_cast<std::ptrdiff_t>(alive), 0.0);
    e.memory.after_backward = in_flight_elements * (sh.reduce_bytes + (kind == Replicated::kZero2 ? 4.0 : 0.0));
  }
  e.memory.transient_step = owned * 4.0;
  return finish(std::move(e), sh, *in.network, 1.0 / n);
}

// ---- kParameters plans (zero3, fsdp, hpz): units sharded, gathered when they run --------------------

/// Ranks of a job of `world` on one host: all of them, or a node's on a cluster.
int ranks_on_host(const Network& net, int world) {
  return std::max(1, net.gpus_per_node > 0 ? std::min(world, net.gpus_per_node) : world);
}

StrategyEstimate build_sharded(const std::string& name, const PlanOutline& plan, const EstimateInput& in) {
  using Reshard = PlanOutline::Reshard;
  auto e = start(name, in);
  const int n = in.world_size;
  const Shape sh(in, n);
  // The mesh (kit/src/mesh.cpp): shard groups of `shard_size` consecutive ranks (0: every rank),
  // replicated across the groups; a shard group of one rank is NO_SHARD's replica.
  int g = plan.shard_size <= 0 ? n : std::min(plan.shard_size, n);
  if (n % g != 0) {
    e.applicable = false;
    e.note = fmt::format("a shard group of {} ranks does not divide world size {}", g, n);
    g = n;
  }
  const bool replicated = g == 1 && n > 1;  // NO_SHARD: all-reduce per unit, nothing gathered
  const int replicas = n / g;
  std::vector<double> unit(sh.units());
  for (std::size_t u = 0; u < unit.size(); ++u) unit[u] = replicated ? sh.unit_params[u] : padded(sh.unit_params[u], g);
  // Every unit's plan as the engine makes it (Engine::take_over_sharded): the plan's, then its own,
  // the last unit kept gathered, a sub-group of one rank kept whole, 0 the ranks of one host.
  std::vector<PlanOutline::Unit> units(unit.size(), plan.units);
  for (std::size_t u = 0; u < units.size(); ++u)
    if (plan.unit) plan.unit(u, u < sh.p.units.size() ? sh.p.units[u].name : fmt::format("unit{}", u), units[u]);
  if (plan.keep_last_unit_gathered && !units.empty()) units.back().after_forward = Reshard::kNone;
  std::vector<int> sub(units.size(), g);  // ranks a unit's backward gathers from
  for (std::size_t u = 0; u < units.size(); ++u) {
    if (units[u].after_forward != Reshard::kSubgroup) continue;
    const int size = units[u].subgroup_size > 0 ? units[u].subgroup_size : std::min(ranks_on_host(*in.network, n), g);
    if (size < 1 || g % size != 0) {
      e.applicable = false;
      e.note = fmt::format("a sub-group of {} ranks does not divide the shard group of {}", size, g);
    }
    sub[u] = std::max(1, std::min(size, g));
    if (sub[u] == 1) units[u].after_forward = Reshard::kNone;
  }
  // A unit of more than group_bytes is gathered as several flat groups, one collective each.
  auto pieces = [&](std::size_t u) {
    if (plan.group_bytes <= 0) return 1.0;
    return std::max(1.0, std::ceil(sh.unit_params[u] * sh.gather_bytes / static_cast<double>(plan.group_bytes)));
  };
  auto gather = [&](const std::string& what, std::size_t u, int ranks, std::vector<int> wait) {
    std::vector<int> ids;
    const double k = pieces(u);
    for (int piece = 0; piece < static_cast<int>(k); ++piece)
      ids.push_back(e.schedule.collective(k > 1 ? fmt::format("{} [{}]", what, piece) : what, Collective::kAllGather,
                                          unit[u] / k * sh.gather_bytes, ranks, wait, "gather"));
    return ids;
  };
  std::vector<int> reductions;
  for (int m = 0; m < sh.micro; ++m) {
    std::vector<int> fwd;
    for (std::size_t u = 0; u < unit.size(); ++u) {
      std::vector<int> deps;
      if (!replicated) {  // every micro-batch: a unit is freed once its gradients are reduced
        std::vector<int> wait;
        const auto ahead = static_cast<std::size_t>(std::max(0, plan.forward_prefetch)) + 1;
        if (u >= ahead) wait.push_back(fwd[u - ahead]);
        deps = gather(fmt::format("all_gather {} (forward, micro {})", u, m), u, g, wait);
      }
      fwd.push_back(e.schedule.compute(fmt::format("forward {} (micro {})", u, m), sh.forward_s[u], deps));
    }
    std::vector<int> bwd;
    std::vector<int> pass;
    for (std::size_t k = unit.size(); k-- > 0;) {
      const std::size_t i = unit.size() - 1 - k;  // position in backward order
      std::vector<int> deps;
      // Freed after forward: gathered again, from the shard group or the sub-group holding its copy.
      if (!replicated && units[k].after_forward != Reshard::kNone) {
        std::vector<int> wait;
        const auto ahead = static_cast<std::size_t>(std::max(0, plan.backward_prefetch)) + 1;
        if (i >= ahead) wait.push_back(bwd[i - ahead]);
        const bool from_sub = units[k].after_forward == Reshard::kSubgroup;
        deps = gather(fmt::format("all_gather {} (backward{}, micro {})", k, from_sub ? " from the sub-group" : "", m), k,
                      from_sub ? sub[k] : g, wait);
      }
      const auto limit = static_cast<std::size_t>(std::max(1, plan.reductions_in_flight));
      if (pass.size() >= limit) deps.push_back(pass[pass.size() - limit]);
      bwd.push_back(e.schedule.compute(fmt::format("backward {} (micro {})", k, m), sh.backward_s[k], deps));
      if (n <= 1) continue;
      // Shards are averaged across replicas once a step, unit by unit in the last micro-batch's backward.
      const bool last_micro = m + 1 == sh.micro;
      if (replicated) {
        if (last_micro)
          pass.push_back(e.schedule.collective(fmt::format("all_reduce {} (micro {})", k, m), Collective::kAllReduce,
                                               unit[k] * sh.reduce_bytes, n, {bwd.back()}));
        continue;
      }
      int rs = e.schedule.collective(fmt::format("reduce_scatter {} (micro {})", k, m), Collective::kReduceScatter,
                                     unit[k] * sh.reduce_bytes, g, {bwd.back()});
      if (replicas > 1 && last_micro) {  // the shards averaged across the replicas, one rank of each per node
        rs = e.schedule.collective(fmt::format("all_reduce {} across replicas (micro {})", k, m), Collective::kAllReduce,
                                   unit[k] / g * sh.reduce_bytes, replicas, {rs});
        e.schedule.spread(rs, 1);
      }
      pass.push_back(rs);
    }
    reductions.insert(reductions.end(), pass.begin(), pass.end());
  }
  const double psi = std::accumulate(unit.begin(), unit.end(), 0.0);
  const double owned = replicated ? psi : psi / g;
  e.schedule.compute("optimizer", sh.optimizer_s(owned / std::max(1.0, sh.total())), reductions);
  const double pe = element_bytes(sh.p.param_dtype);
  e.memory.params = replicated ? psi * sh.param_bytes : owned * pe + (pe < 4 ? owned * 4.0 : 0.0);
  e.memory.grads = owned * 4.0;
  e.memory.optimizer = owned * sh.opt_bytes;
  e.memory.activations = sh.activations();
  if (!replicated) {
    // A shard of one rank is the whole unit: nothing is gathered, but its gradients are still staged.
    const double full = g > 1 ? sh.gather_bytes : 0.0;
    // Between its forward and its backward a unit keeps: all of it (kNone), its sub-group's copy
    // (kSubgroup: 1/s of it), or its shard only (kShardGroup: counted in the parameters).
    auto kept = [&](std::size_t j) {
      switch (units[j].after_forward) {
        case Reshard::kNone: return unit[j] * full;
        case Reshard::kSubgroup: return unit[j] / sub[j] * full;
        case Reshard::kShardGroup: break;
      }
      return 0.0;
    };
    // In backward, a unit holds its gathered parameters and its full gradients, the units before it
    // what they kept, and the next `prefetch` of them (in backward order) are gathered whole. A
    // sub-group's copy is freed with its unit's gathered parameters, once its gradients are reduced.
    double worst = 0;
    for (std::size_t k = unit.size(); k-- > 0;) {
      double held = unit[k] * (full + 4.0);
      for (std::size_t j = 0; j <= k; ++j)
        if (j < k || units[j].after_forward == Reshard::kSubgroup) held += kept(j);
      for (int a = 1; a <= plan.backward_prefetch && static_cast<int>(k) - a >= 0; ++a) {
        const auto j = k - static_cast<std::size_t>(a);
        if (units[j].after_forward != Reshard::kNone) held += unit[j] * full;
      }
      worst = std::max(worst, held);
    }
    e.memory.gathered = worst;
  }
  e.memory.transient_step = owned * 4.0;
  return finish(std::move(e), sh, *in.network, 1.0 / n);
}

// ---- a strategy known by its Footprint only ----------------------------------------------------------

StrategyEstimate build_declared(const std::string& name, const EstimateInput& in, const DeclaredFootprint& f) {
  auto e = start(name, in);
  e.coarse = true;
  const int n = in.world_size;
  const Shape sh(in, n);
  const double psi = sh.total();
  int last = -1;
  for (int m = 0; m < sh.micro; ++m) {
    forward_pass(e.schedule, sh, m);
    for (std::size_t u = sh.units(); u-- > 0;) last = e.schedule.compute(fmt::format("backward {} (micro {})", u, m), sh.backward_s[u]);
  }
  std::vector<int> deps;
  if (f.traffic_known && n > 1) {
    const double units = f.per_step + f.per_micro_batch * sh.micro;
    // The declared volume, in units of (N-1)/N x 4 Psi, as one collective after backward (no overlap).
    if (units > 0)
      deps.push_back(e.schedule.collective("declared traffic", Collective::kAllGather, units * psi * 4.0, n, {last}));
  }
  const double share = f.optimizer ? 1.0 / n : 1.0;
  e.schedule.compute("optimizer", sh.optimizer_s(share), deps);
  e.memory.params = psi * sh.param_bytes / (f.params ? n : 1);
  e.memory.grads = psi * 4.0 / (f.grads ? n : 1);
  e.memory.optimizer = psi * sh.opt_bytes * share;
  e.memory.activations = sh.activations();
  e.memory.transient_step = psi * 4.0 * share;
  if (!f.known) e.note = "no Footprint declared: memory as a full replica";
  if (!f.traffic_known) e.note += std::string(e.note.empty() ? "" : "; ") + "no traffic declared: communication not counted";
  if (e.note.empty()) e.note = "from the strategy's Footprint (memory sharding, traffic volume): coarse";
  return finish(std::move(e), sh, *in.network, 1.0 / n);
}

}  // namespace

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

std::vector<std::string> built_in_strategies() { return {"single", "dp", "ddp", "zero1", "zero2", "zero3", "fsdp"}; }

Topology topology_on(const Network& network, int world) { return {world, ranks_on_host(network, world)}; }

StrategyModel strategy_model(const Registry& registry, const std::string& name, const Options& options,
                             const Topology& topology) {
  StrategyModel m;
  const RegistryEntry* entry = registry.find(PluginKind::kStrategy, name);
  if (entry == nullptr) return m;
  const auto& traits = entry->traits;
  m.one_device = traits.placement.kind == Placement::Kind::kOneDevice;
  m.devices_in_process = traits.placement.kind == Placement::Kind::kDevicesInProcess;
  const Footprint& f = traits.footprint;
  if (f.memory) {
    m.footprint.known = true;
    m.footprint.params = f.memory->params;
    m.footprint.grads = f.memory->grads;
    m.footprint.optimizer = f.memory->optimizer;
  }
  if (f.traffic) {
    m.footprint.traffic_known = true;
    m.footprint.per_step = f.traffic->per_step;
    m.footprint.per_micro_batch = f.traffic->per_micro_batch;
  }
  if (entry->planner) m.plan = entry->planner(options, topology);
  return m;
}

StrategyEstimate estimate_strategy(const std::string& strategy, const EstimateInput& in, const StrategyModel& model) {
  // One process driving its replicas (dp): gradients copied to device 0, not a collective.
  if (model.devices_in_process) return build_dp(strategy, in);
  if (!model.plan) return build_declared(strategy, in, model.footprint);
  const PlanOutline& plan = *model.plan;
  switch (plan.sharded) {
    case PlanOutline::Sharded::kNothing:
      return plan.reduce ? build_replicated(strategy, Replicated::kDdp, plan, in) : build_local(strategy, model.one_device, in);
    case PlanOutline::Sharded::kOptimizer: return build_replicated(strategy, Replicated::kZero1, plan, in);
    case PlanOutline::Sharded::kGradients: return build_replicated(strategy, Replicated::kZero2, plan, in);
    case PlanOutline::Sharded::kParameters: break;
  }
  return build_sharded(strategy, plan, in);
}

}  // namespace strata::estimate
