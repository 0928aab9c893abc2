#include "test_support.hpp"
// The peak-FLOPs table (device name matching, dense figures, sources) and the measured-peak cache;
// the CPU's flush-to-zero mode.

#include <cstdlib>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <ATen/Parallel.h>

#include "bench/bench.hpp"
#include "device/cpu_float.hpp"
#include "device/peaks.hpp"
#include "strata/errors.hpp"

namespace {

using strata::test::ScopedEnv;
using strata::test::temporaries;

double tflops(const std::string& device, const std::string& dtype) {
  const auto peak = strata::datasheet_peak(device, dtype);
  REQUIRE(peak.has_value());
  return peak->tflops;
}

using strata::test::contains;

}  // namespace

TEST_CASE("datasheet peaks: CUDA device names map to the right variant") {
  CHECK(tflops("NVIDIA H100 80GB HBM3", "bfloat16") == doctest::Approx(989.5));  // SXM
  CHECK(tflops("NVIDIA H100 PCIe", "bfloat16") == doctest::Approx(756.5));
  CHECK(tflops("NVIDIA H100 NVL", "float16") == doctest::Approx(835.5));
  CHECK(tflops("NVIDIA H100 80GB HBM3", "tf32") == doctest::Approx(494.5));
  CHECK(tflops("NVIDIA H100 80GB HBM3", "float32") == doctest::Approx(67));
  CHECK(tflops("NVIDIA H200", "bf16") == doctest::Approx(989.5));
  CHECK(tflops("NVIDIA H200 NVL", "bfloat16") == doctest::Approx(835.5));
  CHECK(tflops("NVIDIA A100-SXM4-80GB", "bfloat16") == doctest::Approx(312));
  CHECK(tflops("NVIDIA A100-PCIE-40GB", "tf32") == doctest::Approx(156));
  CHECK(tflops("NVIDIA A100 80GB PCIe", "float32") == doctest::Approx(19.5));
  CHECK(tflops("NVIDIA B200", "bfloat16") == doctest::Approx(2250));
  CHECK(tflops("NVIDIA L40S", "bfloat16") == doctest::Approx(362.05));
  CHECK(tflops("NVIDIA L4", "float16") == doctest::Approx(121));
  CHECK(tflops("NVIDIA A10", "bfloat16") == doctest::Approx(125));
  CHECK(tflops("Tesla V100-SXM2-16GB", "fp16") == doctest::Approx(125));
  CHECK(tflops("Tesla V100-PCIE-32GB", "float16") == doctest::Approx(112));
  CHECK(tflops("AMD Instinct MI300X", "bfloat16") == doctest::Approx(1307.4));
}

TEST_CASE("datasheet peaks: whole words, so similar names do not match each other") {
  // GH200 contains "H200", A100 contains "A10", L40S contains "L4": each is its own entry.
  CHECK(strata::datasheet_peak("NVIDIA GH200 480GB", "bfloat16")->source.find("GH200") != std::string::npos);
  CHECK(tflops("NVIDIA A100-SXM4-40GB", "float32") == doctest::Approx(19.5));
  CHECK(tflops("NVIDIA L40S", "float32") == doctest::Approx(91.6));
  CHECK_FALSE(strata::datasheet_peak("NVIDIA L40", "bfloat16").has_value());
  CHECK_FALSE(strata::datasheet_peak("NVIDIA GeForce RTX 4090", "bfloat16").has_value());
  CHECK_FALSE(strata::datasheet_peak("AMD EPYC 7763 64-Core Processor", "float32").has_value());
  CHECK_FALSE(strata::datasheet_peak("", "float32").has_value());
}

TEST_CASE("datasheet peaks: dense figures with their source, dtypes without a figure are nullopt") {
  const auto h100 = strata::datasheet_peak("NVIDIA H100 80GB HBM3", "bfloat16");
  REQUIRE(h100);
  CHECK(h100->source == "NVIDIA H100 datasheet (SXM, dense BF16)");
  CHECK(contains(strata::datasheet_peak("NVIDIA L4", "tf32")->source, "dense TF32"));
  CHECK_FALSE(strata::datasheet_peak("Tesla V100-SXM2-32GB", "bfloat16").has_value());  // no BF16 tensor cores
  CHECK_FALSE(strata::datasheet_peak("NVIDIA H100 80GB HBM3", "float64").has_value());
  for (const char* name : {"A100", "H100 SXM", "H100 PCIe", "H100 NVL", "H200", "B200", "L40S", "MI300X"})
    CHECK(contains(strata::known_devices(), name));
}

