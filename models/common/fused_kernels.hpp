// The CUDA kernels behind fused_ops.hpp, as plain launchers: raw pointers, sizes and the stream,
// so that fused_kernels.cu compiles with nvcc alone (no LibTorch headers). Each returns nullptr on
// success, else the CUDA error's text. Tensors are contiguous and of one dtype; every float
// computation is in float32, rounded to the dtype where transformers' unfused ops round.
#pragma once

#include <cstdint>

namespace strata::fused::cuda {

enum class DType { kFloat32, kFloat16, kBFloat16 };

/// Rows of `cols`: y = x + residual (when `residual` is not null; else y is x and not written),
/// rstd = 1 / sqrt(mean(y^2) + eps) (float32), out = weight * (y * rstd rounded to the dtype).
const char* add_rms_norm_forward(DType dtype, const void* x, const void* residual, void* y, void* out, float* rstd,
                                 const void* weight, std::int64_t rows, std::int64_t cols, float eps, void* stream);

/// The backward of add_rms_norm_forward: grad_x = rstd (g w - n mean(g w n)) + grad_y (when not
/// null), n = y rstd; and per block of rows the partial sums of g n into dw_partial [blocks, cols]
/// (float32; the caller sums them). `blocks` at most rows.
const char* add_rms_norm_backward(DType dtype, const void* grad_out, const void* grad_y, const void* y,
                                  const void* weight, const float* rstd, void* grad_x, float* dw_partial,
                                  std::int64_t rows, std::int64_t cols, int blocks, void* stream);

/// Rotary embedding of `x` [rows = n T, heads * head_dim] into `out` (may be `x`: in place) with
/// tables cos, sin [B, T, head_dim] (B = 1 or n): the halves (x1, x2) of each head become
/// (x1 cos - x2 sin, x2 cos + x1 sin); `transpose` applies the inverse rotation (the backward).
const char* rope(DType dtype, const void* x, void* out, const void* cos, const void* sin, std::int64_t n,
                 std::int64_t t, std::int64_t heads, std::int64_t head_dim, std::int64_t table_batch, bool transpose,
                 void* stream);

/// out = silu(gate) * up, elementwise over `count`.
const char* swiglu_forward(DType dtype, const void* gate, const void* up, void* out, std::int64_t count, void* stream);

/// grad_gate = grad silu'(gate) up, grad_up = grad silu(gate).
const char* swiglu_backward(DType dtype, const void* grad, const void* gate, const void* up, void* grad_gate,
                            void* grad_up, std::int64_t count, void* stream);

}  // namespace strata::fused::cuda
