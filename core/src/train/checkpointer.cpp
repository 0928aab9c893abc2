#include "train/checkpointer.hpp"

#include <ATen/Context.h>
#include <c10/core/Event.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <set>

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>

#include "io/atomic_file.hpp"
#include "io/build_info.hpp"
#include "io/run_dir.hpp"
#include "io/safetensors.hpp"
#include "strata/errors.hpp"
#include "strata/model.hpp"
#include "text/shape_text.hpp"

namespace strata {

namespace fs = std::filesystem;

Json training_keys(const Experiment& e) {
  // Keys that change where things go or how fast, not what is computed; steps may grow.
  static const std::set<std::string> free_keys = {
      "train.steps",       "train.save_final", "train.save_format",   "train.sync_timing", "train.device",
      "train.threads",     "train.init_from",  "train.init_partial",  "train.micro_batches",
      "train.activation_checkpointing", "train.activation_checkpointing_every", "train.peak_tflops",
      "train.deterministic", "train.sync_audit", "train.timing_warmup_steps", "dataset.path"};
  Json keys = Json::object();
  for (const auto& [key, value] : resolved_values(e)) {
    const std::string section = key.substr(0, key.find('.'));
    const bool training = section == "model" || section == "dataset" || section == "optimizer" ||
                          section == "train" || section == "precision";
    if (training && !free_keys.count(key)) keys[key] = value;
  }
  return keys;
}

Json data_spec_json(const DataSpec& spec) {
  Json j = Json::object();
  Json shape = Json::array();
  for (const auto d : spec.input_shape) shape.push_back(Json(d));
  j["input_shape"] = shape;
  j["input_dtype"] = safetensors_dtype_name(spec.input_dtype);
  j["num_classes"] = spec.num_classes;
  j["vocab_size"] = spec.vocab_size;
  j["seq_len"] = spec.seq_len;
  j["pad_id"] = spec.pad_id;
  j["ignored_targets"] = spec.ignored_targets;
  j["targets_per_sample"] = spec.targets_per_sample;
  return j;
}

DataSpec data_spec_from(const Json& j) {
  DataSpec spec;
  const auto integer = [&](const char* key, std::int64_t fallback) {
    const Json* v = j.find(key);
    return v != nullptr ? static_cast<std::int64_t>(v->number_or(static_cast<double>(fallback))) : fallback;
  };
  if (const Json* shape = j.find("input_shape"); shape != nullptr && shape->elements() != nullptr)
    for (const auto& d : *shape->elements()) spec.input_shape.push_back(static_cast<std::int64_t>(d.number_or(0)));
  if (const Json* dtype = j.find("input_dtype")) spec.input_dtype = safetensors_dtype(dtype->string_or("F32"));
  spec.num_classes = integer("num_classes", 0);
  spec.vocab_size = integer("vocab_size", 0);
  spec.seq_len = integer("seq_len", 0);
  spec.pad_id = integer("pad_id", -1);
  spec.ignored_targets = j.find("ignored_targets") != nullptr && j.find("ignored_targets")->bool_or(false);
  spec.targets_per_sample = integer("targets_per_sample", 1);
  return spec;
}

namespace {

/// Throws a ConfigError naming every training key that differs from the checkpoint's.
void check_training_keys(const Experiment& e, const Json& saved, const fs::path& dir, std::int64_t step) {
  const Json now = training_keys(e);
  std::vector<std::string> differ;
  std::string first;
  const auto value = [](const Json& keys, const std::string& key) {
    const Json* v = keys.find(key);
    return v != nullptr ? v->string_or("?") : std::string("(absent)");
  };
  std::set<std::string> all;
  for (const auto* keys : {&now, &saved})
    if (keys->members())
      for (const auto& [key, v] : *keys->members()) all.insert(key);
  for (const auto& key : all) {
    const std::string a = value(saved, key), b = value(now, key);
    if (a == b) continue;
    if (first.empty()) first = key;
    differ.push_back(fmt::format("{} = {} (checkpoint: {})", key, b, a));
  }
  if (!differ.empty())
    throw e.error(first,
                  fmt::format("this experiment differs from the one that saved checkpoint {} in {} training key{}: "
                              "{}.",
                              dir.string(), differ.size(), differ.size() == 1 ? "" : "s", fmt::join(differ, "; ")),
                  fmt::format("Resume with the experiment that saved it ({} is its resolved config), or start a new "
                              "run; strategy, world size, micro_batches, evaluation, logging and outputs may change, "
                              "and steps may grow.",
                              (dir / "config.toml").string()));
  if (e.train.steps < step)
    throw e.error("train.steps",
                  fmt::format("steps = {} is below the checkpoint's step {} ({}).", e.train.steps, step, dir.string()),
                  "Resume with at least as many steps as the checkpoint has done.");
}

/// The generators a rank's training draws from: the CPU's and its CUDA device's.
std::vector<std::pair<std::string, at::Generator>> generators(const torch::Device& device) {
  std::vector<std::pair<std::string, at::Generator>> out{{"cpu", at::globalContext().defaultGenerator(torch::kCPU)}};
  if (device.is_cuda()) out.emplace_back("cuda", at::globalContext().defaultGenerator(device));
  return out;
}

}  // namespace

Checkpointer::Checkpointer(const Experiment& e, Strategy& strategy, Comm& comm, const Logger& log, fs::path run_dir,
                           bool asked, std::function<void(const std::string&)> barrier)
    : e_(e),
      strategy_(strategy),
      comm_(comm),
      log_(log),
      run_dir_(std::move(run_dir)),
      root_(checkpoint_root(e, run_dir_)),
      run_id_(run_id(run_dir_).empty() ? run_claim() : run_id(run_dir_)),
      barrier_(std::move(barrier)) {
  state_ = dynamic_cast<ShardedState*>(&strategy_);
  if (asked && state_ == nullptr)
    throw e_.error(e_.checkpoint.every > 0 ? "checkpoint.every" : "checkpoint.at_end",
                   fmt::format("strategy '{}' cannot be checkpointed: it does not implement strata::ShardedState.",
                               e_.strategy.name),
                   "Turn checkpoints off for this strategy, or implement ShardedState (strata/sharded_state.hpp); "
                   "strategies built on the kit's strata::Engine have it.");
}

bool Checkpointer::due(std::int64_t step) const {
  if (state_ == nullptr || step == last_step_) return false;
  return (e_.checkpoint.every > 0 && step % e_.checkpoint.every == 0) || (e_.checkpoint.at_end && step == e_.train.steps);
}

std::vector<TensorPiece> Checkpointer::rng_pieces(bool save) const {
  std::vector<TensorPiece> pieces;
  for (auto& [kind, gen] : generators(comm_.device())) {
    torch::Tensor state;
    {
      std::lock_guard<std::mutex> lock(gen.mutex());
      state = gen.get_state();
    }
    if (!save) state = torch::empty_like(state);
    pieces.push_back({fmt::format("rng/{}/{}", comm_.rank(), kind), {state.numel()}, 0, state.numel(), state});
  }
  return pieces;
}

namespace {

/// Test hook: STRATA_FAULT=slow-writer:SECONDS makes the writer thread of an asynchronous save
/// wait that long before it writes, so that training runs on meanwhile (and the next save waits).
void slow_writer() {
  const char* fault = std::getenv("STRATA_FAULT");
  double seconds = 0;
  if (fault != nullptr && std::sscanf(fault, "slow-writer:%lf", &seconds) == 1 && seconds > 0)
    std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
}

}  // namespace

ckpt::SaveResult Checkpointer::save(std::int64_t step, Json trainer) {
  const auto t0 = std::chrono::steady_clock::now();
  if (writer_.joinable()) {  // at most one save in flight: this one waits for the last
    if (comm_.rank() == 0 && !writer_done_.load())
      log_.info(fmt::format("checkpoint at step {} waits for the one of step {}, still being written", step,
                            pending_step_));
    collect();
  }
  ckpt::SaveInput in;
  in.root = root_;
  in.step = step;
  in.keep = e_.checkpoint.keep;
  in.run_id = run_id_;
  in.barrier = barrier_;
  in.pieces = state_->state_pieces(StateAccess::kSave, /*optimizer=*/true);
  for (auto& p : rng_pieces(true)) in.pieces.push_back(std::move(p));
  if (comm_.rank() == 0) {
    trainer["training_keys"] = training_keys(e_);
    in.files = {{"trainer.json", trainer.dump(1) + "\n"}, {"config.toml", resolved_toml(e_)}};
    in.info["strategy"] = e_.strategy.name;
    in.info["experiment"] = e_.experiment.name;
    in.info["run_dir"] = fs::absolute(run_dir_).lexically_normal().string();
  }
  last_step_ = step;
  ++saves_;
  if (!e_.checkpoint.async) {
    last_ = ckpt::save(in, comm_);
    save_time_s_ += last_.seconds;
    stall_s_ += last_.seconds;
    log_saved(step, last_);
    return last_;
  }
  // Asynchronous: the pieces are copied to host memory (pinned staging buffers, reused, on a GPU),
  // then a writer thread writes and commits them. Its barriers go through the job's store, never
  // the process group, so training's collectives go on meanwhile in the same order on every rank.
  std::optional<c10::Event> ready = snapshot(in.pieces);
  pending_step_ = step;
  writer_done_ = false;
  writer_ = std::thread([this, in = std::move(in), ready = std::move(ready)]() mutable {
    try {
      if (ready) ready->synchronize();  // the device-to-host copies have landed
      slow_writer();
      pending_ = ckpt::save(in, comm_);
    } catch (...) {
      writer_error_ = std::current_exception();
    }
    writer_done_ = true;
  });
  ckpt::SaveResult staged;
  staged.dir = root_ / ckpt::step_dir_name(step);
  staged.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  stall_s_ += staged.seconds;
  if (comm_.rank() == 0)
    log_.info(fmt::format("checkpoint at step {}: state copied in {:.2f} s, written in the background to {}", step,
                          staged.seconds, staged.dir.string()));
  return staged;
}

std::optional<c10::Event> Checkpointer::snapshot(std::vector<TensorPiece>& pieces) {
  const bool device = comm_.device().type() != torch::kCPU;
  if (staging_.size() != pieces.size()) staging_.assign(pieces.size(), torch::Tensor());
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    const torch::Tensor& data = pieces[i].data;
    torch::Tensor& host = staging_[i];
    if (!host.defined() || host.sizes() != data.sizes() || host.scalar_type() != data.scalar_type())
      host = torch::empty(data.sizes(), data.options().device(torch::kCPU).pinned_memory(device && data.is_cuda()));
    host.copy_(data, /*non_blocking=*/device);
    pieces[i].data = host;
  }
  if (!device) return std::nullopt;
  c10::Event ready(comm_.device().type());
  ready.record(c10::impl::VirtualGuardImpl(comm_.device().type()).getStream(comm_.device()));
  return ready;
}

