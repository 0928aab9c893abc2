#include "fused_ops.hpp"

#include <algorithm>
#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>

#include <torch/autograd.h>

#ifdef STRATA_FUSED_CUDA
#include <ATen/cuda/CUDAContextLight.h>
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

/// The kernels take contiguous CUDA tensors of one float dtype on one device.
bool kernel_fits(std::initializer_list<const Tensor*> tensors) {
  const Tensor& first = **tensors.begin();
  if (!first.is_cuda() || !kernel_dtype(first.scalar_type())) return false;
  return std::all_of(tensors.begin(), tensors.end(), [&](const Tensor* t) {
    return !t->defined() || (t->is_cuda() && t->device() == first.device() &&
                             t->scalar_type() == first.scalar_type() && t->is_contiguous());
  });
}

void* stream_of(const Tensor& t) { return c10::cuda::getCurrentCUDAStream(t.device().index()).stream(); }

void check(const char* error, const char* kernel) {
  if (error != nullptr) throw std::runtime_error(std::string("strata fused ") + kernel + " kernel: " + error);
}
#else
bool kernel_fits(std::initializer_list<const Tensor*>) { return false; }
#endif

[[maybe_unused]] const void* data_or_null(const Tensor& t) { return t.defined() ? t.const_data_ptr() : nullptr; }

// ---- RMSNorm with its residual add ----------------------------------------------------------------

struct NormForward {
  Tensor y, out, rstd;  // rstd: float32 [rows]
};

NormForward norm_forward(const Tensor& x, const Tensor& residual, const Tensor& weight, double eps) {
  const auto cols = x.size(-1), rows = cols == 0 ? 0 : x.numel() / cols;
  if (kernel_fits({&x, &residual, &weight}) && weight.dim() == 1 && weight.size(0) == cols &&
      (!residual.defined() || residual.sizes() == x.sizes())) {
#ifdef STRATA_FUSED_CUDA
    NormForward f{residual.defined() ? torch::empty_like(x) : x, torch::empty_like(x),
                  torch::empty({rows}, x.options().dtype(torch::kFloat32))};
    check(cuda::add_rms_norm_forward(*kernel_dtype(x.scalar_type()), x.const_data_ptr(), data_or_null(residual),
                                     residual.defined() ? f.y.data_ptr() : nullptr, f.out.data_ptr(),
                                     f.rstd.data_ptr<float>(), weight.const_data_ptr(), rows, cols,
                                     static_cast<float>(eps), stream_of(x)),
          "add_rms_norm_forward");
    return f;
#endif
  }
  const auto y = residual.defined() ? x + residual : x;
  const auto h = y.to(torch::kFloat32);
  const auto rstd = torch::rsqrt(h.pow(2).mean(-1, /*keepdim=*/true) + eps);
  return {y, weight * (h * rstd).to(y.scalar_type()), rstd.reshape({rows})};
}

/// {grad of y (and of x and residual), grad of weight}.
std::pair<Tensor, Tensor> norm_backward(const Tensor& grad_out, const Tensor& grad_y, const Tensor& y,
                                        const Tensor& weight, const Tensor& rstd) {
  const auto cols = y.size(-1), rows = cols == 0 ? 0 : y.numel() / cols;
  const auto g = grad_out.contiguous().to(y.scalar_type());
  const auto gy = grad_y.defined() ? grad_y.contiguous().to(y.scalar_type()) : Tensor();
  if (kernel_fits({&y, &g, &gy, &weight})) {
#ifdef STRATA_FUSED_CUDA
    auto grad_x = torch::empty_like(y);
    const auto sms = at::cuda::getDeviceProperties(y.device().index())->multiProcessorCount;
    const auto blocks = std::min<std::int64_t>(rows, 4 * static_cast<std::int64_t>(sms));
    auto dw_partial = torch::empty({blocks, cols}, y.options().dtype(torch::kFloat32));
    check(cuda::add_rms_norm_backward(*kernel_dtype(y.scalar_type()), g.const_data_ptr(), data_or_null(gy),
                                      y.const_data_ptr(), weight.const_data_ptr(), rstd.const_data_ptr<float>(),
                                      grad_x.data_ptr(), dw_partial.data_ptr<float>(), rows, cols,
                                      static_cast<int>(blocks), stream_of(y)),
          "add_rms_norm_backward");
    return {grad_x, dw_partial.sum(0).to(weight.scalar_type())};
#endif
  }
  const auto r = rstd.unsqueeze(1);
  const auto n = y.reshape({rows, cols}).to(torch::kFloat32) * r;
  const auto g32 = g.reshape({rows, cols}).to(torch::kFloat32);
  const auto dn = g32 * weight.to(torch::kFloat32);
  auto d = r * (dn - n * (dn * n).mean(-1, /*keepdim=*/true));
  if (gy.defined()) d += gy.reshape({rows, cols}).to(torch::kFloat32);
  return {d.to(y.scalar_type()).view(y.sizes()), (g32 * n).sum(0).to(weight.scalar_type())};
}

/// Inputs x, residual, weight; outputs y = x + residual and RMSNorm(y) * weight.
class AddRmsNormFunction final : public torch::autograd::Function<AddRmsNormFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const Tensor& x, const Tensor& residual, const Tensor& weight,
                               double eps) {
    auto f = norm_forward(x, residual, weight, eps);
    ctx->save_for_backward({f.y, weight, f.rstd});
    return {f.y, f.out};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &grad_y = grads[0], &grad_out = grads[1];
    if (!grad_out.defined()) return {grad_y, grad_y, Tensor(), Tensor()};  // y's gradient is x's and residual's
    auto [grad_x, grad_weight] = norm_backward(grad_out, grad_y, saved[0], saved[1], saved[2]);
    return {grad_x, grad_x, grad_weight, Tensor()};
  }
};

