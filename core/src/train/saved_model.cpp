#include "train/saved_model.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <fstream>
#include <functional>
#include <iterator>
#include <memory>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/csrc/jit/serialization/pickle.h>
#include <torch/utils.h>

#include "io/atomic_file.hpp"
#include "io/json.hpp"
#include "io/run_dir.hpp"
#include "io/safetensors.hpp"
#include "strata/errors.hpp"
#include "text/shape_text.hpp"
#include "train/model_diff.hpp"

namespace strata {

void save_state_dict(const StateDict& state, const std::filesystem::path& file) {
  c10::Dict<std::string, at::Tensor> dict;
  for (const auto& [name, tensor] : state) dict.insert(name, tensor.detach().to(torch::kCPU).contiguous());
  const auto bytes = torch::jit::pickle_save(c10::IValue(dict));
  AtomicFile out(file);
  out.write(bytes.data(), bytes.size(), "the model");
  out.commit();
}

std::map<std::string, torch::Tensor> read_state_dict(const std::filesystem::path& file, const std::string& where,
                                                     const std::string& fix) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw Error(where + " cannot be opened.", fix);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  c10::IValue value;
  try {
    value = torch::jit::pickle_load(bytes);
  } catch (const std::exception&) {
    throw Error(where + " is not a saved model (not a torch.save file).", fix);
  }
  if (!value.isGenericDict()) throw Error(where + " does not hold a dict of tensors.", fix);
  std::map<std::string, at::Tensor> saved;
  for (const auto& entry : value.toGenericDict()) {
    if (!entry.key().isString() || !entry.value().isTensor())
      throw Error(where + " holds an entry that is not a named tensor.", fix);
    saved.emplace(entry.key().toStringRef(), entry.value().toTensor());
  }
  return saved;
}

