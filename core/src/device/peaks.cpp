#include "device/peaks.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <vector>

#include <sys/utsname.h>

#include <fmt/format.h>

#include "io/atomic_file.hpp"
#include "io/json.hpp"
#include "io/run_dir.hpp"
#include "strata/errors.hpp"

namespace strata {
namespace fs = std::filesystem;

namespace {

/// Dense TFLOP/s of one device model; 0 where the datasheet gives no figure for that dtype.
struct DeviceEntry {
  const char* name;     ///< as known_devices() lists it
  const char* sheet;    ///< "NVIDIA H100 datasheet (SXM"; the source adds ", dense BF16)"
  double float32;       ///< non-tensor FP32 (AMD: FP32 matrix), which a float32 matmul without TF32 runs at
  double tf32;
  double bfloat16;
  double float16;
};

// NVIDIA quotes Ampere/Hopper/Blackwell tensor figures with 2:4 sparsity (marked *); the dense
// figure, used here, is half of it. A100 (SXM and PCIe, 40 and 80 GB share one column): TF32 156,
// BF16/FP16 312. H100 SXM (and H200, GH200): TF32 989*, BF16/FP16 1979*. H100 PCIe: 756*, 1513*.
// H100 NVL and H200 NVL: 835*, 1671*. B200 (HGX B200, per GPU): TF32 2.25 PF*, BF16/FP16 4.5 PF*,
// FP32 75. L40S: TF32 366*, BF16/FP16 733*. L4: 120*, 242*. A10: 125*, 250*. AMD MI300X/MI325X
// datasheets give dense and sparse; these are the dense ones (FP32 matrix 163.4).
constexpr std::array kDevices{
    DeviceEntry{"A100", "NVIDIA A100 datasheet (SXM and PCIe", 19.5, 156, 312, 312},
    DeviceEntry{"H100 SXM", "NVIDIA H100 datasheet (SXM", 67, 494.5, 989.5, 989.5},
    DeviceEntry{"H100 PCIe", "NVIDIA H100 datasheet (PCIe", 51, 378, 756.5, 756.5},
    DeviceEntry{"H100 NVL", "NVIDIA H100 datasheet (NVL", 60, 417.5, 835.5, 835.5},
    DeviceEntry{"H200", "NVIDIA H200 datasheet (SXM", 67, 494.5, 989.5, 989.5},
    DeviceEntry{"H200 NVL", "NVIDIA H200 datasheet (NVL", 60, 417.5, 835.5, 835.5},
    DeviceEntry{"GH200", "NVIDIA GH200 datasheet (H100 GPU", 67, 494.5, 989.5, 989.5},
    DeviceEntry{"B200", "NVIDIA HGX B200 datasheet (per GPU", 75, 1125, 2250, 2250},
    DeviceEntry{"L40S", "NVIDIA L40S datasheet (", 91.6, 183, 362.05, 362.05},
    DeviceEntry{"L4", "NVIDIA L4 datasheet (", 30.3, 60, 121, 121},
    DeviceEntry{"A10", "NVIDIA A10 datasheet (", 31.2, 62.5, 125, 125},
    // Volta has no TF32 or BF16 tensor cores: those dtypes have no figure.
    DeviceEntry{"V100 SXM2", "NVIDIA V100 datasheet (SXM2", 15.7, 0, 0, 125},
    DeviceEntry{"V100 PCIe", "NVIDIA V100 datasheet (PCIe", 14, 0, 0, 112},
    DeviceEntry{"V100S", "NVIDIA V100S datasheet (PCIe", 16.4, 0, 0, 130},
    DeviceEntry{"MI300X", "AMD Instinct MI300X datasheet (", 163.4, 653.7, 1307.4, 1307.4},
    DeviceEntry{"MI325X", "AMD Instinct MI325X datasheet (", 163.4, 653.7, 1307.4, 1307.4},
};

/// Upper-case alphanumeric words of a device name: "NVIDIA A100-SXM4-80GB" -> NVIDIA A100 SXM4 80GB.
std::vector<std::string> words(const std::string& name) {
  std::vector<std::string> out;
  std::string word;
  for (char c : name + " ") {
    if (std::isalnum(static_cast<unsigned char>(c))) {
      word += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    } else if (!word.empty()) {
      out.push_back(word);
      word.clear();
    }
  }
  return out;
}

/// The table entry of a device name; matching whole words, so "GH200" is not an H200, nor an
/// "A100" an A10. nullptr when unknown.
const DeviceEntry* find_device(const std::string& device_name) {
  const auto w = words(device_name);
  auto has = [&](const char* word) { return std::find(w.begin(), w.end(), word) != w.end(); };
  auto has_prefix = [&](const char* prefix) {
    return std::any_of(w.begin(), w.end(), [&](const std::string& x) { return x.rfind(prefix, 0) == 0; });
  };
  auto entry = [](const char* name) -> const DeviceEntry* {
    for (const auto& e : kDevices)
      if (std::string(e.name) == name) return &e;
    return nullptr;
  };
  const bool pcie = has_prefix("PCIE"), nvl = has("NVL");
  if (has("GH200")) return entry("GH200");
  if (has("H200")) return entry(nvl ? "H200 NVL" : "H200");
  if (has("H100")) return entry(nvl ? "H100 NVL" : pcie ? "H100 PCIe" : "H100 SXM");
  if (has("B200")) return entry("B200");
  if (has("A100")) return entry("A100");
  if (has("L40S")) return entry("L40S");
  if (has("L4")) return entry("L4");
  if (has("A10")) return entry("A10");
  if (has("V100S")) return entry("V100S");
  if (has("V100")) return entry(pcie ? "V100 PCIe" : "V100 SXM2");
  if (has("MI300X")) return entry("MI300X");
  if (has("MI325X")) return entry("MI325X");
  return nullptr;
}

/// "bf16" -> "bfloat16"; the canonical dtype names of the table, "" for others.
std::string canonical_dtype(const std::string& dtype) {
  if (dtype == "float32" || dtype == "fp32" || dtype == "float") return "float32";
  if (dtype == "tf32") return "tf32";
  if (dtype == "bfloat16" || dtype == "bf16") return "bfloat16";
  if (dtype == "float16" || dtype == "fp16" || dtype == "half") return "float16";
  return "";
}

/// The cache's content ({} when the file does not exist yet).
Json read_cache(const fs::path& file) {
  std::error_code ec;
  if (!fs::exists(file, ec)) return Json::object();
  std::ifstream in(file, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  if (!in && !in.eof())
    throw Error("cannot read the measured-peak cache " + file.string() + ".",
                "Check its permissions, or delete it and run `strata bench gemm` again.");
  try {
    Json cache = Json::parse(text.str());
    if (cache.members() == nullptr) throw Error("the top level is not an object");
    return cache;
  } catch (const Error& e) {
    throw Error("the measured-peak cache " + file.string() + " is not valid: " + e.what(),
                "Delete it and run `strata bench gemm` again to measure this machine's peak.");
  }
}

/// Dtypes are keyed by their canonical name ("bf16" finds "bfloat16").
std::string dtype_key(const std::string& dtype) {
  const std::string d = canonical_dtype(dtype);
  return d.empty() ? dtype : d;
}

std::optional<PeakFlops> lookup(const Json& cache, const std::string& device_description, const std::string& dtype) {
  const Json* record = cache.find(device_description);
  if (record != nullptr) record = record->find(dtype_key(dtype));
  if (record == nullptr) return std::nullopt;
  const Json* rate = record->find("tflops");
  if (rate == nullptr || !rate->is_number() || rate->number_or(0) <= 0) return std::nullopt;
  const Json* date = record->find("date");
  return PeakFlops{rate->number_or(0), "strata bench gemm " + (date != nullptr ? date->string_or("") : std::string())};
}

}  // namespace

std::optional<PeakFlops> datasheet_peak(const std::string& device_name, const std::string& dtype) {
  const DeviceEntry* entry = find_device(device_name);
  const std::string d = canonical_dtype(dtype);
  if (entry == nullptr || d.empty()) return std::nullopt;
  const double tflops = d == "float32" ? entry->float32 : d == "tf32" ? entry->tf32 : d == "bfloat16" ? entry->bfloat16 : entry->float16;
  if (tflops <= 0) return std::nullopt;
  std::string label = d == "float32" ? "FP32" : d == "tf32" ? "TF32" : d == "bfloat16" ? "BF16" : "FP16";
  const std::string sheet = entry->sheet;
  const std::string source = sheet.back() == '(' ? sheet + "dense " + label + ")" : sheet + ", dense " + label + ")";
  return PeakFlops{tflops, source};
}

fs::path measured_peaks_file() {
  auto env = [](const char* name) -> std::string {
    const char* value = std::getenv(name);
    return value != nullptr ? value : "";
  };
  fs::path dir;
  if (const auto d = env("STRATA_CACHE_DIR"); !d.empty()) dir = d;
  else if (const auto x = env("XDG_CACHE_HOME"); !x.empty()) dir = fs::path(x) / "strata";
  else if (const auto h = env("HOME"); !h.empty()) dir = fs::path(h) / ".cache" / "strata";
  else
    throw Error("no directory for the measured-peak cache: STRATA_CACHE_DIR, XDG_CACHE_HOME and HOME are all unset.",
                "Set STRATA_CACHE_DIR to a writable directory.");
  return dir / "gemm_peaks.json";
}

std::optional<PeakFlops> measured_peak(const std::string& device_description, const std::string& dtype) {
  return lookup(read_cache(measured_peaks_file()), device_description, dtype);
}

void record_measured_peak(const std::string& device_description, const std::string& dtype, double tflops) {
  if (!(tflops > 0))
    throw Error(fmt::format("a measured peak must be a positive rate; got {} TFLOP/s for {} on {}.", tflops, dtype,
                            device_description));
  const fs::path file = measured_peaks_file();
  Json cache = read_cache(file);
  if (const auto old = lookup(cache, device_description, dtype); old && old->tflops >= tflops) return;
  Json& device = cache[device_description];
  if (device.members() == nullptr) device = Json::object();  // a damaged entry is replaced
  Json& record = device[dtype_key(dtype)];
  record = Json::object();
  record["tflops"] = tflops;
  record["date"] = utc_time("%Y-%m-%d");
  std::error_code ec;
  fs::create_directories(file.parent_path(), ec);
  if (ec)
    throw Error("cannot create the cache directory " + file.parent_path().string() + ": " + ec.message() + ".",
                "Set STRATA_CACHE_DIR to a writable directory.");
  write_file_atomically(file, cache.dump() + "\n");
}

std::string cpu_description(int threads) { return fmt::format("{}, {} threads", cpu_model(), threads); }

std::string cpu_model() {
  std::string model;
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  // x86 names the model in "model name"; some ARM kernels only in "Hardware" or "Processor".
  for (const char* key : {"model name", "Hardware", "Processor"}) {
    cpuinfo.clear();
    cpuinfo.seekg(0);
    while (model.empty() && std::getline(cpuinfo, line)) {
      if (line.rfind(key, 0) != 0 || line.find(':') == std::string::npos) continue;
      model = line.substr(line.find(':') + 1);
      model.erase(0, model.find_first_not_of(" \t"));
    }
    if (!model.empty()) break;
  }
  if (model.empty()) {
    utsname u{};
    model = uname(&u) == 0 ? std::string(u.machine) + " CPU" : "unknown CPU";
  }
  return model;
}

std::string known_devices() {
  std::string out;
  for (const auto& e : kDevices) out += (out.empty() ? "" : ", ") + std::string(e.name);
  return out;
}

}  // namespace strata
