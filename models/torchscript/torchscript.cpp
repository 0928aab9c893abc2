// `torchscript`: a PyTorch model brought in as TorchScript. `tools/export_model.py FILE.py:FACTORY`
// scripts (or traces) an nn.Module and writes DIR/model.pt beside DIR/model.json, the sidecar this
// plugin reads (input shape and dtype, classes or vocabulary, the units in order, their parameter
// counts, tied parameters, measured activations and FLOPs per sample). `[model] path = "DIR"`.
//
// Each unit is a submodule of the loaded module (a dotted path such as "blocks.0"); its forward
// takes the previous unit's output. The unit mirrors the submodule's parameters and buffers as
// its own (the same tensors, registered under the same names), so strategies flatten, shard,
// gather and move them exactly as a built-in model's: the kit points parameters at views of its
// flat buffers with set_data, which the TorchScript module sees because it holds the very same
// tensors. A parameter registered under two names (tied embedding and head) is one tensor with an
// alias, as in a built-in model.
//
// The module runs with its `training` flag off: no dropout, BatchNorm normalizes with its running
// statistics (kept as buffers), so the model is a deterministic function of its parameters and
// every strategy reproduces single-process training (model.hpp). Inputs go to the first unit as
// the dataset gives them; the BatchContext (padding mask, positions) is not passed on, so padded
// token batches are refused.
//
// TorchScript is deprecated upstream in favour of torch.export; the loader lives in this plugin
// alone, so when LibTorch drops it only this plugin changes (to an AOTInductor package).

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/script.h>

#include <strata/errors.hpp>
#include <strata/json.hpp>
#include <strata/model.hpp>
#include <strata/plugin.hpp>

namespace fs = std::filesystem;

