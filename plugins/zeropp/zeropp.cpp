// `zeropp`: ZeRO++ (Wang et al., "ZeRO++: Extremely Efficient Collective Communication for Giant
// Model Training", 2023) over zero3: every unit's parameters, gradients and optimizer state are
// sharded over all N ranks and a unit is gathered around its forward and its backward, with two of
// the paper's three parts, each switchable by an option:
//
//   qwZ (quantize_weights, section 3.1): what travels in a unit's all-gathers over the N ranks is
//     each rank's shard quantized block by block to int8 with one float32 scale per block_size
//     elements, which every rank dequantizes into the unit's parameters;
//   hpZ (secondary_group_size = k > 1, section 3.2): after its forward a unit keeps a secondary
//     copy of its (dequantized) parameters sharded over sub-groups of k consecutive ranks (0: the
//     ranks of one host), and its backward gathers from that copy, inside the sub-group.
//
//   per micro-batch   forward all-gather    (N-1)/N x P x (1 + 4/B) bytes with qwZ, (N-1)/N x 4 P without
//                     backward all-gather   (k-1)/k x 4 P from the secondary copy with hpZ, else as forward
//                     reduce-scatter        (N-1)/N x 4 P, as zero3 (gradients travel in float32)
//   memory            zero3's (1/N of parameters, gradients and optimizer state between steps), plus
//                     with hpZ each unit's 1/k secondary copy between its forward and its backward
//
// The paper's third part, qgZ (gradients reduced as int8 through a hierarchical all-to-all), is
// not here yet: the contract has Comm::all_to_all (ABI 11.1), but no gradient codec of the kit
// uses it. The masters and the optimizer step stay float32 and exact:
// only what forward and backward compute with is quantized, so with qwZ the run is not single's
// tensor by tensor and declares a loss band; with qwZ off it is (hpZ moves the same values).
//
// The whole strategy is a plan for the kit's engine with a gather codec (strata/plan.hpp,
// strata::GatherCodec) and a reshard target (strata::ReshardTo): the engine keeps its prefetch and
// overlap, the plan's schedule declares the codec's bytes and the two-level gathers, and `strata
// check` and `strata estimate` read that schedule.

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>

#include <strata/plan_strategy.hpp>
#include <strata/plugin.hpp>

namespace {

constexpr double kMiB = 1024.0 * 1024.0;

struct ZeroppOptions {
  bool quantize_weights = true;           ///< qwZ: parameter all-gathers as int8 blocks
  std::int64_t block_size = 256;          ///< elements per quantization block (one float32 scale each)
  std::int64_t secondary_group_size = 1;  ///< hpZ: ranks of a secondary copy (1: none; 0: one host's)
  double allgather_bucket_mb = 25.0;      ///< a unit larger than this is gathered in several groups, in MiB
  double reduce_bucket_mb = 1.0;          ///< ready groups reduce-scattered together up to this many MiB
  std::int64_t reductions_in_flight = 2;  ///< reduce-scatters whose buffers are alive at once
  std::int64_t prefetch = 1;              ///< units gathered ahead of use, in forward and in backward
  std::string offload = "none";           ///< "optimizer": the optimizer steps on the host
};

/// Symmetric int8 quantization in blocks of B elements: B int8 values, then the block scales as
/// float32 bytes, in one int8 tensor per rank (so one all-gather moves both).
class Int8Blocks final : public strata::GatherCodec {
 public:
  explicit Int8Blocks(std::int64_t block) : block_(block) {}

  torch::Tensor encode(const torch::Tensor& shard) override {
    const std::int64_t n = shard.numel(), blocks = (n + block_ - 1) / block_;
    auto x = torch::zeros({blocks * block_}, shard.options().dtype(torch::kFloat32));
    x.narrow(0, 0, n).copy_(shard.reshape(-1));
    auto rows = x.view({blocks, block_});
    const auto scale = std::get<0>(rows.abs().max(1)).clamp_min(1e-30) / 127.0;
    const auto q = (rows / scale.unsqueeze(1)).round().clamp(-127, 127).to(torch::kInt8);
    auto out = torch::empty({blocks * (block_ + 4)}, shard.options().dtype(torch::kInt8));
    out.narrow(0, 0, blocks * block_).copy_(q.reshape(-1));
    out.narrow(0, blocks * block_, blocks * 4).copy_(scale.contiguous().view(torch::kInt8));
    return out;
  }

