#include "fused_ops.hpp"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <iostream>
#include <map>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>

#include <torch/autograd.h>

#ifdef STRATA_FUSED_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime_api.h>
#include <c10/cuda/CUDAStream.h>

#include "fused_kernels.hpp"
#endif

namespace strata::fused {
namespace {

using torch::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// ---- where the CUDA kernels apply -----------------------------------------------------------------

#ifdef STRATA_FUSED_CUDA
std::optional<cuda::DType> kernel_dtype(torch::ScalarType t) {
  switch (t) {
    case torch::kFloat32: return cuda::DType::kFloat32;
    case torch::kFloat16: return cuda::DType::kFloat16;
    case torch::kBFloat16: return cuda::DType::kBFloat16;
    default: return std::nullopt;
  }
}

/// Device `index`'s properties, read once: from the CUDA runtime, not ATen's CUDA context, which
/// lives in libtorch_cuda (loaded only where there is a GPU; the plugin must load without it).
const cudaDeviceProp& device_properties(c10::DeviceIndex index) {
  static std::mutex mutex;
  static std::map<c10::DeviceIndex, cudaDeviceProp> known;
  const std::lock_guard<std::mutex> lock(mutex);
  auto it = known.find(index);
  if (it == known.end()) {
    cudaDeviceProp props{};
    const cudaError_t rc = cudaGetDeviceProperties(&props, index);
    if (rc != cudaSuccess) {
      (void)cudaGetLastError();
      throw std::runtime_error(std::string("fused ops: the properties of CUDA device ") + std::to_string(index) +
                               " could not be read: " + cudaGetErrorString(rc));
    }
    it = known.emplace(index, props).first;
  }
  return it->second;
}

/// Whether the kernels run on CUDA device `index` (its compute capability against the
/// architectures they were built for), asked once per device; a device they do not run on is
/// said once, on stderr, and takes the ATen path.
bool device_runs_kernels(c10::DeviceIndex index) {
  static std::mutex mutex;
  static std::map<c10::DeviceIndex, bool> known;
  const std::lock_guard<std::mutex> lock(mutex);
  const auto it = known.find(index);
  if (it != known.end()) return it->second;
  const cudaDeviceProp* props = &device_properties(index);
  const bool runs = kernels_run_on(props->major, props->minor, cuda_architectures());
  if (!runs)
    std::cerr << "strata: warning: fused ops: CUDA device " << static_cast<int>(index) << " (" << props->name
              << ", compute capability " << props->major << "." << props->minor
              << ") is not among the architectures the fused kernels were built for (" << cuda_architectures()
              << "): they take the ATen path there. Rebuild with -DSTRATA_CUDA_ARCHITECTURES including "
              << props->major << props->minor << " to use the kernels.\n";
  known.emplace(index, runs);
  return runs;
}

/// The kernels take contiguous CUDA tensors of one float dtype on one device they run on.
bool kernel_fits(std::initializer_list<const Tensor*> tensors) {
  const Tensor& first = **tensors.begin();
  if (!first.is_cuda() || !kernel_dtype(first.scalar_type()) || !device_runs_kernels(first.device().index())) return false;
  return std::all_of(tensors.begin(), tensors.end(), [&](const Tensor* t) {
    return !t->defined() || (t->is_cuda() && t->device() == first.device() &&
                             t->scalar_type() == first.scalar_type() && t->is_contiguous());
  });
}

std::atomic<std::int64_t> launches{0};

/// STRATA_FUSED_SYNC=1: the debug mode that waits for each fused kernel, so that a fault inside
/// one is reported by the op that caused it (the gpu tests run in it).
bool sync_after_launch() {
  static const bool on = [] {
    const char* v = std::getenv("STRATA_FUSED_SYNC");
    return v != nullptr && *v != '\0' && std::string(v) != "0";
  }();
  return on;
}

/// The launch's device made current (kernels launch on the current device) and its current stream.
/// An error already pending is an earlier op's: said so here, before `kernel` launches, rather than
/// reported (and cleared) as this kernel's.
struct OnDevice {
  OnDevice(const Tensor& t, const char* kernel)
      : guard(t.device()), stream(c10::cuda::getCurrentCUDAStream(t.device().index())), name(kernel) {
    if (const char* earlier = cuda::pending_error())
      throw std::runtime_error(std::string("a CUDA error was pending before the strata fused ") + kernel +
                               " kernel launched (an earlier operation's): " + earlier);
  }
  c10::cuda::CUDAGuard guard;
  c10::cuda::CUDAStream stream;
  const char* name;
  void* handle() const { return stream.stream(); }
};

/// After a launch: its error, or in the debug mode the kernel's own fault.
void check(const OnDevice& on, const char* error) {
  if (error == nullptr && sync_after_launch()) error = cuda::synchronize(on.handle());
  if (error != nullptr) throw std::runtime_error(std::string("strata fused ") + on.name + " kernel: " + error);
  ++launches;
}
#else
bool kernel_fits(std::initializer_list<const Tensor*>) { return false; }
#endif

[[maybe_unused]] const void* data_or_null(const Tensor& t) { return t.defined() ? t.const_data_ptr() : nullptr; }

// ---- RMSNorm and LayerNorm with the residual add before them ----------------------------------------

/// LayerNorm (mean subtracted, a bias) or RMSNorm.
enum class Norm { kRms, kLayer };

struct NormForward {
  Tensor y, out, mean, rstd;  // [rows]; mean: LayerNorm only; float32 from the kernels, ATen's dtype otherwise
};

/// The norm kernels take, besides kernel_fits' conditions, one weight (and bias) value per column.
bool norm_kernel_fits(std::initializer_list<const Tensor*> tensors, const Tensor& weight, const Tensor& bias,
                      std::int64_t cols) {
  return kernel_fits(tensors) && weight.dim() == 1 && weight.size(0) == cols &&
         (!bias.defined() || (bias.dim() == 1 && bias.size(0) == cols));
}

/// [rows] statistics as native_layer_norm shapes them: the input's sizes with the last one 1.
Tensor stat_shaped(const Tensor& stat, const Tensor& like) {
  auto sizes = like.sizes().vec();
  sizes.back() = 1;
  return stat.view(sizes);
}

/// y is x itself without a residual. On CUDA, a strided x or residual (vit's mean-pooled
/// embedding) is made contiguous here, once, for the kernel.
NormForward norm_forward(Norm norm, const Tensor& input, const Tensor& input_residual, const Tensor& weight,
                         const Tensor& bias, double eps) {
  const auto contiguous_on_cuda = [](const Tensor& t) { return t.defined() && t.is_cuda() ? t.contiguous() : t; };
  const auto x = contiguous_on_cuda(input), residual = contiguous_on_cuda(input_residual);
  const auto cols = x.size(-1), rows = cols == 0 ? 0 : x.numel() / cols;
  if (norm_kernel_fits({&x, &residual, &weight, &bias}, weight, bias, cols)) {
#ifdef STRATA_FUSED_CUDA
    const OnDevice on(x, "norm_forward");
    const auto stats = x.options().dtype(torch::kFloat32);
    NormForward f{residual.defined() ? torch::empty_like(x) : x, torch::empty_like(x),
                  norm == Norm::kLayer ? torch::empty({rows}, stats) : Tensor(), torch::empty({rows}, stats)};
    check(on, cuda::norm_forward(*kernel_dtype(x.scalar_type()), x.const_data_ptr(), data_or_null(residual),
                             residual.defined() ? f.y.data_ptr() : nullptr, f.out.data_ptr(),
                             f.mean.defined() ? f.mean.data_ptr<float>() : nullptr, f.rstd.data_ptr<float>(),
                             weight.const_data_ptr(), data_or_null(bias), rows, cols, static_cast<float>(eps),
                             on.handle()));
    return f;
#endif
  }
  const auto y = residual.defined() ? x + residual : x;
  if (norm == Norm::kLayer) {
    auto [out, mean, rstd] = at::native_layer_norm(y, {cols}, weight, bias, eps);
    return {y, out, mean.reshape({rows}), rstd.reshape({rows})};
  }
  const auto h = y.to(torch::kFloat32);
  const auto rstd = torch::rsqrt(h.pow(2).mean(-1, /*keepdim=*/true) + eps);
  return {y, weight * (h * rstd).to(y.scalar_type()), Tensor(), rstd.reshape({rows})};
}

struct NormGrads {
  Tensor x, weight, bias;  // x: also the residual's (and y's gradient added in)
};

NormGrads norm_backward(Norm norm, const Tensor& grad_out, const Tensor& grad_y, const Tensor& y, const Tensor& weight,
                        const Tensor& bias, const Tensor& mean, const Tensor& rstd) {
  const auto cols = y.size(-1), rows = cols == 0 ? 0 : y.numel() / cols;
  const auto g = grad_out.contiguous().to(y.scalar_type());
  const auto gy = grad_y.defined() ? grad_y.contiguous().to(y.scalar_type()) : Tensor();
  if (norm_kernel_fits({&y, &g, &gy, &weight, &bias}, weight, bias, cols) && rstd.numel() == rows) {
#ifdef STRATA_FUSED_CUDA
    if (rows == 0)  // no row to launch over: the weight's and bias's gradients are zero, not the partials' garbage
      return {torch::empty_like(y), torch::zeros_like(weight), bias.defined() ? torch::zeros_like(bias) : Tensor()};
    const OnDevice on(y, "norm_backward");
    auto grad_x = torch::empty_like(y);
    const auto sms = device_properties(y.device().index()).multiProcessorCount;
    const auto blocks = cuda::norm_backward_blocks(*kernel_dtype(y.scalar_type()), rows, cols, sms);
    const auto partials = y.options().dtype(torch::kFloat32);
    auto dw_partial = torch::empty({blocks, cols}, partials);
    auto db_partial = norm == Norm::kLayer ? torch::empty({blocks, cols}, partials) : Tensor();
    check(on, cuda::norm_backward(*kernel_dtype(y.scalar_type()), g.const_data_ptr(), data_or_null(gy), y.const_data_ptr(),
                              weight.const_data_ptr(), mean.defined() ? mean.const_data_ptr<float>() : nullptr,
                              rstd.const_data_ptr<float>(), grad_x.data_ptr(), dw_partial.data_ptr<float>(),
                              db_partial.defined() ? db_partial.data_ptr<float>() : nullptr, rows, cols,
                              static_cast<int>(blocks), on.handle()));
    return {grad_x, dw_partial.sum(0).to(weight.scalar_type()),
            bias.defined() ? db_partial.sum(0).to(bias.scalar_type()) : Tensor()};
#endif
  }
  if (norm == Norm::kLayer) {
    auto [dx, dw, db] = at::native_layer_norm_backward(g, y, {cols}, stat_shaped(mean, y), stat_shaped(rstd, y), weight,
                                                       bias, {true, true, bias.defined()});
    return {gy.defined() ? dx + gy : dx, dw, db};
  }
  const auto r = rstd.unsqueeze(1);
  const auto n = y.reshape({rows, cols}).to(torch::kFloat32).mul(r);
  const auto g32 = g.reshape({rows, cols}).to(torch::kFloat32);
  auto d = g32.mul(weight.to(torch::kFloat32));  // dn, then rstd (dn - n mean(dn n)) in place
  const auto mean_dot = (d * n).mean(-1, /*keepdim=*/true);
  d.sub_(n * mean_dot).mul_(r);
  if (gy.defined()) d.add_(gy.reshape({rows, cols}).to(torch::kFloat32));
  return {d.to(y.scalar_type()).view(y.sizes()), (g32 * n).sum(0).to(weight.scalar_type()), Tensor()};
}

/// Inputs x, residual, weight; outputs y = x + residual and RMSNorm(y) * weight.
class AddRmsNormFunction final : public torch::autograd::Function<AddRmsNormFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const Tensor& x, const Tensor& residual, const Tensor& weight,
                               double eps) {
    ctx->set_materialize_grads(false);  // an output nothing used gives no gradient, not zeros
    auto f = norm_forward(Norm::kRms, x, residual, weight, Tensor(), eps);
    ctx->save_for_backward({f.y, weight, f.rstd});
    return {f.y, f.out};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &grad_y = grads[0], &grad_out = grads[1];
    if (!grad_out.defined()) return {grad_y, grad_y, Tensor(), Tensor()};  // y's gradient is x's and residual's
    auto g = norm_backward(Norm::kRms, grad_out, grad_y, saved[0], saved[1], Tensor(), Tensor(), saved[2]);
    return {g.x, g.x, g.weight, Tensor()};
  }
};

