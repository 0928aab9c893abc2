#include "test_support.hpp"
// The estimator's schedule simulator and network model on schedules whose answer is known by
// hand: no overlap, full overlap, an all-gather chain bound by bandwidth, collectives across nodes.

#include <string>

#include "estimate/network.hpp"
#include "strata/errors.hpp"
#include "estimate/simulate.hpp"

namespace es = strata::estimate;

namespace {
/// One node of `n` ranks at `gbps` GB/s bus bandwidth, no latency: a collective of S bytes takes
/// S x factor / bandwidth.
es::Network flat(double gbps) {
  es::Network net;
  net.gpus_per_node = 0;
  net.intra = {gbps, 0.0};
  return net;
}
constexpr double kMs = 1e-3;
}  // namespace

TEST_CASE("estimate: communication after the compute it waits for adds up") {
  const auto net = flat(1.0);  // 1 GB/s: 1e6 bytes x 2(2-1)/2 = 1 ms for an all_reduce over 2
  es::Schedule s;
  const int backward = s.compute("backward", 10 * kMs);
  const int reduce = s.collective("all_reduce", es::Collective::kAllReduce, 1e6, 2, {backward});
  s.compute("optimizer", 2 * kMs, {reduce});
  const auto sim = es::simulate(s, net);
  CHECK(sim.step_s == doctest::Approx(13 * kMs));
  CHECK(sim.exposed_comm_s == doctest::Approx(1 * kMs));
  CHECK(sim.busy_s.at("compute") == doctest::Approx(12 * kMs));
  CHECK(sim.busy_s.at("comm") == doctest::Approx(1 * kMs));
  CHECK(sim.bus_bytes == doctest::Approx(1e6));
  CHECK(sim.collectives == 1);
}

TEST_CASE("estimate: communication shorter than the compute beside it is hidden") {
  const auto net = flat(1.0);
  es::Schedule s;
  // Two buckets: the first reduces (1 ms) while the second half of backward runs (5 ms).
  const int b1 = s.compute("backward 1", 5 * kMs);
  const int r1 = s.collective("all_reduce 1", es::Collective::kAllReduce, 1e6, 2, {b1});
  const int b2 = s.compute("backward 2", 5 * kMs);
  const int r2 = s.collective("all_reduce 2", es::Collective::kAllReduce, 0.5e6, 2, {b2});
  s.compute("optimizer", 1 * kMs, {r1, r2});
  const auto sim = es::simulate(s, net);
  // The last bucket's 0.5 ms cannot hide: it follows the last backward.
  CHECK(sim.step_s == doctest::Approx(11.5 * kMs));
  CHECK(sim.exposed_comm_s == doctest::Approx(0.5 * kMs));
  CHECK(sim.timings[static_cast<std::size_t>(r1)].start == doctest::Approx(5 * kMs));
  CHECK(sim.timings[static_cast<std::size_t>(r1)].end == doctest::Approx(6 * kMs));

  es::Schedule all;  // every byte of communication overlaps compute: the step is the compute
  const int f = all.compute("forward", 4 * kMs);
  all.collective("all_gather", es::Collective::kAllGather, 2e6, 2, {}, "gather");  // 1 ms beside the forward
  all.compute("backward", 4 * kMs, {f});
  const auto hidden = es::simulate(all, net);
  CHECK(hidden.step_s == doctest::Approx(8 * kMs));
  CHECK(hidden.exposed_comm_s == doctest::Approx(0.0));
}

namespace {
/// Units with compute times `compute`, each needing its all_gather (2 ms) first, `prefetch` units
/// gathered ahead of the one computing (prefetch + 1 buffers).
es::Simulation gather_chain(const std::vector<double>& compute, int prefetch) {
  const auto net = flat(1.0);
  // 4e6 bytes x (2-1)/2 = 2e6 bus bytes: 2 ms each at 1 GB/s. A gather takes a buffer that the
  // compute prefetch + 1 units earlier frees.
  es::Schedule t;
  std::vector<int> gathers;
  std::vector<int> computes;
  for (std::size_t u = 0; u < compute.size(); ++u) {
    std::vector<int> deps;
    if (u >= static_cast<std::size_t>(prefetch + 1)) deps.push_back(computes[u - static_cast<std::size_t>(prefetch) - 1]);
    gathers.push_back(t.collective("all_gather " + std::to_string(u), es::Collective::kAllGather, 4e6, 2, deps, "gather"));
    computes.push_back(t.compute("forward " + std::to_string(u), compute[u] * kMs, {gathers.back()}));
  }
  return es::simulate(t, net);
}
}  // namespace

TEST_CASE("estimate: a bandwidth-bound all_gather chain, prefetch 1 against prefetch 2") {
  // Compute [4, 1, 1, 1] ms, gathers 2 ms each. Prefetch 1: the third gather waits for unit 0's
  // buffer (free at 6 ms): G0 0-2, C0 2-6, G1 2-4, G2 6-8, C1 6-7, C2 8-9, G3 8-10, C3 10-11.
  const auto one = gather_chain({4, 1, 1, 1}, 1);
  CHECK(one.step_s == doctest::Approx(11 * kMs));
  CHECK(one.exposed_comm_s == doctest::Approx(4 * kMs));
  // Prefetch 2: the gathers run back to back (8 ms of link time), the step is bound by the link:
  // all gathers + the last unit's compute = 9 ms.
  const auto two = gather_chain({4, 1, 1, 1}, 2);
  CHECK(two.step_s == doctest::Approx(9 * kMs));
  CHECK(two.busy_s.at("gather") == doctest::Approx(8 * kMs));
  CHECK(two.exposed_comm_s == doctest::Approx(2 * kMs));
  // Deeper prefetch cannot beat the link.
  CHECK(gather_chain({4, 1, 1, 1}, 3).step_s == doctest::Approx(9 * kMs));
}

