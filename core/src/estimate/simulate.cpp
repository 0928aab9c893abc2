#include "estimate/simulate.hpp"

#include <algorithm>

namespace strata::estimate {

Simulation simulate(const Schedule& schedule, const Network& network, const std::string& compute_stream) {
  Simulation sim;
  const auto& ops = schedule.ops();
  sim.timings.resize(ops.size());
  std::map<std::string, double> free_at;
  for (const ScheduleOp& op : ops) {
    double start = free_at[op.stream];
    for (int d : op.deps) start = std::max(start, sim.timings[static_cast<std::size_t>(d)].end);
    double duration = op.seconds;
    if (op.kind == ScheduleOp::Kind::kCollective) {
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
