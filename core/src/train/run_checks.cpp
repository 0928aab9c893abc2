#include "train/run_checks.hpp"

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <string>

#include <fmt/format.h>

#include "ckpt/store.hpp"
#include "prepare.hpp"
#include "io/run_result.hpp"
#include "strata/errors.hpp"
#include "text/units.hpp"
#include "train/checkpointer.hpp"
#include "train/rank_run.hpp"

namespace strata {

namespace fs = std::filesystem;

void check_plan_fits_world(const Experiment& e, const Registry& registry, const WorldInfo& world) {
  const auto& entry = registry.at(PluginKind::kStrategy, e.strategy.name);
  if (!entry.scheduler || world.world_size <= 1) return;
  // The strategy's schedule at this job's ranks says whether its groups divide them; two units of
  // one parameter are enough for that (the last unit may stay gathered, and so need no sub-group).
  ScheduleInput input;
  input.topology = {world.world_size, std::max(1, world.local_world_size)};
  input.units = {{"unit0", 1.0, {}, 0.0, 0.0}, {"unit1", 1.0, {}, 0.0, 0.0}};  // the last unit may be planned apart
  Schedule schedule;
  try {
    schedule = entry.scheduler(e.strategy.options, input);
  } catch (const OptionError& err) {
    throw e.error("strategy." + err.option(), err.what(), err.fix());
  } catch (const Error&) {
    throw;
  } catch (const std::exception& err) {
    throw PluginError(entry.library,
                      fmt::format("strategy '{}' failed while making its schedule: {}", e.strategy.name, err.what()),
                      "The error is the plugin's: report it to its authors.");
  }
  if (schedule.applicable) return;
  const std::string key = schedule.option.empty() ? "strategy.name" : "strategy." + schedule.option;
  throw e.error(key,
                fmt::format("strategy '{}' cannot run at this job's {} ranks ({} ranks per host): {}.", e.strategy.name,
                            world.world_size, std::max(1, world.local_world_size), schedule.note),
                schedule.option.empty()
                    ? fmt::format("Run on a world size the strategy supports (`strata describe {}`).", e.strategy.name)
                    : fmt::format("Set {} to a size that divides the group it splits, or run on a world size it "
                                  "divides (`strata describe {}` lists its options).",
                                  key, e.strategy.name));
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
