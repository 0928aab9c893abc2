#include "launch/run_place.hpp"

#include <pwd.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>

#include <fmt/format.h>

#include "ckpt/store.hpp"
#include "io/atomic_file.hpp"
#include "io/build_info.hpp"
#include "io/run_dir.hpp"
#include "strata/errors.hpp"

namespace strata {

namespace fs = std::filesystem;

int restart_count() {
  for (const char* name : {"STRATA_RESTART_COUNT", "TORCHELASTIC_RESTART_COUNT"})
    if (const char* value = std::getenv(name); value != nullptr && *value != '\0') return std::atoi(value);
  return 0;
}

RunPlace plan_run_place(const RunRequest& request, const Experiment& e, bool share, bool opens) {
  RunPlace place;
  place.run_dir = request.out;
  place.restarts = restart_count();
  const bool automatic = request.resume == "auto";
  bool continues = automatic;
  if (!request.resume.empty() && !automatic) {
    place.resume = resolve_resume(request.resume, e, {});
    // The run directory PATH names or lies in (a copy's own, even where its root is shared with
    // the original: check_checkpoint_root then refuses that root); else the checkpoint's.
    fs::path owner = enclosing_run_directory(request.resume);
    if (owner.empty()) owner = checkpoint_run_dir(*place.resume);
    if (place.run_dir.empty() && owner.empty())
      throw UsageError(fmt::format("checkpoint {} lies in no run directory (none of its parents holds a run's {}), so "
                                   "there is no run to continue.",
                                   place.resume->string(), kRunMarkerFile),
                       "Give the resumed run a directory with --out DIR (a new run from that checkpoint).");
    if (place.run_dir.empty()) place.run_dir = owner;
    std::error_code ec;
    continues = fs::equivalent(place.run_dir, owner, ec);
  }
  if (automatic && place.run_dir.empty())
    throw UsageError("--resume auto continues the run in --out DIR, but no --out was given.",
                     "Name the run directory: strata run EXP --out DIR --resume auto.");
  // A resumed run, or a launcher's restart of this rank (torchrun's), continues in its directory.
  place.use = share                               ? RunDirUse::kShare
              : continues || place.restarts > 0 ? RunDirUse::kContinue
                                                : RunDirUse::kNew;
  // The one live writer: a directory another process writes is refused before anything is read.
  std::error_code ec;
  // (A new run's directory is claimed by its marker, created exclusively, and locked once made.)
  if (opens && place.use == RunDirUse::kContinue && !launcher_holds_run_lock() && fs::is_directory(place.run_dir, ec))
    place.lock = lock_run_directory(place.run_dir);
  place.run_id = place.run_dir.empty() ? std::string() : run_id(place.run_dir);
  if (place.run_id.empty()) place.run_id = run_claim();
  // Before `auto` looks into the root: never another run's checkpoints. Only the process that opens
  // the run directory claims the root (and tells the other ranks what they resume).
  if (opens && !share && (saves_checkpoints(e) || automatic)) check_checkpoint_root(e, place.run_dir, place.run_id);
  if (automatic) place.resume = resolve_resume("auto", e, place.run_dir);
  return place;
}

RunPlace open_run_place(RunPlace place, const Experiment& e) {
  place.run_dir = make_run_directory(place.run_dir, e.experiment.out_dir, e.experiment.name, place.use);
  place.opened = true;
  if (place.use == RunDirUse::kShare) return place;
  if (!place.lock && !launcher_holds_run_lock()) place.lock = lock_run_directory(place.run_dir);
  if (place.lock) {
    place.lock->announce();
    if (place.use == RunDirUse::kContinue) remove_dead_temporaries(place.run_dir);
  }
  if (const auto marked = run_id(place.run_dir); !marked.empty()) place.run_id = marked;
  if (saves_checkpoints(e)) claim_checkpoint_root(e, place.run_dir, place.run_id);
  return place;
}

fs::path checkpoint_root(const Experiment& e, const fs::path& run_dir) {
  if (e.checkpoint.dir.empty()) return run_dir / "checkpoints";
  const fs::path dir = e.checkpoint.dir;
  return dir.is_absolute() ? dir : run_dir / dir;
}

namespace {

std::optional<fs::path> latest_in(const fs::path& root) {
  auto all = ckpt::complete_checkpoints(root);
  if (all.empty()) return std::nullopt;
  return all.back();
}

const char* kResumeFix =
    "Give --resume a checkpoint directory (step_N with a metadata.json), a directory of them, a run directory "
    "(its checkpoints/), or `auto` with --out RUN_DIR.";

}  // namespace

namespace {

/// The owner record of a checkpoint root: "key value" lines (run, run_dir, host, pid, user, started).
struct RootOwner {
  std::string text;
  std::string field(const std::string& key) const {
    std::istringstream lines(text);
    for (std::string line; std::getline(lines, line);)
      if (line.rfind(key + " ", 0) == 0) return line.substr(key.size() + 1);
    return {};
  }
};

std::optional<RootOwner> read_owner(const fs::path& root) {
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(root / kRootOwnerFile, ec))) return std::nullopt;
  std::ifstream in(root / kRootOwnerFile, std::ios::binary);
  return RootOwner{std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>())};
}

