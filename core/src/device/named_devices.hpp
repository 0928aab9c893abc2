#pragma once
// Accelerators by name, for checking a GPU run's memory from a machine without that GPU
// (`strata validate --device h100-80gb`): the memory one device offers a process.

#include <optional>
#include <string>
#include <vector>

namespace strata {

struct NamedDevice {
  std::string name;  ///< "h100-80gb"
  std::string what;  ///< "NVIDIA H100 80GB (SXM or PCIe)"
  double bytes = 0;  ///< total memory as the driver reports it (CUDA's cudaMemGetInfo total), about
};

/// Every named device, in the order `strata validate --help` lists them.
const std::vector<NamedDevice>& named_devices();
/// The device `name` (case-insensitive), or nothing.
std::optional<NamedDevice> named_device(const std::string& name);
/// Throws UsageError (exit 2) for a name that is not in the table, listing the names (and the
/// closest one); returns the device otherwise.
NamedDevice require_named_device(const std::string& name);

}  // namespace strata
