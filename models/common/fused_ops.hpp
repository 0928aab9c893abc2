// Fused transformer ops for the bundled models (llama's and vit's `fused_ops = true`), each an
// autograd function with its own backward that keeps less for backward than the unfused ops:
// RMSNorm (llama) or LayerNorm (vit) with the residual add before it, rotary embeddings applied in
// place, and SwiGLU. The math is transformers'
// (RMSNorm in float32, rounded to the dtype where its ops round), so a fused model matches the
// unfused one within float32 / bfloat16 tolerances.
//
// On CUDA tensors they run this project's kernels (fused_kernels.cu: one pass per op where the
// unfused ops take five to eight), when the build found a CUDA compiler (cuda_kernels()). On
// other devices, other strides or dtypes, or without the kernels, the same functions compute the
// same values with ATen ops (correct, with the same saved tensors, but without the fewer passes).
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include <torch/types.h>

namespace strata::fused {

/// Whether this build holds the CUDA kernels.
bool cuda_kernels();

/// The CUDA architectures the kernels were built for, as CMake's CUDA_ARCHITECTURES list
/// ("75-virtual;80-real;90-real": sm_XY code runs on devices of compute capability X.Y' with
/// Y' >= Y; compute_XY PTX compiles at load on any device of capability >= X.Y; "XY" is both);
/// empty without the kernels.
std::string cuda_architectures();

/// Whether kernels built for `architectures` (as cuda_architectures()) run on a device of compute
/// capability major.minor. Elsewhere the ops take the ATen path, and say so once.
bool kernels_run_on(int major, int minor, const std::string& architectures);

/// How many of the CUDA kernels this process has launched (for tests: the kernels, not the ATen path, ran).
std::int64_t cuda_kernel_launches();

/// {y, out}: y = x + residual (the same shape), out = RMSNorm(y) * weight as transformers' LlamaRMSNorm (y in
/// float32, times 1 / sqrt(mean(y^2) + eps), rounded to y's dtype, times weight). Saves y and one
/// float32 per row for backward.
std::pair<torch::Tensor, torch::Tensor> add_rms_norm(const torch::Tensor& x, const torch::Tensor& residual,
                                                     const torch::Tensor& weight, double eps);

/// RMSNorm(x) * weight, as add_rms_norm without the residual. Saves x and one float32 per row.
torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps);

/// {y, out}: y = x + residual (the same shape), out = LayerNorm(y) with weight and bias (both
/// defined) as ATen's layer_norm (float32 statistics, one rounding). Saves y and two statistics
/// per row (mean, 1 / std), as the unfused add and layer_norm do.
std::pair<torch::Tensor, torch::Tensor> add_layer_norm(const torch::Tensor& x, const torch::Tensor& residual,
                                                       const torch::Tensor& weight, const torch::Tensor& bias,
                                                       double eps);

/// Rotates each head of q [n, T, heads * head_dim] and k [n, T, kv_heads * head_dim] in place
/// (contiguous, as a projection's output) by the tables cos, sin [B, 1, T, head_dim] (B = 1 or n,
/// frequencies as cat(f, f)): the halves (x1, x2) of a head become (x1 cos - x2 sin, x2 cos + x1 sin),
/// transformers' q * cos + rotate_half(q) * sin. Returns {q, k}, the same tensors; backward applies
/// the inverse rotation, so nothing but the tables is saved.
std::pair<torch::Tensor, torch::Tensor> rope_(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& cos,
                                              const torch::Tensor& sin, std::int64_t head_dim);

/// silu(gate) * up; saves gate and up (not silu(gate)).
torch::Tensor swiglu(const torch::Tensor& gate, const torch::Tensor& up);

}  // namespace strata::fused
