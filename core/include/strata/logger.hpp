#pragma once
/// \file logger.hpp
/// One logger, created by the core and handed to plugins. Lines carry a `[rank r/w]` prefix
/// when the world has more than one rank; routine lines come from rank 0 only, warnings and
/// errors from every rank.

#include <string_view>

namespace strata {

class Logger {
 public:
  Logger(int rank = 0, int world_size = 1) : rank_(rank), world_size_(world_size) {}
  /// Routine progress, printed by rank 0 only (stdout).
  void info(std::string_view message) const;
  /// Something the user should know, printed by every rank (stderr).
  void warn(std::string_view message) const;
  /// A failure, printed by every rank (stderr).
  void error(std::string_view message) const;
  int rank() const noexcept { return rank_; }
  int world_size() const noexcept { return world_size_; }

 private:
  void write(bool to_stderr, std::string_view level, std::string_view message) const;
  int rank_;
  int world_size_;
};

}  // namespace strata