TEST_CASE("measured peaks: record, read back, keep the best, per device and dtype") {
  strata::test::TempDir dir;
  ScopedEnv cache("STRATA_CACHE_DIR", (dir.path() / "cache").string());
  CHECK(strata::measured_peaks_file() == dir.path() / "cache" / "gemm_peaks.json");
  const std::string cpu = strata::cpu_description(4);
  CHECK(contains(cpu, ", 4 threads"));
  CHECK_FALSE(strata::measured_peak(cpu, "float32").has_value());  // no file yet

  strata::record_measured_peak(cpu, "float32", 1.5);
  auto peak = strata::measured_peak(cpu, "float32");
  REQUIRE(peak);
  CHECK(peak->tflops == doctest::Approx(1.5));
  CHECK(contains(peak->source, "strata bench gemm 20"));
  CHECK_FALSE(strata::measured_peak(cpu, "bfloat16").has_value());
  CHECK_FALSE(strata::measured_peak(strata::cpu_description(8), "float32").has_value());

  strata::record_measured_peak(cpu, "float32", 1.0);  // lower: the best stays
  CHECK(strata::measured_peak(cpu, "float32")->tflops == doctest::Approx(1.5));
  strata::record_measured_peak(cpu, "float32", 2.0);
  CHECK(strata::measured_peak(cpu, "float32")->tflops == doctest::Approx(2.0));
  strata::record_measured_peak(cpu, "bf16", 0.5);  // aliases share the canonical key
  CHECK(strata::measured_peak(cpu, "bfloat16")->tflops == doctest::Approx(0.5));
  CHECK(temporaries(dir.path() / "cache").empty());
  CHECK_THROWS_AS(strata::record_measured_peak(cpu, "float32", 0), strata::Error);
}

TEST_CASE("measured peaks: a damaged cache is an error naming the file") {
  strata::test::TempDir dir;
  ScopedEnv cache("STRATA_CACHE_DIR", dir.path().string());
  dir.write("gemm_peaks.json", "{not json");
  try {
    strata::measured_peak("x", "float32");
    FAIL("expected an error");
  } catch (const strata::Error& e) {
    CHECK(contains(e.what(), "gemm_peaks.json"));
    CHECK_FALSE(e.fix().empty());
  }
}

TEST_CASE("measured peaks: XDG_CACHE_HOME is used when STRATA_CACHE_DIR is unset") {
  ScopedEnv strata_dir("STRATA_CACHE_DIR", "");
  ScopedEnv xdg("XDG_CACHE_HOME", "/some/cache");
  CHECK(strata::measured_peaks_file() == std::filesystem::path("/some/cache/strata/gemm_peaks.json"));
}

TEST_CASE("bench options: byte sizes and integer lists") {
  CHECK(strata::parse_byte_size("8", "--min-bytes") == 8);
  CHECK(strata::parse_byte_size("64K", "--max-bytes") == 65536);
  CHECK(strata::parse_byte_size("16M", "--max-bytes") == 16 << 20);
  CHECK(strata::parse_byte_size("1g", "--max-bytes") == std::int64_t{1} << 30);
  CHECK(strata::parse_byte_size("2KiB", "--max-bytes") == 2048);
  for (const char* bad : {"", "K", "-1", "0", "1.5M", "12Q", "99999999999G"})
    CHECK_THROWS_AS(strata::parse_byte_size(bad, "--max-bytes"), strata::UsageError);
  CHECK(strata::parse_int_list("128,256", "-m") == std::vector<std::int64_t>{128, 256});
  for (const char* bad : {"", "1,,2", "a", "0", "-3", "1,"})
    CHECK_THROWS_AS(strata::parse_int_list(bad, "-m"), strata::UsageError);
}

TEST_CASE("flush_denormals: on in this thread, every intra-op thread and the threads created after") {
  // A denormal float times one: itself with gradual underflow, zero under FTZ/DAZ.
  const auto product = [] {
    volatile float tiny = 1e-39f;
    volatile float one = 1.0f;
    return tiny * one;
  };
  const auto pool_products = [&] {
    std::vector<float> out(static_cast<std::size_t>(at::get_num_threads()), -1.0f);
    at::parallel_for(0, static_cast<std::int64_t>(out.size()), 1,
                     [&](std::int64_t b, std::int64_t e) {
                       for (auto i = b; i < e; ++i) out[static_cast<std::size_t>(i)] = product();
                     });
    return out;
  };
  if (!strata::flush_denormals(true)) {
    MESSAGE("this CPU has no flush-to-zero mode");
    return;
  }
  CHECK(product() == 0.0f);
  for (float p : pool_products()) CHECK(p == 0.0f);
  float in_thread = -1.0f;
  std::thread([&] { in_thread = product(); }).join();
  CHECK(in_thread == 0.0f);
  strata::flush_denormals(false);  // the other tests keep IEEE gradual underflow
  CHECK(product() > 0.0f);
  for (float p : pool_products()) CHECK(p > 0.0f);
}