TEST_CASE("estimate: an all_reduce across two nodes is reduce_scatter, inter-node all_reduce, all_gather") {
  es::Network net;
  net.gpus_per_node = 4;
  net.intra = {100.0, 5.0};   // 100 GB/s, 5 us per ring step
  net.inter = {10.0, 10.0};   // 10 GB/s, 10 us per ring step
  const double s = 1e9;
  // One node (4 ranks): 2(4-1)/4 x 1 GB / 100 GB/s = 15 ms, plus 2 x 3 steps x 5 us.
  CHECK(net.seconds(es::Collective::kAllReduce, s, 4) == doctest::Approx(15e-3 + 30e-6));
  // Two nodes (8 ranks): reduce_scatter inside (7.5 ms + 3 x 5 us), all_reduce of the 1/4 share
  // between the 2 nodes (2(2-1)/2 x 0.25 GB / 10 GB/s = 25 ms + 2 x 10 us), all_gather inside
  // (7.5 ms + 15 us): 40.05 ms.
  CHECK(net.seconds(es::Collective::kAllReduce, s, 8) == doctest::Approx(40e-3 + 50e-6));
  CHECK(net.seconds(es::Collective::kAllGather, s, 8) ==
        doctest::Approx((0.5 * 0.25e9 / 10e9 + 10e-6) + (0.75 * 1e9 / 100e9 + 15e-6)));
  CHECK(net.seconds(es::Collective::kReduceScatter, s, 1) == 0.0);
  CHECK(es::bus_factor(es::Collective::kAllReduce, 8) == doctest::Approx(1.75));
  CHECK(es::bus_factor(es::Collective::kAllGather, 8) == doctest::Approx(0.875));
  // all_to_all of 1 GB a rank: inside one node (3/4 x 1 GB / 100 GB/s + 3 x 5 us); across two, the
  // node's 4 x 1/8 GB exchanged inside it (3/4 x 0.5 GB / 100 GB/s + 15 us), then the 1 GB over
  // the 2 nodes (1/2 x 1 GB / 10 GB/s + 10 us): S (n-1)/n in all, S (n-g)/n of it across.
  CHECK(net.seconds(es::Collective::kAllToAll, s, 4) == doctest::Approx(7.5e-3 + 15e-6));
  CHECK(net.seconds(es::Collective::kAllToAll, s, 8) == doctest::Approx((3.75e-3 + 15e-6) + (50e-3 + 10e-6)));
  CHECK(es::bus_factor(es::Collective::kAllToAll, 8) == doctest::Approx(0.875));
}

TEST_CASE("estimate: a network from `bench comms` JSON interpolates busbw in log(size)") {
  const std::string json = R"({"benchmark": "strata bench comms", "world_size": 2, "backend": "gloo", "device": "cpu",
    "rows": [
      {"collective": "all_reduce", "size_bytes": 1000, "busbw_gbps": 0.1},
      {"collective": "all_reduce", "size_bytes": 100000, "busbw_gbps": 1.1},
      {"collective": "all_gather", "size_bytes": 1000, "busbw_gbps": 0.2}
    ]})";
  const auto net = es::network_from_bench_json(json, "bench.json");
  // 10 kB lies half-way in log(size) between 1 kB and 100 kB: busbw 0.6 GB/s.
  CHECK(net.seconds(es::Collective::kAllReduce, 1e4, 2) == doctest::Approx(1e4 * 1.0 / 0.6e9));
  // Beyond the table: the nearest end.
  CHECK(net.seconds(es::Collective::kAllReduce, 1e7, 3) == doctest::Approx(1e7 * (4.0 / 3.0) / 1.1e9));
  CHECK(net.seconds(es::Collective::kAllGather, 1e3, 2) == doctest::Approx(1e3 * 0.5 / 0.2e9));
  // reduce_scatter is not in the table: all_reduce's bus bandwidth stands in.
  CHECK(net.seconds(es::Collective::kReduceScatter, 1e3, 2) == doctest::Approx(1e3 * 0.5 / 0.1e9));
  CHECK_THROWS_WITH_AS(es::network_from_bench_json(R"({"rows": []})", "empty.json"),
                       doctest::Contains("no `rows`"), strata::UsageError);
  CHECK_THROWS_AS(es::network_from_bench_json("{not json", "bad.json"), strata::UsageError);
}

TEST_CASE("estimate: a TOML cluster spec, and what it refuses") {
  const auto net = es::network_from_toml(R"(
[cluster]
name = "two nodes"
gpus_per_node = 8
intra_node_gbps = 360
intra_node_latency_us = 3
inter_node_gbps = 45
inter_node_latency_us = 6
)", "c.toml");
  CHECK(net.gpus_per_node == 8);
  CHECK(net.intra.bandwidth_gbps == 360.0);
  CHECK(net.inter.latency_us == 6.0);
  CHECK_THROWS_WITH_AS(es::network_from_toml("[cluster]\ngpus_per_node = 8\n", "c.toml"),
                       doctest::Contains("intra_node_gbps is missing"), strata::UsageError);
  CHECK_THROWS_WITH_AS(es::network_from_toml("[cluster]\ngpus_per_node = 8\nintra_node_gbps = 1\nintra_gbps = 2\n", "c.toml"),
                       doctest::Contains("unknown key 'intra_gbps'"), strata::UsageError);
  CHECK_THROWS_WITH_AS(es::network_from_toml("[cluster\n", "c.toml"), doctest::Contains("c.toml"), strata::UsageError);
  CHECK_THROWS_WITH_AS(es::network_from_toml("[cluster]\ngpus_per_node = 0\nintra_node_gbps = 1\n", "c.toml"),
                       doctest::Contains("gpus_per_node"), strata::UsageError);
}