namespace {

constexpr const char* kFormat = "strata-torchscript";
constexpr std::int64_t kVersion = 1;
constexpr const char* kExportFix =
    "Export the model with `tools/export_model.py FILE.py:FACTORY --input-shape ... --out DIR` and point "
    "[model] path at DIR.";

struct TorchScriptOptions {
  std::string path;                ///< directory holding model.pt and model.json (relative: to the experiment file)
  std::vector<std::string> units;  ///< dotted submodule paths run in order; empty: the sidecar's
};

/// What tools/export_model.py wrote beside the module.
struct Sidecar {
  fs::path file;
  std::vector<std::int64_t> input_shape;
  std::string input_dtype;
  std::int64_t num_classes = 0, vocab_size = 0;
  std::vector<std::string> units;
  std::vector<double> unit_parameters;
  double activation_bytes_per_sample = 0, flops_per_sample = 0;
};

fs::path model_dir(const TorchScriptOptions& o, const strata::ModelContext& context) {
  if (o.path.empty())
    throw strata::OptionError("path", "the torchscript model needs the directory of an exported model.", kExportFix);
  fs::path dir = o.path;
  return dir.is_relative() ? context.config_dir / dir : dir;
}

[[noreturn]] void bad_sidecar(const fs::path& file, const std::string& what) {
  throw strata::OptionError("path", fmt::format("{}: {}", file.string(), what),
                            "Export the model again with tools/export_model.py (it writes model.json beside model.pt).");
}

std::int64_t integer(const strata::Json& root, const fs::path& file, const char* key) {
  const strata::Json* v = root.find(key);
  if (v == nullptr || !v->is_number() || v->number_or(-1) < 0) bad_sidecar(file, fmt::format("\"{}\" is missing or not a count.", key));
  return static_cast<std::int64_t>(v->number_or(0));
}

Sidecar read_sidecar(const fs::path& dir) {
  Sidecar s;
  s.file = dir / "model.json";
  std::ifstream in(s.file);
  if (!in)
    throw strata::OptionError("path", fmt::format("cannot read {}: {}.", s.file.string(), std::strerror(errno)),
                              kExportFix);
  std::stringstream text;
  text << in.rdbuf();
  strata::Json root;
  try {
    root = strata::Json::parse(text.str());
  } catch (const strata::Error& e) {
    bad_sidecar(s.file, fmt::format("not valid JSON ({}).", e.what()));
  }
  if (!root.members()) bad_sidecar(s.file, "not a JSON object.");
  if (const strata::Json* f = root.find("format"); f == nullptr || f->string_or("") != kFormat)
    bad_sidecar(s.file, fmt::format("\"format\" is not \"{}\".", kFormat));
  if (integer(root, s.file, "version") != kVersion)
    bad_sidecar(s.file, fmt::format("version {} is not the {} this Strata reads.", integer(root, s.file, "version"), kVersion));
  const strata::Json* shape = root.find("input_shape");
  if (shape == nullptr || shape->elements() == nullptr || shape->elements()->empty())
    bad_sidecar(s.file, "\"input_shape\" is missing or empty.");
  for (const auto& d : *shape->elements()) {
    if (!d.is_number() || d.number_or(0) < 1) bad_sidecar(s.file, "\"input_shape\" holds a value that is not a positive integer.");
    s.input_shape.push_back(static_cast<std::int64_t>(d.number_or(0)));
  }
  s.input_dtype = root.find("input_dtype") ? root.find("input_dtype")->string_or("") : "";
  if (s.input_dtype != "float32" && s.input_dtype != "int64") bad_sidecar(s.file, "\"input_dtype\" is neither \"float32\" nor \"int64\".");
  s.num_classes = integer(root, s.file, "num_classes");
  s.vocab_size = integer(root, s.file, "vocab_size");
  const strata::Json* units = root.find("units");
  if (units == nullptr || units->elements() == nullptr || units->elements()->empty())
    bad_sidecar(s.file, "\"units\" is missing or empty.");
  for (const auto& u : *units->elements()) {
    const strata::Json* name = u.find("name");
    if (name == nullptr || !name->is_string() || name->string_or("").empty()) bad_sidecar(s.file, "a unit has no \"name\".");
    s.units.push_back(name->string_or(""));
    s.unit_parameters.push_back(static_cast<double>(integer(u, s.file, "parameters")));
  }
  if (const strata::Json* a = root.find("activation_bytes_per_sample")) s.activation_bytes_per_sample = a->number_or(0);
  if (const strata::Json* f = root.find("flops_per_sample")) s.flops_per_sample = f->number_or(0);
  return s;
}

/// Throws what make_torchscript would when the exported model does not fit the data.
void check_fits(const Sidecar& s, const strata::DataSpec& data) {
  const bool tokens = s.input_dtype == "int64";
  auto shape = [](const std::vector<std::int64_t>& v) { return fmt::format("[{}]", fmt::join(v, ", ")); };
  if (tokens != data.tokens())
    throw strata::OptionError("path", fmt::format("{} was exported for {}, but the dataset gives {}.", s.file.string(),
                                                  tokens ? "token ids" : "float inputs", data.tokens() ? "token ids" : "float inputs"),
                              "Export it again with the dataset's input (--vocab-size for token ids), or choose a matching dataset.");
  if (tokens) {
    if (s.vocab_size != data.vocab_size)
      throw strata::OptionError("path", fmt::format("{} was exported for a vocabulary of {}, the dataset's is {}.",
                                                    s.file.string(), s.vocab_size, data.vocab_size),
                                fmt::format("Export it again with --vocab-size {}.", data.vocab_size));
    if (data.ignored_targets || data.pad_id >= 0)
      throw strata::OptionError("path", "the dataset pads its token batches, and a TorchScript unit sees no padding mask.",
                                "Use a dataset of unpadded windows (such as text), or a built-in model (llama).");
    // Windows of T tokens: the exported sequence length is only the example the tool traced with.
  } else {
    if (s.input_shape != data.input_shape)
      throw strata::OptionError("path", fmt::format("{} was exported for inputs shaped {}, the dataset gives {}.",
                                                    s.file.string(), shape(s.input_shape), shape(data.input_shape)),
                                fmt::format("Export it again with --input-shape {}.", fmt::join(data.input_shape, ",")));
    if (s.num_classes != data.num_classes)
      throw strata::OptionError("path", fmt::format("{} was exported for {} classes, the dataset has {}.", s.file.string(),
                                                    s.num_classes, data.num_classes),
                                fmt::format("Export it again with --num-classes {}.", data.num_classes));
  }
}

/// A submodule of the loaded module with the same parameters and buffers (the same tensors) as an
/// nn::Module, so that the model's named parameters are PyTorch's.
class Mirror : public torch::nn::Module {
 public:
  explicit Mirror(const torch::jit::Module& from) { mirror(*this, from); }

