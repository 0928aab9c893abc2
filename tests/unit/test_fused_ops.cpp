// The fused model ops on the CPU (their ATen path): transformers' values and gradients, tensor by
// tensor, in float32 and bfloat16. The gpu tests run the same cases through the CUDA kernels.
#include "test_support.hpp"

#include "fused_ops_cases.hpp"

namespace fc = strata::test::fused_cases;

TEST_CASE("fused ops on the CPU: add_rms_norm and rms_norm are transformers' RMSNorm, forward and backward") {
  for (const auto dtype : {torch::kFloat32, torch::kBFloat16}) fc::check_add_rms_norm(torch::kCPU, dtype, 7, 48);
}

TEST_CASE("fused ops on the CPU: add_layer_norm is the residual add, then ATen's layer_norm, forward and backward") {
  for (const auto dtype : {torch::kFloat32, torch::kBFloat16}) fc::check_add_layer_norm(torch::kCPU, dtype, 7, 48);
}

TEST_CASE("fused ops on the CPU: rope_ rotates q and k in place as q cos + rotate_half(q) sin, forward and backward") {
  for (const auto dtype : {torch::kFloat32, torch::kBFloat16}) fc::check_rope(torch::kCPU, dtype, 2, 5, 4, 2, 8);
}

TEST_CASE("fused ops on the CPU: swiglu is silu(gate) * up, forward and backward") {
  for (const auto dtype : {torch::kFloat32, torch::kBFloat16}) fc::check_swiglu(torch::kCPU, dtype, 6, 40);
}
