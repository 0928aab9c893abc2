#pragma once
// Checkpoint directories: one directory per step under a root,
//
//   <root>/step_00000010/
//     rank_00000.bin    the raw bytes of rank 0's pieces, back to back      (each rank its own)
//     rank_00000.json   their index: name, shape, dtype, element range, byte offset, CRC-32C
//     trainer.json      rank 0: step, data position, loss curve so far, ...
//     config.toml       rank 0: the resolved experiment that saved it
//     .strata-owner     rank 0, first: "run RUN_ID", the run that wrote the directory
//     metadata.json     rank 0, last: every rank's index merged by tensor, every file's size and
//                       checksum, and its own checksum (its first member). Written to a temporary
//                       name, fsynced and renamed: the commit marker. A directory without it is
//                       incomplete: never resumed, and removed by the next save of the run that
//                       wrote it.
//
// Every file goes through AtomicFile, so a file under its final name is complete. Loading reads
// for each piece a rank holds only the saved pieces that overlap it (pread of their bytes),
// checking each against its size and checksum, so no rank reads the whole model to fill a shard
// and a truncated or corrupted file is named, never loaded.

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "io/json.hpp"
#include "strata/comm.hpp"
#include "strata/sharded_state.hpp"

namespace strata::ckpt {

inline constexpr const char* kMetadataFile = "metadata.json";
inline constexpr const char* kFormat = "strata-checkpoint";
inline constexpr std::int64_t kVersion = 1;
/// In each step directory: the id of the run that wrote it. A save removes only its own run's.
inline constexpr const char* kStepOwnerFile = ".strata-owner";

/// "step_00000010"
std::string step_dir_name(std::int64_t step);

struct SaveInput {
  std::filesystem::path root;            ///< the checkpoint root ([checkpoint] dir)
  std::int64_t step = 0;                 ///< steps done
  std::vector<TensorPiece> pieces;       ///< this rank's (each element of the job's state once)
  /// Rank 0: files written before the commit marker, (name, text): trainer.json, config.toml.
  std::vector<std::pair<std::string, std::string>> files;
  Json info = Json::object();            ///< rank 0: extra members of metadata.json
  std::int64_t keep = 0;                 ///< complete checkpoints kept, this one included (0: all)
  /// The run saving (its run_id): the step directories it marks, the only ones it removes.
  std::string run_id;
  /// Waits until every rank gets to the point `name` names (unique in the job); empty: the
  /// communicator's barrier. The trainer passes the job's store barrier, whose deadline is
  /// [distributed] save_timeout_s: rank 0's commit, the removal of old checkpoints and a slow
  /// file system may outlast the collective timeout without aborting the waiting ranks.
  std::function<void(const std::string& name)> barrier;
};

/// What one save cost.
struct SaveResult {
  std::filesystem::path dir;
  double seconds = 0;               ///< wall time of the save on this rank, barriers included
  std::int64_t bytes = 0;           ///< bytes this rank wrote
  std::int64_t max_rank_bytes = 0;  ///< rank 0: the most bytes any rank wrote (others: their own)
  std::int64_t total_bytes = 0;     ///< rank 0: every file of the checkpoint (others: their own)
  std::vector<std::string> removed;  ///< rank 0: checkpoint directories removed after the commit
};

/// Writes one checkpoint; collective (every rank of `comm` calls it, three barriers). Rank 0
/// then removes its run's incomplete checkpoints and its complete ones beyond `keep`, oldest first
/// (step directories another run wrote are never removed; ones from before owner records are the
/// root's owner's). Throws
/// strata::Error naming the file on a write error (a full disk): the previous checkpoints are
/// untouched.
SaveResult save(const SaveInput& input, Comm& comm);

/// A complete checkpoint, opened for reading.
class Checkpoint {
 public:
  /// Reads and checks `dir`/metadata.json against its own checksum. Throws strata::Error naming the
  /// file when it is not a complete, undamaged checkpoint of this format (never a crash, never a
  /// silently different step).
  explicit Checkpoint(std::filesystem::path dir);
  /// Reads every saved piece and checks its size and checksum (the whole checkpoint, once), and
  /// the files rank 0 wrote. Throws strata::Error naming the damaged file.
  void verify() const;

  const std::filesystem::path& dir() const noexcept { return dir_; }
  std::int64_t step() const noexcept { return step_; }
  const Json& metadata() const noexcept { return metadata_; }
  /// A file rank 0 wrote (trainer.json, config.toml), its size and checksum checked.
  std::string file_text(const std::string& name) const;
  /// Names of the tensors saved, sorted.
  std::vector<std::string> names() const;
  /// Shape of a saved tensor (which must exist).
  const std::vector<std::int64_t>& shape(const std::string& name) const { return tensors_.at(name).shape; }
  bool has(const std::string& name) const { return tensors_.count(name) != 0; }

  /// Overwrites every piece (converting to its dtype) from the saved pieces that overlap it, each
  /// read once and checked against its size and checksum. Throws strata::Error naming the tensor
  /// and the file when a tensor is missing, has another shape, is not covered, or a file is
  /// truncated or corrupted.
  void read_into(const std::vector<TensorPiece>& pieces) const;

 private:
  struct Saved {
    std::string file;
    std::uint64_t offset = 0;
    std::int64_t begin = 0, end = 0;
    std::uint32_t crc = 0;
  };
  struct Entry {
    std::vector<std::int64_t> shape;
    std::string dtype;
    std::vector<Saved> pieces;  // by begin
  };
  std::filesystem::path dir_;
  Json metadata_;
  std::int64_t step_ = 0;
  std::map<std::string, Entry> tensors_;
  std::map<std::string, std::uint64_t> file_bytes_;
};

/// The complete checkpoints under `root`, oldest first (empty when there is none or no root).
std::vector<std::filesystem::path> complete_checkpoints(const std::filesystem::path& root);
/// Whether `dir` holds a committed checkpoint (its metadata.json exists).
bool is_complete(const std::filesystem::path& dir);

}  // namespace strata::ckpt
