// On a GPU (label `gpu`): the fused model ops' CUDA kernels against transformers' unfused ops,
// forward and backward, tensor by tensor, in float32, bfloat16 and float16, at shapes that take
// every launch path (rows striding over the backward's blocks, rows wider than the shared-memory
// weight-gradient buffer, per-sample RoPE tables, 16-byte accesses and element-wise ones for
// widths they do not divide or tensors off a 16-byte boundary); and a llama step with fused_ops
// against one without. The same cases run on the CPU through the ATen path (tests/unit/test_fused_ops.cpp).
#include "test_support.hpp"
#include "gpu_support.hpp"

#include "bundled_plugins.hpp"
#include "fused_ops_cases.hpp"
#include "strata/dataset.hpp"
#include "strata/model.hpp"

#include <cstdint>
#include <string>
#include <vector>

#include <torch/csrc/autograd/autograd.h>

namespace fc = strata::test::fused_cases;
using strata::test::require_gpu;

namespace {
/// Skips without a GPU; fails without the kernels; and while it lives, fails every fused forward
/// and backward of the cases that launched no kernel (the ATen path gives the same values, so only
/// this tells them apart).
struct KernelsUsed {
  KernelsUsed() {
    require_gpu();
    REQUIRE_MESSAGE(strata::fused::cuda_kernels(),
                    "this build has no CUDA kernels for the fused ops: configure where nvcc is found "
                    "(STRATA_CUDA_KERNELS=ON)");
    last = strata::fused::cuda_kernel_launches();
    fc::after_op() = [this](const std::string& what) {
      const auto now = strata::fused::cuda_kernel_launches();
      CHECK_MESSAGE(now > last, what << " launched no CUDA kernel");
      last = now;
    };
  }
  ~KernelsUsed() { fc::after_op() = nullptr; }
  std::int64_t last = 0;
};
const torch::Device kCuda(torch::kCUDA, 0);
}  // namespace

TEST_CASE("fused ops on CUDA: add_rms_norm and rms_norm kernels are transformers' RMSNorm, forward and backward") {
  const KernelsUsed kernels;
  for (const auto dtype : {torch::kFloat32, torch::kBFloat16, torch::kFloat16}) {
    fc::check_add_rms_norm(kCuda, dtype, 7, 48);
    fc::check_add_rms_norm(kCuda, dtype, 3000, 2048);  // more rows than the backward's blocks
  }
  fc::check_add_rms_norm(kCuda, torch::kBFloat16, 40, 12000);  // the widest whose dw fits in shared memory
  fc::check_add_rms_norm(kCuda, torch::kBFloat16, 40, 12001);  // dw partial sums in global memory, element-wise
  fc::check_add_rms_norm(kCuda, torch::kBFloat16, 40, 12008);  // ... and in packs of 8
  fc::check_add_rms_norm(kCuda, torch::kFloat32, 40, 12004);   // ... and in packs of 4
  fc::check_add_rms_norm(kCuda, torch::kFloat32, 5, 33);       // a width that is no multiple of a warp
}

TEST_CASE("fused ops on CUDA: a norm over zero rows has zero weight and bias gradients, and one row is exact") {
  require_gpu();
  for (const auto dtype : {torch::kFloat32, torch::kBFloat16}) {
    const auto opts = torch::TensorOptions().device(kCuda).dtype(dtype);
    auto x = torch::randn({0, 64}, opts).requires_grad_(true);
    auto w = torch::randn({64}, opts).requires_grad_(true), b = torch::randn({64}, opts).requires_grad_(true);
    auto r = torch::randn({0, 64}, opts);
    auto [y, out] = strata::fused::add_layer_norm(x, r, w, b, 1e-5);
    out.sum().backward();
    CHECK(torch::equal(w.grad(), torch::zeros_like(w)));  // not the partial sums' uninitialized memory
    CHECK(torch::equal(b.grad(), torch::zeros_like(b)));
    auto w2 = torch::randn({64}, opts).requires_grad_(true);
    strata::fused::rms_norm(torch::randn({0, 64}, opts), w2, 1e-6).sum().backward();
    CHECK(torch::equal(w2.grad(), torch::zeros_like(w2)));
  }
  fc::check_add_rms_norm(kCuda, torch::kFloat32, 1, 48);  // one row
}

