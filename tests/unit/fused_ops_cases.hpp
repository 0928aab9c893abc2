// The fused model ops (models/common/fused_ops.hpp) against transformers' unfused ops, forward and
// backward, tensor by tensor, on a given device: the CPU unit tests run them through the ATen
// path, the gpu tests through the CUDA kernels.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <torch/types.h>

#include "fused_ops.hpp"

namespace strata::test::fused_cases {

/// Called after each fused forward and backward with what ran: the gpu tests check there that it
/// ran the CUDA kernels (the ATen path gives the same values).
inline std::function<void(const std::string&)>& after_op() {
  static std::function<void(const std::string&)> hook;
  return hook;
}
inline void ran(const std::string& what) {
  if (after_op()) after_op()(what);
}

inline double tolerance(torch::ScalarType dtype) { return dtype == torch::kFloat32 ? 2e-5 : 2e-2; }

/// max |got - expected| / max(max |expected|, 1e-6), in float64.
inline double relative_error(const torch::Tensor& got, const torch::Tensor& expected) {
  REQUIRE(got.defined());
  REQUIRE(got.sizes() == expected.sizes());
  const auto g = got.to(torch::kCPU, torch::kFloat64), e = expected.to(torch::kCPU, torch::kFloat64);
  return (g - e).abs().max().item<double>() / std::max(e.abs().max().item<double>(), 1e-6);
}

inline void check_close(const torch::Tensor& got, const torch::Tensor& expected, torch::ScalarType dtype,
                        const std::string& what) {
  CAPTURE(what);
  CHECK(std::string(c10::toString(got.scalar_type())) == c10::toString(expected.scalar_type()));
  CHECK(relative_error(got, expected) <= tolerance(dtype));
}

/// A leaf of `shape` in `dtype` on `device`, values N(0, 1) (seeded on the CPU: the same on every device).
inline torch::Tensor leaf(torch::IntArrayRef shape, torch::ScalarType dtype, torch::Device device, double scale = 1) {
  return (torch::randn(shape) * scale).to(device, dtype).requires_grad_(true);
}

inline std::vector<torch::Tensor> grads(const std::vector<torch::Tensor>& leaves) {
  std::vector<torch::Tensor> out;
  for (const auto& t : leaves) out.push_back(t.grad().defined() ? t.grad().clone() : torch::Tensor());
  return out;
}

inline void zero_grads(const std::vector<torch::Tensor>& leaves) {
  for (const auto& t : leaves) t.mutable_grad() = torch::Tensor();
}

/// transformers' LlamaRMSNorm.
inline torch::Tensor reference_rms_norm(const torch::Tensor& y, const torch::Tensor& weight, double eps) {
  const auto h = y.to(torch::kFloat32);
  return weight * (h * torch::rsqrt(h.pow(2).mean(-1, true) + eps)).to(y.scalar_type());
}

/// `fused()` against `reference()`, each {y, out} of x + residual and its norm: both outputs, and
/// the gradients of `leaves` (x, residual, then the norm's parameters; `names`) when both y and out
/// feed the loss; then, with only y used, x's gradient is y's and the norm's parameters get none,
/// as in the unfused graph. Leaves the gradients of that last backward.
template <typename Fused, typename Reference>
void check_add_norm(const std::string& op, const Fused& fused, const Reference& reference,
                    const std::vector<torch::Tensor>& leaves, const std::vector<std::string>& names,
                    const torch::Tensor& coef_y, const torch::Tensor& coef_out, torch::ScalarType dtype) {
  const auto [y_ref, out_ref] = reference();
  ((y_ref * coef_y).sum() + (out_ref * coef_out).sum()).backward();
  const auto expected = grads(leaves);
  zero_grads(leaves);

  const auto [y, out] = fused();
  ran(op + " forward");
  check_close(y, y_ref, dtype, "y");
  check_close(out, out_ref, dtype, "out");
  ((y * coef_y).sum() + (out * coef_out).sum()).backward();
  ran(op + " backward");
  const auto got = grads(leaves);
  for (std::size_t i = 0; i < leaves.size(); ++i) check_close(got[i], expected[i], dtype, "grad " + names[i]);
  zero_grads(leaves);

  (fused().first * coef_y).sum().backward();
  check_close(leaves[0].grad(), coef_y, dtype, "grad x, only y used");
  for (std::size_t i = 2; i < leaves.size(); ++i) CHECK_FALSE(leaves[i].grad().defined());
}

/// add_rms_norm against x + residual, then transformers' RMSNorm (check_add_norm); and rms_norm:
/// output and the gradients of x and weight.
inline void check_add_rms_norm(torch::Device device, torch::ScalarType dtype, std::int64_t rows, std::int64_t cols) {
  CAPTURE(c10::toString(dtype));
  CAPTURE(rows);
  CAPTURE(cols);
  torch::manual_seed(3);
  const double eps = 1e-5;
  const auto x = leaf({rows, cols}, dtype, device), residual = leaf({rows, cols}, dtype, device, 0.5);
  const auto weight = (1 + torch::randn({cols}) * 0.1).to(device, dtype).requires_grad_(true);
  const auto coef_y = torch::randn({rows, cols}).to(device, dtype), coef_out = torch::randn({rows, cols}).to(device, dtype);
  const std::vector<torch::Tensor> leaves{x, residual, weight};

  check_add_norm(
      "add_rms_norm", [&] { return strata::fused::add_rms_norm(x, residual, weight, eps); },
      [&] {
        const auto y = x + residual;
        return std::pair{y, reference_rms_norm(y, weight, eps)};
      },
      leaves, {"x", "residual", "weight"}, coef_y, coef_out, dtype);
  check_close(residual.grad(), coef_y, dtype, "grad residual, only y used");
  zero_grads(leaves);

  // Plain RMSNorm: x's gradient through the norm only.
  (reference_rms_norm(x, weight, eps) * coef_out).sum().backward();
  const auto plain_expected = grads({x, weight});
  zero_grads(leaves);
  const auto plain = strata::fused::rms_norm(x, weight, eps);
  ran("rms_norm forward");
  check_close(plain, reference_rms_norm(x.detach(), weight.detach(), eps), dtype, "rms_norm");
  (plain * coef_out).sum().backward();
  ran("rms_norm backward");
  const auto plain_got = grads({x, weight});
  check_close(plain_got[0], plain_expected[0], dtype, "rms_norm grad x");
  check_close(plain_got[1], plain_expected[1], dtype, "rms_norm grad weight");
}

/// add_layer_norm against x + residual, then ATen's layer_norm (check_add_norm).
inline void check_add_layer_norm(torch::Device device, torch::ScalarType dtype, std::int64_t rows, std::int64_t cols) {
  CAPTURE(c10::toString(dtype));
  CAPTURE(rows);
  CAPTURE(cols);
  torch::manual_seed(8);
  const double eps = 1e-6;
  const auto x = leaf({rows, cols}, dtype, device, 2), residual = leaf({rows, cols}, dtype, device, 0.5);
  {
    // A mean far from 0 (in float32: the variance as E[y^2] - E[y]^2 would be off by about 6%).
    torch::NoGradGuard no_grad;
    x.add_(dtype == torch::kFloat32 ? 1000 : 3);
  }
  const auto weight = (1 + torch::randn({cols}) * 0.1).to(device, dtype).requires_grad_(true);
  const auto bias = (torch::randn({cols}) * 0.1).to(device, dtype).requires_grad_(true);
  const auto coef_y = torch::randn({rows, cols}).to(device, dtype), coef_out = torch::randn({rows, cols}).to(device, dtype);

  check_add_norm(
      "add_layer_norm", [&] { return strata::fused::add_layer_norm(x, residual, weight, bias, eps); },
      [&] {
        const auto y = x + residual;
        return std::pair{y, torch::layer_norm(y, {cols}, weight, bias, eps)};
      },
      {x, residual, weight, bias}, {"x", "residual", "weight", "bias"}, coef_y, coef_out, dtype);
}

/// cat(-x2, x1) over the halves of the last dimension.
inline torch::Tensor rotate_half(const torch::Tensor& x) {
  const auto half = x.size(-1) / 2;
  return torch::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
}

/// rope_ on projections' outputs (with a bias, ATen's linear returns a view of addmm's result;
/// without, matmul's own tensor)
/// against q * cos + rotate_half(q) * sin: the rotated q and k, rotated in place, and the gradients
/// of the projections' inputs and weights; tables of one row (unpadded) or one per sample.
inline void check_rope(torch::Device device, torch::ScalarType dtype, std::int64_t n, std::int64_t t,
                       std::int64_t heads, std::int64_t kv_heads, std::int64_t head_dim) {
  CAPTURE(c10::toString(dtype));
  torch::manual_seed(4);
  const auto hidden = heads * head_dim;
  for (const bool bias : {false, true}) {
    for (const std::int64_t table_batch : {std::int64_t{1}, n}) {
      CAPTURE(bias);
      CAPTURE(table_batch);
      const auto h = leaf({n, t, hidden}, dtype, device);
      const auto wq = leaf({hidden, hidden}, dtype, device, 0.1), wk = leaf({kv_heads * head_dim, hidden}, dtype, device, 0.1);
      const auto bq = bias ? leaf({hidden}, dtype, device) : torch::Tensor();
      const auto bk = bias ? leaf({kv_heads * head_dim}, dtype, device) : torch::Tensor();
      const auto angles = torch::rand({table_batch, 1, t, head_dim / 2}) * 20;
      const auto cos = torch::cat({angles, angles}, -1).cos().to(device, dtype);
      const auto sin = torch::cat({angles, angles}, -1).sin().to(device, dtype);
      const auto coef_q = torch::randn({n, heads, t, head_dim}).to(device, dtype);
      const auto coef_k = torch::randn({n, kv_heads, t, head_dim}).to(device, dtype);
      std::vector<torch::Tensor> leaves{h, wq, wk};
      if (bias) leaves.insert(leaves.end(), {bq, bk});
      const auto heads_of = [&](const torch::Tensor& x) { return x.view({n, t, -1, head_dim}).transpose(1, 2); };

      auto q_ref = heads_of(torch::linear(h, wq, bq));
      auto k_ref = heads_of(torch::linear(h, wk, bk));
      q_ref = q_ref * cos + rotate_half(q_ref) * sin;
      k_ref = k_ref * cos + rotate_half(k_ref) * sin;
      ((q_ref * coef_q).sum() + (k_ref * coef_k).sum()).backward();
      const auto expected = grads(leaves);
      zero_grads(leaves);

      const auto q_proj = torch::linear(h, wq, bq), k_proj = torch::linear(h, wk, bk);
      CHECK(q_proj.is_view() == bias);  // both kinds of tensor are rotated in place
      const auto* q_data = q_proj.const_data_ptr();
      const auto [q, k] = strata::fused::rope_(q_proj, k_proj, cos, sin, head_dim);
      ran("rope_ forward");
      CHECK(q.const_data_ptr() == q_data);  // in place
      CHECK(q_proj._version() > 0);
      check_close(heads_of(q), q_ref.detach(), dtype, "q");
      check_close(heads_of(k), k_ref.detach(), dtype, "k");
      ((heads_of(q) * coef_q).sum() + (heads_of(k) * coef_k).sum()).backward();
      ran("rope_ backward");
      const auto got = grads(leaves);
      for (std::size_t i = 0; i < leaves.size(); ++i) check_close(got[i], expected[i], dtype, "grad " + std::to_string(i));
    }
  }
}

/// swiglu against silu(gate) * up.
inline void check_swiglu(torch::Device device, torch::ScalarType dtype, std::int64_t rows, std::int64_t cols) {
  CAPTURE(c10::toString(dtype));
  torch::manual_seed(5);
  const auto gate = leaf({rows, cols}, dtype, device, 3), up = leaf({rows, cols}, dtype, device);
  const auto coef = torch::randn({rows, cols}).to(device, dtype);
  const auto reference = torch::silu(gate) * up;
  (reference * coef).sum().backward();
  const auto expected = grads({gate, up});
  zero_grads({gate, up});
  const auto out = strata::fused::swiglu(gate, up);
  ran("swiglu forward");
  check_close(out, reference.detach(), dtype, "out");
  (out * coef).sum().backward();
  ran("swiglu backward");
  const auto got = grads({gate, up});
  check_close(got[0], expected[0], dtype, "grad gate");
  check_close(got[1], expected[1], dtype, "grad up");
}

}  // namespace strata::test::fused_cases