namespace {

namespace fs = std::filesystem;

/// A tensor of a saved model, read only when the model takes it.
struct StoredTensor {
  std::vector<std::int64_t> shape;
  torch::ScalarType dtype{};
  std::function<torch::Tensor()> read;
};
/// The tensors of a saved model by their name in the file, and how to talk about the file.
struct Stored {
  std::map<std::string, StoredTensor> tensors;
  std::string where;  // "train.init_from: <file>"
  std::string fix;
};

/// "a, b, c ... and 7 more"
std::string listing(const std::vector<std::string>& items, std::size_t cap = 8) {
  const auto shown = static_cast<std::ptrdiff_t>(std::min(cap, items.size()));
  std::string text = fmt::format("{}", fmt::join(items.begin(), items.begin() + shown, ", "));
  if (items.size() > cap) text += fmt::format(" ... and {} more", items.size() - cap);
  return text;
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

/// Rotary-embedding frequency tables: derived from the config, carried by some Hugging Face files.
bool ignorable(const std::string& name) {
  return name == "rotary_emb.inv_freq" || ends_with(name, ".rotary_emb.inv_freq");
}

/// True when `file` starts like a safetensors file: a header length within the file, then '{'.
bool looks_like_safetensors(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  unsigned char head[9];
  if (!in.read(reinterpret_cast<char*>(head), sizeof head)) return false;
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | head[i];
  std::error_code ec;
  const auto size = fs::file_size(file, ec);
  return !ec && n >= 2 && n <= size - 8 && head[8] == '{';
}

void add_safetensors(Stored& stored, const std::shared_ptr<SafetensorsFile>& file,
                     const std::vector<std::string>& names) {
  for (const auto& name : names) {
    const auto* entry = file->find(name);
    stored.tensors[name] = {entry->shape, safetensors_dtype(entry->dtype), [file, name] { return file->read(name); }};
  }
}

Stored from_safetensors(const fs::path& file, std::string where, std::string fix) {
  Stored stored{{}, std::move(where), std::move(fix)};
  std::shared_ptr<SafetensorsFile> reader;
  try {
    reader = std::make_shared<SafetensorsFile>(file);
  } catch (const Error& e) {
    throw Error("train.init_from: " + std::string(e.what()), e.fix());
  }
  std::vector<std::string> names;
  for (const auto& entry : reader->entries()) names.push_back(entry.name);
  add_safetensors(stored, reader, names);
  return stored;
}

/// A sharded checkpoint: the index's weight_map names each tensor's file (relative to the index).
Stored from_index(const fs::path& index, std::string where, std::string fix) {
  Stored stored{{}, std::move(where), std::move(fix)};
  std::ifstream in(index, std::ios::binary);
  if (!in) throw Error(stored.where + " cannot be opened.", stored.fix);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  Json json;
  try {
    json = Json::parse(text);
  } catch (const Error& e) {
    throw Error(stored.where + " is not valid JSON (" + e.what() + ").", stored.fix);
  }
  const Json* map = json.find("weight_map");
  if (map == nullptr || map->members() == nullptr)
    throw Error(stored.where + " has no \"weight_map\" object (tensor name -> file), so it is not a sharded "
                "checkpoint index.", stored.fix);
  std::map<std::string, std::vector<std::string>> by_file;
  for (const auto& [name, file] : *map->members()) {
    if (!file.is_string() || file.string_or("").empty())
      throw Error(stored.where + ": weight_map entry " + name + " is not a file name.", stored.fix);
    by_file[file.string_or("")].push_back(name);
  }
  for (const auto& [file, names] : by_file) {
    const fs::path shard = index.parent_path() / file;
    std::shared_ptr<SafetensorsFile> reader;
    try {
      reader = std::make_shared<SafetensorsFile>(shard);
    } catch (const Error& e) {
      throw Error(stored.where + ": shard " + file + ": " + e.what(), e.fix());
    }
    std::vector<std::string> absent;
    for (const auto& name : names)
      if (reader->find(name) == nullptr) absent.push_back(name);
    if (!absent.empty())
      throw Error(fmt::format("{}: the weight_map puts {} in {}, which holds no such tensor.", stored.where,
                              listing(absent), shard.string()),
                  stored.fix);
    add_safetensors(stored, reader, names);
  }
  return stored;
}

Stored from_pt(const fs::path& file, std::string where, std::string fix) {
  Stored stored{{}, std::move(where), std::move(fix)};
  for (auto& [name, tensor] : read_state_dict(file, stored.where, stored.fix))
    stored.tensors[name] = {tensor.sizes().vec(), tensor.scalar_type(), [tensor] { return tensor; }};
  return stored;
}

/// Opens what `path` names (see load_state_dict).
Stored open_saved_model(const fs::path& path) {
  const std::string hf_fix = "Point init_from at a final_model.pt or final_model directory saved with "
                             "`save_final = true`, or at a Hugging Face model directory or safetensors file.";
  fs::path file = path;
  if (fs::is_directory(path)) {
    file = path / "model.safetensors";
    if (!fs::is_regular_file(file)) file = path / "model.safetensors.index.json";
    if (!fs::is_regular_file(file)) {
      // A run directory holds the saved model one level down.
      std::string fix = hf_fix;
      for (const char* saved : {"final_model", "final_model.pt"})
        if (fs::exists(path / saved))
          fix = "This is a run directory; point init_from at " + (path / saved).string() + ".";
      throw Error("train.init_from: the directory " + path.string() +
                      " holds neither model.safetensors nor model.safetensors.index.json.",
                  fix);
    }
  }
  const std::string where = "train.init_from: " + file.string();
  if (ends_with(file.filename().string(), ".index.json")) return from_index(file, where, hf_fix);
  if (file.extension() == ".safetensors" || looks_like_safetensors(file)) return from_safetensors(file, where, hf_fix);
  return from_pt(file, where,
                 "Use a final_model.pt saved (save_final = true) from a run with the same [model] section.");
}

}  // namespace

void check_saved_model(const std::filesystem::path& path) {
  fs::path file = path;
  if (fs::is_directory(path) || ends_with(path.filename().string(), ".index.json") ||
      path.extension() == ".safetensors") {
    open_saved_model(path);  // headers and the index only: no tensor is read
    return;
  }
  const std::string where = "train.init_from: " + path.string();
  const std::string fix = "Point init_from at a final_model.pt or final_model directory saved with `save_final = true`, "
                          "or at a Hugging Face model directory or safetensors file.";
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) throw Error(where + " is neither a file nor a directory.", fix);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error(fmt::format("{} cannot be opened: {}.", where, errno_text()), fix);
  unsigned char head[9] = {};
  const bool read = pread_all(fd, head, sizeof head, 0);
  const std::string reason = errno != 0 ? errno_text() : std::string("the file is shorter than any saved model");
  ::close(fd);
  if (!read) throw Error(fmt::format("{} cannot be read: {}.", where, reason), fix);
  if (looks_like_safetensors(path)) {
    open_saved_model(path);
    return;
  }
  // torch.save writes a zip archive: a local file header first.
  if (!(head[0] == 'P' && head[1] == 'K' && head[2] == 3 && head[3] == 4))
    throw Error(where + " is not a saved model (neither a torch.save file nor safetensors).", fix);
}