/// Inputs x, weight; output RMSNorm(x) * weight. (A custom function's inputs cannot be undefined,
/// so the plain norm is a function of its own.)
class RmsNormFunction final : public torch::autograd::Function<RmsNormFunction> {
 public:
  static Tensor forward(AutogradContext* ctx, const Tensor& x, const Tensor& weight, double eps) {
    auto f = norm_forward(Norm::kRms, x, Tensor(), weight, Tensor(), eps);
    ctx->save_for_backward({f.y, weight, f.rstd});
    return f.out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    auto g = norm_backward(Norm::kRms, grads[0], Tensor(), saved[0], saved[1], Tensor(), Tensor(), saved[2]);
    return {g.x, g.weight, Tensor()};
  }
};

/// Inputs x, residual, weight, bias; outputs y = x + residual and LayerNorm(y).
class AddLayerNormFunction final : public torch::autograd::Function<AddLayerNormFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const Tensor& x, const Tensor& residual, const Tensor& weight,
                               const Tensor& bias, double eps) {
    ctx->set_materialize_grads(false);
    auto f = norm_forward(Norm::kLayer, x, residual, weight, bias, eps);
    ctx->save_for_backward({f.y, weight, bias, f.mean, f.rstd});
    return {f.y, f.out};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &grad_y = grads[0], &grad_out = grads[1];
    if (!grad_out.defined()) return {grad_y, grad_y, Tensor(), Tensor(), Tensor()};
    auto g = norm_backward(Norm::kLayer, grad_out, grad_y, saved[0], saved[1], saved[2], saved[3], saved[4]);
    return {g.x, g.x, g.weight, g.bias, Tensor()};
  }
};