TEST_CASE("estimate: a dependency on an op not yet added is refused") {
  es::Schedule s;
  CHECK_THROWS_AS(s.compute("x", 1.0, {0}), std::invalid_argument);
  const int a = s.compute("a", 1.0);
  CHECK_THROWS_AS(s.depend(a, a), std::invalid_argument);
}

TEST_CASE("estimate: the shipped cluster specs load") {
  const std::string dir = std::string(STRATA_FIXTURE_CONFIG_DIR) + "/../../../examples/clusters/";
  const auto h100 = es::load_network(dir + "8xh100_nvlink_ib400.toml");
  CHECK(h100.gpus_per_node == 8);
  CHECK(h100.intra.bandwidth_gbps > h100.inter.bandwidth_gbps);
  CHECK(h100.description.find("assumed") != std::string::npos);
  const auto pcie = es::load_network(dir + "pcie_node.toml");
  CHECK(pcie.gpus_per_node == 4);
  // Across two nodes the slower link costs more than the node alone.
  CHECK(pcie.seconds(es::Collective::kAllReduce, 1e8, 8) > 1.5 * pcie.seconds(es::Collective::kAllReduce, 1e8, 4));
  CHECK_THROWS_WITH_AS(es::load_network(dir + "no_such.toml"), doctest::Contains("cannot be read"), strata::UsageError);
}

// ---- the built-in strategies' schedules and memory ---------------------------------------------------

#include "bundled_plugins.hpp"
#include "estimate/strategies.hpp"
#include "strata/plan.hpp"

namespace {
/// Two units (600 and 300 parameters), 9 ms of compute and 1 ms of optimizer per step on one device,
/// AdamW, 100 bytes of activations per example, batch 12.
es::Profile two_units() {
  es::Profile p;
  p.parameters = 900;
  p.units = {{"u0", 600}, {"u1", 300}};
  p.global_batch = 12;
  p.compute_s = 9e-3;
  p.optimizer_s = 1e-3;
  p.activation_bytes_per_sample = 100;
  return p;
}
/// [strategy] options, as an experiment gives them.
strata::Options strategy_options(std::vector<std::pair<std::string, strata::OptionValue>> values) {
  strata::Options o;
  for (auto& [key, value] : values) o.set(key, std::move(value));
  return o;
}
/// The strategy as the estimator reads it from this build's plugins: its schedule for `o`.
es::StrategyModel model(const std::string& name, int, const strata::Options& o = {}) {
  return es::strategy_model(strata::test::bundled_plugins(), name, o);
}
/// A plan of the kit as the estimator reads it: the schedule the kit makes of it.
es::StrategyModel plan_model(const strata::Plan& plan) {
  es::StrategyModel m;
  m.schedule = [plan](const strata::ScheduleInput& in) { return strata::schedule(plan, in); };
  return m;
}
/// `p` at `n` ranks on a flat network of 1 GB/s.
es::EstimateInput at_ranks(const es::Profile& p, int n) {
  static const es::Network net = flat(1.0);
  es::EstimateInput in;
  in.profile = &p;
  in.network = &net;
  in.world_size = n;
  return in;
}
es::StrategyEstimate estimate_of(const std::string& name, const es::Profile& p, int n, const strata::Options& o = {}) {
  return es::estimate_strategy(name, at_ranks(p, n), model(name, n, o));
}
}  // namespace