void Checkpointer::collect() {
  if (!writer_.joinable()) return;
  writer_.join();
  if (writer_error_) {
    auto error = writer_error_;
    writer_error_ = nullptr;
    std::rethrow_exception(error);
  }
  last_ = pending_;
  save_time_s_ += last_.seconds;
  log_saved(pending_step_, last_);
}

void Checkpointer::poll() {
  if (writer_.joinable() && writer_done_.load()) collect();
}

void Checkpointer::finish() { collect(); }

Checkpointer::~Checkpointer() {
  if (writer_.joinable()) writer_.join();  // a failed run: the save ends (or its barrier times out) first
}

void Checkpointer::log_saved(std::int64_t step, const ckpt::SaveResult& r) const {
  if (comm_.rank() != 0) return;
  log_.info(fmt::format("checkpoint at step {}: {} ({:.1f} MiB, at most {:.1f} MiB per rank, {:.2f} s{})", step,
                        r.dir.string(), static_cast<double>(r.total_bytes) / (1 << 20),
                        static_cast<double>(r.max_rank_bytes) / (1 << 20), r.seconds,
                        e_.checkpoint.async ? ", in the background" : ""));
  if (!r.removed.empty()) log_.info("removed older checkpoints: " + fmt::format("{}", fmt::join(r.removed, ", ")));
}

