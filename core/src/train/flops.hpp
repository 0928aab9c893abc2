#pragma once
// Achieved FLOP/s and MFU (model FLOPs utilization, Chowdhery et al. 2022): the model's training
// FLOPs per sample (Model::flops_per_sample, no recomputation counted) times samples per second
// per device, against a dense peak of that device for the compute dtype. The peak is, in order:
// [train] peak_tflops; on a GPU, the datasheet table of device/peaks.hpp (an unknown GPU is a
// configuration error, so that no MFU is ever computed against a guess); on a CPU, the rate
// `strata bench gemm` measured and recorded for this CPU and thread count, else none.

#include <cstdint>
#include <optional>
#include <string>

#include <torch/types.h>

#include "device/peaks.hpp"
#include "io/json.hpp"

namespace strata {

struct Experiment;

/// The peak MFU is measured against, or why there is none.
struct MfuPeak {
  std::optional<PeakFlops> peak;
  std::string note;  ///< why there is no peak (empty when there is one)
};

/// Resolves the peak for a run on `device` computing in `dtype` ("float32", "bfloat16", "float16").
/// Throws ConfigError (train.peak_tflops) for a GPU missing from the table without peak_tflops.
MfuPeak resolve_mfu_peak(const Experiment& experiment, const torch::Device& device, const std::string& dtype);

/// The device's name: the CUDA device name, or the CPU's model name.
std::string device_name(const torch::Device& device);

/// summary.json's "flops": per_sample, formula, achieved_tflops_per_device, peak_tflops,
/// peak_source, mfu (null where unknown).
Json flops_summary(std::int64_t flops_per_sample, const std::string& formula, double samples_per_s_per_device,
                   const MfuPeak& peak);

/// Achieved TFLOP/s per device (0 when the model's FLOPs are unknown).
inline double achieved_tflops(std::int64_t flops_per_sample, double samples_per_s_per_device) {
  return static_cast<double>(flops_per_sample) * samples_per_s_per_device / 1e12;
}

}  // namespace strata