  static void mirror(torch::nn::Module& into, const torch::jit::Module& from) {
    for (const auto& p : from.named_parameters(/*recurse=*/false))
      into.register_parameter(p.name, p.value, p.value.requires_grad());
    for (const auto& b : from.named_buffers(/*recurse=*/false)) into.register_buffer(b.name, b.value);
    for (const auto& child : from.named_children()) into.register_module(child.name, std::make_shared<Mirror>(child.value));
  }
};

class TorchScriptUnit final : public strata::Unit {
 public:
  explicit TorchScriptUnit(torch::jit::Module module) : module_(std::move(module)) { Mirror::mirror(*this, module_); }
  torch::Tensor forward(const torch::Tensor& x, const strata::BatchContext&) override {
    return module_.forward({x}).toTensor();
  }

 private:
  torch::jit::Module module_;
};

torch::jit::Module find_submodule(const torch::jit::Module& root, const std::string& dotted, const fs::path& file) {
  torch::jit::Module current = root;
  std::stringstream parts(dotted);
  for (std::string part; std::getline(parts, part, '.');) {
    std::optional<torch::jit::Module> next;
    std::vector<std::string> names;
    for (const auto& child : current.named_children()) {
      names.push_back(child.name);
      if (child.name == part) next = child.value;
    }
    if (!next)
      throw strata::OptionError("units", fmt::format("{} has no submodule \"{}\" (children there: {}).", file.string(),
                                                     dotted, names.empty() ? "none" : fmt::format("{}", fmt::join(names, ", "))),
                                "Name units by their dotted paths in the PyTorch module, e.g. \"blocks.0\".");
    current = *next;
  }
  return current;
}

/// The model whose strata names are unit names with '.' as '_' ("blocks_0.up.weight"); its
/// external names are PyTorch's ("blocks.0.up.weight"), which init_from accepts and a
/// safetensors save_final writes, so torch's load_state_dict reads the file back.
class TorchScriptModel final : public strata::Model {
 public:
  void name_externally(const std::string& unit_name, const std::string& dotted) {
    for (const auto& item : units().back()->named_parameters(/*recurse=*/true))
      external_.emplace_back(unit_name + "." + item.key(), dotted + "." + item.key());
    for (const auto& item : units().back()->named_buffers(/*recurse=*/true))
      external_.emplace_back(unit_name + "." + item.key(), dotted + "." + item.key());
  }
  std::vector<std::pair<std::string, std::string>> external_names() const override { return external_; }