bool same_directory(const fs::path& a, const fs::path& b) {
  std::error_code ec;
  return !a.empty() && !b.empty() && fs::equivalent(a, b, ec);
}

/// The root of `e` for `run_dir`; empty when it lies in a run directory not named yet.
fs::path root_of(const Experiment& e, const fs::path& run_dir) {
  if (run_dir.empty() && !fs::path(e.checkpoint.dir).is_absolute()) return {};
  return fs::absolute(checkpoint_root(e, run_dir)).lexically_normal();
}

/// Whether `root` lies in `run_dir` as the file system resolves both: a root reached through a link
/// out of the run, or through "..", is outside (a copy of the run would share it).
bool lies_in(const fs::path& root, const fs::path& run_dir) {
  if (root.empty() || run_dir.empty()) return false;
  std::error_code ec;
  const fs::path r = fs::weakly_canonical(fs::absolute(root), ec);
  if (ec) return false;
  const fs::path d = fs::weakly_canonical(fs::absolute(run_dir), ec);
  if (ec) return false;
  return std::mismatch(d.begin(), d.end(), r.begin(), r.end()).first == d.end();
}

std::string user_name() {
  if (const passwd* pw = ::getpwuid(::getuid()); pw != nullptr && pw->pw_name != nullptr) return pw->pw_name;
  return std::to_string(::getuid());
}

/// Whether `owner` is this run: the same id, and the same directory unless the root lies inside the
/// run directory (then a copy or a move of the run carries its own root along).
bool owned_by(const RootOwner& owner, const fs::path& root, const fs::path& run_dir, const std::string& run_id) {
  return !run_id.empty() && owner.field("run") == run_id &&
         (same_directory(owner.field("run_dir"), run_dir) || lies_in(root, run_dir));
}

[[noreturn]] void refuse_root(const Experiment& e, const fs::path& root, const std::string& why) {
  throw e.error("checkpoint.dir", fmt::format("checkpoint root {} {}", root.string(), why),
                "Give this run a checkpoint root of its own ([checkpoint] dir: a new directory, or unset for "
                "<run directory>/checkpoints), or continue the run that owns it with --resume RUN_DIR.");
}

bool holds_step_directories(const fs::path& root) {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(root, ec))
    if (entry.path().filename().string().rfind("step_", 0) == 0) return true;
  return false;
}

}  // namespace

bool saves_checkpoints(const Experiment& e) { return e.checkpoint.every > 0 || e.checkpoint.at_end; }

void check_checkpoint_root(const Experiment& e, const fs::path& run_dir, const std::string& run_id) {
  const fs::path root = root_of(e, run_dir);
  if (root.empty()) return;
  std::error_code ec;
  if (const auto owner = read_owner(root)) {
    if (owned_by(*owner, root, run_dir, run_id)) return;
    refuse_root(e, root,
                fmt::format("belongs to {} (started {} by {} on {}, pid {}); a run removes old checkpoints of its "
                            "root, so two runs never share one.",
                            owner->field("run") == run_id
                                ? fmt::format("the run in {}, of which this run is a copy", owner->field("run_dir"))
                                : fmt::format("the run in {}", owner->field("run_dir")),
                            owner->field("started"), owner->field("user"), owner->field("host"),
                            owner->field("pid")));
  }
  // Checkpoints from before owner records: the run's own when they lie in its directory.
  if (!lies_in(root, run_dir) && holds_step_directories(root))
    refuse_root(e, root, "holds checkpoints of another run (step_* directories with no owner record).");
  fs::path existing = root;
  while (!fs::exists(existing, ec) && existing != existing.parent_path()) existing = existing.parent_path();
  if (!fs::is_directory(existing, ec) || ::access(existing.c_str(), W_OK | X_OK) != 0)
    throw e.error("checkpoint.dir",
                  fmt::format("checkpoints cannot be written to {}: {} is {}.", root.string(), existing.string(),
                              fs::is_directory(existing, ec) ? "not writable" : "not a directory"),
                  "Choose a writable [checkpoint] dir, or turn checkpoints off (every = 0, at_end = false).");
}

