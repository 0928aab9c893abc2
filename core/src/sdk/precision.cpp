#include "strata/precision.hpp"

#include <fmt/format.h>

#include "strata/errors.hpp"

namespace strata {

std::string dtype_name(torch::ScalarType dtype) {
  switch (dtype) {
    case torch::kFloat32: return "float32";
    case torch::kBFloat16: return "bfloat16";
    case torch::kFloat16: return "float16";
    case torch::kFloat64: return "float64";
    default: return c10::toString(dtype);
  }
}

torch::ScalarType dtype_from_name(const std::string& name) {
  if (name == "float32") return torch::kFloat32;
  if (name == "bfloat16") return torch::kBFloat16;
  throw Error(fmt::format("unknown dtype '{}'", name), "use \"float32\" or \"bfloat16\"");
}

std::string PrecisionPolicy::describe() const {
  if (!mixed() && reduce == torch::kFloat32) return "float32 throughout";
  return fmt::format("parameters {} in forward and backward, gradients reduced in {}, master weights and "
                     "optimizer state float32",
                     dtype_name(param), dtype_name(reduce));
}

}  // namespace strata

namespace strata {

void Precision::cast_frozen_state(torch::nn::Module& module) const {
  if (!mixed()) return;
  torch::NoGradGuard no_grad;
  for (auto& buffer : module.buffers())
    if (buffer.is_floating_point() && buffer.scalar_type() != param_dtype()) buffer.set_data(buffer.to(param_dtype()));
  for (auto& p : module.parameters())
    if (!p.requires_grad() && p.is_floating_point() && p.scalar_type() != param_dtype())
      p.set_data(p.to(param_dtype()));
}

torch::Tensor Precision::compute(const torch::Tensor& x) const {
  return x.is_floating_point() && x.scalar_type() != param_dtype() ? x.to(param_dtype()) : x;
}

torch::Tensor Precision::wire(const torch::Tensor& grads) const {
  return grads.scalar_type() == reduce_dtype() ? grads : grads.to(reduce_dtype());
}

}  // namespace strata
