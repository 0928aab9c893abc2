#include "launch/verdict.hpp"

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "io/atomic_file.hpp"
#include "strata/errors.hpp"

namespace strata {

namespace fs = std::filesystem;

Json FailureRecord::to_json() const {
  Json j = Json::object();
  j["rank"] = rank;
  j["status"] = status;
  j["error"] = error;
  j["cause_rank"] = cause_rank ? Json(*cause_rank) : Json();
  j["time"] = time;
  return j;
}

FailureRecord FailureRecord::from_json(const Json& json) {
  const Json* rank = json.find("rank");
  if (rank == nullptr || !rank->is_number()) throw Error("a failure record without a rank");
  FailureRecord r;
  r.rank = static_cast<int>(rank->number_or(0));
  if (const Json* s = json.find("status")) r.status = s->string_or("failed");
  if (const Json* e = json.find("error")) r.error = e->string_or("");
  if (const Json* c = json.find("cause_rank"); c != nullptr && c->is_number())
    r.cause_rank = static_cast<int>(c->number_or(0));
  if (const Json* t = json.find("time")) r.time = t->number_or(0);
  return r;
}

fs::path failure_record_path(const fs::path& run_dir, int rank) {
  return run_dir / "failures" / ("rank_" + std::to_string(rank) + ".json");
}

void write_failure_record(const fs::path& run_dir, const FailureRecord& record) noexcept {
  if (run_dir.empty()) return;
  try {
    std::error_code ec;
    fs::create_directories(run_dir / "failures", ec);
    write_file_atomically(failure_record_path(run_dir, record.rank), record.to_json().dump() + "\n");
  } catch (const std::exception& e) {
    // The launcher then names the cause from the exit statuses alone; the user learns why.
    std::fprintf(stderr, "strata: warning: rank %d could not write its failure record: %s\n", record.rank, e.what());
  } catch (...) {
  }
}

std::vector<FailureRecord> read_failure_records(const fs::path& run_dir) {
  std::vector<FailureRecord> records;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(run_dir / "failures", ec)) {
    try {
      std::ifstream in(entry.path());
      std::stringstream text;
      text << in.rdbuf();
      records.push_back(FailureRecord::from_json(Json::parse(text.str())));
    } catch (...) {
    }
  }
  std::sort(records.begin(), records.end(), [](const auto& a, const auto& b) { return a.rank < b.rank; });
  return records;
}

void clear_failure_records(const fs::path& run_dir) noexcept {
  std::error_code ec;
  if (!run_dir.empty()) fs::remove_all(run_dir / "failures", ec);
}

std::optional<FailureRecord> cause_of(const std::vector<FailureRecord>& records) {
  const FailureRecord* own = nullptr;
  const FailureRecord* blame = nullptr;
  for (const auto& r : records) {
    if (r.status != "failed" || !r.cause_rank) continue;
    const FailureRecord*& slot = *r.cause_rank == r.rank ? own : blame;
    if (slot == nullptr || r.time < slot->time) slot = &r;
  }
  if (own != nullptr) return *own;
  if (blame != nullptr) return *blame;
  return std::nullopt;
}

std::string signal_name(int signal) {
  // sigabbrev_np is glibc 2.32+; the names of the signals a job meets are spelled out here.
  switch (signal) {
    case SIGHUP: return "SIGHUP";
    case SIGINT: return "SIGINT";
    case SIGQUIT: return "SIGQUIT";
    case SIGILL: return "SIGILL";
    case SIGTRAP: return "SIGTRAP";
    case SIGABRT: return "SIGABRT";
    case SIGBUS: return "SIGBUS";
    case SIGFPE: return "SIGFPE";
    case SIGKILL: return "SIGKILL";
    case SIGUSR1: return "SIGUSR1";
    case SIGSEGV: return "SIGSEGV";
    case SIGUSR2: return "SIGUSR2";
    case SIGPIPE: return "SIGPIPE";
    case SIGALRM: return "SIGALRM";
    case SIGTERM: return "SIGTERM";
    case SIGSTOP: return "SIGSTOP";
    case SIGTSTP: return "SIGTSTP";
    case SIGTTIN: return "SIGTTIN";
    case SIGTTOU: return "SIGTTOU";
    case SIGXCPU: return "SIGXCPU";
    case SIGXFSZ: return "SIGXFSZ";
    case SIGSYS: return "SIGSYS";
    default: return "signal " + std::to_string(signal);
  }
}

double unix_time_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace strata