void claim_checkpoint_root(const Experiment& e, const fs::path& run_dir, const std::string& run_id) {
  check_checkpoint_root(e, run_dir, run_id);
  const fs::path root = root_of(e, run_dir);
  std::error_code ec;
  fs::create_directories(root, ec);
  if (ec)
    throw e.error("checkpoint.dir", fmt::format("cannot create checkpoint root {}: {}.", root.string(), ec.message()),
                  "Choose a writable [checkpoint] dir.");
  const std::string text =
      fmt::format("run {}\nrun_dir {}\nhost {}\npid {}\nuser {}\nstarted {}\n", run_id,
                  fs::absolute(run_dir).lexically_normal().string(), host_name(), ::getpid(), user_name(),
                  utc_time("%Y-%m-%dT%H:%M:%SZ"));
  if (const auto owner = read_owner(root)) {
    // This run's own root, carried along by a copy or a move: it now records this directory.
    if (!same_directory(owner->field("run_dir"), run_dir)) write_file_atomically(root / kRootOwnerFile, text);
    return;
  }
  StreamedFile file;
  if (!file.open(root / kRootOwnerFile, /*exclusive=*/true, "the checkpoint root's owner record")) {
    if (errno == EEXIST) return check_checkpoint_root(e, run_dir, run_id);  // a run racing this one won it
    throw e.error("checkpoint.dir",
                  fmt::format("cannot claim checkpoint root {}: {}.", root.string(), std::strerror(errno)),
                  "Choose a writable [checkpoint] dir.");
  }
  try {
    file.append(text.data(), text.size());
  } catch (...) {
    file.remove();  // never an empty record: it would hold the root for nobody
    throw;
  }
}

std::optional<fs::path> resolve_resume(const std::string& resume, const Experiment& e, const fs::path& run_dir) {
  if (resume.empty()) return std::nullopt;
  if (resume == "auto") {
    if (auto latest = latest_in(checkpoint_root(e, run_dir))) return latest;
    const char* fallback = std::getenv("STRATA_RESUME_FALLBACK");
    if (fallback != nullptr && *fallback != '\0') return resolve_resume(fallback, e, run_dir);
    return std::nullopt;
  }
  const fs::path path = fs::absolute(resume).lexically_normal();
  std::error_code ec;
  if (!fs::is_directory(path, ec))
    throw UsageError(fmt::format("--resume {}: no such directory.", resume), kResumeFix);
  if (fs::is_regular_file(path / ckpt::kMetadataFile, ec)) return path;
  if (path.filename().string().rfind("step_", 0) == 0)
    throw UsageError(fmt::format("--resume {}: this checkpoint is incomplete (it has no {}: its save did not "
                                 "finish), so it cannot be resumed.",
                                 resume, ckpt::kMetadataFile),
                     "Resume from an older complete checkpoint, or from the run directory (its latest complete one).");
  if (auto latest = latest_in(path)) return latest;
  if (fs::is_regular_file(path / kRunMarkerFile, ec)) {
    // Its root under this experiment, when that root is this run's (an absolute root of another
    // run's is never resumed for it).
    const fs::path root = checkpoint_root(e, path);
    const auto owner = read_owner(root);
    if (lies_in(root, path) || (owner && owner->field("run") == run_id(path)))
      if (auto latest = latest_in(root)) return latest;
  }
  if (auto latest = latest_in(path / "checkpoints")) return latest;
  throw UsageError(fmt::format("--resume {}: no complete checkpoint in it or in its checkpoints/.", resume), kResumeFix);
}

fs::path checkpoint_run_dir(const fs::path& checkpoint) {
  if (auto dir = enclosing_run_directory(checkpoint); !dir.empty()) return dir;
  // A root outside any run directory ([checkpoint] dir absolute): its owner's, while that holds the run.
  if (const auto owner = read_owner(checkpoint.parent_path())) {
    const fs::path dir = owner->field("run_dir");
    if (!dir.empty() && !owner->field("run").empty() && run_id(dir) == owner->field("run")) return dir;
  }
  return {};
}

}  // namespace strata
