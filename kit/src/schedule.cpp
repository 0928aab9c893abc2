// A Plan's step as a strata::Schedule (strata/schedule.hpp): the collectives the engine issues for
// it, in its order, over its groups, with their bytes, and what a rank holds. `strata check` holds
// runs to it and `strata estimate` simulates it; the engine (engine.cpp, engine_units.cpp) runs the
// same Plan. A change of how the engine runs a plan changes this file in the same commit.
#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "strata/plan.hpp"

namespace strata::inline kit_v3 {

namespace {

double padded(double elements, int n) { return n <= 1 ? elements : std::ceil(elements / n) * n; }

/// The step's shape on this rank.
struct Shape {
  const ScheduleInput& in;
  int n;
  int micro;
  std::vector<double> unit_params;
  explicit Shape(const ScheduleInput& input)
      : in(input), n(std::max(1, input.topology.world_size)), micro(std::max(1, input.micro_batches)) {
    for (const auto& u : in.units) unit_params.push_back(u.params);
    if (unit_params.empty()) unit_params.push_back(0);
  }
  std::size_t units() const { return unit_params.size(); }
  double total() const { return std::accumulate(unit_params.begin(), unit_params.end(), 0.0); }
  double forward_s(std::size_t u) const { return u < in.units.size() ? in.units[u].forward_s : 0.0; }
  double backward_s(std::size_t u) const { return u < in.units.size() ? in.units[u].backward_s : 0.0; }
  std::string name(std::size_t u) const { return u < in.units.size() ? in.units[u].name : fmt::format("unit{}", u); }
  /// Parameter bytes held per element: narrower parameters keep float32 masters.
  double param_bytes() const { return in.param_bytes < 4 ? in.param_bytes + 4.0 : 4.0; }
  double largest_unit() const { return *std::max_element(unit_params.begin(), unit_params.end()); }
  /// The optimizer step over `share` of the parameters, on this rank.
  double optimizer_s(double share) const { return in.optimizer_s * share; }
  const char* gather_dtype() const { return in.param_bytes < 4 ? "bfloat16" : "float32"; }
  const char* reduce_dtype() const { return in.reduce_bytes < 4 ? "bfloat16" : "float32"; }
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
  const double cap = std::max(1.0, cap_bytes / s.in.param_bytes);
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

/// A sub-group of `ranks` members of a shard group of `g` (0: the ranks of one host), as
/// Mesh::resolve_subgroup makes it: one that does not divide the shard group makes the schedule not
/// applicable, naming the plan's sub-group option. Returns its size, within 1..g.
int subgroup_of(Schedule& s, const Plan& plan, const Shape& sh, int ranks, int g) {
  const int size = ranks > 0 ? ranks : std::min(std::max(1, sh.in.topology.local_world_size), g);
  if (size < 1 || g % size != 0) {
    s.applicable = false;
    s.option = plan.subgroup_option;
    s.note = fmt::format("a sub-group of {} ranks does not divide the shard group of {}", size, g);
  }
  return std::max(1, std::min(size, g));
}

/// How sharded gradients travel over a shard group of `g` ranks (Engine::make_reducer): a
/// reduce-scatter, or the plan's reduce codec exchanged in one level or, over sub-groups of k ranks
/// (1 < k < g, k dividing g), in two.
struct Exchange {
  std::unique_ptr<ReduceCodec> codec;
  int g = 1;
  int subgroup = 1;  ///< the first level's ranks (1: one exchange over the shard group)
  int per_node = 1;  ///< of the second level's ranks, those on one host

  Exchange(Schedule& s, const Plan& plan, const Shape& sh, int shard_ranks) : g(shard_ranks) {
    if (!plan.reduce_codec || g <= 1) return;  // the engine resolves the sub-group only where it exchanges
    codec = plan.reduce_codec();
    const int k = subgroup_of(s, plan, sh, plan.reduce_subgroup, g);
    if (k > 1 && k < g && g % k == 0) subgroup = k;
    per_node = std::max(1, std::max(1, sh.in.topology.local_world_size) / subgroup);
  }

