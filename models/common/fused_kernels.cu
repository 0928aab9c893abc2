// CUDA kernels of the fused transformer ops (fused_kernels.hpp). Each pass reads and writes every
// element once: the unfused ops they replace make a float32 copy, squares, means, casts and
// products as separate tensors, each a pass over memory.
#include "fused_kernels.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

namespace strata::fused::cuda {
namespace {

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) { return v; }
template <>
__device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

/// `v` rounded to T and back: where transformers' ops hold an intermediate in the dtype.
template <typename T>
__device__ __forceinline__ float rounded(float v) { return to_float(from_float<T>(v)); }

/// The sum of `v` over the block (every thread gets it). `shared` holds 32 floats.
__device__ float block_sum(float v, float* shared) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < warps ? shared[lane] : 0.f;
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    if (lane == 0) shared[0] = v;
  }
  __syncthreads();
  v = shared[0];
  __syncthreads();  // shared is free again for the next call
  return v;
}

/// One block per row. kCentered: LayerNorm (mean subtracted, bias added), else RMSNorm.
template <typename T, bool kCentered>
__global__ void norm_forward_kernel(const T* __restrict__ x, const T* __restrict__ residual, T* y, T* out,
                                    float* __restrict__ mean_out, float* __restrict__ rstd_out,
                                    const T* __restrict__ weight, const T* __restrict__ bias, std::int64_t cols,
                                    float eps) {
  __shared__ float shared[32];
  const std::int64_t offset = static_cast<std::int64_t>(blockIdx.x) * cols;
  const T* source = residual != nullptr ? y + offset : x + offset;  // the row that is normalized
  float sum = 0.f;  // of y (LayerNorm) or of y^2 (RMSNorm)
  for (std::int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    float v;
    if (residual != nullptr) {
      const T added = from_float<T>(to_float(x[offset + c]) + to_float(residual[offset + c]));
      y[offset + c] = added;  // read back below by this same thread only
      v = to_float(added);
    } else {
      v = to_float(x[offset + c]);
    }
    sum += kCentered ? v : v * v;
  }
  const float n = static_cast<float>(cols);
  float mean = 0.f, r;
  if (kCentered) {
    mean = block_sum(sum, shared) / n;
    float squares = 0.f;  // a second pass over the row (in cache) rather than E[y^2] - E[y]^2
    for (std::int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      const float d = to_float(source[c]) - mean;
      squares += d * d;
    }
    r = rsqrtf(block_sum(squares, shared) / n + eps);
  } else {
    r = rsqrtf(block_sum(sum, shared) / n + eps);
  }
  if (threadIdx.x == 0) {
    rstd_out[blockIdx.x] = r;
    if (kCentered) mean_out[blockIdx.x] = mean;
  }
  for (std::int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    if (kCentered) {  // as ATen's layer_norm: float32 throughout, rounded once
      const float b = bias != nullptr ? to_float(bias[c]) : 0.f;
      out[offset + c] = from_float<T>((to_float(source[c]) - mean) * r * to_float(weight[c]) + b);
    } else {  // as transformers' LlamaRMSNorm: the normalized row rounded, then scaled
      out[offset + c] = from_float<T>(to_float(weight[c]) * rounded<T>(to_float(source[c]) * r));
    }
  }
}

/// Blocks stride over rows; each thread owns columns c = threadIdx.x (mod blockDim.x), so its
/// share of dw (and db) accumulates without atomics, in shared memory when `in_shared` (dynamic
/// shared memory of cols floats, twice for LayerNorm) else straight in its block's row of
/// dw_partial (db_partial).
template <typename T, bool kCentered>
__global__ void norm_backward_kernel(const T* __restrict__ grad_out, const T* __restrict__ grad_y,
                                     const T* __restrict__ y, const T* __restrict__ weight,
                                     const float* __restrict__ mean_in, const float* __restrict__ rstd_in,
                                     T* __restrict__ grad_x, float* __restrict__ dw_partial,
                                     float* __restrict__ db_partial, std::int64_t rows, std::int64_t cols,
                                     bool in_shared) {
  extern __shared__ float partial_shared[];
  __shared__ float shared[32];
  const std::int64_t block_offset = static_cast<std::int64_t>(blockIdx.x) * cols;
  float* dw = in_shared ? partial_shared : dw_partial + block_offset;
  float* db = kCentered ? (in_shared ? partial_shared + cols : db_partial + block_offset) : nullptr;
  for (std::int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    dw[c] = 0.f;
    if (kCentered) db[c] = 0.f;
  }
  const float count = static_cast<float>(cols);
  for (std::int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const std::int64_t offset = row * cols;
    const float r = rstd_in[row], mean = kCentered ? mean_in[row] : 0.f;
    float dot = 0.f, sum = 0.f;  // of dn n, and of dn (LayerNorm), over the row
    for (std::int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      const float n = (to_float(y[offset + c]) - mean) * r, g = to_float(grad_out[offset + c]);
      const float dn = g * to_float(weight[c]);
      dot += dn * n;
      dw[c] += g * n;
      if (kCentered) {
        sum += dn;
        db[c] += g;
      }
    }
    const float mean_dot = block_sum(dot, shared) / count;
    const float mean_dn = kCentered ? block_sum(sum, shared) / count : 0.f;
    for (std::int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      const float n = (to_float(y[offset + c]) - mean) * r;
      float d = r * (to_float(grad_out[offset + c]) * to_float(weight[c]) - mean_dn - n * mean_dot);
      if (grad_y != nullptr) d += to_float(grad_y[offset + c]);
      grad_x[offset + c] = from_float<T>(d);
    }
  }
  if (in_shared)
    for (std::int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      dw_partial[block_offset + c] = dw[c];
      if (kCentered) db_partial[block_offset + c] = db[c];
    }
}