std::string load_state_dict(Model& model, const std::filesystem::path& path, bool partial) {
  const Stored stored = open_saved_model(path);
  struct Target {
    std::string name;
    torch::Tensor tensor;
    bool buffer;
    std::vector<std::string> sources;  // names in the file that hold it (aliases must agree)
  };
  std::vector<Target> targets;
  std::map<std::string, std::size_t> by_name;  // Strata and external names -> target
  for (const auto& p : model.named_parameters()) targets.push_back({p.key(), p.value(), false, {}});
  for (const auto& b : model.named_buffers()) targets.push_back({b.key(), b.value(), true, {}});
  for (std::size_t i = 0; i < targets.size(); ++i) by_name.emplace(targets[i].name, i);
  const auto external = model.external_names();
  std::set<std::string> has_external;
  for (const auto& [strata_name, external_name] : external) {
    has_external.insert(strata_name);
    if (auto it = by_name.find(strata_name); it != by_name.end()) by_name.emplace(external_name, it->second);
  }

  std::vector<std::string> unexpected, missing, mismatched;
  for (const auto& [name, t] : stored.tensors) {
    if (auto it = by_name.find(name); it != by_name.end()) targets[it->second].sources.push_back(name);
    else if (!ignorable(name)) unexpected.push_back(name + " " + shape_text(t.shape));
  }
  // A tensor the model registers under two names (tied weights) is loaded when either name is found.
  const auto loaded_elsewhere = [&](const Target& target) {
    return std::any_of(targets.begin(), targets.end(), [&](const Target& other) {
      return !other.sources.empty() && other.tensor.is_same(target.tensor);
    });
  };
  for (const auto& target : targets) {
    if (target.sources.empty()) {
      // Derived buffers (e.g. rotary tables) have no place in the external format.
      const bool derived = target.buffer && !external.empty() && !has_external.count(target.name);
      if (!derived && !loaded_elsewhere(target))
        missing.push_back(target.name + " " + shape_text(target.tensor.sizes().vec()));
      continue;
    }
    for (const auto& source : target.sources) {
      const auto& t = stored.tensors.at(source);
      const std::string label = source == target.name ? source : source + " = " + target.name;
      if (t.shape != target.tensor.sizes().vec())
        mismatched.push_back(fmt::format("{} (file {}, model {})", label, shape_text(t.shape),
                                         shape_text(target.tensor.sizes().vec())));
      else if (t.dtype != target.tensor.scalar_type() &&
               !(c10::isFloatingType(t.dtype) && c10::isFloatingType(target.tensor.scalar_type())))
        mismatched.push_back(fmt::format("{} (file dtype {}, model {})", label, c10::toString(t.dtype),
                                         c10::toString(target.tensor.scalar_type())));
    }
  }
  std::string skipped;  // partial: what was left as it was, for the log
  if (partial && mismatched.empty() && (!missing.empty() || !unexpected.empty())) {
    if (!missing.empty()) skipped += fmt::format("kept their fresh initialization: {}", listing(missing));
    if (!unexpected.empty())
      skipped += fmt::format("{}not used from the file: {}", skipped.empty() ? "" : "; ", listing(unexpected));
    missing.clear();
    unexpected.clear();
  }
  if (!missing.empty() || !mismatched.empty() || !unexpected.empty()) {
    std::string what = stored.where + " does not fit the model:";
    if (!missing.empty()) what += fmt::format(" missing {};", listing(missing));
    if (!mismatched.empty()) what += fmt::format(" wrong shape or dtype {};", listing(mismatched));
    if (!unexpected.empty()) what += fmt::format(" not in the model {};", listing(unexpected));
    what.back() = '.';
    throw Error(what, stored.fix);
  }
  // Every name that reaches one tensor (aliases in the file, tied names in the model) must agree.
  torch::NoGradGuard no_grad;
  std::map<const void*, std::string> filled;  // tensor -> the file name it was read from
  for (auto& target : targets) {
    for (const auto& source : target.sources) {
      const auto value = stored.tensors.at(source).read().to(target.tensor.scalar_type());
      auto [first, fresh] = filled.emplace(target.tensor.unsafeGetTensorImpl(), source);
      if (fresh) {
        target.tensor.copy_(value);
      } else if (!torch::equal(value, target.tensor)) {
        throw Error(fmt::format("{}: {} and {} both hold the model's {}, but their values differ.", stored.where,
                                first->second, source, target.name),
                    "This model ties those tensors; use a checkpoint where they are equal (or untie them).");
      }
    }
  }
  return skipped;
}