TEST_CASE("estimate: bus bytes per step of every built-in strategy follow docs/user-guide.md") {
  const auto p = two_units();
  const double psi4 = 900 * 4.0;
  CHECK(estimate_of("single", p, 1).bus_bytes == 0.0);
  CHECK(estimate_of("ddp", p, 3).bus_bytes == doctest::Approx(2.0 * 2 / 3 * psi4));
  CHECK(estimate_of("zero1", p, 3).bus_bytes == doctest::Approx(2.0 * 2 / 3 * psi4));
  CHECK(estimate_of("zero2", p, 3).bus_bytes == doctest::Approx(2.0 * 2 / 3 * psi4));
  // Every unit gathered twice but the last (300 parameters), which stays gathered into its backward.
  const double sharded4 = (3.0 * 900 - 300) * 4.0;
  CHECK(estimate_of("zero3", p, 3).bus_bytes == doctest::Approx(2.0 / 3 * sharded4));
  CHECK(estimate_of("fsdp", p, 3).bus_bytes == doctest::Approx(2.0 / 3 * sharded4));
  CHECK(estimate_of("fsdp", p, 3, strategy_options({{"sharding_strategy", std::string("SHARD_GRAD_OP")}})).bus_bytes == doctest::Approx(2.0 * 2 / 3 * psi4));
  CHECK(estimate_of("fsdp", p, 3, strategy_options({{"sharding_strategy", std::string("NO_SHARD")}})).bus_bytes == doctest::Approx(2.0 * 2 / 3 * psi4));
  CHECK(estimate_of("dp", p, 3).bus_bytes == doctest::Approx(2.0 * 2 * psi4));  // (K-1) copies each way
  // Accumulation: zero2 reduce-scatters every micro-batch, ddp only the last.
  auto p2 = p;
  p2.micro_batches = 2;
  CHECK(estimate_of("ddp", p2, 3).bus_bytes == doctest::Approx(2.0 * 2 / 3 * psi4));
  CHECK(estimate_of("zero2", p2, 3).bus_bytes == doctest::Approx(3.0 * 2 / 3 * psi4));
  CHECK(estimate_of("zero3", p2, 3).bus_bytes == doctest::Approx(2 * 2.0 / 3 * sharded4));
  // SHARD_GRAD_OP frees a unit once its gradients are reduced: gathered again in every micro-batch.
  CHECK(estimate_of("fsdp", p2, 3, strategy_options({{"sharding_strategy", std::string("SHARD_GRAD_OP")}})).bus_bytes == doctest::Approx(2 * 2.0 * 2 / 3 * psi4));
  // NO_SHARD and HYBRID_SHARD average across replicas once a step, in the last micro-batch: NO_SHARD
  // as ddp; HYBRID_SHARD over 2 groups of 2 gathers and reduce-scatters in pairs every micro-batch
  // (1/2 of S each) and all-reduces its shards (450 elements) between the pairs once (2 x 1/2 of S).
  CHECK(estimate_of("fsdp", p2, 3, strategy_options({{"sharding_strategy", std::string("NO_SHARD")}})).bus_bytes == doctest::Approx(2.0 * 2 / 3 * psi4));
  CHECK(estimate_of("fsdp", p2, 4, strategy_options({{"sharding_strategy", std::string("HYBRID_SHARD")}, {"shard_group_size", std::int64_t{2}}})).bus_bytes ==
        doctest::Approx(2 * 0.5 * sharded4 + 1.0 * 450 * 4.0));
  // Padding to a multiple of the world size: 600 and 300 divide by 4? 300 does, 600 does; 7 pads both.
  CHECK(estimate_of("zero3", p, 7).bus_bytes == doctest::Approx(6.0 / 7 * (3.0 * (602 + 301) - 301) * 4.0));
}

TEST_CASE("estimate: a plugin's schedule is read: hpz's backward gathers inside its sub-group") {
  const auto p = two_units();
  // hpz at 4 ranks with sub-groups of 2, per micro-batch: both units gathered over 4 in forward
  // (3/4 x 3600 bytes), unit 0 gathered again over its sub-group of 2 in backward (1/2 x 2400; the
  // last unit stays gathered), gradients reduce-scattered over 4 (3/4 x 3600).
  const auto hpz = estimate_of("hpz", p, 4, strategy_options({{"secondary_group_size", std::int64_t{2}}}));
  CHECK_FALSE(hpz.coarse);
  CHECK(hpz.bus_bytes == doctest::Approx(2700.0 + 1200.0 + 2700.0));
  // zero3 gathers unit 0 from all 4 in backward; hpz with a sub-group of 4 moves zero3's bytes.
  CHECK(estimate_of("zero3", p, 4).bus_bytes == doctest::Approx(2700.0 + 1800.0 + 2700.0));
  CHECK(estimate_of("hpz", p, 4, strategy_options({{"secondary_group_size", std::int64_t{4}}})).bus_bytes ==
        doctest::Approx(estimate_of("zero3", p, 4).bus_bytes));
  // A sub-group of one rank keeps the unit whole (SHARD_GRAD_OP's bytes); one that does not divide
  // the shard group is refused, as the engine refuses it.
  CHECK(estimate_of("hpz", p, 4, strategy_options({{"secondary_group_size", std::int64_t{1}}})).bus_bytes == doctest::Approx(2700.0 * 2));
  CHECK_FALSE(estimate_of("hpz", p, 4, strategy_options({{"secondary_group_size", std::int64_t{3}}})).applicable);
  // Between its forward and the end of its backward a unit keeps its sub-group's share. Without
  // prefetch, unit 0 runs backward gathered with its gradients (600 x 8 bytes) beside its own half
  // (300 x 4), where zero3 holds 600 x 8 only.
  const auto no_prefetch = strategy_options({{"secondary_group_size", std::int64_t{2}}, {"prefetch", std::int64_t{0}}});
  CHECK(estimate_of("hpz", p, 4, no_prefetch).memory.gathered == doctest::Approx(600 * 8.0 + 300 * 4.0));
  CHECK(estimate_of("zero3", p, 4, strategy_options({{"prefetch", std::int64_t{0}}})).memory.gathered == doctest::Approx(600 * 8.0));
  // With the larger unit last (300 then 600 parameters), backward starts with unit 1 gathered with
  // its gradients (600 x 8) beside unit 0's half (150 x 4).
  auto last_big = p;
  last_big.units = {{"u0", 300}, {"u1", 600}};
  CHECK(estimate_of("hpz", last_big, 4, no_prefetch).memory.gathered == doctest::Approx(600 * 8.0 + 150 * 4.0));
  CHECK(estimate_of("zero3", last_big, 4, strategy_options({{"prefetch", std::int64_t{0}}})).memory.gathered == doctest::Approx(600 * 8.0));
}