TEST_CASE("fused ops on CUDA: the add_layer_norm kernels are the residual add, then ATen's layer_norm") {
  const KernelsUsed kernels;
  for (const auto dtype : {torch::kFloat32, torch::kBFloat16, torch::kFloat16}) {
    fc::check_add_layer_norm(kCuda, dtype, 7, 48);
    fc::check_add_layer_norm(kCuda, dtype, 8000, 768);  // more rows than the backward's blocks
  }
  fc::check_add_layer_norm(kCuda, torch::kBFloat16, 40, 6000);  // the widest whose dw and db fit in shared memory
  fc::check_add_layer_norm(kCuda, torch::kBFloat16, 40, 6001);  // dw and db partial sums in global memory, element-wise
  fc::check_add_layer_norm(kCuda, torch::kBFloat16, 40, 6008);  // ... and in packs of 8
  fc::check_add_layer_norm(kCuda, torch::kFloat32, 5, 33);
}

TEST_CASE("fused ops on CUDA: the rope_ kernel rotates q and k in place, forward and backward") {
  const KernelsUsed kernels;
  for (const auto dtype : {torch::kFloat32, torch::kBFloat16, torch::kFloat16}) {
    fc::check_rope(kCuda, dtype, 2, 5, 4, 2, 8);
    fc::check_rope(kCuda, dtype, 3, 300, 8, 2, 64);
  }
  fc::check_rope(kCuda, torch::kFloat32, 2, 5, 4, 2, 12);  // halves of 6: element-wise in float32 too
}

TEST_CASE("fused ops on CUDA: the swiglu kernels are silu(gate) * up, forward and backward") {
  const KernelsUsed kernels;
  for (const auto dtype : {torch::kFloat32, torch::kBFloat16, torch::kFloat16}) {
    fc::check_swiglu(kCuda, dtype, 6, 40);
    fc::check_swiglu(kCuda, dtype, 512, 5632);
    fc::check_swiglu(kCuda, dtype, 7, 37);  // 259 elements: packs of 4 or 8, then the last 3 one by one
  }
}

namespace {
/// t's values in a contiguous tensor that starts one element past a 16-byte boundary: the kernels
/// take it, with element-wise accesses instead of 16-byte ones.
torch::Tensor unaligned(const torch::Tensor& t) {
  auto buffer = torch::empty({t.numel() + 1}, t.options().requires_grad(false));
  auto view = buffer.narrow(0, 1, t.numel()).view(t.sizes());
  view.copy_(t.detach());
  REQUIRE(reinterpret_cast<std::uintptr_t>(view.const_data_ptr()) % 16 != 0);
  return view.requires_grad_(t.requires_grad());
}

/// The outputs and gradients of `op` on `inputs` (leaves) with upstream gradients `coefs`.
template <typename Op>
std::vector<torch::Tensor> outputs_and_grads(const Op& op, const std::vector<torch::Tensor>& inputs,
                                             const std::vector<torch::Tensor>& coefs) {
  const std::vector<torch::Tensor> outs = op(inputs);
  fc::ran("forward");
  torch::autograd::backward(outs, coefs);
  fc::ran("backward");
  std::vector<torch::Tensor> all;
  for (const auto& o : outs) all.push_back(o.detach().clone());
  for (const auto& i : inputs)
    if (i.requires_grad()) all.push_back(i.grad().clone());
  return all;
}

/// `op` on 16-byte aligned inputs and upstream gradients against `op` on unaligned copies of them:
/// the same values (`tolerance` 0: bit for bit, where only the row sums' order may differ, a few ulps).
template <typename Op>
void check_paths_agree(const std::string& what, const Op& op, const std::vector<torch::Tensor>& inputs,
                       const std::vector<torch::Tensor>& coefs, double tolerance) {
  CAPTURE(what);
  const auto aligned = outputs_and_grads(op, inputs, coefs);
  std::vector<torch::Tensor> moved_inputs, moved_coefs;
  for (const auto& t : inputs) moved_inputs.push_back(unaligned(t));
  for (const auto& t : coefs) moved_coefs.push_back(unaligned(t));
  const auto moved = outputs_and_grads(op, moved_inputs, moved_coefs);
  REQUIRE(moved.size() == aligned.size());
  for (std::size_t i = 0; i < moved.size(); ++i) {
    CAPTURE(i);
    CHECK(fc::relative_error(moved[i], aligned[i]) <= tolerance);
  }
}
}  // namespace