// ---- rotary embeddings in place -------------------------------------------------------------------

/// x rotated (transpose: by the inverse rotation) into out, which may be x.
void rotate(const Tensor& x, const Tensor& out, const Tensor& cos, const Tensor& sin, std::int64_t head_dim,
            bool transpose) {
  const auto n = x.size(0), t = x.size(1);
  if (kernel_fits({&x, &out, &cos, &sin})) {
#ifdef STRATA_FUSED_CUDA
    const OnDevice on(x, "rope");
    check(on, cuda::rope(*kernel_dtype(x.scalar_type()), x.const_data_ptr(), out.data_ptr(), cos.const_data_ptr(),
                     sin.const_data_ptr(), n, t, x.size(2) / head_dim, head_dim, cos.size(0), transpose,
                     on.handle()));
    return;
#endif
  }
  const auto half = head_dim / 2;
  const auto v = x.view({n, t, -1, head_dim}).to(torch::kFloat32);
  // Tables [B, 1, T, d] -> [B, T, 1, d], against v's [n, T, heads, d].
  const auto c = cos.squeeze(1).unsqueeze(2).to(torch::kFloat32), s = sin.squeeze(1).unsqueeze(2).to(torch::kFloat32);
  const auto x1 = v.narrow(-1, 0, half), x2 = v.narrow(-1, half, half);
  const auto c1 = c.narrow(-1, 0, half), c2 = c.narrow(-1, half, half);
  const auto s1 = s.narrow(-1, 0, half), s2 = s.narrow(-1, half, half);
  const auto rotated = transpose ? torch::cat({x1 * c1 + x2 * s2, x2 * c2 - x1 * s1}, -1)
                                 : torch::cat({x1 * c1 - x2 * s1, x2 * c2 + x1 * s2}, -1);
  out.view({n, t, -1, head_dim}).copy_(rotated);
}

