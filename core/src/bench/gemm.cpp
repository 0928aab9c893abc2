// `strata bench gemm`: the compute benchmark of param (facebookresearch/param, train/compute/pt):
// the time of one M x K by K x N matmul and its rate 2*M*N*K / time. The best rate is recorded per
// device and dtype (device/peaks.hpp), where a run on the same CPU finds its MFU denominator.

#include "bench/bench.hpp"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <iostream>

#include <ATen/Context.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <fmt/format.h>
#include <torch/cuda.h>
#include <torch/utils.h>

#include "device/peaks.hpp"
#include "io/atomic_file.hpp"
#include "io/json.hpp"
#include "io/run_dir.hpp"
#include "train/flops.hpp"
#include "strata/errors.hpp"
#include "text/suggest.hpp"

namespace strata {

std::vector<std::int64_t> parse_int_list(const std::string& text, const std::string& option) {
  std::vector<std::int64_t> out;
  std::size_t start = 0;
  while (start <= text.size()) {
    const auto end = std::min(text.find(',', start), text.size());
    const std::string item = text.substr(start, end - start);
    const bool digits = !item.empty() && item.size() <= 9 &&
                        std::all_of(item.begin(), item.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (!digits || std::stoll(item) == 0)
      throw UsageError(fmt::format("{} \"{}\" is not a comma-separated list of positive integers.", option, text),
                       fmt::format("Write e.g. {} 1024,2048.", option));
    out.push_back(std::stoll(item));
    start = end + 1;
  }
  return out;
}

namespace {

using Clock = std::chrono::steady_clock;

struct Shape {
  std::int64_t m, n, k;
};

struct GemmRow {
  Shape shape;
  double time_s = 0;  ///< per matmul
  double tflops = 0;
};

torch::Device gemm_device(const std::string& requested) {
  const bool cuda = torch::cuda::is_available();
  const std::string d = requested.empty() ? (cuda ? "cuda" : "cpu") : requested;
  if (d == "cpu") return torch::kCPU;
  if (d != "cuda" && d.rfind("cuda:", 0) != 0)
    throw UsageError(fmt::format("unknown --device \"{}\".", d), "Use cpu, cuda or cuda:N.");
  if (!cuda)
    throw UsageError("--device " + d + " was requested, but no CUDA device is available.",
                     "Use --device cpu, or run on a machine with a GPU.");
  if (d == "cuda") return torch::Device(torch::kCUDA, 0);
  const std::string index = d.substr(5);
  const int count = static_cast<int>(torch::cuda::device_count());
  if (index.empty() || index.size() > 3 || !std::all_of(index.begin(), index.end(), ::isdigit) ||
      std::stoi(index) >= count)
    throw UsageError(fmt::format("--device {} does not exist; this machine has {} CUDA device(s).", d, count),
                     "Use cuda:N with N below the device count.");
  return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(std::stoi(index)));
}

/// The shapes of the sweep: -m, -n, -k element by element (a list of one is repeated), or the
/// default square sizes.
std::vector<Shape> shapes_of(const GemmBenchRequest& r, bool cuda) {
  if (r.m.empty() && r.n.empty() && r.k.empty()) {
    std::vector<Shape> out;
    for (std::int64_t s = 128; s <= (cuda ? 4096 : 2048); s *= 2) out.push_back({s, s, s});
    return out;
  }
  const std::size_t length = std::max({r.m.size(), r.n.size(), r.k.size()});
  for (const auto& [list, option] : {std::pair{&r.m, "-m"}, std::pair{&r.n, "-n"}, std::pair{&r.k, "-k"}}) {
    if (list->empty() || (list->size() != 1 && list->size() != length))
      throw UsageError(fmt::format("-m, -n and -k must be lists of the same length (or of one value); {} has {} "
                                   "value(s), the longest {}.",
                                   option, list->size(), length),
                       "Give all three, e.g. -m 1024,2048 -n 1024 -k 1024.");
  }
  auto at = [](const std::vector<std::int64_t>& v, std::size_t i) { return v.size() == 1 ? v[0] : v[i]; };
  std::vector<Shape> out;
  for (std::size_t i = 0; i < length; ++i) out.push_back({at(r.m, i), at(r.n, i), at(r.k, i)});
  return out;
}

/// What the measured peak is keyed by: the CUDA device name, or the CPU model and thread count.
std::string device_description(const torch::Device& device) {
  if (!device.is_cuda()) return cpu_description(torch::get_num_threads());
  return device_name(device);
}

GemmRow measure_gemm(const Shape& s, const torch::Device& device, torch::ScalarType type, int steps, int warmup) {
  const auto options = torch::TensorOptions().dtype(type).device(device);
  const auto a = torch::randn({s.m, s.k}, options);
  const auto b = torch::randn({s.k, s.n}, options);
  auto c = torch::empty({s.m, s.n}, options);
  for (int i = 0; i < warmup; ++i) torch::mm_out(c, a, b);
  detail::synchronize_device(device);
  const auto start = Clock::now();
  for (int i = 0; i < steps; ++i) torch::mm_out(c, a, b);
  detail::synchronize_device(device);
  GemmRow row{s};
  row.time_s = std::chrono::duration<double>(Clock::now() - start).count() / steps;
  row.tflops = 2.0 * static_cast<double>(s.m) * static_cast<double>(s.n) * static_cast<double>(s.k) / row.time_s / 1e12;
  return row;
}

void write_gemm_outputs(const GemmBenchRequest& r, const std::string& dtype, const std::string& description,
                        const std::vector<GemmRow>& rows, double best) {
  if (!r.csv.empty()) {
    std::string csv = "m,n,k,dtype,time_s,tflops\n";
    for (const auto& row : rows)
      csv += fmt::format("{},{},{},{},{},{}\n", row.shape.m, row.shape.n, row.shape.k, dtype, row.time_s, row.tflops);
    write_file_atomically(r.csv, csv);
  }
  if (!r.json.empty()) {
    Json j = Json::object();
    j["benchmark"] = "strata bench gemm";
    j["date"] = utc_time("%Y-%m-%dT%H:%M:%SZ");
    j["device"] = description;
    j["dtype"] = dtype;
    Json list = Json::array();
    for (const auto& row : rows) {
      Json o = Json::object();
      o["m"] = row.shape.m;
      o["n"] = row.shape.n;
      o["k"] = row.shape.k;
      o["time_s"] = row.time_s;
      o["tflops"] = row.tflops;
      list.push_back(std::move(o));
    }
    j["rows"] = std::move(list);
    j["best_tflops"] = best;
    write_file_atomically(r.json, j.dump() + "\n");
  }
}

}  // namespace

void detail::synchronize_device(const torch::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize(device.index());
}

int bench_gemm(const GemmBenchRequest& r) {
  const std::vector<std::string> dtypes{"float32", "tf32", "bfloat16", "float16"};
  if (std::find(dtypes.begin(), dtypes.end(), r.dtype) == dtypes.end())
    throw UsageError(fmt::format("unknown --dtype \"{}\".{}", r.dtype, detail::did_you_mean(r.dtype, dtypes)),
                     "Use one of: " + detail::join(dtypes) + ".");
  const torch::Device device = gemm_device(r.device);
  if (r.dtype == "tf32" && !device.is_cuda())
    throw UsageError("--dtype tf32 is a mode of NVIDIA GPUs' tensor cores; the CPU has none.",
                     "Use --dtype float32 (or bfloat16) with --device cpu, or --device cuda.");
  if (r.threads < 0) throw UsageError(fmt::format("--threads must be 0 or more; got {}.", r.threads), "Give e.g. --threads 1.");
  // A CPU peak is recorded per thread count: a rank of `strata run --nproc N` computes with its
  // share of the cores, and its MFU is read against the peak of that many threads.
  if (r.threads > 0) torch::set_num_threads(r.threads);
  const int steps = r.steps != 0 ? r.steps : device.is_cuda() ? 50 : 10;
  if (steps < 1) throw UsageError(fmt::format("--steps must be at least 1; got {}.", steps), "Give e.g. --steps 10.");
  if (r.warmup < 0) throw UsageError(fmt::format("--warmup must be 0 or more; got {}.", r.warmup), "Give e.g. --warmup 5.");
  const auto shapes = shapes_of(r, device.is_cuda());
  const torch::ScalarType type = r.dtype == "bfloat16" ? torch::kBFloat16 : r.dtype == "float16" ? torch::kFloat16 : torch::kFloat32;
  // float32 means IEEE float32 in cuBLAS; tf32 allows its TF32 tensor-core kernels.
  if (device.is_cuda()) {
    c10::impl::getDeviceGuardImpl(device.type())->setDevice(device);
    at::globalContext().setAllowTF32CuBLAS(r.dtype == "tf32");
  }
  const std::string description = device_description(device);

  std::cout << fmt::format("# strata bench gemm: {} on {}, {} steps after {} warmup\n", r.dtype, description, steps,
                           r.warmup)
            << fmt::format("#{:>7} {:>8} {:>8} {:>12} {:>12}\n", "M", "N", "K", "Time(s)", "Rate(TF/s)") << std::flush;
  std::vector<GemmRow> rows;
  double best = 0;
  for (const auto& shape : shapes) {
    rows.push_back(measure_gemm(shape, device, type, steps, r.warmup));
    const auto& row = rows.back();
    best = std::max(best, row.tflops);
    std::cout << fmt::format("{:>8} {:>8} {:>8} {:>12.4e} {:>12.4g}\n", shape.m, shape.n, shape.k, row.time_s, row.tflops)
              << std::flush;
  }
  std::cout << fmt::format("# best rate: {:.4g} TF/s ({}) on {}\n", best, r.dtype, description);
  const auto earlier = measured_peak(description, r.dtype);
  record_measured_peak(description, r.dtype, best);
  const auto file = measured_peaks_file().string();
  if (earlier && earlier->tflops >= best)
    std::cout << fmt::format("# kept the best rate recorded earlier, {:.4g} TF/s ({}), in {}\n", earlier->tflops,
                             earlier->source, file);
  else
    std::cout << fmt::format("# recorded {:.4g} TF/s as the measured peak of this device in {}\n", best, file);
  write_gemm_outputs(r, r.dtype, description, rows, best);
  return 0;
}

}  // namespace strata
