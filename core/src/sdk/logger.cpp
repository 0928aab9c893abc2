#include "strata/logger.hpp"

#include <cstdio>
#include <mutex>
#include <string>

namespace strata {

namespace {
std::mutex& output_mutex() {
  static std::mutex m;
  return m;
}
}  // namespace

void Logger::info(std::string_view message) const {
  if (rank_ == 0) write(false, "", message);
}
void Logger::warn(std::string_view message) const { write(true, "warning: ", message); }
void Logger::error(std::string_view message) const { write(true, "error: ", message); }

void Logger::write(bool to_stderr, std::string_view level, std::string_view message) const {
  std::string line;
  if (world_size_ > 1) line = "[rank " + std::to_string(rank_) + "/" + std::to_string(world_size_) + "] ";
  line.append(level).append(message).push_back('\n');
  std::lock_guard lock(output_mutex());
  std::FILE* out = to_stderr ? stderr : stdout;
  std::fwrite(line.data(), 1, line.size(), out);
  std::fflush(out);
}

}  // namespace strata
