#pragma once
// The simulation of one training step (a strata::Schedule, strata/schedule.hpp): an op starts at
// the later of its stream becoming free and its dependencies ending. Collectives take their time
// from a Network (network.hpp); compute ops carry their own.

#include <map>
#include <string>
#include <vector>

#include "estimate/network.hpp"
#include "strata/schedule.hpp"

namespace strata::estimate {

/// The schedule's vocabulary is the contract's (strata/schedule.hpp): strategies declare it.
using strata::Schedule;
using strata::ScheduleOp;

struct OpTiming {
  double start = 0;
  double end = 0;
};

struct Simulation {
  double step_s = 0;                      ///< when the last op ends
  double exposed_comm_s = 0;              ///< time the compute stream waits (idle before step_s)
  std::map<std::string, double> busy_s;   ///< per stream: the sum of its ops' durations
  double bus_bytes = 0;                   ///< sum over collectives of S x bus factor
  double payload_bytes = 0;               ///< sum over collectives of S
  int collectives = 0;
  std::vector<OpTiming> timings;          ///< per op, by id
};

/// Simulates `schedule` with collective times from `network`. The compute stream is named
/// `compute_stream`; its idle time before the step ends is the exposed communication (a step
/// with no compute op exposes all of it).
Simulation simulate(const Schedule& schedule, const Network& network, const std::string& compute_stream = "compute");

}  // namespace strata::estimate
