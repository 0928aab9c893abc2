#include "train/checkpoint.hpp"

#include <algorithm>

#include "train/model_diff.hpp"

#include <fstream>
#include <iterator>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/csrc/jit/serialization/pickle.h>
#include <torch/utils.h>

#include "strata/errors.hpp"

namespace strata {

void save_state_dict(const StateDict& state, const std::filesystem::path& file) {
  c10::Dict<std::string, at::Tensor> dict;
  for (const auto& [name, tensor] : state) dict.insert(name, tensor.detach().to(torch::kCPU).contiguous());
  const auto bytes = torch::jit::pickle_save(c10::IValue(dict));
  std::ofstream out(file, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw Error(fmt::format("could not write the model to {}", file.string()), "check free disk space");
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

void load_state_dict(Model& model, const std::filesystem::path& file) {
  const std::string where = "train.init_from: " + file.string();
  const std::string fix = "Use a final_model.pt saved (save_final = true) from a run with the same [model] section.";
  const auto saved = read_state_dict(file, where, fix);
  std::vector<std::pair<std::string, at::Tensor>> targets;
  for (const auto& p : model.named_parameters()) targets.emplace_back(p.key(), p.value());
  for (const auto& b : model.named_buffers()) targets.emplace_back(b.key(), b.value());
  std::vector<std::string> missing;
  std::vector<std::string> mismatched;
  std::set<std::string> used;
  for (const auto& [name, tensor] : targets) {
    auto it = saved.find(name);
    if (it == saved.end()) {
      missing.push_back(name);
    } else if (it->second.sizes() != tensor.sizes()) {
      mismatched.push_back(fmt::format("{} (file {}, model {})", name, fmt::join(it->second.sizes(), "x"),
                                       fmt::join(tensor.sizes(), "x")));
    }
    used.insert(name);
  }
  std::vector<std::string> unexpected;
  for (const auto& [name, tensor] : saved)
    if (!used.count(name)) unexpected.push_back(name);
  if (!missing.empty() || !mismatched.empty() || !unexpected.empty()) {
    std::string what = where + " does not fit the model:";
    if (!missing.empty()) what += fmt::format(" missing {};", fmt::join(missing, ", "));
    if (!mismatched.empty()) what += fmt::format(" wrong shape {};", fmt::join(mismatched, ", "));
    if (!unexpected.empty()) what += fmt::format(" not in the model {};", fmt::join(unexpected, ", "));
    what.back() = '.';
    throw Error(what, fix);
  }
  torch::NoGradGuard no_grad;
  for (auto& [name, tensor] : targets) tensor.copy_(saved.at(name));
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