TEST_CASE("estimate: a plan's own unit plans, and a last unit it does not keep gathered") {
  const auto p = two_units();
  strata::Plan plan;
  plan.sharded = strata::Sharded::kParameters;
  plan.keep_last_unit_gathered = false;
  plan.unit = [](std::size_t, const std::string& name, strata::UnitPlan& u) {
    if (name == "u0") u.after_forward = strata::Reshard::kNone;  // by the profile's unit names
  };
  const es::StrategyModel m = plan_model(plan);
  static const es::Network net = flat(1.0);
  es::EstimateInput in;
  in.profile = &p;
  in.network = &net;
  in.world_size = 3;
  // Forward gathers both units, backward only u1 (u0 stayed gathered), the reduce-scatter both:
  // 2/3 x (3600 + 1200 + 3600).
  const auto e = es::estimate_strategy("mine", in, m);
  CHECK(e.bus_bytes == doctest::Approx(2.0 / 3 * (3600 + 1200 + 3600)));
  // At the start of backward u1 is gathered with its gradients (300 x 8), u0 kept whole (600 x 4).
  CHECK(e.memory.gathered == doctest::Approx(300 * 8.0 + 600 * 4.0));
}

TEST_CASE("estimate: memory per rank by the strategies' sharding") {
  const auto p = two_units();
  const double psi = 900;
  const auto ddp = estimate_of("ddp", p, 3).memory;
  CHECK(ddp.params == psi * 4);
  CHECK(ddp.grads == psi * 4);
  CHECK(ddp.optimizer == psi * 8);
  CHECK(ddp.activations == doctest::Approx(100.0 * 12 / 3));
  // The optimizer step's temporaries (a parameter-sized tensor) outweigh 400 bytes of activations.
  CHECK(ddp.peak() == doctest::Approx(16 * psi + 4 * psi));
  const auto z1 = estimate_of("zero1", p, 3).memory;
  CHECK(z1.state() == doctest::Approx(8 * psi + 8 * psi / 3));
  const auto z2 = estimate_of("zero2", p, 3).memory;
  CHECK(z2.state() == doctest::Approx(4 * psi + 12 * psi / 3));
  CHECK(z2.buffers == doctest::Approx(600 * 4.0));  // the larger unit's gradients, before they are reduced
  // On the CPU, after backward: Gloo's clone of the group a reduce-scatter into a separate chunk
  // all-reduces (one group of 900 here), and zero2's staged input besides; not on GPUs.
  CHECK(z2.after_backward == doctest::Approx(900 * 8.0));
  CHECK(estimate_of("zero1", p, 3).memory.after_backward == doctest::Approx(900 * 4.0));
  auto gpu = p;
  gpu.device = "cuda";
  CHECK(estimate_of("zero2", gpu, 3).memory.after_backward == 0.0);
  CHECK(estimate_of("zero1", gpu, 3).memory.after_backward == 0.0);
  auto big = p;  // parameters outweighing activations: the reductions after backward set the peak
  big.activation_bytes_per_sample = 0;
  const auto z1big = estimate_of("zero1", big, 3).memory;
  CHECK(z1big.peak() == doctest::Approx(z1big.state() + std::max(900 * 4.0, 300 * 4.0)));
  // At world size 1 a unit is not gathered, only its gradients staged: 600 x 4 bytes.
  CHECK(estimate_of("zero3", p, 1).memory.gathered == doctest::Approx(600 * 4.0));
  const auto z3 = estimate_of("zero3", p, 3).memory;
  CHECK(z3.state() == doctest::Approx(16 * psi / 3));
  // In backward: unit 1 (300) gathered with its gradients plus unit 0 (600) prefetched, or unit 0
  // with its gradients: 600 x 8 bytes.
  CHECK(z3.gathered == doctest::Approx(600 * 8.0));
  // SGD with momentum keeps 4 bytes a parameter; bf16 parameters keep float32 masters.
  auto sgd = p;
  sgd.optimizer = "sgd";
  CHECK(estimate_of("ddp", sgd, 2).memory.optimizer == psi * 4);
  auto bf16 = p;
  bf16.param_dtype = "bfloat16";
  CHECK(estimate_of("ddp", bf16, 2).memory.params == psi * 6);
  CHECK(estimate_of("zero3", bf16, 3).memory.params == doctest::Approx(psi / 3 * 6));
}

TEST_CASE("estimate: ddp overlaps its buckets with backward, and one big bucket cannot") {
  auto p = two_units();
  es::Network net = flat(1e-3);  // 1 MB/s: an all_reduce of 1200 bytes over 2 ranks takes 1.2 ms
  es::EstimateInput in;
  in.profile = &p;
  in.network = &net;
  in.world_size = 2;
  // Buckets of 1 KiB: unit 1's 1200 bytes reduce while unit 0's backward (2 ms) runs.
  const auto small = es::estimate_strategy("ddp", in, model("ddp", 2, strategy_options({{"bucket_cap_mb", 1200.0 / (1024.0 * 1024.0)}})));
  const auto big = es::estimate_strategy("ddp", in, model("ddp", 2, strategy_options({{"bucket_cap_mb", 25.0}})));
  CHECK(small.bus_bytes == doctest::Approx(big.bus_bytes));
  CHECK(small.exposed_comm_s < big.exposed_comm_s);
  CHECK(big.exposed_comm_s == doctest::Approx(3600 * 1.0 / 1e6));  // everything after backward
}

