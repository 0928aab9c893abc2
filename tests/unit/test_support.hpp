#pragma once
// Include this first in every unit test file. LibTorch defines a CHECK(cond) macro that aborts
// the process; doctest's CHECK must win, so LibTorch's headers come first and its macro goes.

#include <torch/types.h>
#undef CHECK
#include <doctest/doctest.h>

#include <sys/resource.h>

#include <atomic>
#include <csignal>
#include <filesystem>
#include <functional>
#include <map>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <string>
#include <vector>
#include <unistd.h>

#include "strata/errors.hpp"

namespace strata::test {

/// A fresh directory under the system temp dir, removed with its contents at scope exit.
class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    path_ = std::filesystem::temp_directory_path() /
            ("strata-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }
  /// Writes `text` to `name` inside the directory and returns its path.
  std::filesystem::path write(const std::string& name, const std::string& text) const {
    auto file = path_ / name;
    std::ofstream(file, std::ios::binary) << text;
    return file;
  }

 private:
  std::filesystem::path path_;
};

inline bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

/// The message of the strata::Error that `f` throws ("" when it throws none).
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const strata::Error& e) {
    return e.what();
  }
  return "";
}

/// An environment to look variables up in (job/world.hpp's EnvLookup), from a map.
inline std::function<std::optional<std::string>(const std::string&)> lookup_in(std::map<std::string, std::string> env) {
  return [env = std::move(env)](const std::string& name) -> std::optional<std::string> {
    auto it = env.find(name);
    if (it == env.end()) return std::nullopt;
    return it->second;
  };
}

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

/// The names of `dir`'s temporary files (".NAME.RANDOM.tmp" from AtomicFile).
inline std::vector<std::string> temporaries(const std::filesystem::path& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec))
    if (entry.path().extension() == ".tmp") out.push_back(entry.path().filename().string());
  return out;
}

/// Sets an environment variable (std::nullopt: unsets it) for one scope, then restores it; the
/// children a test starts meanwhile inherit it.
class ScopedEnv {
 public:
  ScopedEnv(std::string name, const std::optional<std::string>& value) : name_(std::move(name)) {
    if (const char* old = std::getenv(name_.c_str())) old_ = old;
    if (value) ::setenv(name_.c_str(), value->c_str(), 1);
    else ::unsetenv(name_.c_str());
  }
  ~ScopedEnv() {
    if (old_) ::setenv(name_.c_str(), old_->c_str(), 1);
    else ::unsetenv(name_.c_str());
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
  std::optional<std::string> old_;
};

/// Leaf tensors that require grad, of the given sizes, holding 1, 2, 3, ... in order.
inline std::vector<torch::Tensor> make_params(std::initializer_list<std::int64_t> sizes) {
  std::vector<torch::Tensor> params;
  float start = 1.0f;
  for (auto n : sizes) {
    params.push_back(torch::arange(start, start + static_cast<float>(n)).requires_grad_());
    start += static_cast<float>(n);
  }
  return params;
}

/// Files of this process cannot grow past `bytes` while it lives (RLIMIT_FSIZE; SIGXFSZ ignored):
/// a write beyond fails with EFBIG, as one on a full disk fails with ENOSPC.
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    ::getrlimit(RLIMIT_FSIZE, &old_);
    old_handler_ = std::signal(SIGXFSZ, SIG_IGN);
    rlimit limited = old_;
    limited.rlim_cur = bytes;
    ::setrlimit(RLIMIT_FSIZE, &limited);
  }
  ~FileSizeLimit() {
    ::setrlimit(RLIMIT_FSIZE, &old_);
    std::signal(SIGXFSZ, old_handler_);
  }
  FileSizeLimit(const FileSizeLimit&) = delete;
  FileSizeLimit& operator=(const FileSizeLimit&) = delete;

 private:
  rlimit old_{};
  void (*old_handler_)(int) = SIG_DFL;
};

}  // namespace strata::test
