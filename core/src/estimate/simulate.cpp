#include "estimate/simulate.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "strata/errors.hpp"

namespace strata::estimate {

namespace {
void check_deps(const std::vector<int>& deps, int next) {
  for (int d : deps)
    if (d < 0 || d >= next)
      throw Error(fmt::format("schedule: op {} depends on op {}, which was not added before it.", next, d));
}
}  // namespace

int Schedule::add(Op op) {
  op.id = static_cast<int>(ops_.size());
  check_deps(op.deps, op.id);
  ops_.push_back(std::move(op));
  return ops_.back().id;
}

int Schedule::compute(std::string name, double seconds, std::vector<int> deps, std::string stream) {
  Op op;
  op.name = std::move(name);
  op.stream = std::move(stream);
  op.kind = OpKind::kCompute;
  op.seconds = std::max(0.0, seconds);
  op.deps = std::move(deps);
  return add(std::move(op));
}

int Schedule::collective(std::string name, Collective c, double bytes, int group, std::vector<int> deps,
                         std::string stream) {
  Op op;
  op.name = std::move(name);
  op.stream = std::move(stream);
  op.kind = OpKind::kCollective;
  op.collective = c;
  op.bytes = bytes;
  op.group = group;
  op.deps = std::move(deps);
  return add(std::move(op));
}

void Schedule::depend(int id, int dep) {
  if (id < 0 || id >= static_cast<int>(ops_.size())) throw Error(fmt::format("schedule: no op {}.", id));
  check_deps({dep}, id);
  ops_[static_cast<std::size_t>(id)].deps.push_back(dep);
}

void Schedule::spread(int id, int per_node) {
  if (id < 0 || id >= static_cast<int>(ops_.size())) throw Error(fmt::format("schedule: no op {}.", id));
  ops_[static_cast<std::size_t>(id)].per_node = per_node;
}

void Schedule::window(const std::vector<int>& takers, const std::vector<int>& frees, int k) {
  if (k < 1) k = 1;
  for (std::size_t i = static_cast<std::size_t>(k); i < takers.size(); ++i)
    if (i - static_cast<std::size_t>(k) < frees.size()) depend(takers[i], frees[i - static_cast<std::size_t>(k)]);
}

Simulation simulate(const Schedule& schedule, const Network& network, const std::string& compute_stream) {
  Simulation sim;
  const auto& ops = schedule.ops();
  sim.timings.resize(ops.size());
  std::map<std::string, double> free_at;
  for (const Op& op : ops) {
    double start = free_at[op.stream];
    for (int d : op.deps) start = std::max(start, sim.timings[static_cast<std::size_t>(d)].end);
    double duration = op.seconds;
    if (op.kind == OpKind::kCollective) {
      duration = network.seconds(op.collective, op.bytes, op.group, op.per_node);
      if (op.group > 1 && op.bytes > 0) {
        sim.bus_bytes += op.bytes * bus_factor(op.collective, op.group);
        sim.payload_bytes += op.bytes;
        ++sim.collectives;
      }
    }
    sim.timings[static_cast<std::size_t>(op.id)] = {start, start + duration};
    free_at[op.stream] = start + duration;
    sim.busy_s[op.stream] += duration;
    sim.step_s = std::max(sim.step_s, start + duration);
  }
  sim.exposed_comm_s = std::max(0.0, sim.step_s - sim.busy_s[compute_stream]);
  return sim;
}

}  // namespace strata::estimate