/// One block per token (row of x); its threads stride over the row's pairs (x1, x2), one per
/// head and frequency, with 32-bit arithmetic inside the row (64-bit division per element would
/// cost more than the memory traffic).
template <typename T>
__global__ void rope_kernel(const T* x, T* out, const T* __restrict__ cos, const T* __restrict__ sin,
                            std::int64_t t, int heads, int head_dim, std::int64_t table_batch, bool transpose) {
  const int half = head_dim / 2, pairs = heads * half;
  const std::int64_t row = blockIdx.x;
  const std::int64_t sample = table_batch == 1 ? 0 : row / t;
  const T* c = cos + (sample * t + row % t) * head_dim;
  const T* s = sin + (sample * t + row % t) * head_dim;
  const T* in = x + row * pairs * 2;
  T* to = out + row * pairs * 2;
  for (int p = threadIdx.x; p < pairs; p += blockDim.x) {
    const int head = p / half, i = p - head * half, at = head * head_dim + i;
    const float x1 = to_float(in[at]), x2 = to_float(in[at + half]);
    const float c1 = to_float(c[i]), s1 = to_float(s[i]);
    const float c2 = to_float(c[i + half]), s2 = to_float(s[i + half]);
    if (!transpose) {
      to[at] = from_float<T>(x1 * c1 - x2 * s1);
      to[at + half] = from_float<T>(x2 * c2 + x1 * s2);
    } else {  // the transpose of [[c1, -s1], [s2, c2]]
      to[at] = from_float<T>(x1 * c1 + x2 * s2);
      to[at + half] = from_float<T>(x2 * c2 - x1 * s1);
    }
  }
}

__device__ __forceinline__ float sigmoid(float v) { return 1.f / (1.f + __expf(-v)); }

template <typename T>
__global__ void swiglu_forward_kernel(const T* __restrict__ gate, const T* __restrict__ up, T* __restrict__ out,
                                      std::int64_t count) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const float g = to_float(gate[i]);
    out[i] = from_float<T>(rounded<T>(g * sigmoid(g)) * to_float(up[i]));
  }
}

template <typename T>
__global__ void swiglu_backward_kernel(const T* __restrict__ grad, const T* __restrict__ gate, const T* __restrict__ up,
                                       T* __restrict__ grad_gate, T* __restrict__ grad_up, std::int64_t count) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const float g = to_float(gate[i]), d = to_float(grad[i]), s = sigmoid(g);
    grad_up[i] = from_float<T>(d * rounded<T>(g * s));
    grad_gate[i] = from_float<T>(rounded<T>(d * to_float(up[i])) * s * (1.f + g * (1.f - s)));
  }
}

constexpr int kElementwiseThreads = 256;
constexpr std::int64_t kMaxGrid = 65535;
constexpr std::int64_t kMaxSharedPartials = 12000;  // floats: with block_sum's 128 bytes, under the 48 KiB a block gets without opting in

int grid_for(std::int64_t count) {
  const std::int64_t blocks = (count + kElementwiseThreads - 1) / kElementwiseThreads;
  return static_cast<int>(blocks < 1 ? 1 : (blocks > kMaxGrid * 8 ? kMaxGrid * 8 : blocks));
}

/// Threads per row: about four columns each, a whole number of warps, 32 to 1024.
int row_threads(std::int64_t cols) {
  std::int64_t threads = ((cols + 3) / 4 + 31) / 32 * 32;
  return static_cast<int>(threads < 32 ? 32 : (threads > 1024 ? 1024 : threads));
}

const char* launched() {
  const cudaError_t error = cudaGetLastError();
  return error == cudaSuccess ? nullptr : cudaGetErrorString(error);
}

