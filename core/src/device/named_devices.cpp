#include "device/named_devices.hpp"

#include <algorithm>
#include <cctype>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "strata/errors.hpp"
#include "text/suggest.hpp"

namespace strata {

namespace {
constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}
}  // namespace

const std::vector<NamedDevice>& named_devices() {
  // The total a process sees is a little under the marketed capacity (the driver and ECC keep
  // some): these are the totals CUDA (ROCm for the MI300X) reports on such devices, rounded down.
  static const std::vector<NamedDevice> table = {
      {"a100-40gb", "NVIDIA A100 40GB", 39.4 * kGiB},
      {"a100-80gb", "NVIDIA A100 80GB", 79.1 * kGiB},
      {"h100-80gb", "NVIDIA H100 80GB (SXM or PCIe)", 79.1 * kGiB},
      {"h100-94gb", "NVIDIA H100 NVL 94GB", 93.0 * kGiB},
      {"h200-141gb", "NVIDIA H200 141GB", 139.8 * kGiB},
      {"b200-180gb", "NVIDIA B200 180GB", 178.3 * kGiB},
      {"l4-24gb", "NVIDIA L4 24GB", 21.9 * kGiB},
      {"l40s-48gb", "NVIDIA L40S 48GB", 44.3 * kGiB},
      {"a10-24gb", "NVIDIA A10 24GB", 22.0 * kGiB},
      {"rtx4090-24gb", "NVIDIA GeForce RTX 4090 24GB", 23.5 * kGiB},
      {"v100-32gb", "NVIDIA V100 32GB", 31.7 * kGiB},
      {"mi300x-192gb", "AMD Instinct MI300X 192GB", 191.5 * kGiB},
  };
  return table;
}

std::optional<NamedDevice> named_device(const std::string& name) {
  const std::string key = lower(name);
  for (const auto& d : named_devices())
    if (d.name == key) return d;
  return std::nullopt;
}

NamedDevice require_named_device(const std::string& name) {
  if (auto d = named_device(name)) return *d;
  std::vector<std::string> names;
  for (const auto& d : named_devices()) names.push_back(d.name);
  throw UsageError(fmt::format("--device {}: no device of that name.{}", detail::shown(name), detail::did_you_mean(lower(name), names)),
                   fmt::format("Name one of: {}.", fmt::join(names, ", ")));
}

}  // namespace strata