TEST_CASE("estimate: zero1/zero2's parameter gathers overlap the next forward when the plan waits for them per unit") {
  auto p = two_units();
  p.device = "cuda";
  es::Network net = flat(1e-3);  // 1 MB/s: gathering the 3600 bytes of parameters over 2 ranks takes 1.8 ms
  es::EstimateInput in;
  in.profile = &p;
  in.network = &net;
  in.world_size = 2;
  for (const std::string name : {"zero1", "zero2"}) {
    CAPTURE(name);
    // Groups of 1200 bytes: unit 1's, then unit 0's in two. Unit 0's forward waits for its two only.
    // The strategy's own schedule is the per-unit one.
    strata::Plan plan;
    plan.sharded = name == "zero1" ? strata::Sharded::kOptimizer : strata::Sharded::kGradients;
    plan.group_bytes = 1200;
    plan.reductions_in_flight = name == "zero1" ? 0 : 2;
    plan.wait_params_per_unit = true;
    const auto per_unit = plan_model(plan);
    const auto own = model(name, 2, strategy_options({{"reduce_bucket_mb", 1200.0 / (1024.0 * 1024.0)}}));
    CHECK(es::estimate_strategy(name, in, own).step_s == doctest::Approx(es::estimate_strategy(name, in, per_unit).step_s));
    plan.wait_params_per_unit = false;
    const auto at_once = plan_model(plan);
    const auto overlapped = es::estimate_strategy(name, in, per_unit);
    const auto after_step = es::estimate_strategy(name, in, at_once);
    CHECK(overlapped.bus_bytes == doctest::Approx(after_step.bus_bytes));
    CHECK(overlapped.collectives == after_step.collectives);
    // After the step: the three gathers exposed (0.6 ms each). Per unit: unit 0's two (1.2 ms)
    // delay its forward, unit 1's runs beside unit 0's 1 ms forward: 0.6 ms less.
    CHECK(overlapped.step_s == doctest::Approx(after_step.step_s - 0.6e-3));
  }
}

TEST_CASE("estimate: CPU ranks that fill their host's cores do not overlap their collectives") {
  auto p = two_units();
  p.device = "cpu";
  p.threads = 4;
  p.host_threads = 4;
  es::Network net = flat(1e-3);  // 1 MB/s, as above: small buckets hide unit 1's 1.2 ms reduction on a GPU
  es::EstimateInput in;
  in.profile = &p;
  in.network = &net;
  in.world_size = 2;
  const auto ddp = model("ddp", 2, strategy_options({{"bucket_cap_mb", 1200.0 / (1024.0 * 1024.0)}}));
  // 2 ranks of 2 threads on 4: the host is full, so Gloo's transfers and reductions take the ranks'
  // cores, and the step is compute plus communication.
  CHECK(es::collectives_share_cores(p, net, 2));
  const auto full = es::estimate_strategy("ddp", in, ddp);
  CHECK(full.exposed_comm_s == doctest::Approx(full.comm_s));
  CHECK(full.step_s == doctest::Approx(full.compute_s + full.comm_s + p.other_s));
  // [train] threads = 1 leaves 2 of the 4 cores free: the collectives overlap backward again.
  p.rank_threads = 1;
  CHECK_FALSE(es::collectives_share_cores(p, net, 2));
  const auto spare = es::estimate_strategy("ddp", in, ddp);
  CHECK(spare.exposed_comm_s < 0.9 * spare.comm_s);
  CHECK(spare.step_s < spare.compute_s + spare.comm_s);
  // One rank, and GPUs, never.
  CHECK_FALSE(es::collectives_share_cores(p, net, 1));
  p.device = "cuda";
  p.rank_threads = 0;
  CHECK_FALSE(es::collectives_share_cores(p, net, 2));
}

TEST_CASE("estimate: a strategy that declares no schedule is a replica that does not communicate, and says so") {
  const auto p = two_units();
  const auto in = at_ranks(p, 4);
  const auto e = es::estimate_strategy("mine", in, es::StrategyModel{});
  CHECK(e.coarse);
  CHECK(e.bus_bytes == 0.0);
  CHECK(e.note.find("declares no schedule") != std::string::npos);
  CHECK(e.memory.state() == doctest::Approx((4 + 4 + 8) * 900.0));
  CHECK_FALSE(estimate_of("ddp", p, 4).coarse);
  CHECK_FALSE(estimate_of("single", p, 2).applicable);
}

