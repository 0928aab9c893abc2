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

TEST_CASE("the fused kernels run only on devices whose capability their architectures cover") {
  namespace f = strata::fused;
  const std::string built = "75-virtual;80-real;90-real;100-real;120-real";  // the build's default
  CHECK(f::kernels_run_on(8, 0, built));    // A100: sm_80 code
  CHECK(f::kernels_run_on(8, 9, built));    // L40S: sm_80 code runs on 8.9
  CHECK(f::kernels_run_on(9, 0, built));    // H100/H200
  CHECK(f::kernels_run_on(10, 3, built));   // B300: sm_100 code
  CHECK(f::kernels_run_on(11, 0, built));   // Thor: compute_75 PTX
  CHECK(f::kernels_run_on(7, 5, built));    // T4: compute_75 PTX
  CHECK_FALSE(f::kernels_run_on(7, 0, built));  // V100: below every architecture
  // The old default, sm_90 code and compute_90 PTX: not an A100 or an L40S (no kernel image).
  CHECK(f::kernels_run_on(9, 0, "90"));
  CHECK(f::kernels_run_on(10, 0, "90"));
  CHECK_FALSE(f::kernels_run_on(8, 0, "90"));
  CHECK_FALSE(f::kernels_run_on(8, 9, "90"));
  // Code only, no PTX: not a newer major.
  CHECK_FALSE(f::kernels_run_on(10, 0, "90-real"));
  CHECK(f::kernels_run_on(8, 6, "90-real,80-virtual"));  // compute_80 PTX on 8.6
  CHECK(f::kernels_run_on(12, 0, "all"));
  CHECK_FALSE(f::kernels_run_on(9, 0, ""));
  if (f::cuda_kernels()) CHECK(!f::cuda_architectures().empty());
  else CHECK(f::cuda_architectures().empty());
}