  void decode(const torch::Tensor& gathered, torch::Tensor& full, int ranks) override {
    const std::int64_t per = gathered.numel() / ranks, blocks = per / (block_ + 4), n = full.numel() / ranks;
    const auto g = gathered.view({ranks, per});
    const auto q = g.narrow(1, 0, blocks * block_).to(torch::kFloat32).view({ranks, blocks, block_});
    const auto scale = g.narrow(1, blocks * block_, blocks * 4).contiguous().view(torch::kFloat32).view({ranks, blocks, 1});
    const auto x = (q * scale).view({ranks, blocks * block_}).narrow(1, 0, n);
    full.view({ranks, n}).copy_(x);
  }

  double wire_bytes(double elements, double) const override {
    return std::ceil(elements / static_cast<double>(block_)) * static_cast<double>(block_ + 4);
  }
  std::string wire_dtype() const override { return "int8"; }

 private:
  std::int64_t block_;
};

strata::Plan zeropp_plan(const ZeroppOptions& o, const strata::Topology&) {
  const int k = static_cast<int>(o.secondary_group_size);
  strata::Plan plan = strata::sharded_plan(
      "zeropp", 0, k == 1 ? strata::ReshardTo::shard_group() : strata::ReshardTo::subgroups_of(k));  // zero3's, or hpZ
  plan.subgroup_option = "secondary_group_size";
  plan.group_bytes = static_cast<std::int64_t>(o.allgather_bucket_mb * kMiB);
  plan.reduce_coalesce_bytes = static_cast<std::int64_t>(o.reduce_bucket_mb * kMiB);
  plan.forward_prefetch = plan.backward_prefetch = static_cast<int>(o.prefetch);
  plan.reductions_in_flight = static_cast<int>(o.reductions_in_flight);
  plan.offload = strata::OffloadOption::of(o.offload);
  if (o.quantize_weights) plan.gather_codec = [block = o.block_size] { return std::make_unique<Int8Blocks>(block); };
  return plan;
}

void register_zeropp(strata::Registry& registry) {
  strata::Schema<ZeroppOptions> schema;
  schema
      .option("quantize_weights", &ZeroppOptions::quantize_weights,
              "qwZ: all-gather parameters as int8 blocks with a float32 scale each (false: float32, as zero3)")
      .option("block_size", &ZeroppOptions::block_size, "elements per int8 quantization block (one float32 scale each)",
              strata::at_least(8))
      .option("secondary_group_size", &ZeroppOptions::secondary_group_size,
              "hpZ: ranks (consecutive, dividing the world size) over which a unit's secondary copy is sharded "
              "between its forward and its backward, which gathers from them; 1 = none (backward gathers over "
              "every rank, as zero3); 0 = the ranks of one host",
              strata::at_least(0))
      .option("allgather_bucket_mb", &ZeroppOptions::allgather_bucket_mb,
              "a unit larger than this many MiB is gathered in several flat groups", strata::positive())
      .option("reduce_bucket_mb", &ZeroppOptions::reduce_bucket_mb,
              "ready groups reduce-scattered together up to this many MiB (0: each alone)", strata::at_least(0))
      .option("reductions_in_flight", &ZeroppOptions::reductions_in_flight,
              "gradient reduce-scatters whose buffers may be alive at once", strata::at_least(1))
      .option("prefetch", &ZeroppOptions::prefetch, "units whose all-gather is issued ahead of use (0: none)",
              strata::at_least(0));
  strata::OffloadOption::add(schema, &ZeroppOptions::offload);
  // With qwZ, `strata check zeropp --world-sizes 1,2,3,4` measured final losses within 0.012 of
  // single's (the CNN at world 2; 0.001 and less on the MLPs): 0.05 leaves a margin. With quantize_weights = false it is exact (zero3's or hpz's
  // values, moved differently). The engine runs the plan; `strata check` and `strata estimate`
  // read its schedule.
  strata::add_plan_strategy(
      registry, "zeropp", "ZeRO++ over zero3: int8 parameter all-gathers (qwZ), a secondary shard inside a sub-group (hpZ)",
      schema, zeropp_plan,
      strata::StrategyTraits{
          strata::Placement::rank_per_device(),
          strata::Equivalence::exact_under({{"quantize_weights", "false"}}, 0.05, "parameters gathered as int8 blocks"),
          {{"hpZ over sub-groups of 2", {{"secondary_group_size", "2"}}},
           {"hpZ alone, sub-groups of 2", {{"quantize_weights", "false"}, {"secondary_group_size", "2"}}},
           {"blocks of 32", {{"block_size", "32"}}},
           strata::OffloadOption::matrix_row()}});
}

}  // namespace

STRATA_PLUGIN(strategy, "zeropp", "0.1.0", register_zeropp)