  /// The reduction of `elements` gradient elements (padded to the group) after op `after`
  /// (GradReducer::launch_coded with a codec). Returns the op whose end completes it.
  int reduce(Schedule& s, const Shape& sh, const std::string& what, double elements, int after) const {
    if (!codec)
      return s.collective("reduce_scatter " + what, Collective::kReduceScatter, elements * sh.in.reduce_bytes, g,
                          {after}, "comm", sh.reduce_dtype());
    const double row = codec->wire_bytes(elements / g);  // one destination's encoded columns
    if (subgroup == 1)
      return s.collective("all_to_all " + what, Collective::kAllToAll, g * row, g, {after}, "comm", codec->wire_dtype());
    const int inner = s.collective(fmt::format("all_to_all {} (inside sub-groups of {})", what, subgroup),
                                   Collective::kAllToAll, g * row, subgroup, {after}, "comm", codec->wire_dtype());
    const int outer = s.collective(fmt::format("all_to_all {} (across sub-groups)", what), Collective::kAllToAll,
                                   (g / subgroup) * row, g / subgroup, {inner}, "comm", codec->wire_dtype());
    s.spread(outer, per_node);  // one member of each sub-group: one per host when they are hosts
    return outer;
  }
};

/// The reductions of sharded gradients as the engine issues them (GradReducer::flush): a ready
/// group is staged and waits for the next ones while they stay under `cap` bytes together, then
/// they are reduced in one call (one reduce-scatter, or one exchange of a reduce codec's rows); the
/// rest at the end of backward. `reduce(ids, elements, after)` declares one call of the groups `ids`
/// (their elements summed) after op `after`.
class Coalescer {
 public:
  using Reduce = std::function<void(const std::vector<std::size_t>&, double, int)>;
  Coalescer(double cap_bytes, double element_bytes, Reduce reduce)
      : cap_(cap_bytes), element_bytes_(element_bytes), reduce_(std::move(reduce)) {}
  /// Group `id` of `elements` is ready after op `after`.
  void ready(std::size_t id, double elements, int after) {
    ready_.emplace_back(id, elements);
    flush(false, after);
  }
  /// The end of backward (op `after`): everything staged is reduced.
  void finish(int after) { flush(true, after); }

