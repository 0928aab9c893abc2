#include "estimate/fit.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "estimate/network.hpp"

namespace strata::estimate {

namespace {

/// Memory does not depend on the network but for the ranks of one host (groups of a host's ranks).
Network hosts(int ranks_per_host) {
  Network net;
  net.name = "fit check";
  net.gpus_per_node = ranks_per_host;
  net.intra = {10.0, 10.0};
  return net;
}

Profile profile_of(const FitRequest& r) {
  Profile p;
  p.source = "the model's estimate";
  p.device = r.shared_memory ? "cpu" : "cuda";  // CPU ranks share the host's memory; GPU ranks have their own
  p.parameters = r.parameters;
  double units = 0;
  for (std::size_t u = 0; u < r.unit_parameters.size(); ++u) {
    p.units.push_back({fmt::format("unit{}", u), r.unit_parameters[u]});
    units += r.unit_parameters[u];
  }
  if (units > 0) p.parameters = units;  // tied weights count once, as the model holds them
  else p.units.clear();
  p.global_batch = r.global_batch;
  p.micro_batches = std::max(1, r.micro_batches);
  p.activation_bytes_per_sample = r.activation_bytes_per_sample;
  if (r.checkpoint_every > 0) {
    // Checkpointed units (every k-th of U) keep only their inputs; backward recomputes one at a
    // time. Held: the other units' activations, plus about two units' worth for the one being
    // recomputed and the saved inputs (a unit's input is a small part of its activations), as a
    // share of the whole when the units are alike.
    const double u = std::max<double>(1.0, static_cast<double>(r.unit_parameters.size()));
    const double checkpointed = std::ceil(u / r.checkpoint_every);
    p.activation_bytes_per_sample *= std::min(1.0, (u - checkpointed + 2.0) / u);
  }
  p.optimizer = r.optimizer;
  p.momentum = r.momentum;
  p.param_dtype = r.param_dtype;
  p.reduce_dtype = r.reduce_dtype;
  return p;
}

StrategyEstimate estimate_at(const Profile& p, const Network& net, const std::string& strategy, int world,
                             const StrategyModel& model) {
  EstimateInput in;
  in.profile = &p;
  in.network = &net;
  in.world_size = world;
  return estimate_strategy(strategy, in, model);
}

StrategyEstimate estimate_at(const FitRequest& r, const Profile& p, const Network& net, const std::string& strategy,
                             int world) {
  return estimate_at(p, net, strategy, world, r.model ? r.model(strategy) : StrategyModel{});
}

std::string ranks(int n) { return fmt::format("{} rank{}", n, n == 1 ? "" : "s"); }

}  // namespace

std::string gib_text(double bytes) {
  const double g = bytes / (1024.0 * 1024.0 * 1024.0);
  if (g >= 0.1 || bytes == 0) return fmt::format("{:.3g} GiB", g);
  return fmt::format("{:.3g} MiB", bytes / (1024.0 * 1024.0));
}

FitCheck check_fit(const FitRequest& r) {
  const Profile p = profile_of(r);
  const Network net = hosts(r.ranks_per_host);
  FitCheck c;
  c.estimate = estimate_at(r, p, net, r.strategy, r.world_size);
  c.peak = c.estimate.memory.peak();
  const auto fits = [&r](const StrategyEstimate& e, double limit) {
    return e.applicable && (limit <= 0 || e.memory.peak() <= limit) &&
           (r.host_memory <= 0 || e.memory.host <= r.host_memory);
  };
  c.fits = fits(c.estimate, r.device_memory);
  if (c.fits) return c;
  if (r.offloaded) {  // the same strategy with its optimizer on the host
    const auto e = estimate_at(p, net, r.strategy, r.world_size, r.offloaded());
    if (fits(e, r.device_memory))
      c.would_fit.push_back(fmt::format("{} with strategy.offload = \"optimizer\" ({} per rank on the device, {} of "
                                        "host memory)",
                                        r.strategy, gib_text(e.memory.peak()), gib_text(e.memory.host)));
  }
  // Other strategies at this world size.
  for (const auto& s : r.candidates) {
    if (s == r.strategy) continue;
    const auto e = estimate_at(r, p, net, s, r.world_size);
    if (fits(e, r.device_memory))
      c.would_fit.push_back(fmt::format("{} at {} ({} per rank)", s, ranks(r.world_size), gib_text(e.memory.peak())));
  }
  // This strategy (or, for one that runs on one device only, the candidates) at the smallest
  // larger world size that splits the batch evenly.
  std::vector<std::string> growing{r.strategy};
  if (!estimate_at(r, p, net, r.strategy, r.world_size + 1).applicable) growing = r.candidates;
  c.grown = fmt::format("{}", fmt::join(growing, ", "));
  const auto per_step = static_cast<long long>(std::llround(r.global_batch)) / std::max(1, r.micro_batches);
  int tries = 0;
  for (long long w = r.world_size + 1; w <= per_step && tries < 64; ++w) {
    if (per_step % w != 0) continue;
    ++tries;
    const double limit = r.shared_memory ? r.device_memory * r.world_size / static_cast<double>(w) : r.device_memory;
    for (const auto& grow : growing) {
      const auto e = estimate_at(r, p, net, grow, static_cast<int>(w));
      if (fits(e, limit)) {
        c.would_fit.push_back(fmt::format("{} at {} ({} per rank)", grow, ranks(static_cast<int>(w)), gib_text(e.memory.peak())));
        return c;
      }
    }
  }
  return c;
}

std::string fit_breakdown(const MemoryEstimate& m) {
  std::string text = fmt::format("parameters {} + gradients {} + optimizer {} + activations {}", gib_text(m.params),
                                 gib_text(m.grads), gib_text(m.optimizer), gib_text(m.activations));
  if (m.gathered > 0) text += fmt::format(" + gathered units {}", gib_text(m.gathered));
  if (m.buffers > 0) text += fmt::format(" + communication buffers {}", gib_text(m.buffers));
  if (m.host > 0) text += fmt::format("; host memory {} (offloaded)", gib_text(m.host));
  if (m.transient_step > m.activations + m.gathered + m.buffers)
    text += fmt::format(" (the optimizer step's {} of temporaries outweigh the backward's)", gib_text(m.transient_step));
  return text;
}

namespace {
std::string examples(const FitRequest& r) {
  const double per_rank = r.global_batch / std::max(1, r.world_size) / std::max(1, r.micro_batches);
  return fmt::format("{:g} example{} per micro-batch", per_rank, per_rank == 1 ? "" : "s");
}
}  // namespace

std::string fit_line(const FitRequest& r, const FitCheck& c) {
  return fmt::format("memory per rank: about {} for {} at world size {} ({}, {}), of the {} of {}", gib_text(c.peak),
                     r.strategy, r.world_size, fit_breakdown(c.estimate.memory), examples(r), gib_text(r.device_memory),
                     r.device_memory_source);
}

std::string fit_refusal(const FitRequest& r, const FitCheck& c) {
  return fmt::format("strategy '{}' at world size {} needs about {} per rank ({}, {}; {} parameters, {} with {} "
                     "optimizer state), more than the {} of {}.{}",
                     r.strategy, r.world_size, gib_text(c.peak), fit_breakdown(c.estimate.memory), examples(r),
                     fmt::format("{:.4g}", r.parameters), r.param_dtype, r.optimizer == "sgd" ? "SGD" : "AdamW",
                     gib_text(r.device_memory), r.device_memory_source,
                     c.estimate.coarse ? " (the strategy declares no schedule: counted as a full replica)" : "") +
         (r.host_memory > 0 && c.estimate.memory.host > r.host_memory
              ? fmt::format(" Its offloaded state needs {} of host memory per rank, more than the {} a rank has there.",
                            gib_text(c.estimate.memory.host), gib_text(r.host_memory))
              : std::string());
}

std::string fit_fix(const FitRequest& r, const FitCheck& c) {
  std::string fix;
  if (!c.would_fit.empty()) {
    fix = "These would fit: ";
    for (std::size_t i = 0; i < c.would_fit.size(); ++i) fix += (i ? "; " : "") + c.would_fit[i];
    fix += ". ";
  } else {
    fix = fmt::format("No strategy fits at world size {}, nor {} at a larger world size dividing the batch. ",
                      r.world_size, c.grown.empty() ? r.strategy : c.grown);
  }
  fix += "Or lower [train] global_batch_size (or raise micro_batches), set [train] activation_checkpointing = \"full\", "
         "or choose a smaller model; `strata estimate` gives every strategy's figure at each world size.";
  return fix;
}

}  // namespace strata::estimate
