#include "launch/run_checks.hpp"

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <string>

#include <fmt/format.h>

#include "ckpt/store.hpp"
#include "io/run_result.hpp"
#include "strata/errors.hpp"
#include "text/units.hpp"
#include "train/checkpointing.hpp"
#include "train/rank_run.hpp"

namespace strata {

namespace fs = std::filesystem;

namespace {
constexpr double kFloat32Bytes = 4;
}  // namespace

void check_plan_fits_world(const Experiment& e, const Registry& registry, const WorldInfo& world) {
  const auto& entry = registry.at(PluginKind::kStrategy, e.strategy.name);
  if (!entry.planner || world.world_size <= 1) return;
  PlanOutline plan;
  try {
    plan = entry.planner(e.strategy.options, Topology{world.world_size, std::max(1, world.local_world_size)});
  } catch (const OptionError& err) {
    throw e.error("strategy." + err.option(), err.what(), err.fix());
  }
  // The option that set a size, for the error's position: a group-size option holding that number.
  const auto key_of = [&](int size) {
    for (const auto& [key, value] : e.strategy.options.values())
      if (key.find("group") != std::string::npos && to_toml(value) == std::to_string(size)) return "strategy." + key;
    return std::string("strategy.name");
  };
  const int shard = plan.shard_size == 0 ? world.world_size : plan.shard_size;
  if (shard < 1 || world.world_size % shard != 0) {
    const std::string key = key_of(shard);
    throw e.error(key,
                  fmt::format("strategy '{}' shards over groups of {} ranks ({}), which does not divide this job's {} "
                              "ranks.",
                              e.strategy.name, shard, key, world.world_size),
                  fmt::format("Set {} to a divisor of {}, or run on a multiple of {} ranks (`strata describe {}` lists "
                              "its options).",
                              key == "strategy.name" ? "the strategy's shard-group option" : key, world.world_size,
                              shard, e.strategy.name));
  }
  if (plan.units.after_forward == PlanOutline::Reshard::kSubgroup) {
    const int sub = plan.units.subgroup_size == 0 ? std::min(std::max(1, world.local_world_size), shard)
                                                  : plan.units.subgroup_size;
    if (sub < 1 || shard % sub != 0) {
      const std::string key = key_of(sub);
      throw e.error(key,
                    fmt::format("strategy '{}' reshards into sub-groups of {} ranks ({}), which does not divide its "
                                "shard group of {} ranks at this job's {} ranks.",
                                e.strategy.name, sub, key, shard, world.world_size),
                    fmt::format("Set {} to a divisor of {} (`strata describe {}` lists its options).",
                                key == "strategy.name" ? "the strategy's sub-group option" : key, shard,
                                e.strategy.name));
    }
  }
}

void check_checkpoint_space(const RankRun& p, const RunPlace& place) {
  const Experiment& e = p.experiment;
  if (!saves_checkpoints(e)) return;
  const double parameters = p.model ? static_cast<double>(p.model->parameter_count())
                                    : p.estimated_parameters.value_or(0);
  const double least = parameters * kFloat32Bytes;
  std::error_code ec;
  fs::path dir = place.run_dir.empty() && !fs::path(e.checkpoint.dir).is_absolute()
                     ? fs::path(e.experiment.out_dir)
                     : checkpoint_root(e, place.run_dir);
  dir = fs::absolute(dir, ec).lexically_normal();
  while (!fs::exists(dir, ec) && dir != dir.parent_path()) dir = dir.parent_path();
  const auto space = fs::space(dir, ec);
  if (ec || static_cast<double>(space.available) >= least) return;
  throw e.error(e.checkpoint.every > 0 ? "checkpoint.every" : "checkpoint.at_end",
                fmt::format("a checkpoint of this model needs at least {} (its {:.4g} parameters as float32), but the "
                            "file system of {} has {} free.",
                            gib(least), parameters, dir.string(), gib(static_cast<double>(space.available))),
                "Free space there, point [checkpoint] dir at a larger file system, or turn checkpoints off.");
}

bool nothing_left(const RunPlace& place, const Experiment& e, int rank) {
  if (!place.resume || place.restarts > 0) return false;
  const ckpt::Checkpoint c(*place.resume);
  if (c.step() < e.train.steps) return false;
  if (place.use == RunDirUse::kContinue && read_run_result(place.run_dir).status != "ok") return false;
  if (rank == 0)
    std::cerr << fmt::format("strata: nothing to train: checkpoint {} has done step {} of train.steps = {}; {} is "
                             "left as it is. To train further, resume with more steps (--set train.steps=N).\n",
                             place.resume->string(), c.step(), e.train.steps, place.run_dir.string());
  return true;
}

}  // namespace strata
