// CUDA kernels of the fused transformer ops (fused_kernels.hpp). Each pass reads and writes every
// element once: the unfused ops they replace make a float32 copy, squares, means, casts and
// products as separate tensors, each a pass over memory.
#include "fused_kernels.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <type_traits>

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

/// V consecutive elements, loaded and stored as one access (16 bytes when V = 16 / sizeof(T)):
/// scalar 2-byte accesses leave most of a GPU's memory bandwidth unused. V = 1 is the scalar path,
/// for pointers that are not 16-byte aligned or widths that V does not divide.
template <typename T, int V>
struct alignas(sizeof(T) * V) Pack {
  T v[V];
};
template <int V, typename T>
__device__ __forceinline__ Pack<T, V> load(const T* base, std::int64_t pack) {
  return reinterpret_cast<const Pack<T, V>*>(base)[pack];
}
template <int V, typename T>
__device__ __forceinline__ void store(T* base, std::int64_t pack, const Pack<T, V>& value) {
  reinterpret_cast<Pack<T, V>*>(base)[pack] = value;
}

/// One block per row; each thread takes packs of V columns (V divides cols; the row's tensors are
/// 16-byte aligned when V > 1). The weight and bias are read element by element: they may be views
/// into a flat parameter buffer at any offset, and are small enough to stay in cache.
/// kCentered: LayerNorm (mean subtracted, bias added), else RMSNorm. x is not __restrict__: the
/// row read back (`source`) is x or y, and y is written here, so no load of it may go through the
/// read-only cache.
template <typename T, bool kCentered, int V>
__global__ void norm_forward_kernel(const T* x, const T* __restrict__ residual, T* y, T* out,
                                    float* __restrict__ mean_out, float* __restrict__ rstd_out,
                                    const T* __restrict__ weight, const T* __restrict__ bias, std::int64_t cols,
                                    float eps) {
  __shared__ float shared[32];
  const std::int64_t offset = static_cast<std::int64_t>(blockIdx.x) * cols, packs = cols / V;
  const T* source = residual != nullptr ? y + offset : x + offset;  // the row that is normalized
  float sum = 0.f;  // of y (LayerNorm) or of y^2 (RMSNorm)
  for (std::int64_t c = threadIdx.x; c < packs; c += blockDim.x) {
    Pack<T, V> row = load<V>(x + offset, c);
    if (residual != nullptr) {
      const Pack<T, V> other = load<V>(residual + offset, c);
#pragma unroll
      for (int k = 0; k < V; ++k) row.v[k] = from_float<T>(to_float(row.v[k]) + to_float(other.v[k]));
      store<V>(y + offset, c, row);  // read back below by this same thread only
    }
#pragma unroll
    for (int k = 0; k < V; ++k) {
      const float v = to_float(row.v[k]);
      sum += kCentered ? v : v * v;
    }
  }
  const float n = static_cast<float>(cols);
  float mean = 0.f, r;
  if (kCentered) {
    mean = block_sum(sum, shared) / n;
    float squares = 0.f;  // a second pass over the row (in cache) rather than E[y^2] - E[y]^2
    for (std::int64_t c = threadIdx.x; c < packs; c += blockDim.x) {
      const Pack<T, V> row = load<V>(source, c);
#pragma unroll
      for (int k = 0; k < V; ++k) {
        const float d = to_float(row.v[k]) - mean;
        squares += d * d;
      }
    }
    r = rsqrtf(block_sum(squares, shared) / n + eps);
  } else {
    r = rsqrtf(block_sum(sum, shared) / n + eps);
  }
  if (threadIdx.x == 0) {
    rstd_out[blockIdx.x] = r;
    if (kCentered) mean_out[blockIdx.x] = mean;
  }
  for (std::int64_t c = threadIdx.x; c < packs; c += blockDim.x) {
    const Pack<T, V> row = load<V>(source, c);
    Pack<T, V> result;
#pragma unroll
    for (int k = 0; k < V; ++k) {
      const std::int64_t col = c * V + k;
      if (kCentered) {  // as ATen's layer_norm: float32 throughout, rounded once
        const float b = bias != nullptr ? to_float(bias[col]) : 0.f;
        result.v[k] = from_float<T>((to_float(row.v[k]) - mean) * r * to_float(weight[col]) + b);
      } else {  // as transformers' LlamaRMSNorm: the normalized row rounded, then scaled
        result.v[k] = from_float<T>(to_float(weight[col]) * rounded<T>(to_float(row.v[k]) * r));
      }
    }
    store<V>(out + offset, c, result);
  }
}