namespace {

/// The model's tensors as a checkpoint names them ("model/<name>"), with their shapes.
std::map<std::string, std::vector<std::int64_t>> checkpoint_tensors(const Model& model) {
  std::map<std::string, std::vector<std::int64_t>> out;
  const auto add = [&](const std::string& name, const torch::Tensor& t) { out["model/" + name] = t.sizes().vec(); };
  for (const auto& [name, p] : unique_trainable_parameters(model)) add(name, p);
  for (const auto& p : model.named_parameters())
    if (!p.value().requires_grad()) add(p.key(), p.value());
  for (const auto& b : model.named_buffers()) add(b.key(), b.value());
  return out;
}

/// ConfigError at model.name unless checkpoint `c` holds exactly `model`'s tensors and shapes.
void check_checkpoint_holds_model(const Experiment& e, const ckpt::Checkpoint& c, const Model& model) {
  const auto expected = checkpoint_tensors(model);
  std::vector<std::string> missing, extra, reshaped;
  for (const auto& [name, shape] : expected) {
    if (!c.has(name)) missing.push_back(name.substr(6));
    else if (c.shape(name) != shape)
      reshaped.push_back(fmt::format("{} {} (checkpoint: {})", name.substr(6), shape_text(shape), shape_text(c.shape(name))));
  }
  for (const auto& name : c.names())
    if (name.rfind("model/", 0) == 0 && !expected.count(name)) extra.push_back(name.substr(6));
  if (missing.empty() && extra.empty() && reshaped.empty()) return;
  std::vector<std::string> parts;
  if (!reshaped.empty()) parts.push_back(fmt::format("another shape: {}", fmt::join(reshaped, "; ")));
  if (!missing.empty()) parts.push_back(fmt::format("not in the checkpoint: {}", fmt::join(missing, ", ")));
  if (!extra.empty()) parts.push_back(fmt::format("not in the model: {}", fmt::join(extra, ", ")));
  throw e.error("model.name",
                fmt::format("checkpoint {} does not hold this model ({}): {}.", c.dir().string(), e.model.name,
                            fmt::join(parts, "; ")),
                fmt::format("Resume with the model that saved it ({} is its resolved config).",
                            (c.dir() / "config.toml").string()));
}

/// ConfigError at dataset unless the data is described as the checkpoint's was.
void check_data_fits(const Experiment& e, const fs::path& dir, const Json& trainer, const DataSpec& now) {
  const Json* saved_json = trainer.find("data");
  if (saved_json == nullptr) return;  // a checkpoint from before data descriptions were saved
  const DataSpec saved = data_spec_from(*saved_json);
  std::vector<std::string> differ;
  const auto same = [&](const char* what, auto a, auto b) {
    if (a != b) differ.push_back(fmt::format("{} {} (checkpoint: {})", what, a, b));
  };
  if (now.input_shape != saved.input_shape)
    differ.push_back(fmt::format("input shape {} (checkpoint: {})", shape_text(now.input_shape),
                                 shape_text(saved.input_shape)));
  same("classes", now.num_classes, saved.num_classes);
  same("vocabulary", now.vocab_size, saved.vocab_size);
  same("sequence length", now.seq_len, saved.seq_len);
  if (differ.empty()) return;
  throw e.error(e.dataset.options.values().count("path") ? "dataset.path" : "dataset.name",
                fmt::format("the data of this run is not the data checkpoint {} was trained on: {}.", dir.string(),
                            fmt::join(differ, "; ")),
                "Resume on the data set that saved it (dataset.path may move, not change).");
}

}  // namespace