TEST_CASE("estimate: CPU ranks share their host's threads, GPU ranks compute alone") {
  auto p = two_units();
  p.device = "cpu";
  p.threads = 8;
  p.host_threads = 8;
  const es::Network one_host = flat(1.0);  // gpus_per_node 0: every rank on one host
  // 2 ranks get 4 threads each: twice the profile's time for the same work, the same for half of it.
  CHECK(es::host_compute_factor(p, one_host, 1) == doctest::Approx(1.0));
  CHECK(es::host_compute_factor(p, one_host, 2) == doctest::Approx(2.0));
  CHECK(es::host_compute_factor(p, one_host, 8) == doctest::Approx(8.0));
  // 16 ranks on 8 threads: one thread each, time-sharing the cores two to one; 12 ranks take two
  // rounds as well (a rank runs whole, so 8 then 4), not one and a half.
  CHECK(es::host_compute_factor(p, one_host, 12) == doctest::Approx(16.0));
  CHECK(es::host_compute_factor(p, one_host, 16) == doctest::Approx(16.0));
  // Hosts of 4 ranks: 2 threads each, whatever the world size.
  es::Network hosts = flat(1.0);
  hosts.gpus_per_node = 4;
  CHECK(es::host_compute_factor(p, hosts, 16) == doctest::Approx(4.0));
  // A profile that computed with 2 of 8 threads: 4 ranks of 2 threads compute as fast as it did.
  p.threads = 2;
  CHECK(es::host_compute_factor(p, one_host, 4) == doctest::Approx(1.0));
  // So a CPU host's step compute stays what the profile measured in strong scaling: 9 ms.
  p.threads = 8;
  CHECK(estimate_of("ddp", p, 4).compute_s == doctest::Approx(9e-3 + 1e-3 * 4.0));  // the optimizer step on 4x fewer threads
  // [train] threads = 1 fixes every rank's threads: 4 ranks use 4 of the 8 cores, each 8x slower
  // than the 8-thread profile (linear, unmeasured), no time-sharing.
  auto fixed = p;
  fixed.rank_threads = 1;
  CHECK(es::rank_threads(fixed, one_host, 4) == 1);
  CHECK(es::host_compute_factor(fixed, one_host, 4) == doctest::Approx(8.0));
  fixed.compute_by_threads[1] = 50e-3;  // measured: 50 ms at 1 thread against the profile's 10 ms
  CHECK(es::host_compute_factor(fixed, one_host, 4) == doctest::Approx(5.0));
  CHECK(es::host_compute_factor(fixed, one_host, 16) == doctest::Approx(10.0));  // 16 one-thread ranks: 2 rounds
  // GPUs, and profiles that do not say their threads: one device per rank.
  auto gpu = p;
  gpu.device = "cuda";
  CHECK(es::host_compute_factor(gpu, one_host, 4) == 1.0);
  auto old = p;
  old.threads = 0;
  CHECK(es::host_compute_factor(old, one_host, 4) == 1.0);
  CHECK(estimate_of("ddp", gpu, 4).compute_s == doctest::Approx(9e-3 / 4 + 1e-3));
}

TEST_CASE("estimate: weak scaling keeps the batch per rank, and activations with it") {
  const auto p = two_units();
  static const es::Network net = flat(1.0);
  es::EstimateInput in;
  in.profile = &p;
  in.network = &net;
  in.world_size = 3;
  const auto strong = es::estimate_strategy("ddp", in, model("ddp", 3));
  in.batch_scale = 3;  // the global batch grows with the ranks
  const auto weak = es::estimate_strategy("ddp", in, model("ddp", 3));
  CHECK(strong.memory.activations == doctest::Approx(100.0 * 12 / 3));
  CHECK(weak.memory.activations == doctest::Approx(100.0 * 12));
  // Each rank computes the profile's whole batch: 9 ms of forward and backward.
  CHECK(weak.compute_s == doctest::Approx(9e-3 + 1e-3));
  CHECK(strong.compute_s == doctest::Approx(3e-3 + 1e-3));
  CHECK(weak.bus_bytes == doctest::Approx(strong.bus_bytes));  // gradients do not grow with the batch
}

namespace {
/// Sends half the bytes of the parameters (a stand-in for a quantizing codec; never run here).
class HalfBytes final : public strata::GatherCodec {
 public:
  torch::Tensor encode(const torch::Tensor& shard) override { return shard; }
  void decode(const torch::Tensor&, torch::Tensor&, int) override {}
  double wire_bytes(double elements, double element_bytes) const override { return elements * element_bytes / 2; }
  std::string wire_dtype() const override { return "half_bytes"; }
};
}  // namespace

TEST_CASE("estimate: a plan's gather codec sets the bytes of its gathers, over the shard group and from a sub-group") {
  const auto p = two_units();
  const auto in = at_ranks(p, 4);
  strata::Plan plan;
  plan.sharded = strata::Sharded::kParameters;
  const double plain = es::estimate_strategy("zero3", in, plan_model(plan)).bus_bytes;
  plan.gather_codec = [] { return std::make_unique<HalfBytes>(); };
  const auto coded = es::estimate_strategy("coded", in, plan_model(plan));
  // Forward gathers both units (3600 bytes), backward unit 0 (2400), each at 3/4; the
  // reduce-scatter (3600 at 3/4) is the gradients'.
  CHECK(plain == doctest::Approx(0.75 * (3600 + 2400 + 3600)));
  CHECK(coded.bus_bytes == doctest::Approx(0.75 * ((3600 + 2400) / 2.0 + 3600)));
  bool named = false;
  for (const auto& op : coded.schedule.ops()) named = named || op.dtype == "half_bytes";
  CHECK(named);
  // With sub-groups of 2, the backward gather comes from the sub-group's copy, through the codec too.
  plan.units.after_forward = strata::ReshardTo::subgroups_of(2);
  CHECK(es::estimate_strategy("coded_hpz", in, plan_model(plan)).bus_bytes ==
        doctest::Approx(0.75 * 3600 / 2.0 + 0.5 * 2400 / 2.0 + 0.75 * 3600));
}

TEST_CASE("estimate: a unit that a later one reads (tied weights) stays gathered, so its backward gathers nothing") {
  auto p = two_units();
  strata::Plan plan;
  plan.sharded = strata::Sharded::kParameters;
  // Forward gathers both units (3600 bytes), backward unit 0 (2400), the reduce-scatter 3600, at 3/4.
  CHECK(es::estimate_strategy("zero3", at_ranks(p, 4), plan_model(plan)).bus_bytes ==
        doctest::Approx(0.75 * (3600 + 2400 + 3600)));
  p.units[1].reads_from = {0};  // unit 1 reads unit 0's parameters (a head tied to an embedding)
  const auto in = es::schedule_input(at_ranks(p, 4));
  REQUIRE(in.tied.size() == 1);
  CHECK(in.tied.front() == std::pair<std::size_t, std::size_t>{1, 0});
  CHECK(es::estimate_strategy("zero3", at_ranks(p, 4), plan_model(plan)).bus_bytes ==
        doctest::Approx(0.75 * (3600 + 3600)));
}

