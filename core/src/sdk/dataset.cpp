#include "strata/dataset.hpp"

#include <cstdlib>

namespace strata {

Augmenting::~Augmenting() = default;

namespace {

torch::Tensor moved(const torch::Tensor& t, torch::Device device, bool non_blocking) {
  return t.defined() ? t.to(device, non_blocking) : t;
}

torch::Tensor sliced(const torch::Tensor& t, std::int64_t lo, std::int64_t hi) {
  return t.defined() ? t.slice(0, lo, hi) : t;
}

}  // namespace

Batch Batch::to(torch::Device device, bool non_blocking) const {
  return {moved(inputs, device, non_blocking), moved(targets, device, non_blocking), moved(mask, device, non_blocking)};
}

Batch Batch::slice(std::int64_t lo, std::int64_t hi) const {
  return {sliced(inputs, lo, hi), sliced(targets, lo, hi), sliced(mask, lo, hi)};
}

DataLocation locate_data(const std::string& option_path, const char* env_var, const std::filesystem::path& fallback,
                         const DatasetContext& context) {
  const auto resolved = [&](std::filesystem::path p) {
    if (p.is_relative()) p = context.config_dir / p;
    return std::filesystem::absolute(p).lexically_normal();
  };
  if (!option_path.empty()) return {resolved(option_path), "[dataset] path"};
  if (const char* env = std::getenv(env_var); env != nullptr && *env != '\0')
    return {resolved(env), std::string("$") + env_var};
  return {resolved(fallback), fallback.is_relative() ? "the default, relative to the experiment file" : "the default"};
}

torch::Tensor Batch::target_count() const { return targets.ne(kIgnoreIndex).sum().to(torch::kFloat64); }

}  // namespace strata
