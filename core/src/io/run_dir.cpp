#include "io/run_dir.hpp"

#include <chrono>
#include <ctime>
#include <fstream>

#include <fmt/format.h>

#include "strata/errors.hpp"

namespace strata {

namespace fs = std::filesystem;

namespace {
void make_directories(const fs::path& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec)
    throw UsageError("cannot create run directory " + dir.string() + ": " + ec.message() + ".",
                     "Choose a writable location with --out DIR or [experiment] out_dir.");
}

/// True when `dir` already holds the outputs of a run (which a new run would mix with its own).
bool holds_a_run(const fs::path& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return false;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const auto name = entry.path().filename().string();
    if (name == "summary.json" || name.find("tfevents") != std::string::npos) return true;
  }
  return false;
}
}  // namespace

std::string utc_time(const char* format) {
  std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char text[64];
  std::strftime(text, sizeof text, format, &utc);
  return text;
}

fs::path make_run_directory(const fs::path& out, const std::string& out_dir, const std::string& name, bool continuing) {
  if (!out.empty()) {
    if (!continuing && holds_a_run(out))
      throw UsageError("run directory " + out.string() + " already holds a run (summary.json or TensorBoard events).",
                       "Choose a new directory for --out, or delete the old run first.");
    make_directories(out);
    return out;
  }
  fs::path base = fs::path(out_dir) / name / utc_time("%Y%m%dT%H%M%SZ");
  fs::path dir = base;
  for (int i = 1; fs::exists(dir); ++i) dir = base.string() + "-" + std::to_string(i);
  make_directories(dir);
  return dir;
}

void write_text_file(const fs::path& file, const std::string& text) {
  fs::path tmp = file;
  tmp += ".tmp";
  {
    std::ofstream os(tmp, std::ios::binary | std::ios::trunc);
    os << text;
    if (!os) throw Error("cannot write " + tmp.string() + ".", "Check free space and permissions.");
  }
  std::error_code ec;
  fs::rename(tmp, file, ec);
  if (ec) throw Error("cannot write " + file.string() + ": " + ec.message() + ".", "Check permissions.");
}

}  // namespace strata