 private:
  std::vector<std::pair<std::string, std::string>> external_;
};

/// Makes every parameter that shares another's memory (a tie saved as two tensors) the same
/// tensor, so the model holds it once with an alias.
void tie_shared(torch::jit::Module& root) {
  std::unordered_map<const void*, torch::Tensor> first;
  std::function<void(torch::jit::Module&)> visit = [&](torch::jit::Module& m) {
    for (const auto& p : m.named_parameters(/*recurse=*/false)) {
      const auto [it, fresh] = first.try_emplace(p.value.data_ptr(), p.value);
      if (!fresh && !it->second.is_same(p.value) && it->second.sizes() == p.value.sizes() &&
          it->second.strides() == p.value.strides() && it->second.dtype() == p.value.dtype())
        m.setattr(p.name, it->second);
    }
    for (auto child : m.children()) visit(child);
  };
  visit(root);
}

std::shared_ptr<strata::Model> make_torchscript(const TorchScriptOptions& o, const strata::ModelContext& context) {
  const fs::path dir = model_dir(o, context);
  const Sidecar s = read_sidecar(dir);
  check_fits(s, context.data);
  const fs::path file = dir / "model.pt";
  torch::jit::Module root;
  try {
    root = torch::jit::load(file.string(), torch::kCPU);
  } catch (const std::exception& e) {
    std::string first = e.what();
    first = first.substr(0, first.find('\n'));
    throw strata::OptionError("path", fmt::format("LibTorch cannot load {}: {}", file.string(), first), kExportFix);
  }
  root.eval();  // see the header: no dropout, running statistics
  tie_shared(root);
  const std::vector<std::string>& units = o.units.empty() ? s.units : o.units;
  auto model = std::make_shared<TorchScriptModel>();
  for (const auto& dotted : units) {
    std::string name = dotted;
    std::replace(name.begin(), name.end(), '.', '_');
    model->add_unit(name, std::make_shared<TorchScriptUnit>(find_submodule(root, dotted, file)));
    model->name_externally(name, dotted);
  }
  // Every tensor of the module inside a unit (what the tool checked; --units may have changed).
  std::unordered_set<const void*> inside;
  for (const auto& unit : model->units()) {
    for (const auto& p : unit->parameters()) inside.insert(p.unsafeGetTensorImpl());
    for (const auto& b : unit->buffers()) inside.insert(b.unsafeGetTensorImpl());
  }
  std::vector<std::string> outside;
  for (const auto& p : root.named_parameters()) if (!inside.count(p.value.unsafeGetTensorImpl())) outside.push_back(p.name);
  for (const auto& b : root.named_buffers()) if (!inside.count(b.value.unsafeGetTensorImpl())) outside.push_back(b.name);
  if (!outside.empty())
    throw strata::OptionError("units", fmt::format("{}: tensors outside every unit ({}): {}.", file.string(),
                                                   fmt::join(units, ", "), fmt::join(outside, ", ")),
                              "List units that hold every parameter and buffer of the module.");
  if (s.flops_per_sample > 0)
    model->set_flops_per_sample(static_cast<std::int64_t>(s.flops_per_sample),
                                "counted by torch.utils.flop_counter when the model was exported (model.json)");
  return model;
}

double estimate_torchscript(const TorchScriptOptions& o, const strata::ModelContext& context) {
  const Sidecar s = read_sidecar(model_dir(o, context));
  check_fits(s, context.data);
  double total = 0;
  for (double p : s.unit_parameters) total += p;
  return total;
}

/// Parameters per unit as exported (a tied parameter in the first unit holding it) and the
/// activations the tool measured: every leaf module's float outputs for one sample (for token
/// models, at the exported sequence length).
strata::ModelMemoryEstimate estimate_torchscript_memory(const TorchScriptOptions& o, const strata::ModelContext& context) {
  const Sidecar s = read_sidecar(model_dir(o, context));
  check_fits(s, context.data);
  strata::ModelMemoryEstimate m;
  m.activation_bytes_per_sample = s.activation_bytes_per_sample;
  if (o.units.empty()) m.unit_parameters = s.unit_parameters;
  return m;
}

void register_torchscript(strata::Registry& registry) {
  strata::Schema<TorchScriptOptions> schema;
  schema
      .option("path", &TorchScriptOptions::path,
              "directory written by tools/export_model.py (model.pt, model.json); relative to the experiment file")
      .option("units", &TorchScriptOptions::units,
              "dotted submodule paths run in order, one unit each; empty: the units model.json lists");
  registry.add_model("torchscript", "a PyTorch nn.Module exported as TorchScript by tools/export_model.py, one unit per listed submodule",
                     schema, make_torchscript, estimate_torchscript, estimate_torchscript_memory);
}

}  // namespace

STRATA_PLUGIN(model, "torchscript", "0.1.0", register_torchscript)
