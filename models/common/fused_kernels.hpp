// The CUDA kernels behind fused_ops.hpp, as plain launchers: raw pointers, sizes and the stream,
// so that fused_kernels.cu compiles with nvcc alone (no LibTorch headers). Each returns nullptr on
// success, else the CUDA error's text. Tensors are contiguous and of one dtype; every float
// computation is in float32, rounded to the dtype where transformers' unfused ops round.
#pragma once

#include <cstdint>

namespace strata::fused::cuda {

enum class DType { kFloat32, kFloat16, kBFloat16 };

/// The text of a CUDA error already pending (an earlier op's), without clearing it; nullptr when none.
const char* pending_error();
/// Waits for `stream` and returns the text of any error of what ran on it (a kernel's fault), or
/// nullptr: the debug mode's check after each launch (STRATA_FUSED_SYNC=1, fused_ops.cpp).
const char* synchronize(void* stream);

/// Rows of `cols`: y = x + residual (when `residual` is not null; else y is x and not written),
/// then, with `mean` null, RMSNorm: rstd = 1 / sqrt(mean(y^2) + eps), out = weight * (y rstd
/// rounded to the dtype); with `mean` given, LayerNorm: mean and rstd = 1 / sqrt(var(y) + eps)
/// per row, out = (y - mean) rstd weight + bias (`bias` may be null). mean and rstd: float32 [rows].
const char* norm_forward(DType dtype, const void* x, const void* residual, void* y, void* out, float* mean,
                         float* rstd, const void* weight, const void* bias, std::int64_t rows, std::int64_t cols,
                         float eps, void* stream);

/// How many blocks norm_backward should take for `rows` of `cols` on a device of `sms`
/// multiprocessors (the rows of its partial sums): enough for about 2048 threads per
/// multiprocessor whatever the width (at least 4 blocks each, at most 32), at most `rows`.
std::int64_t norm_backward_blocks(DType dtype, std::int64_t rows, std::int64_t cols, int sms);

/// The backward of norm_forward (LayerNorm when `mean` is not null): with n = (y - mean) rstd and
/// dn = grad_out weight, grad_x = rstd (dn - mean(dn) - n mean(dn n)) + grad_y (mean(dn) only for
/// LayerNorm; grad_y when not null); per block of rows, the partial sums of grad_out n into
/// dw_partial [blocks, cols] and, for LayerNorm, of grad_out into db_partial (float32; the caller
/// sums them). `blocks` at most rows.
const char* norm_backward(DType dtype, const void* grad_out, const void* grad_y, const void* y, const void* weight,
                          const float* mean, const float* rstd, void* grad_x, float* dw_partial, float* db_partial,
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
