// On a GPU (label `gpu`): the fused model ops' CUDA kernels against transformers' unfused ops,
// forward and backward, tensor by tensor, in float32, bfloat16 and float16, at shapes that take
// every launch path (rows striding over the backward's blocks, rows wider than the shared-memory
// weight-gradient buffer, per-sample RoPE tables); and a llama step with fused_ops against one
// without. The same cases run on the CPU through the ATen path (tests/unit/test_fused_ops.cpp).
#include "test_support.hpp"
#include "gpu_support.hpp"

#include "bundled_plugins.hpp"
#include "fused_ops_cases.hpp"
#include "strata/dataset.hpp"
#include "strata/model.hpp"

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
  fc::check_add_rms_norm(kCuda, torch::kBFloat16, 40, 12001);  // dw partial sums in global memory
  fc::check_add_rms_norm(kCuda, torch::kFloat32, 5, 33);       // a width that is no multiple of a warp
}

TEST_CASE("fused ops on CUDA: the add_layer_norm kernels are the residual add, then ATen's layer_norm") {
  const KernelsUsed kernels;
  for (const auto dtype : {torch::kFloat32, torch::kBFloat16, torch::kFloat16}) {
    fc::check_add_layer_norm(kCuda, dtype, 7, 48);
    fc::check_add_layer_norm(kCuda, dtype, 3000, 768);  // more rows than the backward's blocks
  }
  fc::check_add_layer_norm(kCuda, torch::kBFloat16, 40, 6000);  // the widest whose dw and db fit in shared memory
  fc::check_add_layer_norm(kCuda, torch::kBFloat16, 40, 6001);  // dw and db partial sums in global memory
  fc::check_add_layer_norm(kCuda, torch::kFloat32, 5, 33);
}

TEST_CASE("fused ops on CUDA: the rope_ kernel rotates q and k in place, forward and backward") {
  const KernelsUsed kernels;
  for (const auto dtype : {torch::kFloat32, torch::kBFloat16, torch::kFloat16}) {
    fc::check_rope(kCuda, dtype, 2, 5, 4, 2, 8);
    fc::check_rope(kCuda, dtype, 3, 300, 8, 2, 64);
  }
}

TEST_CASE("fused ops on CUDA: the swiglu kernels are silu(gate) * up, forward and backward") {
  const KernelsUsed kernels;
  for (const auto dtype : {torch::kFloat32, torch::kBFloat16, torch::kFloat16}) {
    fc::check_swiglu(kCuda, dtype, 6, 40);
    fc::check_swiglu(kCuda, dtype, 512, 5632);
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
