#include "config/checks.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <set>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "strata/logger.hpp"
#include "text/suggest.hpp"

namespace strata::detail {

namespace fs = std::filesystem;

namespace {

// Stated bounds (docs/user-guide.md, "Experiment files"): the ranks per hardware thread of a
// host, what a file name and a path may hold (NAME_MAX, PATH_MAX), and the size and key depth of
// an experiment file.
constexpr std::int64_t kRanksPerThread = 4;
constexpr std::int64_t kMinRankBound = 8;
constexpr std::size_t kMaxNameBytes = 255;
constexpr std::size_t kMaxPathBytes = 4000;

constexpr std::uintmax_t kMaxFileBytes = 8u << 20;  // an experiment file is text written by hand

[[noreturn]] void file_error(const fs::path& file, const std::string& message, const std::string& fix) {
  throw ConfigError({file.string(), 0, 0}, "", message, fix);
}

}  // namespace

/// The experiment file's text: a regular file of at most kMaxFileBytes, read with errors named.
std::string read_experiment_text(const fs::path& file) {
  const std::string example = "experiments/quickstart.toml is a working example.";
  std::error_code ec;
  const auto status = fs::status(file, ec);
  if (!fs::exists(status)) file_error(file, "experiment file not found.", "Check the path; " + example);
  if (!fs::is_regular_file(status))
    file_error(file, fs::is_directory(status) ? "is a directory, not an experiment file."
                                              : "is not a regular file (a device, pipe or socket).",
               "Give the path of a TOML experiment file; " + example);
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) file_error(file, "cannot be opened: " + std::string(std::strerror(errno)) + ".", "Check its permissions.");
  std::string text;
  char buffer[1 << 16];
  for (;;) {
    const ssize_t got = ::read(fd, buffer, sizeof buffer);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      const std::string reason = std::strerror(errno);
      ::close(fd);
      file_error(file, "cannot be read: " + reason + ".", "Give the path of a TOML experiment file; " + example);
    }
    if (got == 0) break;
    text.append(buffer, static_cast<std::size_t>(got));
    if (text.size() > kMaxFileBytes) {
      ::close(fd);
      file_error(file, fmt::format("is larger than {} MiB; experiment files are text written by hand.", kMaxFileBytes >> 20),
                 "Check that this is the experiment file meant; " + example);
    }
  }
  ::close(fd);
  return text;
}

/// toml++ recurses once per part of a dotted key or table header (a key of 100000 parts overflowed
/// the stack), also inside inline tables: every run of dotted parts outside strings and comments
/// (a key, a header, a float's two) of more than kMaxKeyParts parts is refused before parsing.
/// Arrays and inline tables nest at most toml++'s 256 deep, each level's key within the bound.
void check_key_depth(const std::string& text, const std::string& label) {
  const auto bare = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-'; };
  std::uint32_t line = 1;
  std::size_t line_start = 0;
  std::size_t parts = 0;      // parts of the current run
  std::size_t run_start = 0;  // where it began
  bool dotted = false;        // its last part is followed by a '.'
  // The run ends (a newline, '=', a bracket, a comment, ...): refused when it was too long.
  const auto end_run = [&] {
    if (parts > kMaxKeyParts)
      throw ConfigError({label, line, static_cast<std::uint32_t>(run_start - line_start + 1)},
                        shown(text.substr(run_start, 64), 40),
                        fmt::format("a key or table header of {} dotted parts; at most {} are allowed.", parts,
                                    kMaxKeyParts),
                        "Nest tables less deeply; experiment keys are section.key.");
    parts = 0;
    dotted = false;
  };
  // A key part (bare or quoted) that began at `begin`: the next of the run after a '.', else the
  // first of a new one.
  const auto part = [&](std::size_t begin) {
    if (parts > 0 && !dotted) end_run();
    if (parts == 0) run_start = begin;
    ++parts;
    dotted = false;
  };
  for (std::size_t i = 0; i < text.size();) {
    const char c = text[i];
    if (c == '\n') {
      end_run();  // a key never spans lines
      ++line;
      line_start = ++i;
    } else if (c == ' ' || c == '\t' || c == '\r') {
      ++i;
    } else if (c == '#') {
      end_run();
      while (i < text.size() && text[i] != '\n') ++i;
    } else if (c == '"' || c == '\'') {
      const std::size_t begin = i;
      const bool multiline = text.compare(i, 3, std::string(3, c)) == 0;
      if (multiline) end_run();  // a value, never a key
      i += multiline ? 3 : 1;
      // To the closing quote (a basic string's backslash escapes the next character); an
      // unterminated string runs to the end of its line, or of the text, for toml++ to report.
      while (i < text.size()) {
        if (c == '"' && text[i] == '\\' && i + 1 < text.size() && text[i + 1] != '\n') {
          i += 2;
          continue;
        }
        if (text[i] == '\n') {
          if (!multiline) break;
          ++line;
          line_start = i + 1;
        }
        if (text[i] == c && (!multiline || text.compare(i, 3, std::string(3, c)) == 0)) {
          i += multiline ? 3 : 1;
          break;
        }
        ++i;
      }
      if (!multiline) part(begin);
    } else if (bare(c)) {
      const std::size_t begin = i;
      while (i < text.size() && bare(text[i])) ++i;
      part(begin);
    } else if (c == '.' && parts > 0 && !dotted) {
      dotted = true;
      ++i;
    } else {
      end_run();  // '=', brackets, ',', ...
      ++i;
    }
  }
  end_run();
}

