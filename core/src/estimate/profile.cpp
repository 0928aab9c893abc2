#include "estimate/profile.hpp"

#include <algorithm>
#include <fstream>
#include <optional>
#include <sstream>

#include <fmt/format.h>

#include "config/experiment.hpp"
#include "io/atomic_file.hpp"
#include "strata/errors.hpp"
#include "strata/json.hpp"

namespace strata::estimate {

namespace {
double number_at(const Json& j, const std::string& path, double fallback) {
  const Json* v = j.at_path(path);
  return v != nullptr ? v->number_or(fallback) : fallback;
}
}  // namespace

Profile read_profile(const std::filesystem::path& run_dir, const Experiment& e) {
  const auto file = run_dir / "summary.json";
  std::ifstream in(file, std::ios::binary);
  const std::string fix = "Give --profile a run directory of `strata run` at world size 1 that finished, or leave --profile "
                          "out so that `strata estimate` runs a short profile itself.";
  if (!in) throw UsageError(fmt::format("profile {}: no summary.json there.", run_dir.string()), fix);
  std::stringstream text;
  text << in.rdbuf();
  Json j;
  try {
    j = Json::parse(text.str());
  } catch (const std::exception& ex) {
    throw UsageError(fmt::format("profile {}: summary.json is not valid JSON: {}", run_dir.string(), ex.what()), fix);
  }
  const Json* status = j.find("status");
  if (status == nullptr || status->string_or("") != "ok")
    throw UsageError(fmt::format("profile {}: the run did not finish (status {}).", run_dir.string(),
                                 status ? status->string_or("?") : "missing"), fix);
  if (number_at(j, "world_size", 1) != 1 || number_at(j, "devices", 1) != 1)
    throw UsageError(fmt::format("profile {}: the run used {} ranks and {} devices; a profile is one device.", run_dir.string(),
                                 number_at(j, "world_size", 1), number_at(j, "devices", 1)),
                     fix);
  Profile p;
  p.source = run_dir.string();
  p.device = j.find("device") ? j.find("device")->string_or("cpu") : "cpu";
  p.device_name = j.find("host") ? j.find("host")->string_or("") : "";
  p.parameters = number_at(j, "parameters", 0);
  p.global_batch = number_at(j, "global_batch_size", 1);
  p.micro_batches = static_cast<int>(number_at(j, "micro_batches", 1));
  p.step_s = number_at(j, "steady_step_time_s", number_at(j, "step_time_s", 0));
  if (const Json* q = j.find("steady_step_time_quartiles_s"); q != nullptr && q->elements() && q->elements()->size() == 2 &&
                                                              p.step_s > 0)
    p.step_spread = std::max(0.0, ((*q->elements())[1].number_or(0) - (*q->elements())[0].number_or(0)) / p.step_s);
  p.threads = static_cast<int>(number_at(j, "threads", 0));
  p.host_threads = static_cast<int>(number_at(j, "host_threads", 0));
  p.rank_threads = static_cast<int>(e.train.threads);
  // The steady step's phases (medians over the steps steady_step_time_s covers); older summaries
  // have the mean over every step only, which the first steps inflate.
  const Json* steady_compute = j.at_path("time_breakdown_steady_s.compute");
  const bool steady = steady_compute != nullptr && steady_compute->is_number();
  const std::string breakdown = steady ? "time_breakdown_steady_s." : "time_breakdown_s.";
  p.compute_s = number_at(j, breakdown + "compute", -1);
  p.optimizer_s = number_at(j, breakdown + "optimizer", 0);
  p.data_s = number_at(j, breakdown + "data", 0);
  if (p.compute_s < 0) {
    p.compute_s = std::max(0.0, p.step_s - p.optimizer_s - p.data_s);
    p.notes.push_back("the profile has no time breakdown: the whole step counts as compute");
  }
  const double phases = p.work_s();
  if (phases > p.step_s && phases > 0) {
    // Medians (or means) of the phases need not add up to the median step: scaled to it.
    const double f = p.step_s / phases;
    p.compute_s *= f;
    p.optimizer_s *= f;
    p.data_s *= f;
    if (!steady) p.notes.push_back("the profile's time breakdown is a mean over every step: scaled to its steady step");
  }
  p.other_s = std::max(0.0, p.step_s - p.compute_s - p.optimizer_s - p.data_s);
  if (p.device == "cpu" && p.host_threads <= 0)
    p.notes.push_back("the profile does not say how many threads it computed with: ranks sharing a host's cores are not modelled");
  p.state_bytes = number_at(j, "memory.model_state_bytes.params", 0) + number_at(j, "memory.model_state_bytes.grads", 0) +
                  number_at(j, "memory.model_state_bytes.optimizer", 0);
  p.peak_tensor_bytes = number_at(j, "memory.peak_tensor_bytes", 0);
  const double per_micro = p.global_batch / std::max(1, p.micro_batches);
  p.activation_bytes_per_sample = std::max(0.0, p.peak_tensor_bytes - p.state_bytes) / std::max(1.0, per_micro);
  if (const Json* shape = j.find("sample_shape"); shape != nullptr && shape->elements() != nullptr)
    for (const auto& d : *shape->elements()) p.sample_shape.push_back(static_cast<std::int64_t>(d.number_or(0)));
  p.optimizer = e.optimizer.name;
  p.momentum = e.optimizer.momentum;
  p.param_dtype = e.precision.param_dtype;
  p.reduce_dtype = e.precision.reduce_dtype;
  if (p.parameters <= 0)
    throw UsageError(fmt::format("profile {}: summary.json has no parameter count.", run_dir.string()), fix);
  p.notes.push_back("activations per example from the profile's tensor peak less its model state, scaled by each rank's batch");
  return p;
}

void attach_units(Profile& p, std::vector<UnitProfile> units) {
  double unit_total = 0;
  for (const auto& u : units) unit_total += u.params;
  if (units.empty() || unit_total != p.parameters) {
    p.notes.push_back("the model's units are unknown here: one unit of every parameter (coarser gathers and buckets)");
    return;
  }
  p.units = std::move(units);
  double measured = 0;
  bool timed = true;
  for (const auto& u : p.units) {
    timed = timed && u.forward_s >= 0 && u.backward_s >= 0;
    measured += std::max(0.0, u.forward_s) + std::max(0.0, u.backward_s);
  }
  if (!timed || measured <= 0) {
    p.notes.push_back(fmt::format("per-unit compute split by each of the {} units' share of the parameters (no per-unit "
                                  "times measured)",
                                  p.units.size()));
    return;
  }
  // The units' measured proportions of the run's steady compute (forward and backward of every micro-batch).
  const double scale = p.compute_s / measured;
  std::string shares;
  for (auto& u : p.units) {
    shares += fmt::format("{}{} {:.0f}%", shares.empty() ? "" : ", ", u.name, 100 * (u.forward_s + u.backward_s) / measured);
    u.forward_s *= scale;
    u.backward_s *= scale;
  }
  p.per_unit_times = true;
  p.notes.push_back(fmt::format("per-unit compute measured unit by unit on one micro-batch ({}), scaled to the run's "
                                "steady compute",
                                shares));
}

Json units_json(const std::vector<UnitProfile>& units) {
  Json list = Json::array();
  for (const auto& u : units) {
    Json uj = Json::object();
    uj["name"] = u.name;
    uj["params"] = u.params;
    uj["forward_s"] = u.forward_s;
    uj["backward_s"] = u.backward_s;
    uj["activation_bytes"] = u.activation_bytes;
    uj["checkpointed_activation_bytes"] = u.checkpointed_bytes;
    uj["checkpointed_backward_s"] = u.checkpointed_backward_s;
    Json shapes = Json::array();
    for (const auto& shape : u.tensors) {
      Json dims = Json::array();
      for (auto d : shape) dims.push_back(Json(static_cast<std::int64_t>(d)));
      shapes.push_back(std::move(dims));
    }
    uj["tensors"] = std::move(shapes);
    Json reads = Json::array();
    for (const auto h : u.reads_from) reads.push_back(Json(static_cast<std::int64_t>(h)));
    uj["reads_from"] = std::move(reads);
    list.push_back(std::move(uj));
  }
  return list;
}

void save_units(const std::filesystem::path& run_dir, const std::string& device, const std::vector<UnitProfile>& units) {
  Json j = Json::object();
  j["device"] = device;
  j["units"] = units_json(units);
  try {
    write_file_atomically(run_dir / "units.json", j.dump() + "\n");
  } catch (const Error&) {
    // best effort: a read-only run directory keeps none
  }
}

std::optional<std::vector<UnitProfile>> load_units(const std::filesystem::path& run_dir, const std::string& device) {
  std::ifstream in(run_dir / "units.json", std::ios::binary);
  if (!in) return std::nullopt;
  std::stringstream text;
  text << in.rdbuf();
  Json j;
  try {
    j = Json::parse(text.str());
  } catch (const std::exception&) {
    return std::nullopt;  // unreadable: profiled again
  }
  const Json* d = j.find("device");
  const Json* list = j.find("units");
  if (d == nullptr || d->string_or("") != device || list == nullptr || list->elements() == nullptr) return std::nullopt;
  std::vector<UnitProfile> units;
  for (const auto& uj : *list->elements()) {
    UnitProfile u;
    u.name = uj.find("name") ? uj.find("name")->string_or("") : "";
    u.params = number_at(uj, "params", 0);
    u.forward_s = number_at(uj, "forward_s", -1);
    u.backward_s = number_at(uj, "backward_s", -1);
    u.activation_bytes = number_at(uj, "activation_bytes", -1);
    u.checkpointed_bytes = number_at(uj, "checkpointed_activation_bytes", -1);
    u.checkpointed_backward_s = number_at(uj, "checkpointed_backward_s", -1);
    if (const Json* shapes = uj.find("tensors"); shapes != nullptr && shapes->elements() != nullptr)
      for (const auto& dims : *shapes->elements()) {
        std::vector<std::int64_t> shape;
        if (dims.elements() != nullptr)
          for (const auto& d : *dims.elements()) shape.push_back(static_cast<std::int64_t>(d.number_or(0)));
        u.tensors.push_back(std::move(shape));
      }
    if (const Json* reads = uj.find("reads_from"); reads != nullptr && reads->elements() != nullptr)
      for (const auto& h : *reads->elements())
        if (const double v = h.number_or(-1); v >= 0 && v < static_cast<double>(units.size()))
          u.reads_from.push_back(static_cast<std::size_t>(v));  // an earlier unit only
    units.push_back(std::move(u));
  }
  return units;
}

}  // namespace strata::estimate