std::string write_model(const Model& model, const StateDict& state, const std::filesystem::path& target,
                        const std::string& form) {
  if (form == "pt") {
    save_state_dict(state, target);
    return "";
  }
  if (form != "safetensors" && form != "directory")
    throw Error("unknown model form \"" + form + "\"; available: pt, safetensors, directory.");
  std::map<std::string, std::string> external;  // the first external name of each tensor
  for (const auto& [strata_name, external_name] : model.external_names()) external.emplace(strata_name, external_name);
  std::set<std::string> buffers;
  for (const auto& b : model.named_buffers()) buffers.insert(b.key());
  std::string unnamed;  // a parameter without an external name
  for (const auto& [name, tensor] : state)
    if (!external.count(name) && !buffers.count(name) && unnamed.empty()) unnamed = name;
  std::string note;
  StateDict out;
  if (!external.empty() && unnamed.empty()) {
    for (const auto& [name, tensor] : state)
      if (auto it = external.find(name); it != external.end()) out.emplace_back(it->second, tensor);
    note = ", external names";
  } else {
    out = state;
    if (!external.empty()) note = ", Strata names: the model gives " + unnamed + " no external name";
  }
  if (form == "safetensors") {
    write_safetensors(target, out, {{"format", "pt"}});
    return note;
  }
  std::error_code ec;
  fs::create_directories(target, ec);
  if (ec) throw Error("cannot create " + target.string() + ": " + ec.message() + ".", "Check permissions.");
  write_safetensors(target / "model.safetensors", out, {{"format", "pt"}});
  if (const auto config = model.external_config(); !config.empty()) {
    write_text_file(target / "config.json", config);
    note += ", config.json";
  }
  return note;
}

SavedModel write_final_model(const Model& model, const StateDict& state, const std::filesystem::path& run_dir,
                             const std::string& format) {
  if (format == "pt") return {"final_model.pt", write_model(model, state, run_dir / "final_model.pt", "pt")};
  if (format != "safetensors") throw Error("unknown save format \"" + format + "\"; available: pt, safetensors.");
  return {"final_model", write_model(model, state, run_dir / "final_model", "directory")};
}

}  // namespace strata

namespace strata {

ModelDifference compare_saved_models(const std::filesystem::path& reference, const std::filesystem::path& candidate) {
  ModelDifference d;
  std::map<std::string, torch::Tensor> a, b;
  try {
    a = read_state_dict(reference, reference.string(), "");
    b = read_state_dict(candidate, candidate.string(), "");
  } catch (const Error& e) {
    d.problem = e.what();
    return d;
  }
  for (const auto& [name, ta] : a) {
    auto it = b.find(name);
    if (it == b.end()) {
      d.problem = fmt::format("{} has no tensor {}", candidate.filename().string(), name);
      return d;
    }
    if (it->second.sizes() != ta.sizes()) {
      d.problem = fmt::format("{}: shape {} against {}", name, fmt::join(it->second.sizes(), "x"),
                              fmt::join(ta.sizes(), "x"));
      return d;
    }
    const auto x = ta.to(torch::kFloat64), y = it->second.to(torch::kFloat64);
    const double scale = std::max(x.abs().max().item<double>(), 1e-30);
    const double rel = (x - y).abs().max().item<double>() / scale;
    if (!(rel <= d.max_rel)) {  // NaN counts as the worst
      d.max_rel = rel;
      d.tensor = name;
    }
  }
  if (a.size() != b.size()) d.problem = fmt::format("{} holds {} tensors, the reference {}", candidate.filename().string(), b.size(), a.size());
  return d;
}

}  // namespace strata