/// Blocks stride over rows; each thread owns the columns of its packs c = threadIdx.x (mod
/// blockDim.x), so its share of dw (and db) accumulates without atomics: in shared memory when
/// `in_shared` (dynamic shared memory of cols floats, twice for LayerNorm; column k of pack c at
/// k * packs + c, so a warp's threads touch consecutive banks), else straight in its block's row of
/// dw_partial (db_partial).
template <typename T, bool kCentered, int V>
__global__ void norm_backward_kernel(const T* __restrict__ grad_out, const T* __restrict__ grad_y,
                                     const T* __restrict__ y, const T* __restrict__ weight,
                                     const float* __restrict__ mean_in, const float* __restrict__ rstd_in,
                                     T* __restrict__ grad_x, float* __restrict__ dw_partial,
                                     float* __restrict__ db_partial, std::int64_t rows, std::int64_t cols,
                                     bool in_shared) {
  extern __shared__ float partial_shared[];
  __shared__ float shared[32];
  const std::int64_t block_offset = static_cast<std::int64_t>(blockIdx.x) * cols, packs = cols / V;
  float* dw = in_shared ? partial_shared : dw_partial + block_offset;
  float* db = kCentered ? (in_shared ? partial_shared + cols : db_partial + block_offset) : nullptr;
  const auto slot = [&](std::int64_t c, int k) { return in_shared ? k * packs + c : c * V + k; };
  for (std::int64_t c = threadIdx.x; c < packs; c += blockDim.x)
#pragma unroll
    for (int k = 0; k < V; ++k) {
      dw[slot(c, k)] = 0.f;
      if (kCentered) db[slot(c, k)] = 0.f;
    }
  const float count = static_cast<float>(cols);
  for (std::int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const std::int64_t offset = row * cols;
    const float r = rstd_in[row], mean = kCentered ? mean_in[row] : 0.f;
    float dot = 0.f, sum = 0.f;  // of dn n, and of dn (LayerNorm), over the row
    for (std::int64_t c = threadIdx.x; c < packs; c += blockDim.x) {
      const Pack<T, V> yv = load<V>(y + offset, c), gv = load<V>(grad_out + offset, c);
#pragma unroll
      for (int k = 0; k < V; ++k) {
        const float n = (to_float(yv.v[k]) - mean) * r, g = to_float(gv.v[k]);
        const float dn = g * to_float(weight[c * V + k]);
        dot += dn * n;
        dw[slot(c, k)] += g * n;
        if (kCentered) {
          sum += dn;
          db[slot(c, k)] += g;
        }
      }
    }
    const float mean_dot = block_sum(dot, shared) / count;
    const float mean_dn = kCentered ? block_sum(sum, shared) / count : 0.f;
    for (std::int64_t c = threadIdx.x; c < packs; c += blockDim.x) {
      const Pack<T, V> yv = load<V>(y + offset, c), gv = load<V>(grad_out + offset, c);
      Pack<T, V> gy, result;
      if (grad_y != nullptr) gy = load<V>(grad_y + offset, c);
#pragma unroll
      for (int k = 0; k < V; ++k) {
        const float n = (to_float(yv.v[k]) - mean) * r;
        float d = r * (to_float(gv.v[k]) * to_float(weight[c * V + k]) - mean_dn - n * mean_dot);
        if (grad_y != nullptr) d += to_float(gy.v[k]);
        result.v[k] = from_float<T>(d);
      }
      store<V>(grad_x + offset, c, result);
    }
  }
  if (in_shared)
    for (std::int64_t c = threadIdx.x; c < packs; c += blockDim.x)
#pragma unroll
      for (int k = 0; k < V; ++k) {
        dw_partial[block_offset + c * V + k] = dw[slot(c, k)];
        if (kCentered) db_partial[block_offset + c * V + k] = db[slot(c, k)];
      }
}