TEST_CASE("fused ops on CUDA: 16-byte accesses and element-wise ones give the same values") {
  const KernelsUsed kernels;
  for (const auto dtype : {torch::kFloat32, torch::kBFloat16}) {
    CAPTURE(c10::toString(dtype));
    torch::manual_seed(9);
    const auto leaf = [&](torch::IntArrayRef shape, double scale = 1) { return fc::leaf(shape, dtype, kCuda, scale); };
    const auto coef = [&](torch::IntArrayRef shape) { return torch::randn(shape).to(kCuda, dtype); };
    const double sums = dtype == torch::kFloat32 ? 1e-6 : 1e-2;  // rstd and the row dots may move by an ulp
    const auto pair = [](const std::pair<torch::Tensor, torch::Tensor>& p) { return std::vector{p.first, p.second}; };

    check_paths_agree(
        "swiglu", [](const auto& in) { return std::vector{strata::fused::swiglu(in[0], in[1])}; },
        {leaf({5, 37}, 3), leaf({5, 37})}, {coef({5, 37})}, 0);
    const auto weight = (1 + torch::randn({64}) * 0.1).to(kCuda, dtype).requires_grad_(true);
    const auto bias = (torch::randn({64}) * 0.1).to(kCuda, dtype).requires_grad_(true);
    check_paths_agree(
        "add_rms_norm",
        [&](const auto& in) { return pair(strata::fused::add_rms_norm(in[0], in[1], in[2], 1e-5)); },
        {leaf({9, 64}), leaf({9, 64}), weight}, {coef({9, 64}), coef({9, 64})}, sums);
    weight.mutable_grad() = torch::Tensor();
    check_paths_agree(
        "add_layer_norm",
        [&](const auto& in) { return pair(strata::fused::add_layer_norm(in[0], in[1], in[2], in[3], 1e-5)); },
        {leaf({9, 64}), leaf({9, 64}), weight, bias}, {coef({9, 64}), coef({9, 64})}, sums);
    // RoPE rotates in place, so each run rotates a non-leaf copy of the leaf, as far from a
    // 16-byte boundary as the leaf. (Its backward gets an aligned gradient either way: autograd
    // clones the gradient of a view modified in place; check_rope's halves of 4 and 6 take its
    // element-wise path.)
    const auto angles = torch::rand({1, 1, 6, 32}) * 20;
    const auto cos = torch::cat({angles, angles}, -1).cos().to(kCuda, dtype);
    const auto sin = torch::cat({angles, angles}, -1).sin().to(kCuda, dtype);
    const auto copy_like = [](const torch::Tensor& x) {
      const auto shift = static_cast<std::int64_t>(reinterpret_cast<std::uintptr_t>(x.const_data_ptr()) % 16) /
                         static_cast<std::int64_t>(x.element_size());
      const auto buffer = torch::cat({torch::zeros({shift}, x.options().requires_grad(false)), x.reshape(-1)});
      return buffer.narrow(0, shift, x.numel()).view(x.sizes());
    };
    check_paths_agree(
        "rope_",
        [&](const auto& in) {
          auto [q, k] = strata::fused::rope_(copy_like(in[0]), copy_like(in[1]), cos, sin, 64);
          return std::vector{q, k};
        },
        {leaf({2, 6, 4 * 64}), leaf({2, 6, 2 * 64})}, {coef({2, 6, 4 * 64}), coef({2, 6, 2 * 64})}, 0);
  }
}