/// Calls f(T{}) with T the CUDA type of `dtype`.
template <typename F>
void with_type(DType dtype, F&& f) {
  switch (dtype) {
    case DType::kFloat32: f(float{}); break;
    case DType::kFloat16: f(__half{}); break;
    case DType::kBFloat16: f(__nv_bfloat16{}); break;
  }
}

}  // namespace

const char* norm_forward(DType dtype, const void* x, const void* residual, void* y, void* out, float* mean,
                         float* rstd, const void* weight, const void* bias, std::int64_t rows, std::int64_t cols,
                         float eps, void* stream) {
  if (rows == 0) return nullptr;
  if (rows > 0x7fffffff) return "too many rows for one launch";
  with_type(dtype, [&](auto tag) {
    using T = decltype(tag);
    const auto launch = [&](auto kernel) {
      kernel<<<static_cast<unsigned>(rows), row_threads(cols), 0, static_cast<cudaStream_t>(stream)>>>(
          static_cast<const T*>(x), static_cast<const T*>(residual), static_cast<T*>(y), static_cast<T*>(out), mean,
          rstd, static_cast<const T*>(weight), static_cast<const T*>(bias), cols, eps);
    };
    if (mean != nullptr)
      launch(norm_forward_kernel<T, true>);
    else
      launch(norm_forward_kernel<T, false>);
  });
  return launched();
}

const char* norm_backward(DType dtype, const void* grad_out, const void* grad_y, const void* y, const void* weight,
                          const float* mean, const float* rstd, void* grad_x, float* dw_partial, float* db_partial,
                          std::int64_t rows, std::int64_t cols, int blocks, void* stream) {
  if (rows == 0) return nullptr;
  const std::int64_t partials = mean != nullptr ? 2 * cols : cols;
  const bool in_shared = partials <= kMaxSharedPartials;
  const std::size_t shared_bytes = in_shared ? static_cast<std::size_t>(partials) * sizeof(float) : 0;
  with_type(dtype, [&](auto tag) {
    using T = decltype(tag);
    const auto launch = [&](auto kernel) {
      kernel<<<blocks, row_threads(cols), shared_bytes, static_cast<cudaStream_t>(stream)>>>(
          static_cast<const T*>(grad_out), static_cast<const T*>(grad_y), static_cast<const T*>(y),
          static_cast<const T*>(weight), mean, rstd, static_cast<T*>(grad_x), dw_partial, db_partial, rows, cols,
          in_shared);
    };
    if (mean != nullptr)
      launch(norm_backward_kernel<T, true>);
    else
      launch(norm_backward_kernel<T, false>);
  });
  return launched();
}

const char* rope(DType dtype, const void* x, void* out, const void* cos, const void* sin, std::int64_t n,
                 std::int64_t t, std::int64_t heads, std::int64_t head_dim, std::int64_t table_batch, bool transpose,
                 void* stream) {
  const std::int64_t rows = n * t, pairs = heads * (head_dim / 2);
  if (rows == 0 || pairs == 0) return nullptr;
  if (rows > 0x7fffffff || heads * head_dim > 0x7fffffff) return "too many tokens or heads for one launch";
  const int threads = static_cast<int>(pairs >= 1024 ? 1024 : (pairs + 31) / 32 * 32);
  with_type(dtype, [&](auto tag) {
    using T = decltype(tag);
    rope_kernel<T><<<static_cast<unsigned>(rows), threads, 0, static_cast<cudaStream_t>(stream)>>>(
        static_cast<const T*>(x), static_cast<T*>(out), static_cast<const T*>(cos), static_cast<const T*>(sin), t,
        static_cast<int>(heads), static_cast<int>(head_dim), table_batch, transpose);
  });
  return launched();
}

const char* swiglu_forward(DType dtype, const void* gate, const void* up, void* out, std::int64_t count, void* stream) {
  if (count == 0) return nullptr;
  with_type(dtype, [&](auto tag) {
    using T = decltype(tag);
    swiglu_forward_kernel<T><<<grid_for(count), kElementwiseThreads, 0, static_cast<cudaStream_t>(stream)>>>(
        static_cast<const T*>(gate), static_cast<const T*>(up), static_cast<T*>(out), count);
  });
  return launched();
}

const char* swiglu_backward(DType dtype, const void* grad, const void* gate, const void* up, void* grad_gate,
                            void* grad_up, std::int64_t count, void* stream) {
  if (count == 0) return nullptr;
  with_type(dtype, [&](auto tag) {
    using T = decltype(tag);
    swiglu_backward_kernel<T><<<grid_for(count), kElementwiseThreads, 0, static_cast<cudaStream_t>(stream)>>>(
        static_cast<const T*>(grad), static_cast<const T*>(gate), static_cast<const T*>(up), static_cast<T*>(grad_gate),
        static_cast<T*>(grad_up), count);
  });
  return launched();
}

}  // namespace strata::fused::cuda
