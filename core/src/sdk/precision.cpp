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