/// More warmup steps than steps is what a short smoke run of a real experiment (`--set
/// train.steps=20`) asks for: the trainer clamps the warmup to the steps, with a warning saying so
/// (once per process; not again in the ranks that strata's own launcher starts after warning
/// itself). The experiment keeps the value as written, so that the resolved config.toml and a
/// checkpoint's training keys hold it, and a resume with more steps compares equal.
void clamp_warmup(const Experiment& e) {
  const auto& t = e.train;
  if (t.steps <= 0 || t.warmup_steps <= t.steps) return;
  const std::string message =
      fmt::format("train.warmup_steps {} exceeds train.steps {} ({}); the warmup is clamped to {} steps",
                  t.warmup_steps, t.steps, e.location("train.warmup_steps").str(), t.steps);
  static std::set<std::string> said;
  const char* spawned = std::getenv("STRATA_SPAWNED");
  if ((spawned != nullptr && std::string(spawned) == "1") || !said.insert(message).second) return;
  const char* rank = std::getenv("RANK");
  const char* world = std::getenv("WORLD_SIZE");
  Logger(rank ? std::atoi(rank) : 0, world ? std::max(1, std::atoi(world)) : 1).warn(message);
}


namespace {

/// c10's device index is 8 bits wide.
constexpr int kMaxDeviceIndex = 127;

/// auto, cpu, cuda or cuda:N, checked by hand: a regex recurses per character (a 50k-character
/// value overflowed the stack).
bool valid_device(const std::string& d) {
  if (d == "auto" || d == "cpu" || d == "cuda") return true;
  if (d.rfind("cuda:", 0) != 0) return false;
  const std::string index = d.substr(5);
  if (index.empty() || index.size() > 3 || !std::all_of(index.begin(), index.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return false;
  return std::stoi(index) <= kMaxDeviceIndex;
}

/// Hardware threads of this machine (at least 1).
std::int64_t machine_threads() { return std::max(1u, std::thread::hardware_concurrency()); }

void check_threads(const Experiment& e) {
  if (e.train.threads > machine_threads())
    throw e.error("train.threads",
                  fmt::format("threads = {} exceeds the {} hardware threads of this machine.", e.train.threads,
                              machine_threads()),
                  "Use at most the machine's thread count, or 0 for LibTorch's default.");
}

/// Ranks on one host: a stated bound, and a warning where CPU ranks oversubscribe the cores (each
/// rank is a process with its own LibTorch threads and memory).
void check_nproc(const Experiment& e) {
  const std::int64_t nproc = e.distributed.nproc;
  const std::int64_t bound = std::max<std::int64_t>(kMinRankBound, kRanksPerThread * machine_threads());
  if (nproc > bound)
    throw e.error("distributed.nproc",
                  fmt::format("nproc = {} ranks on this host exceeds the bound of {} ({} per hardware thread, {} "
                              "threads here).",
                              nproc, bound, kRanksPerThread, machine_threads()),
                  "Use fewer ranks on this host (one per GPU, or at most one per core on a CPU), or spread the job "
                  "over hosts with a launcher (torchrun, srun, mpirun).");
  static bool warned = false;
  const char* spawned = std::getenv("STRATA_SPAWNED");
  const bool cpu = e.train.device == "cpu" || e.train.device == "auto";
  if (cpu && nproc > machine_threads() && !warned && !(spawned != nullptr && std::string(spawned) == "1")) {
    warned = true;
    Logger(0, 1).warn(fmt::format("distributed.nproc = {} ranks oversubscribe the {} hardware threads of this host "
                                  "({}); CPU ranks will run slowly",
                                  nproc, machine_threads(), e.location("distributed.nproc").str()));
  }
}

/// The run directory <out_dir>/<name>/<UTC time>[-N] must be creatable: a name that is one path
/// component of at most NAME_MAX bytes, not "." or "..", and a path within PATH_MAX.
void check_run_path(const Experiment& e) {
  const auto& name = e.experiment.name;
  const bool chars_ok = !name.empty() && std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-';
  });
  if (!chars_ok || name == "." || name == "..")
    throw e.error("experiment.name",
                  fmt::format("name \"{}\" is not usable as a directory name.", detail::shown(name)),
                  "Use letters, digits, '.', '_' and '-' only (not \".\" or \"..\").");
  if (name.size() > kMaxNameBytes)
    throw e.error("experiment.name",
                  fmt::format("name \"{}\" is {} bytes long; a directory name has at most {}.", detail::shown(name),
                              name.size(), kMaxNameBytes),
                  "Use a shorter name.");
  for (const auto& part : fs::path(e.experiment.out_dir))
    if (part.string().size() > kMaxNameBytes)
      throw e.error("experiment.out_dir",
                    fmt::format("out_dir \"{}\" has a component of {} bytes; a directory name has at most {}.",
                                detail::shown(e.experiment.out_dir), part.string().size(), kMaxNameBytes),
                    "Use shorter directory names.");
  // <out_dir>/<name>/20261121T193012Z-NNN plus the longest file inside a run directory.
  const std::size_t longest = fs::absolute(e.experiment.out_dir).string().size() + name.size() + 64;
  if (longest > kMaxPathBytes)
    throw e.error("experiment.out_dir",
                  fmt::format("run directories under out_dir \"{}\" would have paths of about {} bytes; paths have "
                              "at most {}.",
                              detail::shown(e.experiment.out_dir), longest, kMaxPathBytes),
                  "Use a shorter out_dir or name.");
}

}  // namespace