/// One block per token (row of x); its threads stride over the row's packs of V pairs (x1, x2) of
/// one head (V divides head_dim / 2), with 32-bit arithmetic inside the row (64-bit division per
/// element would cost more than the memory traffic).
template <typename T, int V>
__global__ void rope_kernel(const T* x, T* out, const T* __restrict__ cos, const T* __restrict__ sin,
                            std::int64_t t, int heads, int head_dim, std::int64_t table_batch, bool transpose) {
  const int half = head_dim / 2, per_head = half / V, packs = heads * per_head;
  const std::int64_t row = blockIdx.x;
  const std::int64_t table = ((table_batch == 1 ? 0 : row / t) * t + row % t) * head_dim;
  const T* in = x + row * heads * head_dim;
  T* to = out + row * heads * head_dim;
  for (int p = threadIdx.x; p < packs; p += blockDim.x) {
    const int head = p / per_head, i = (p - head * per_head) * V, at = head * head_dim + i;
    // Pack indices: every offset below is a multiple of V elements.
    const Pack<T, V> x1 = load<V>(in + at, 0), x2 = load<V>(in + at + half, 0);
    const Pack<T, V> c1 = load<V>(cos + table + i, 0), s1 = load<V>(sin + table + i, 0);
    const Pack<T, V> c2 = load<V>(cos + table + i + half, 0), s2 = load<V>(sin + table + i + half, 0);
    Pack<T, V> first, second;
#pragma unroll
    for (int k = 0; k < V; ++k) {
      const float a = to_float(x1.v[k]), b = to_float(x2.v[k]);
      if (!transpose) {
        first.v[k] = from_float<T>(a * to_float(c1.v[k]) - b * to_float(s1.v[k]));
        second.v[k] = from_float<T>(b * to_float(c2.v[k]) + a * to_float(s2.v[k]));
      } else {  // the transpose of [[c1, -s1], [s2, c2]]
        first.v[k] = from_float<T>(a * to_float(c1.v[k]) + b * to_float(s2.v[k]));
        second.v[k] = from_float<T>(b * to_float(c2.v[k]) - a * to_float(s1.v[k]));
      }
    }
    store<V>(to + at, 0, first);
    store<V>(to + at + half, 0, second);
  }
}

__device__ __forceinline__ float sigmoid(float v) { return 1.f / (1.f + __expf(-v)); }

/// silu(gate) * up as transformers' ops round it: silu(gate) in the dtype, then the product.
template <typename T>
__device__ __forceinline__ T swiglu_value(T gate, T up) {
  const float g = to_float(gate);
  return from_float<T>(rounded<T>(g * sigmoid(g)) * to_float(up));
}

/// Packs of V elements over a grid-stride loop, then the count % V left one element per thread.
template <typename T, int V>
__global__ void swiglu_forward_kernel(const T* __restrict__ gate, const T* __restrict__ up, T* __restrict__ out,
                                      std::int64_t count) {
  const std::int64_t first = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x, packs = count / V;
  for (std::int64_t p = first; p < packs; p += stride) {
    const Pack<T, V> g = load<V>(gate, p), u = load<V>(up, p);
    Pack<T, V> o;
#pragma unroll
    for (int k = 0; k < V; ++k) o.v[k] = swiglu_value(g.v[k], u.v[k]);
    store<V>(out, p, o);
  }
  for (std::int64_t i = packs * V + first; i < count; i += stride) out[i] = swiglu_value(gate[i], up[i]);
}

template <typename T>
__device__ __forceinline__ void swiglu_grads(T grad, T gate, T up, T& grad_gate, T& grad_up) {
  const float g = to_float(gate), d = to_float(grad), s = sigmoid(g);
  grad_up = from_float<T>(d * rounded<T>(g * s));
  grad_gate = from_float<T>(rounded<T>(d * to_float(up)) * s * (1.f + g * (1.f - s)));
}

template <typename T, int V>
__global__ void swiglu_backward_kernel(const T* __restrict__ grad, const T* __restrict__ gate, const T* __restrict__ up,
                                       T* __restrict__ grad_gate, T* __restrict__ grad_up, std::int64_t count) {
  const std::int64_t first = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x, packs = count / V;
  for (std::int64_t p = first; p < packs; p += stride) {
    const Pack<T, V> d = load<V>(grad, p), g = load<V>(gate, p), u = load<V>(up, p);
    Pack<T, V> dg, du;
#pragma unroll
    for (int k = 0; k < V; ++k) swiglu_grads(d.v[k], g.v[k], u.v[k], dg.v[k], du.v[k]);
    store<V>(grad_gate, p, dg);
    store<V>(grad_up, p, du);
  }
  for (std::int64_t i = packs * V + first; i < count; i += stride)
    swiglu_grads(grad[i], gate[i], up[i], grad_gate[i], grad_up[i]);
}

