#pragma once
/// \file errors.hpp
/// The exceptions Strata throws. Each carries enough context (file:line:column and key, library,
/// training step) for the CLI to print one readable paragraph with the fix. They are caught once,
/// at the top of the CLI; nothing crosses an `extern "C"` boundary.

#include <cstdint>
#include <stdexcept>
#include <string>

namespace strata {

/// Base of all Strata errors: a message and, separately, how to fix it (may be empty).
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message, std::string fix = {})
      : std::runtime_error(message), fix_(std::move(fix)) {}
  // Destructors are defined in libstrata_core (key functions): one vtable and type_info for the
  // host and every plugin, so the host catches what a plugin throws.
  ~Error() override;
  /// One sentence telling the user what to do; empty when there is nothing obvious.
  const std::string& fix() const noexcept { return fix_; }
  /// Process exit code the CLI uses for this error (2: bad input or usage, 1: the run failed).
  virtual int exit_code() const noexcept { return 1; }

 private:
  std::string fix_;
};

/// A position in a configuration file (1-based); `line == 0` means "not from a file"
/// (for example a `--set` override, described by `origin`).
struct SourceLocation {
  std::string file;            ///< path as given by the user, or "--set" for overrides
  std::uint32_t line = 0;      ///< 1-based line, 0 when unknown
  std::uint32_t column = 0;    ///< 1-based column, 0 when unknown
  std::string str() const {
    if (line == 0) return file;
    return file + ":" + std::to_string(line) + ":" + std::to_string(column);
  }
};

/// Bad experiment file, bad override or bad option value. Exit code 2.
class ConfigError : public Error {
 public:
  ConfigError(SourceLocation where, std::string key, const std::string& message, std::string fix = {})
      : Error(message, std::move(fix)), where_(std::move(where)), key_(std::move(key)) {}
  ~ConfigError() override;
  const SourceLocation& where() const noexcept { return where_; }
  /// Dotted key path such as "train.steps"; empty for file-level errors (syntax).
  const std::string& key() const noexcept { return key_; }
  int exit_code() const noexcept override { return 2; }

 private:
  SourceLocation where_;
  std::string key_;
};

/// Thrown by plugin code about one of its own options (for example a data path that does not
/// exist). The host turns it into a ConfigError at the option's position in the experiment file.
class OptionError : public Error {
 public:
  OptionError(std::string option, const std::string& message, std::string fix = {})
      : Error(message, std::move(fix)), option_(std::move(option)) {}
  ~OptionError() override;
  /// Name of the option inside the plugin's section, e.g. "path".
  const std::string& option() const noexcept { return option_; }

 private:
  std::string option_;
};

/// A plugin library could not be loaded, checked or registered, or its factory failed. Exit 2.
class PluginError : public Error {
 public:
  PluginError(std::string library, const std::string& message, std::string fix = {})
      : Error(message, std::move(fix)), library_(std::move(library)) {}
  ~PluginError() override;
  /// Path of the shared library concerned (empty when the name matched no library).
  const std::string& library() const noexcept { return library_; }
  int exit_code() const noexcept override { return 2; }

 private:
  std::string library_;
};

/// A collective or the rendezvous failed on one rank (a lost peer, a timeout, mismatched calls).
/// Exit code 1: the run failed, the input was fine.
class DistributedError : public Error {
 public:
  DistributedError(int rank, std::string op, const std::string& message, std::string fix = {})
      : Error(message, std::move(fix)), rank_(rank), op_(std::move(op)) {}
  ~DistributedError() override;
  int rank() const noexcept { return rank_; }
  /// The collective ("all_reduce", ...) or stage ("rendezvous") that failed.
  const std::string& op() const noexcept { return op_; }

 private:
  int rank_;
  std::string op_;
};

/// Command-line misuse (unknown command or flag, missing argument). Exit code 2.
class UsageError : public Error {
 public:
  using Error::Error;
  ~UsageError() override;
  int exit_code() const noexcept override { return 2; }
};

/// Training went wrong at a known step (non-finite loss or gradient norm). Exit code 1; the
/// outputs written so far are kept.
class TrainingError : public Error {
 public:
  TrainingError(std::int64_t step, const std::string& message, std::string fix = {})
      : Error(message, std::move(fix)), step_(step) {}
  ~TrainingError() override;
  std::int64_t step() const noexcept { return step_; }

 private:
  std::int64_t step_;
};

}  // namespace strata
