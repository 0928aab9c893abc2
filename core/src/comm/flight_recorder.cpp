// Where c10d's flight recorder writes this rank's dump (comm/process_group.hpp's
// direct_flight_recorder): a writer of ours, registered once per process, under the run directory.
// Includes c10d headers: see comm/process_group.cpp.

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <system_error>

#include <torch/csrc/distributed/c10d/FlightRecorder.hpp>

#include "comm/process_group.hpp"

namespace strata {

namespace {
/// c10d's own writer (it writes the trace to the file it was made with) at a path of ours, whose
/// directory it makes at the dump: a run without a dump keeps no empty directory.
class RunDirTraceWriter final : public c10d::DebugInfoWriter {
 public:
  RunDirTraceWriter(const std::string& prefix, int rank) : c10d::DebugInfoWriter(prefix, rank) {}
  void write(const std::string& trace) override {
    std::error_code ec;
    std::filesystem::create_directories(std::filesystem::path(filename_).parent_path(), ec);
    c10d::DebugInfoWriter::write(trace);
  }
};
}  // namespace

std::filesystem::path direct_flight_recorder(const std::filesystem::path& run_dir, int rank) {
  for (const char* name : {"TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE"})
    if (const char* chosen = std::getenv(name); chosen != nullptr && *chosen != '\0')
      return std::string(chosen) + std::to_string(rank);
  const std::string prefix = (run_dir / "comm_trace" / "rank_").string();
  static std::once_flag once;  // c10d takes one writer per process
  std::call_once(once, [&] {
    try {
      c10d::DebugInfoWriter::registerWriter(std::make_unique<RunDirTraceWriter>(prefix, rank));
    } catch (const std::exception&) {  // a dump came first and registered c10d's default writer
    }
  });
  return prefix + std::to_string(rank);
}

}  // namespace strata