constexpr int kElementwiseThreads = 256;
constexpr std::int64_t kMaxGrid = 65535;
// Floats of dw/db partial sums in shared memory: with block_sum's 128 bytes, under the 48 KiB a
// block gets without opting in.
constexpr std::int64_t kMaxSharedPartials = 12000;

int grid_for(std::int64_t count) {
  const std::int64_t blocks = (count + kElementwiseThreads - 1) / kElementwiseThreads;
  return static_cast<int>(blocks < 1 ? 1 : (blocks > kMaxGrid * 8 ? kMaxGrid * 8 : blocks));
}

/// Threads per row of `packs` packs of V: four columns each (one pack when a pack is four or
/// more), a whole number of warps, 32 to 1024.
int row_threads(std::int64_t packs, int v) {
  const std::int64_t per_thread = v >= 4 ? 1 : 4 / v;
  std::int64_t threads = ((packs + per_thread - 1) / per_thread + 31) / 32 * 32;
  return static_cast<int>(threads < 32 ? 32 : (threads > 1024 ? 1024 : threads));
}

/// The pack width of 16-byte accesses to T.
template <typename T>
constexpr int kVector = static_cast<int>(16 / sizeof(T));

/// The pack width of rows (a norm's, a RoPE head's halves) of `width` elements of `element_size`
/// bytes where the tensors are aligned: kVector where it divides the width, else 1.
/// norm_backward_blocks sizes its grid with it.
int pack_width(std::int64_t width, std::int64_t element_size) {
  const int v = static_cast<int>(16 / element_size);
  return width % v == 0 ? v : 1;
}

/// Whether every non-null pointer is 16-byte aligned.
bool aligned(std::initializer_list<const void*> pointers) {
  for (const void* p : pointers)
    if (p != nullptr && reinterpret_cast<std::uintptr_t>(p) % 16 != 0) return false;
  return true;
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

/// Calls f(std::integral_constant<int, V>{}) with V = kVector<T> when `vectorized`, else 1.
template <typename T, typename F>
void with_width(bool vectorized, F&& f) {
  if (vectorized)
    f(std::integral_constant<int, kVector<T>>{});
  else
    f(std::integral_constant<int, 1>{});
}

}  // namespace

const char* norm_forward(DType dtype, const void* x, const void* residual, void* y, void* out, float* mean,
                         float* rstd, const void* weight, const void* bias, std::int64_t rows, std::int64_t cols,
                         float eps, void* stream) {
  if (rows == 0) return nullptr;
  if (rows > 0x7fffffff) return "too many rows for one launch";
  with_type(dtype, [&](auto tag) {
    using T = decltype(tag);
    with_width<T>(pack_width(cols, sizeof(T)) > 1 && aligned({x, residual, y, out}), [&](auto width) {
      constexpr int V = decltype(width)::value;
      const auto launch = [&](auto kernel) {
        kernel<<<static_cast<unsigned>(rows), row_threads(cols / V, V), 0, static_cast<cudaStream_t>(stream)>>>(
            static_cast<const T*>(x), static_cast<const T*>(residual), static_cast<T*>(y), static_cast<T*>(out), mean,
            rstd, static_cast<const T*>(weight), static_cast<const T*>(bias), cols, eps);
      };
      if (mean != nullptr)
        launch(norm_forward_kernel<T, true, V>);
      else
        launch(norm_forward_kernel<T, false, V>);
    });
  });
  return launched();
}

const char* pending_error() {
  const cudaError_t error = cudaPeekAtLastError();
  return error == cudaSuccess ? nullptr : cudaGetErrorString(error);
}

const char* synchronize(void* stream) {
  cudaError_t error = cudaStreamSynchronize(static_cast<cudaStream_t>(stream));
  if (error == cudaSuccess) error = cudaGetLastError();
  return error == cudaSuccess ? nullptr : cudaGetErrorString(error);
}