/// One tensor rotated in place (a function of one output: autograd lets such a function modify a
/// view, as a projection with a bias returns, in place).
class RopeFunction final : public torch::autograd::Function<RopeFunction> {
 public:
  static Tensor forward(AutogradContext* ctx, const Tensor& x, const Tensor& cos, const Tensor& sin,
                        std::int64_t head_dim) {
    rotate(x, x, cos, sin, head_dim, false);
    ctx->mark_dirty({x});
    ctx->save_for_backward({cos, sin});
    ctx->saved_data["head_dim"] = head_dim;
    return x;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto g = grads[0].contiguous();
    auto grad = torch::empty_like(g);
    rotate(g, grad, saved[0], saved[1], ctx->saved_data["head_dim"].toInt(), true);
    return {grad, Tensor(), Tensor(), Tensor()};
  }
};

// ---- SwiGLU ----------------------------------------------------------------------------------------

class SwiGluFunction final : public torch::autograd::Function<SwiGluFunction> {
 public:
  static Tensor forward(AutogradContext* ctx, const Tensor& gate, const Tensor& up) {
    ctx->save_for_backward({gate, up});
    if (kernel_fits({&gate, &up}) && gate.sizes() == up.sizes()) {
#ifdef STRATA_FUSED_CUDA
      const OnDevice on(gate, "swiglu_forward");
      auto out = torch::empty_like(gate);
      check(on, cuda::swiglu_forward(*kernel_dtype(gate.scalar_type()), gate.const_data_ptr(), up.const_data_ptr(),
                                 out.data_ptr(), gate.numel(), on.handle()));
      return out;
#endif
    }
    return torch::silu(gate) * up;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &gate = saved[0], &up = saved[1];
    const auto grad = grads[0].contiguous().to(gate.scalar_type());
    if (kernel_fits({&gate, &up, &grad}) && gate.sizes() == up.sizes()) {
#ifdef STRATA_FUSED_CUDA
      const OnDevice on(gate, "swiglu_backward");
      auto grad_gate = torch::empty_like(gate), grad_up = torch::empty_like(up);
      check(on, cuda::swiglu_backward(*kernel_dtype(gate.scalar_type()), grad.const_data_ptr(), gate.const_data_ptr(),
                                  up.const_data_ptr(), grad_gate.data_ptr(), grad_up.data_ptr(), gate.numel(),
                                  on.handle()));
      return {grad_gate, grad_up};
#endif
    }
    // As autograd through silu(gate) * up computes them (silu(gate) again, not saved).
    return {at::silu_backward(grad * up, gate), grad * torch::silu(gate)};
  }
};