void check_consistency(const Experiment& e) {
  const auto& t = e.train;
  if (t.global_batch_size % t.micro_batches != 0)
    throw e.error("train.micro_batches",
                  fmt::format("global_batch_size {} is not divisible by micro_batches {}.", t.global_batch_size,
                              t.micro_batches),
                  "Choose micro_batches that divides global_batch_size.");
  if (t.activation_checkpointing == "none" && t.activation_checkpointing_every != 1)
    throw e.error("train.activation_checkpointing_every",
                  fmt::format("activation_checkpointing_every = {} has no effect while activation_checkpointing is "
                              "\"none\".",
                              t.activation_checkpointing_every),
                  "Set activation_checkpointing = \"full\" as well, or remove activation_checkpointing_every.");
  if (!valid_device(t.device))
    throw e.error("train.device",
                  fmt::format("device must be auto, cpu, cuda or cuda:N (N below {}); got \"{}\".", kMaxDeviceIndex + 1,
                              detail::shown(t.device)),
                  "Write for example `device = \"cpu\"`.");
  if (t.sync_audit && t.sync_timing)
    throw e.error("train.sync_audit",
                  "sync_audit makes a host sync in a step an error, and sync_timing synchronizes after every step.",
                  "Turn one of them off: sync_timing = false times steps with CUDA events, which the audit allows.");
  if (!t.trace_steps.empty() &&
      (t.trace_steps.size() != 2 || t.trace_steps[0] > t.trace_steps[1] || t.trace_steps[1] > t.steps))
    throw e.error("train.trace_steps",
                  fmt::format("trace_steps takes [first, last] with 1 <= first <= last <= steps ({}); got [{}].", t.steps,
                              fmt::join(t.trace_steps, ", ")),
                  "Write for example `trace_steps = [10, 11]` (two steps after the first ones, which warm up), or "
                  "remove it.");
  check_threads(e);
  check_nproc(e);
  if (const auto& d = e.distributed; d.hang_timeout_s > 0 && d.hang_timeout_s >= d.timeout_s)
    throw e.error("distributed.hang_timeout_s",
                  fmt::format("hang_timeout_s = {:g} is not below timeout_s = {:g}: the collective timeout would end a "
                              "hang first, with no verdict.",
                              d.hang_timeout_s, d.timeout_s),
                  "Use a hang_timeout_s below timeout_s (0: half of it).");
  if (const double h = e.distributed.heartbeat_s; h > 0 && h < 1)
    throw e.error("distributed.heartbeat_s", fmt::format("heartbeat_s = {:g} is below one second.", h),
                  "Use 0 (no heartbeat) or at least 1 second; a rank is declared lost after this long.");
  if (e.optimizer.betas.size() != 2)
    throw e.error("optimizer.betas", fmt::format("betas needs exactly 2 values, got {}.", e.optimizer.betas.size()),
                  "Write `betas = [0.9, 0.999]`.");
  if (!t.init_from.empty() && !fs::is_regular_file(t.init_from) && !fs::is_directory(t.init_from))
    throw e.error("train.init_from", "no model file or directory at \"" + t.init_from + "\".",
                  "Point init_from at the final_model.pt or final_model directory of a run made with "
                  "`save_final = true`, or at a Hugging Face model directory (model.safetensors or "
                  "model.safetensors.index.json inside).");
  if (!t.memory_profile.empty() && !fs::is_regular_file(fs::path(t.memory_profile) / "summary.json"))
    throw e.error("train.memory_profile",
                  "no run directory at \"" + detail::shown(t.memory_profile, 200) + "\" (it holds no summary.json).",
                  "Point memory_profile at the run directory of this experiment on one device (`strata run` with "
                  "nproc = 1), or remove it to size activations by the model's formula.");
  check_run_path(e);
}


}  // namespace strata::detail