std::int64_t norm_backward_blocks(DType dtype, std::int64_t rows, std::int64_t cols, int sms) {
  const std::int64_t element_size = dtype == DType::kFloat32 ? 4 : 2;
  const int v = pack_width(cols, element_size), threads = row_threads(cols / v, v);
  const std::int64_t per_sm = std::max<std::int64_t>(4, std::min<std::int64_t>(32, 2048 / threads));
  return std::max<std::int64_t>(1, std::min<std::int64_t>(rows, per_sm * sms));
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
    with_width<T>(pack_width(cols, sizeof(T)) > 1 && aligned({grad_out, grad_y, y, grad_x}), [&](auto width) {
      constexpr int V = decltype(width)::value;
      const auto launch = [&](auto kernel) {
        kernel<<<blocks, row_threads(cols / V, V), shared_bytes, static_cast<cudaStream_t>(stream)>>>(
            static_cast<const T*>(grad_out), static_cast<const T*>(grad_y), static_cast<const T*>(y),
            static_cast<const T*>(weight), mean, rstd, static_cast<T*>(grad_x), dw_partial, db_partial, rows, cols,
            in_shared);
      };
      if (mean != nullptr)
        launch(norm_backward_kernel<T, true, V>);
      else
        launch(norm_backward_kernel<T, false, V>);
    });
  });
  return launched();
}

const char* rope(DType dtype, const void* x, void* out, const void* cos, const void* sin, std::int64_t n,
                 std::int64_t t, std::int64_t heads, std::int64_t head_dim, std::int64_t table_batch, bool transpose,
                 void* stream) {
  const std::int64_t rows = n * t, pairs = heads * (head_dim / 2);
  if (rows == 0 || pairs == 0) return nullptr;
  if (rows > 0x7fffffff || heads * head_dim > 0x7fffffff) return "too many tokens or heads for one launch";
  with_type(dtype, [&](auto tag) {
    using T = decltype(tag);
    with_width<T>(pack_width(head_dim / 2, sizeof(T)) > 1 && aligned({x, out, cos, sin}), [&](auto width) {
      constexpr int V = decltype(width)::value;
      const std::int64_t packs = pairs / V;
      const int threads = static_cast<int>(packs >= 1024 ? 1024 : (packs + 31) / 32 * 32);
      rope_kernel<T, V><<<static_cast<unsigned>(rows), threads, 0, static_cast<cudaStream_t>(stream)>>>(
          static_cast<const T*>(x), static_cast<T*>(out), static_cast<const T*>(cos), static_cast<const T*>(sin), t,
          static_cast<int>(heads), static_cast<int>(head_dim), table_batch, transpose);
    });
  });
  return launched();
}

const char* swiglu_forward(DType dtype, const void* gate, const void* up, void* out, std::int64_t count, void* stream) {
  if (count == 0) return nullptr;
  with_type(dtype, [&](auto tag) {
    using T = decltype(tag);
    with_width<T>(aligned({gate, up, out}), [&](auto width) {
      constexpr int V = decltype(width)::value;
      swiglu_forward_kernel<T, V><<<grid_for(count / V), kElementwiseThreads, 0, static_cast<cudaStream_t>(stream)>>>(
          static_cast<const T*>(gate), static_cast<const T*>(up), static_cast<T*>(out), count);
    });
  });
  return launched();
}

const char* swiglu_backward(DType dtype, const void* grad, const void* gate, const void* up, void* grad_gate,
                            void* grad_up, std::int64_t count, void* stream) {
  if (count == 0) return nullptr;
  with_type(dtype, [&](auto tag) {
    using T = decltype(tag);
    with_width<T>(aligned({grad, gate, up, grad_gate, grad_up}), [&](auto width) {
      constexpr int V = decltype(width)::value;
      swiglu_backward_kernel<T, V><<<grid_for(count / V), kElementwiseThreads, 0, static_cast<cudaStream_t>(stream)>>>(
          static_cast<const T*>(grad), static_cast<const T*>(gate), static_cast<const T*>(up),
          static_cast<T*>(grad_gate), static_cast<T*>(grad_up), count);
    });
  });
  return launched();
}

}  // namespace strata::fused::cuda