TEST_CASE("estimate: an offloaded optimizer's state is host memory, and on a GPU its untimed copies are said") {
  strata::ScheduleInput in;
  in.topology = {2, 2};
  in.units = {{"u0", 1000.0, {}, 0.0, 0.0}, {"u1", 1000.0, {}, 0.0, 0.0}};
  strata::Plan plan = strata::sharded_plan("offloaded", 0, strata::ReshardTo::shard_group());
  plan.offload = strata::Offload::kOptimizer;
  const auto on_cpu = strata::schedule(plan, in);
  CHECK(on_cpu.memory.optimizer == 0);
  double host = 0;
  for (const auto& [name, bytes] : on_cpu.memory.extra) host += bytes;
  CHECK(host == doctest::Approx(1000.0 * 8 + 1000.0 * 8));  // masters and gradients, and AdamW's two moments, of 1000 owned
  CHECK(on_cpu.note.empty());  // the host is the device: nothing is copied
  in.cpu = false;
  CHECK(strata::schedule(plan, in).note.find("not timed") != std::string::npos);
}

namespace {
/// One byte a gradient element (a stand-in for an int8 codec; never run here).
class ByteRows final : public strata::ReduceCodec {
 public:
  torch::Tensor encode(const torch::Tensor& rows) override { return rows; }
  torch::Tensor decode(const torch::Tensor& rows, std::int64_t) override { return rows; }
  double wire_bytes(double elements) const override { return elements; }
  std::string wire_dtype() const override { return "bytes"; }
};
}  // namespace

TEST_CASE("estimate: a plan's reduce codec makes the reduce-scatter an all-to-all of its bytes, in two levels over sub-groups") {
  const auto p = two_units();
  const auto in = at_ranks(p, 4);
  strata::Plan plan;
  plan.sharded = strata::Sharded::kParameters;
  plan.reduce_coalesce_bytes = 0;  // each unit's gradients alone
  plan.reduce_codec = [] { return std::make_unique<ByteRows>(); };
  // The reduce-scatter of 3600 float32 bytes (900 elements) becomes rows of 225 one-byte elements,
  // four to each rank: 900 bytes at 3/4.
  const auto flat = es::estimate_strategy("flat", in, plan_model(plan));
  CHECK(flat.bus_bytes == doctest::Approx(0.75 * (3600 + 2400) + 0.75 * 900));
  int exchanges = 0;
  for (const auto& op : flat.schedule.ops())
    if (op.kind == strata::ScheduleOp::Kind::kCollective && op.collective == strata::Collective::kAllToAll) {
      ++exchanges;
      CHECK(op.group == 4);
      CHECK(op.dtype == "bytes");
    }
  CHECK(exchanges == 2);  // one per unit
  // Over pairs: every row inside the pair first (900 bytes at 1/2), then half of them across (450 at 1/2).
  plan.reduce_subgroup = 2;
  const auto two = es::estimate_strategy("two_levels", in, plan_model(plan));
  CHECK(two.bus_bytes == doctest::Approx(0.75 * (3600 + 2400) + 0.5 * 900 + 0.5 * 450));
  int inner = 0, across = 0;
  for (const auto& op : two.schedule.ops())
    if (op.kind == strata::ScheduleOp::Kind::kCollective && op.collective == strata::Collective::kAllToAll) {
      CHECK(op.group == 2);
      (op.per_node > 0 ? across : inner) += 1;  // across: spread over the hosts, inside: packed
    }
  CHECK(inner == 2);
  CHECK(across == 2);
  // A sub-group that does not divide the shard group is named.
  plan.reduce_subgroup = 3;
  plan.subgroup_option = "secondary_group_size";
  CHECK_FALSE(strata::schedule(plan, es::schedule_input(in)).applicable);
}

TEST_CASE("estimate: a schedule that throws is the plugin's error, named, and an option error passes through") {
  struct NoOptions {};
  strata::Registry r;
  r.set_current_library("/p/libbroken.so", nullptr);
  r.add_strategy("broken", "", strata::Schema<NoOptions>{}, [](const NoOptions&) { return std::shared_ptr<strata::Strategy>(); });
  r.set_schedule("broken", strata::Schema<NoOptions>{}, [](const NoOptions&, const strata::ScheduleInput&) -> strata::Schedule {
    throw std::runtime_error("index out of range");
  });
  r.add_strategy("picky", "", strata::Schema<NoOptions>{}, [](const NoOptions&) { return std::shared_ptr<strata::Strategy>(); });
  r.set_schedule("picky", strata::Schema<NoOptions>{}, [](const NoOptions&, const strata::ScheduleInput&) -> strata::Schedule {
    throw strata::OptionError("ranks", "ranks must divide the world");
  });
  const strata::ScheduleInput in;
  CHECK_THROWS_WITH_AS(es::strategy_schedule(r.at(strata::PluginKind::kStrategy, "broken"), {}, in),
                       doctest::Contains("strategy 'broken' failed while making its schedule"), strata::PluginError);
  CHECK_THROWS_AS(es::strategy_schedule(r.at(strata::PluginKind::kStrategy, "picky"), {}, in), strata::OptionError);
}
