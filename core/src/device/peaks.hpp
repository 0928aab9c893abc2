#pragma once
// Dense peak throughput of a device, the denominator of MFU: the vendor's datasheet
// figure for known GPUs, or the best rate `strata bench gemm` measured on this machine (the only
// source for a CPU). Every figure says where it comes from.

#include <filesystem>
#include <optional>
#include <string>

namespace strata {

/// A dense (no sparsity) peak throughput and where the number comes from.
struct PeakFlops {
  double tflops = 0;     ///< TFLOP/s per device
  std::string source;    ///< "NVIDIA H100 datasheet (SXM, dense BF16)", "strata bench gemm 2026-11-23", "[train] peak_tflops"
};

/// The datasheet dense peak of a GPU by its CUDA device name (e.g. "NVIDIA H100 80GB HBM3") and compute dtype
/// ("float32", "tf32", "bfloat16", "float16"; also "fp32", "bf16", "fp16"); nullopt when the device is not in
/// the table, or the table has no figure for that dtype on it (bfloat16 on a V100).
std::optional<PeakFlops> datasheet_peak(const std::string& device_name, const std::string& dtype);

/// The best rate `strata bench gemm` measured and recorded for this device description and dtype; nullopt when none.
/// Throws strata::Error naming the cache file when it exists but cannot be read or parsed.
std::optional<PeakFlops> measured_peak(const std::string& device_description, const std::string& dtype);
/// Records `tflops` for the device description and dtype in the cache (gemm_peaks.json, written atomically),
/// unless a higher rate is recorded there already: the cache keeps the best measured rate.
void record_measured_peak(const std::string& device_description, const std::string& dtype, double tflops);
/// The measured-peak cache: $STRATA_CACHE_DIR, else $XDG_CACHE_HOME/strata, else ~/.cache/strata, then
/// gemm_peaks.json. Throws strata::Error when none of those variables is set.
std::filesystem::path measured_peaks_file();

/// The description measured peaks are keyed by for the CPU ("<cpuinfo model name>, <threads> threads").
std::string cpu_description(int threads);
/// The CPU's model name from /proc/cpuinfo ("model name", else "Hardware" or "Processor"), else
/// "<machine> CPU" from uname.
std::string cpu_model();

/// The names in the table, for an error message ("A100, H100 SXM, ...").
std::string known_devices();

}  // namespace strata