 private:
  void flush(bool all, int after) {
    while (!ready_.empty()) {
      std::size_t take = 0;
      double bytes = 0;
      while (take < ready_.size()) {
        const double b = ready_[take].second * element_bytes_;
        if (take > 0 && bytes + b > cap_) break;
        bytes += b;
        ++take;
      }
      if (!all && take == ready_.size() && bytes < cap_) return;  // waits for more
      std::vector<std::size_t> ids;
      double elements = 0;
      for (std::size_t i = 0; i < take; ++i) ids.push_back(ready_[i].first), elements += ready_[i].second;
      ready_.erase(ready_.begin(), ready_.begin() + static_cast<std::ptrdiff_t>(take));
      reduce_(ids, elements, after);
    }
  }
  double cap_, element_bytes_;
  Reduce reduce_;
  std::vector<std::pair<std::size_t, double>> ready_;
};

std::string ids_text(const std::vector<std::size_t>& ids) { return fmt::format("{}", fmt::join(ids, ",")); }

/// Offload::kOptimizer: the optimizer state moves to the host, beside a float32 copy of the
/// `owned` master elements and of their gradients (strata/offload.hpp).
void offload_optimizer(Schedule& s, const Shape& sh, double owned) {
  auto& m = s.memory;
  m.extra.emplace_back("host_masters", owned * 8.0);
  m.extra.emplace_back("host_optimizer", m.optimizer);
  m.optimizer = 0;
  // On a GPU the step also copies the gradients to the host and the masters back, and steps on the
  // host's cores: neither has a figure in the input (no host link, no host optimizer profile).
  if (!sh.in.cpu && s.note.empty())
    s.note = "optimizer offload: the copies to and from the host and the host's step are not timed";
}

/// Forward of every unit on the compute stream; returns their ids.
std::vector<int> forward_pass(Schedule& s, const Shape& sh, int m) {
  std::vector<int> ids;
  for (std::size_t u = 0; u < sh.units(); ++u)
    ids.push_back(s.compute(fmt::format("forward {} (micro {})", u, m), sh.forward_s(u)));
  return ids;
}

// ---- kNothing without reduction: replicas whose gradients stay local -------------------------------

Schedule local_schedule(const Shape& sh) {
  Schedule s;
  for (int m = 0; m < sh.micro; ++m) {
    forward_pass(s, sh, m);
    for (std::size_t k = sh.units(); k-- > 0;) s.compute(fmt::format("backward {} (micro {})", k, m), sh.backward_s(k));
  }
  s.compute("optimizer", sh.optimizer_s(1.0));
  const double psi = sh.total();
  s.memory.params = psi * sh.param_bytes();
  s.memory.grads = psi * 4.0;
  s.memory.optimizer = psi * sh.in.optimizer_bytes;
  s.memory.transient_step = psi * 4.0;
  return s;
}

// ---- kNothing (ddp), kOptimizer (zero1), kGradients (zero2): replicas with flat gradient groups ----

Schedule replicated_schedule(const Plan& plan, const Shape& sh) {
  Schedule s;
  const int n = sh.n;
  const bool ddp = plan.sharded == Sharded::kNothing;
  const bool zero2 = plan.sharded == Sharded::kGradients;
  const double cap = plan.group_bytes > 0 ? static_cast<double>(plan.group_bytes) : 25.0 * 1024 * 1024;
  auto groups = reverse_groups(sh, cap);
  // 0: every group's reduction may be in flight at once (their buffers are the gradients anyway).
  const int in_flight = plan.reductions_in_flight > 0 ? plan.reductions_in_flight : static_cast<int>(groups.size());
  if (!ddp)
    for (auto& g : groups) g.elements = padded(g.elements, n);
  const Collective reduce = ddp ? Collective::kAllReduce : Collective::kReduceScatter;
  const Exchange exchange(s, plan, sh, zero2 ? n : 1);
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
      const double bytes = groups[g].elements * sh.in.param_bytes;
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
      const int id = s.collective(gather_name(c) + " (the previous step's)", Collective::kAllGather, c.bytes, n, {},
                                  "comm", sh.gather_dtype());
      for (auto g : c.groups)
        for (std::size_t u = groups[g].ready_unit; u <= groups[g].last_unit; ++u) waits[u].push_back(id);
    }
  std::vector<int> reductions;
  for (int m = 0; m < sh.micro; ++m) {
    if (m == 0 && per_unit)
      for (std::size_t u = 0; u < sh.units(); ++u)
        s.compute(fmt::format("forward {} (micro {})", u, m), sh.forward_s(u), waits[u]);
    else
      forward_pass(s, sh, m);
    // ddp and zero1 communicate after the last micro-batch only (no_sync); zero2 after every one.
    const bool communicate = n > 1 && (zero2 || m == sh.micro - 1);
    std::vector<int> backward(sh.units(), -1);
    std::vector<int> pass;  // this micro-batch's reductions, in issue order
    std::size_t next_group = 0;
    // zero2's sharded gradients are staged and coalesced (GradReducer::flush); ddp's and zero1's
    // full buffers are reduced group by group.
    Coalescer shards(static_cast<double>(plan.reduce_coalesce_bytes), sh.in.reduce_bytes,
                     [&](const std::vector<std::size_t>& ids, double elements, int after) {
                       const auto what = fmt::format("group{} {} (micro {})", ids.size() > 1 ? "s" : "", ids_text(ids), m);
                       pass.push_back(exchange.reduce(s, sh, what, elements, after));
                     });
    const auto reduce_group = [&](std::size_t k, int after) {
      if (zero2)
        shards.ready(k, groups[k].elements, after);
      else
        pass.push_back(s.collective(fmt::format("{} group {} (micro {})", collective_name(reduce), k, m), reduce,
                                    groups[k].elements * sh.in.reduce_bytes, n, {after}, "comm", sh.reduce_dtype()));
    };
    for (std::size_t u = sh.units(); u-- > 0;) {
      backward[u] = s.compute(fmt::format("backward {} (micro {})", u, m), sh.backward_s(u));
      if (!communicate || !plan.overlap) continue;
      while (next_group < groups.size() && groups[next_group].ready_unit == u) reduce_group(next_group++, backward[u]);
    }
    if (communicate && !plan.overlap)
      for (std::size_t k = 0; k < groups.size(); ++k) reduce_group(k, backward[0]);
    if (communicate) shards.finish(backward[0]);
    reductions.insert(reductions.end(), pass.begin(), pass.end());
    // zero2: the next micro-batch's backward stages into buffers that the reductions in flight free.
    if (zero2 && m + 1 < sh.micro && !pass.empty()) s.compute("wait for reductions", 0.0, pass);
  }
  const double psi = sh.total();
  const double psi_padded = ddp ? psi : std::accumulate(groups.begin(), groups.end(), 0.0,
                                                        [](double a, const Group& g) { return a + g.elements; });
  const double owned = ddp ? psi : psi_padded / n;
  const int opt = s.compute("optimizer", sh.optimizer_s(psi > 0 ? owned / psi : 1.0), reductions);
  if (!per_unit && n > 1)
    for (const auto& c : calls) s.collective(gather_name(c), Collective::kAllGather, c.bytes, n, {opt}, "comm", sh.gather_dtype());
  // Memory: parameters whole on every rank; float32 masters of the owned chunk when narrower.
  const double pe = sh.in.param_bytes;
  s.memory.params = ddp ? psi * sh.param_bytes() : psi_padded * pe + (pe < 4 ? owned * 4.0 : 0.0);
  s.memory.grads = zero2 ? owned * 4.0 : psi_padded * 4.0;
  s.memory.optimizer = owned * sh.in.optimizer_bytes;
  if (plan.offload == Offload::kOptimizer) offload_optimizer(s, sh, owned);
  if (zero2) {
    // Autograd's gradients of the unit whose backward runs, until they are staged and reduced.
    double largest_group = 0;
    for (const auto& g : groups) largest_group = std::max(largest_group, g.elements);
    s.memory.buffers = std::min(sh.largest_unit(), in_flight * largest_group) * 4.0;
  }
  if (!ddp && sh.in.cpu && n > 1) {
    // Gloo reduce-scatters into a separate chunk by all-reducing a clone of the input: the
    // reductions in flight at the end of backward each hold a copy of their group, and zero2's its
    // staged input besides (zero1's input is the gradients).
    std::vector<double> sizes;
    for (const auto& g : groups) sizes.push_back(g.elements);
    std::sort(sizes.rbegin(), sizes.rend());
    const std::size_t alive = std::min<std::size_t>(sizes.size(), static_cast<std::size_t>(in_flight));
    const double in_flight_elements =
        std::accumulate(sizes.begin(), sizes.begin() + static_cast<std::ptrdiff_t>(alive), 0.0);
    s.memory.after_backward = in_flight_elements * (sh.in.reduce_bytes + (zero2 ? 4.0 : 0.0));
  }
  s.memory.transient_step = owned * 4.0;
  return s;
}

// ---- kParameters (zero3, fsdp, hpz): units sharded, gathered when they run -------------------------

Schedule sharded_schedule(const Plan& plan, const Shape& sh) {
  Schedule s;
  const int n = sh.n;
  // The mesh (mesh.cpp): shard groups of `shard_size` consecutive ranks (0: every rank),
  // replicated across the groups; a shard group of one rank is NO_SHARD's replica.
  int g = plan.shard_size <= 0 ? n : plan.shard_size;
  if (g > n || n % g != 0) {  // as Mesh::over refuses it
    s.applicable = false;
    s.option = plan.shard_option;
    s.note = fmt::format("a shard group of {} ranks does not divide world size {}", g, n);
    g = n;
  }
  const bool replicated = g == 1 && n > 1;  // NO_SHARD: all-reduce per unit, nothing gathered
  const int replicas = n / g;
  std::vector<double> unit(sh.units());
  for (std::size_t u = 0; u < unit.size(); ++u) unit[u] = replicated ? sh.unit_params[u] : padded(sh.unit_params[u], g);
  // Every unit's plan as the engine makes it (Engine::take_over_sharded): the plan's, then its own,
  // the last unit kept gathered, a sub-group of one rank kept whole, 0 the ranks of one host.
  std::vector<UnitPlan> units(unit.size(), plan.units);
  for (std::size_t u = 0; u < units.size(); ++u)
    if (plan.unit) plan.unit(u, sh.name(u), units[u]);
  // A unit whose parameters a later one reads (tied) stays gathered until that one has run
  // (Engine::take_over_sharded): its backward gathers nothing.
  for (const auto& [reader, holder] : sh.in.tied)
    if (holder < units.size() && reader > holder) units[holder].after_forward = Reshard::kNone;
  if (plan.keep_last_unit_gathered && !units.empty()) units.back().after_forward = Reshard::kNone;
  std::vector<int> sub(units.size(), g);  // ranks a unit's backward gathers from
  for (std::size_t u = 0; u < units.size(); ++u) {
    if (units[u].after_forward != Reshard::kSubgroup) continue;
    sub[u] = subgroup_of(s, plan, sh, units[u].after_forward.ranks, g);
    if (sub[u] == 1) units[u].after_forward = Reshard::kNone;
  }
  // A unit of more than group_bytes is gathered as several flat groups, one collective each.
  auto pieces = [&](std::size_t u) {
    if (plan.group_bytes <= 0) return 1.0;
    return std::max(1.0, std::ceil(sh.unit_params[u] * sh.in.param_bytes / static_cast<double>(plan.group_bytes)));
  };
  // A gather codec's bytes travel, over the shard group and from a sub-group copy alike
  // (engine_units.cpp, Engine::gather).
  const std::unique_ptr<GatherCodec> codec = plan.gather_codec ? plan.gather_codec() : nullptr;
  auto gather = [&](const std::string& what, std::size_t u, int ranks, std::vector<int> wait) {
    std::vector<int> ids;
    const double k = pieces(u);
    const double elements = unit[u] / k;
    const double bytes = codec ? ranks * codec->wire_bytes(elements / ranks, sh.in.param_bytes) : elements * sh.in.param_bytes;
    for (int piece = 0; piece < static_cast<int>(k); ++piece)
      ids.push_back(s.collective(k > 1 ? fmt::format("{} [{}]", what, piece) : what, Collective::kAllGather, bytes,
                                 ranks, wait, "gather", codec ? codec->wire_dtype() : sh.gather_dtype()));
    return ids;
  };
  const Exchange exchange(s, plan, sh, replicated ? 1 : g);
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
      fwd.push_back(s.compute(fmt::format("forward {} (micro {})", u, m), sh.forward_s(u), deps));
    }
    std::vector<int> bwd;
    std::vector<int> pass;
    const bool last_micro = m + 1 == sh.micro;
    // Ready units are staged and reduced together up to reduce_coalesce_bytes (GradReducer::flush);
    // in the last micro-batch each shard is then averaged across the replicas, one rank of each per node.
    Coalescer shards(static_cast<double>(plan.reduce_coalesce_bytes), sh.in.reduce_bytes,
                     [&](const std::vector<std::size_t>& ids, double elements, int after) {
                       const int rs = exchange.reduce(s, sh, fmt::format("{} (micro {})", ids_text(ids), m), elements, after);
                       if (replicas <= 1 || !last_micro) return pass.push_back(rs);
                       for (const auto k : ids) {
                         const int ar = s.collective(fmt::format("all_reduce {} across replicas (micro {})", k, m),
                                                     Collective::kAllReduce, unit[k] / g * sh.in.reduce_bytes, replicas,
                                                     {rs}, "comm", sh.reduce_dtype());
                         s.spread(ar, 1);
                         pass.push_back(ar);
                       }
                     });
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
      bwd.push_back(s.compute(fmt::format("backward {} (micro {})", k, m), sh.backward_s(k), deps));
      if (n <= 1) continue;
      if (replicated) {  // NO_SHARD: each unit's gradients all-reduced once a step, in the last micro-batch
        if (last_micro)
          pass.push_back(s.collective(fmt::format("all_reduce {} (micro {})", k, m), Collective::kAllReduce,
                                      unit[k] * sh.in.reduce_bytes, n, {bwd.back()}, "comm", sh.reduce_dtype()));
        continue;
      }
      shards.ready(k, unit[k], bwd.back());
    }
    if (n > 1 && !replicated && !bwd.empty()) shards.finish(bwd.back());
    reductions.insert(reductions.end(), pass.begin(), pass.end());
  }
  const double psi = std::accumulate(unit.begin(), unit.end(), 0.0);
  const double owned = replicated ? psi : psi / g;
  s.compute("optimizer", sh.optimizer_s(owned / std::max(1.0, sh.total())), reductions);
  const double pe = sh.in.param_bytes;
  s.memory.params = replicated ? psi * sh.param_bytes() : owned * pe + (pe < 4 ? owned * 4.0 : 0.0);
  s.memory.grads = owned * 4.0;
  s.memory.optimizer = owned * sh.in.optimizer_bytes;
  if (plan.offload == Offload::kOptimizer) offload_optimizer(s, sh, owned);
  if (!replicated) {
    // A shard of one rank is the whole unit: nothing is gathered, but its gradients are still staged.
    const double full = g > 1 ? pe : 0.0;
    // Between its forward and its backward a unit keeps: all of it (kNone), its sub-group's copy
    // (kSubgroup: 1/s of it), or its shard only (kShardGroup: counted in the parameters).
    auto kept = [&](std::size_t j) {
      switch (units[j].after_forward.kind) {
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
    s.memory.gathered = worst;
  }
  s.memory.transient_step = owned * 4.0;
  return s;
}

}  // namespace