void check_resume(const Experiment& e, const fs::path& dir, const ResumeSubject& subject) {
  const ckpt::Checkpoint c(dir);
  const Json trainer = Json::parse(c.file_text("trainer.json"));
  const Json* keys = trainer.find("training_keys");
  check_training_keys(e, keys != nullptr ? *keys : Json::object(), dir, c.step());
  if (subject.strategy != nullptr && dynamic_cast<const ShardedState*>(subject.strategy) == nullptr)
    throw e.error("strategy.name",
                  fmt::format("strategy '{}' cannot resume a checkpoint: it does not implement strata::ShardedState.",
                              e.strategy.name),
                  "Resume under a strategy that has it (every built-in strategy does).");
  if (subject.model != nullptr) check_checkpoint_holds_model(e, c, *subject.model);
  if (subject.data != nullptr) check_data_fits(e, dir, trainer, *subject.data);
  if (subject.verify_data) c.verify();
}

Resumed Checkpointer::load(const fs::path& dir) {
  const ckpt::Checkpoint c(dir);
  Resumed r{dir, c.step(), Json::parse(c.file_text("trainer.json"))};
  // strata run checked all of it before it wrote anything (check_resume); again here, for a
  // caller that did not, and for the checkpoint as it is now.
  check_resume(e_, dir, {&strategy_.model(), &strategy_, nullptr});
  bool optimizer = false;
  for (const auto& name : c.names()) optimizer = optimizer || name.rfind("optim/", 0) == 0;
  c.read_into(state_->state_pieces(StateAccess::kLoad, optimizer));
  state_->state_loaded();

  const Json* world_json = c.metadata().find("world_size");
  const auto saved_world = static_cast<int>(world_json != nullptr ? world_json->number_or(0) : 0);
  if (saved_world == comm_.world_size()) {
    auto pieces = rng_pieces(false);
    std::vector<TensorPiece> present;
    for (auto& p : pieces)
      if (c.has(p.name)) present.push_back(p);
    c.read_into(present);
    auto gens = generators(comm_.device());
    for (auto& p : present)
      for (auto& [kind, gen] : gens)
        if (p.name.substr(p.name.rfind('/') + 1) == kind) {
          std::lock_guard<std::mutex> lock(gen.mutex());
          gen.set_state(p.data);
        }
  } else if (comm_.rank() == 0) {
    log_.info(fmt::format("random generators not restored: the checkpoint was saved by {} ranks, this run has {} "
                          "(dropout draws new masks; data order and parameters are unaffected)",
                          saved_world, comm_.world_size()));
  }
  last_step_ = r.step;
  resumed_ = r;
  if (comm_.rank() == 0)
    log_.info(fmt::format("resumed from {} (step {}, saved by {} at world size {})", dir.string(), r.step,
                          c.metadata().find("strategy") ? c.metadata().find("strategy")->string_or("?") : "?",
                          saved_world));
  return r;
}

Json Checkpointer::summary() const {
  Json s = Json::object();
  s["dir"] = root_.string();
  s["saves"] = saves_;
  s["save_time_s"] = save_time_s_;
  s["async"] = e_.checkpoint.async;
  s["stall_s"] = stall_s_;  // what the saves cost the training thread (all of save_time_s when synchronous)
  s["last_step"] = saves_ > 0 ? Json(last_step_) : Json();
  s["last_save_s"] = saves_ > 0 ? Json(last_.seconds) : Json();
  s["bytes_per_rank"] = saves_ > 0 ? Json(last_.max_rank_bytes) : Json();  // the most any rank wrote, last save
  s["total_bytes"] = saves_ > 0 ? Json(last_.total_bytes) : Json();
  s["resumed_from"] = resumed_ ? Json(resumed_->dir.string()) : Json();
  s["resumed_step"] = resumed_ ? Json(resumed_->step) : Json();
  return s;
}

}  // namespace strata