/// Inputs x, weight; output RMSNorm(x) * weight. (A custom function's inputs cannot be undefined,
/// so the plain norm is a function of its own.)
class RmsNormFunction final : public torch::autograd::Function<RmsNormFunction> {
 public:
  static Tensor forward(AutogradContext* ctx, const Tensor& x, const Tensor& weight, double eps) {
    auto f = norm_forward(x, Tensor(), weight, eps);
    ctx->save_for_backward({x, weight, f.rstd});
    return f.out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    auto [grad_x, grad_weight] = norm_backward(grads[0], Tensor(), saved[0], saved[1], saved[2]);
    return {grad_x, grad_weight, Tensor()};
  }
};

// ---- rotary embeddings in place -------------------------------------------------------------------

/// x rotated (transpose: by the inverse rotation) into out, which may be x.
void rotate(const Tensor& x, const Tensor& out, const Tensor& cos, const Tensor& sin, std::int64_t head_dim,
            bool transpose) {
  const auto n = x.size(0), t = x.size(1);
  if (kernel_fits({&x, &out, &cos, &sin})) {
#ifdef STRATA_FUSED_CUDA
    check(cuda::rope(*kernel_dtype(x.scalar_type()), x.const_data_ptr(), out.data_ptr(), cos.const_data_ptr(),
                     sin.const_data_ptr(), n, t, x.size(2) / head_dim, head_dim, cos.size(0), transpose,
                     stream_of(x)),
          "rope");
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

class RopeFunction final : public torch::autograd::Function<RopeFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const Tensor& q, const Tensor& k, const Tensor& cos,
                               const Tensor& sin, std::int64_t head_dim) {
    rotate(q, q, cos, sin, head_dim, false);
    rotate(k, k, cos, sin, head_dim, false);
    ctx->mark_dirty({q, k});
    ctx->save_for_backward({cos, sin});
    ctx->saved_data["head_dim"] = head_dim;
    return {q, k};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto head_dim = ctx->saved_data["head_dim"].toInt();
    variable_list out(5);
    for (std::size_t i = 0; i < 2; ++i) {
      if (!grads[i].defined()) continue;
      const auto g = grads[i].contiguous();
      out[i] = torch::empty_like(g);
      rotate(g, out[i], saved[0], saved[1], head_dim, true);
    }
    return out;
  }
};

// ---- SwiGLU ----------------------------------------------------------------------------------------

class SwiGluFunction final : public torch::autograd::Function<SwiGluFunction> {
 public:
  static Tensor forward(AutogradContext* ctx, const Tensor& gate, const Tensor& up) {
    ctx->save_for_backward({gate, up});
    if (kernel_fits({&gate, &up}) && gate.sizes() == up.sizes()) {
#ifdef STRATA_FUSED_CUDA
      auto out = torch::empty_like(gate);
      check(cuda::swiglu_forward(*kernel_dtype(gate.scalar_type()), gate.const_data_ptr(), up.const_data_ptr(),
                                 out.data_ptr(), gate.numel(), stream_of(gate)),
            "swiglu_forward");
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
      auto grad_gate = torch::empty_like(gate), grad_up = torch::empty_like(up);
      check(cuda::swiglu_backward(*kernel_dtype(gate.scalar_type()), grad.const_data_ptr(), gate.const_data_ptr(),
                                  up.const_data_ptr(), grad_gate.data_ptr(), grad_up.data_ptr(), gate.numel(),
                                  stream_of(gate)),
            "swiglu_backward");
      return {grad_gate, grad_up};
#endif
    }
    // As autograd through silu(gate) * up, whose intermediates round to the dtype.
    const auto g = gate.to(torch::kFloat32), s = torch::sigmoid(g);
    const auto silu = (g * s).to(gate.scalar_type());
    const auto grad_silu = (grad * up).to(torch::kFloat32);
    return {(grad_silu * s * (1 + g * (1 - s))).to(gate.scalar_type()), grad * silu};
  }
};

}  // namespace

bool cuda_kernels() {
#ifdef STRATA_FUSED_CUDA
  return true;
#else
  return false;
#endif
}

std::pair<Tensor, Tensor> add_rms_norm(const Tensor& x, const Tensor& residual, const Tensor& weight, double eps) {
  const auto out = AddRmsNormFunction::apply(x, residual, weight, eps);
  return {out[0], out[1]};
}

Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps) { return RmsNormFunction::apply(x, weight, eps); }

std::pair<Tensor, Tensor> rope_(const Tensor& q, const Tensor& k, const Tensor& cos, const Tensor& sin,
                                std::int64_t head_dim) {
  for (const auto* t : {&q, &k})
    if (t->dim() != 3 || !t->is_contiguous() || t->size(2) % head_dim != 0 || head_dim % 2 != 0)
      throw std::invalid_argument("strata::fused::rope_: q and k must be contiguous [n, T, heads * head_dim], "
                                  "head_dim even");
  if (cos.dim() != 4 || cos.size(1) != 1 || cos.sizes() != sin.sizes() || (cos.size(0) != 1 && cos.size(0) != q.size(0)) ||
      cos.size(2) != q.size(1) || cos.size(3) != head_dim)
    throw std::invalid_argument("strata::fused::rope_: cos and sin must be [1 or n, 1, T, head_dim]");
  const auto out = RopeFunction::apply(q, k, cos.contiguous(), sin.contiguous(), head_dim);
  return {out[0], out[1]};
}

Tensor swiglu(const Tensor& gate, const Tensor& up) { return SwiGluFunction::apply(gate, up); }

}  // namespace strata::fused
