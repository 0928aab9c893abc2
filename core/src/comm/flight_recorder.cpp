// c10d's flight recorder, as the job reads it (comm/process_group.hpp): where NCCL's watchdog
// writes this rank's dump (a writer of ours, registered once per process, under the run directory),
// the collectives it holds as not completed (the hang watch's evidence), and a dump of our own when
// the job monitor ends a job. Gloo's recorder is libtorch_cpu's; NCCL's is libtorch_cuda's, which
// libstrata_cuda registers (comm/nccl.cpp). Includes c10d headers: see comm/process_group.cpp.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <system_error>
#include <vector>

#include <fmt/format.h>
#include <torch/csrc/distributed/c10d/FlightRecorder.hpp>

#include "comm/backends.hpp"
#include "comm/process_group.hpp"
#include "io/atomic_file.hpp"
#include "io/json.hpp"

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

std::atomic<detail::NcclFlightRecorder*> nccl_recorder{nullptr};

/// The dumps of `backend`'s recorder: Gloo's is libtorch_cpu's; NCCL's, libtorch_cuda's, is there
/// once libstrata_cuda registered it (null functions before).
detail::NcclFlightRecorder dumps_of(const std::string& backend) {
  if (backend != "nccl") return {&c10d::dump_fr_trace, &c10d::dump_fr_trace_json};
  const auto* nccl = nccl_recorder.load();
  return nccl != nullptr ? *nccl : detail::NcclFlightRecorder{};
}

std::string text_of(const Json* j) { return j != nullptr ? j->string_or("") : std::string(); }

/// "1x2048 Float" for an entry's input_sizes and input_dtypes.
std::string tensors_of(const Json& entry) {
  std::string sizes;
  if (const Json* all = entry.find("input_sizes"); all != nullptr && all->elements() != nullptr)
    for (const auto& shape : *all->elements()) {
      std::string dims;
      if (shape.elements() != nullptr)
        for (const auto& d : *shape.elements()) dims += (dims.empty() ? "" : "x") + fmt::format("{:.0f}", d.number_or(0));
      sizes += (sizes.empty() ? "" : ", ") + (dims.empty() ? std::string("scalar") : dims);
    }
  std::string dtype;
  if (const Json* d = entry.find("input_dtypes"); d != nullptr && d->elements() != nullptr && !d->elements()->empty())
    dtype = d->elements()->front().string_or("");
  return sizes.empty() ? dtype : dtype.empty() ? sizes : sizes + " " + dtype;
}
}  // namespace

namespace detail {
void register_nccl_flight_recorder(NcclFlightRecorder recorder) {
  static NcclFlightRecorder registered;
  registered = recorder;
  nccl_recorder.store(&registered);
}
}  // namespace detail

std::filesystem::path flight_record_file(const std::filesystem::path& run_dir, int rank) {
  return run_dir / "comm_trace" / ("rank_" + std::to_string(rank));
}

void keep_flight_record() { ::setenv("TORCH_FR_BUFFER_SIZE", "2000", /*overwrite=*/0); }

std::vector<std::string> collectives_in_flight(const std::string& backend) {
  std::vector<std::string> pending;
  try {
    const auto dumps = dumps_of(backend);
    const std::string text = dumps.json != nullptr ? dumps.json(/*include_collectives=*/true, /*only_active=*/true)
                                                   : std::string();
    if (text.empty()) return pending;
    const Json trace = Json::parse(text);
    const Json* entries = trace.find("entries");
    if (entries == nullptr || entries->elements() == nullptr) return pending;
    const auto now_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                            std::chrono::system_clock::now().time_since_epoch())
                            .count();
    for (const auto& e : *entries->elements()) {
      if (const Json* retired = e.find("retired"); retired != nullptr && retired->bool_or(false)) continue;
      std::string op = text_of(e.find("profiling_name"));
      if (const auto colon = op.find(':'); colon != std::string::npos) op.erase(0, colon + 1);
      std::string group;
      if (const Json* pg = e.find("process_group"); pg != nullptr && pg->elements() != nullptr && !pg->elements()->empty()) {
        const auto& names = *pg->elements();
        group = names.size() > 1 && !names[1].string_or("").empty() ? names[1].string_or("") : names[0].string_or("");
      }
      const Json* created = e.find("time_created_ns");
      const double age_s = created != nullptr ? static_cast<double>(now_ns - static_cast<std::int64_t>(created->number_or(0))) / 1e9 : 0.0;
      pending.push_back(fmt::format("{} of {} on {}, issued {:.1f} s ago, {}", op.empty() ? "?" : op, tensors_of(e),
                                    group.empty() ? "?" : group, age_s, text_of(e.find("state"))));
    }
  } catch (const std::exception&) {  // a recorder that is off, or a format we do not read: no evidence
    pending.clear();
  }
  return pending;
}

bool dump_flight_recorder(const std::string& backend, const std::filesystem::path& file) noexcept {
  try {
    const auto dumps = dumps_of(backend);
    if (dumps.dump == nullptr) return false;
    const std::string trace = dumps.dump(/*include_collectives=*/true, /*include_stack_traces=*/false,
                                         /*only_active=*/false);
    if (trace.empty()) return false;
    std::error_code ec;
    std::filesystem::create_directories(file.parent_path(), ec);
    write_file_atomically(file, trace);
    return true;
  } catch (...) {
    return false;
  }
}

std::filesystem::path direct_flight_recorder(const std::filesystem::path& run_dir, int rank) {
  for (const char* name : {"TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE"})
    if (const char* chosen = std::getenv(name); chosen != nullptr && *chosen != '\0')
      return std::string(chosen) + std::to_string(rank);
  const std::string prefix = (run_dir / "comm_trace" / "rank_").string();  // + rank: flight_record_file
  static std::once_flag once;  // c10d takes one writer per process
  std::call_once(once, [&] {
    try {
      c10d::DebugInfoWriter::registerWriter(std::make_unique<RunDirTraceWriter>(prefix, rank));
    } catch (const std::exception&) {  // a dump came first and registered c10d's default writer
    }
  });
  return flight_record_file(run_dir, rank);
}

}  // namespace strata
