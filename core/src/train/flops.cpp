#include "train/flops.hpp"


#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <torch/utils.h>

#include "config/experiment.hpp"
#include "strata/errors.hpp"

namespace strata {

std::string device_name(const torch::Device& device) {
  if (device.is_cuda()) {
    cudaDeviceProp props{};
    if (cudaGetDeviceProperties(&props, device.has_index() ? device.index() : 0) == cudaSuccess) return props.name;
    return "unknown CUDA device";
  }
  return cpu_model();
}

MfuPeak resolve_mfu_peak(const Experiment& e, const torch::Device& device, const std::string& dtype) {
  if (e.train.peak_tflops > 0) return {PeakFlops{e.train.peak_tflops, "[train] peak_tflops"}, ""};
  if (device.is_cuda()) {
    const std::string name = device_name(device);
    if (auto peak = datasheet_peak(name, dtype)) return {peak, ""};
    throw e.error("train.peak_tflops",
                  fmt::format("no dense {} peak is known for the GPU \"{}\", so MFU cannot be computed.", dtype, name),
                  fmt::format("Set [train] peak_tflops to its dense {} TFLOP/s (datasheet, or the best rate of "
                              "`strata bench gemm --dtype {}`). Known GPUs: {}.",
                              dtype, dtype, known_devices()));
  }
  const std::string description = cpu_description(torch::get_num_threads());
  if (auto peak = measured_peak(description, dtype)) return {peak, ""};
  return {std::nullopt, fmt::format("no peak for this CPU ({}): run `strata bench gemm --dtype {}` once, or set "
                                    "[train] peak_tflops",
                                    description, dtype)};
}

Json flops_summary(std::int64_t flops_per_sample, const std::string& formula, double samples_per_s_per_device,
                   const MfuPeak& peak) {
  Json f = Json::object();
  f["per_sample"] = flops_per_sample > 0 ? Json(flops_per_sample) : Json();
  f["formula"] = formula.empty() ? Json() : Json(formula);
  const double achieved = achieved_tflops(flops_per_sample, samples_per_s_per_device);
  f["achieved_tflops_per_device"] = flops_per_sample > 0 ? Json(achieved) : Json();
  f["peak_tflops"] = peak.peak ? Json(peak.peak->tflops) : Json();
  f["peak_source"] = peak.peak ? Json(peak.peak->source) : Json(peak.note);
  f["mfu"] = peak.peak && flops_per_sample > 0 ? Json(achieved / peak.peak->tflops) : Json();
  return f;
}

}  // namespace strata