TEST_CASE("fused ops on CUDA: the kernels give the ATen path's values on the same inputs") {
  const KernelsUsed kernels;
  torch::manual_seed(6);
  const auto x = torch::randn({64, 256}), residual = torch::randn({64, 256}), weight = torch::randn({256});
  const auto [y_cpu, out_cpu] = strata::fused::add_rms_norm(x, residual, weight, 1e-6);
  const auto [y_gpu, out_gpu] = strata::fused::add_rms_norm(x.to(kCuda), residual.to(kCuda), weight.to(kCuda), 1e-6);
  CHECK(fc::relative_error(y_gpu, y_cpu) == 0);
  CHECK(fc::relative_error(out_gpu, out_cpu) < 1e-6);
  const auto [ly_cpu, lout_cpu] = strata::fused::add_layer_norm(x, residual, weight, residual[0], 1e-6);
  const auto [ly_gpu, lout_gpu] = strata::fused::add_layer_norm(x.to(kCuda), residual.to(kCuda), weight.to(kCuda),
                                                                residual[0].to(kCuda), 1e-6);
  CHECK(fc::relative_error(lout_gpu, lout_cpu) < 1e-5);
  const auto gate = torch::randn({64, 256}) * 4, up = torch::randn({64, 256});
  CHECK(fc::relative_error(strata::fused::swiglu(gate.to(kCuda), up.to(kCuda)), strata::fused::swiglu(gate, up)) < 1e-6);
}

TEST_CASE("fused ops on CUDA: a llama with fused_ops has the unfused model's logits and gradients") {
  const KernelsUsed kernels;
  const auto& registry = strata::test::bundled_plugins();
  strata::ModelContext context;
  context.data.input_shape = {128};
  context.data.input_dtype = torch::kInt64;
  context.data.vocab_size = 1000;
  context.data.seq_len = 128;
  const auto options = [&](bool fused) {
    auto o = registry.at(strata::PluginKind::kModel, "llama").schema.defaults();
    o.set("hidden_size", strata::OptionValue(std::int64_t{256}));
    o.set("num_heads", strata::OptionValue(std::int64_t{4}));
    o.set("num_kv_heads", strata::OptionValue(std::int64_t{2}));
    o.set("num_layers", strata::OptionValue(std::int64_t{2}));
    o.set("fused_ops", strata::OptionValue(fused));
    return o;
  };
  torch::manual_seed(7);
  const auto plain = registry.create_model("llama", options(false), context);
  const auto fused = registry.create_model("llama", options(true), context);
  {
    torch::NoGradGuard no_grad;
    auto to = fused->named_parameters();
    for (const auto& p : plain->named_parameters()) to[p.key()].copy_(p.value());
  }
  for (const auto& model : {plain, fused}) model->to(kCuda, torch::kBFloat16);
  strata::Batch batch;
  batch.inputs = torch::randint(1000, {4, 128}, torch::kInt64).to(kCuda);
  batch.targets = torch::randint(1000, {4, 128}, torch::kInt64).to(kCuda);
  const auto reference = plain->forward(batch.inputs), out = fused->forward(batch.inputs);
  CHECK(fc::relative_error(out, reference) < 3e-2);
  plain->loss(reference.to(torch::kFloat32), batch).backward();
  fused->loss(out.to(torch::kFloat32), batch).backward();
  auto got = fused->named_parameters();
  for (const auto& p : plain->named_parameters()) {
    CAPTURE(p.key());
    fc::check_close(got[p.key()].grad(), p.value().grad(), torch::kBFloat16, p.key());
  }
}