Schedule schedule(const Plan& plan, const ScheduleInput& input) {
  const Shape sh(input);
  switch (plan.sharded) {
    case Sharded::kNothing: return plan.reduce ? replicated_schedule(plan, sh) : local_schedule(sh);
    case Sharded::kOptimizer:
    case Sharded::kGradients: return replicated_schedule(plan, sh);
    case Sharded::kParameters: break;
  }
  return sharded_schedule(plan, sh);
}

Schedule local_update_schedule(const ScheduleInput& input, std::int64_t every, const std::string& what) {
  Plan local;
  local.reduce = false;
  Schedule s = schedule(local, input);
  const int n = input.topology.world_size;
  const int optimizer = static_cast<int>(s.ops().size()) - 1;  // the local schedule ends with the optimizer step
  const double bytes = input.parameters() * 4.0;
  if (input.step == ScheduleInput::kSteady)
    s.collective("all_reduce " + what + " (1/" + std::to_string(every) + " of it per step)", Collective::kAllReduce,
                 bytes / static_cast<double>(every), n, {optimizer});
  else if ((input.step + 1) % every == 0 || input.step + 1 == input.steps)
    s.collective("all_reduce " + what, Collective::kAllReduce, bytes, n, {optimizer});
  return s;
}

}  // namespace strata::inline kit_v3