/// The residual adds without broadcasting.
void check_residual(const Tensor& x, const Tensor& residual, const char* op) {
  if (!residual.defined() || residual.sizes() != x.sizes())
    throw std::invalid_argument(std::string("strata::fused::") + op + ": the residual must have x's shape");
}

}  // namespace

bool cuda_kernels() {
#ifdef STRATA_FUSED_CUDA
  return true;
#else
  return false;
#endif
}

std::string cuda_architectures() {
#ifdef STRATA_FUSED_CUDA
  return STRATA_CUDA_ARCHITECTURES_LIST;
#else
  return "";
#endif
}

bool kernels_run_on(int major, int minor, const std::string& architectures) {
  const int device = major * 10 + minor;
  std::size_t start = 0;
  while (start <= architectures.size()) {
    const std::size_t end = std::min(architectures.find_first_of(";,", start), architectures.size());
    const std::string entry = architectures.substr(start, end - start);
    start = end + 1;
    if (entry == "all" || entry == "all-major" || entry == "native") return true;  // CMake's: built for this device
    if (entry.empty() || entry.find_first_not_of("0123456789") == 0) continue;
    std::size_t digits = 0;
    const int arch = std::stoi(entry, &digits);
    const std::string kind = entry.substr(digits);  // "", "-real" or "-virtual" (an "a"/"f" suffix: that arch only)
    const bool real = kind.empty() || kind == "-real", virtual_ = kind.empty() || kind == "-virtual";
    if (real && arch / 10 == major && arch % 10 <= minor) return true;  // sm_XY code runs on X.Y' for Y' >= Y
    if (virtual_ && arch <= device) return true;                        // compute_XY PTX compiles at load
    if (kind != "-real" && kind != "-virtual" && !kind.empty() && arch == device) return true;
  }
  return false;
}

std::int64_t cuda_kernel_launches() {
#ifdef STRATA_FUSED_CUDA
  return launches.load();
#else
  return 0;
#endif
}

std::pair<Tensor, Tensor> add_rms_norm(const Tensor& x, const Tensor& residual, const Tensor& weight, double eps) {
  check_residual(x, residual, "add_rms_norm");
  const auto out = AddRmsNormFunction::apply(x, residual, weight, eps);
  return {out[0], out[1]};
}

Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps) { return RmsNormFunction::apply(x, weight, eps); }

std::pair<Tensor, Tensor> add_layer_norm(const Tensor& x, const Tensor& residual, const Tensor& weight,
                                         const Tensor& bias, double eps) {
  check_residual(x, residual, "add_layer_norm");
  if (!weight.defined() || !bias.defined())  // a custom function's inputs cannot be undefined
    throw std::invalid_argument("strata::fused::add_layer_norm: LayerNorm with a weight and a bias only");
  const auto out = AddLayerNormFunction::apply(x, residual, weight, bias, eps);
  return {out[0], out[1]};
}

std::pair<Tensor, Tensor> rope_(const Tensor& q, const Tensor& k, const Tensor& cos, const Tensor& sin,
                                std::int64_t head_dim) {
  if (head_dim <= 0 || head_dim % 2 != 0)
    throw std::invalid_argument("strata::fused::rope_: head_dim must be positive and even");
  for (const auto* t : {&q, &k})
    if (t->dim() != 3 || !t->is_contiguous() || t->size(2) % head_dim != 0 || t->size(0) != q.size(0) ||
        t->size(1) != q.size(1))
      throw std::invalid_argument("strata::fused::rope_: q and k must be contiguous [n, T, heads * head_dim]");
  if (cos.dim() != 4 || cos.size(1) != 1 || cos.sizes() != sin.sizes() || (cos.size(0) != 1 && cos.size(0) != q.size(0)) ||
      cos.size(2) != q.size(1) || cos.size(3) != head_dim)
    throw std::invalid_argument("strata::fused::rope_: cos and sin must be [1 or n, 1, T, head_dim]");
  const auto c = cos.contiguous(), s = sin.contiguous();
  return {RopeFunction::apply(q, c, s, head_dim), RopeFunction::apply(k, c, s, head_dim)};
}

Tensor swiglu(const Tensor& gate, const Tensor& up) { return SwiGluFunction::apply(gate, up); }

}  // namespace strata::fused
