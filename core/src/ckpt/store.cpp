#include "ckpt/store.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <thread>

#include <fmt/format.h>

#include "ckpt/piece_bytes.hpp"
#include "io/atomic_file.hpp"
#include "io/crc32c.hpp"
#include "io/run_dir.hpp"
#include "io/safetensors.hpp"
#include "strata/errors.hpp"
#include "text/shape_text.hpp"

namespace strata::ckpt {

namespace fs = std::filesystem;

namespace {

using Clock = std::chrono::steady_clock;

std::string rank_file(int rank, const char* ext) { return fmt::format("rank_{:05}.{}", rank, ext); }

std::string read_text(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw Error(fmt::format("cannot read {}.", file.string()), "Check that the checkpoint is complete.");
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

Json shape_json(const std::vector<std::int64_t>& shape) {
  Json out = Json::array();
  for (const auto d : shape) out.push_back(Json(d));
  return out;
}

std::int64_t numel_of(const std::vector<std::int64_t>& shape) {
  std::int64_t n = 1;
  for (const auto d : shape) n *= d;
  return n;
}

std::int64_t integer(const Json* value, const std::string& what) {
  if (value == nullptr || !value->is_number()) throw Error("checkpoint metadata: " + what + " is missing");
  return static_cast<std::int64_t>(value->number_or(0));
}

std::vector<std::int64_t> shape_from(const Json* value, const std::string& what) {
  std::vector<std::int64_t> shape;
  if (value == nullptr || value->elements() == nullptr) throw Error("checkpoint metadata: the shape of " + what + " is missing");
  for (const auto& d : *value->elements()) shape.push_back(static_cast<std::int64_t>(d.number_or(-1)));
  return shape;
}

/// metadata.json's own checksum: its first member, `{"metadata_crc32c":"XXXXXXXX",...`, the CRC-32C
/// of the text with those 8 hex digits as zeros.
constexpr const char* kChecksumKey = "metadata_crc32c";
const std::string kChecksumPrefix = std::string("{\"") + kChecksumKey + "\":\"";
constexpr std::size_t kChecksumDigits = 8;

std::string with_checksum(std::string text) {
  const auto crc = crc32c(text.data(), text.size());
  text.replace(kChecksumPrefix.size(), kChecksumDigits, fmt::format("{:08x}", crc));
  return text;
}

/// Whether `text` carries a checksum; throws when it does not match.
bool check_own_checksum(std::string text, const fs::path& file, const std::string& fix) {
  if (text.rfind(kChecksumPrefix, 0) != 0) return false;
  const std::string saved = text.substr(kChecksumPrefix.size(), kChecksumDigits);
  text.replace(kChecksumPrefix.size(), kChecksumDigits, std::string(kChecksumDigits, '0'));
  if (saved.size() != kChecksumDigits || fmt::format("{:08x}", crc32c(text.data(), text.size())) != saved)
    throw Error(fmt::format("{} is damaged: its text does not match its own checksum ({}).", file.string(),
                            kChecksumKey),
                fix);
  return true;
}

/// The fault injection of STRATA_FAULT="kill-in-save:STEP:RANK": that rank kills itself with
/// SIGKILL after writing its files of that step, before the checkpoint is committed (tests of
/// the commit protocol; documented in docs/user-guide.md, "Checkpoints and resume").
void maybe_fault(std::int64_t step, int rank) {
  const char* fault = std::getenv("STRATA_FAULT");
  if (fault == nullptr) return;
  long long s = -1;
  int r = -1;
  if (std::sscanf(fault, "kill-in-save:%lld:%d", &s, &r) == 2 && s == step && r == rank) ::raise(SIGKILL);
}

/// Test hook: STRATA_FAULT=slow-commit:SECONDS makes rank 0's commit take that much longer (a
/// slow shared file system), to show that the waiting ranks outlast the collective timeout.
void maybe_slow_commit() {
  const char* fault = std::getenv("STRATA_FAULT");
  double seconds = 0;
  if (fault != nullptr && std::sscanf(fault, "slow-commit:%lf", &seconds) == 1 && seconds > 0)
    std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
}

/// Writes this rank's pieces and their index; returns the bytes written.
std::int64_t write_rank(const fs::path& dir, int rank, const std::vector<TensorPiece>& pieces) {
  AtomicFile bin(dir / rank_file(rank, "bin"));
  Json index = Json::array();
  for (const auto& piece : pieces)
    if (piece.data.numel() != piece.end - piece.begin)
      throw Error(fmt::format("checkpoint: the piece of {} for elements [{}, {}) holds {} elements", piece.name,
                              piece.begin, piece.end, piece.data.numel()));
  std::vector<std::uint64_t> offsets(pieces.size());
  std::vector<std::uint32_t> crcs(pieces.size(), 0);
  std::size_t current = pieces.size();  // the piece whose spans are arriving (each piece's in order)
  for_each_piece_span(pieces, [&](std::size_t i, const void* data, std::size_t size) {
    if (i != current) {
      current = i;
      offsets[i] = bin.size();
    }
    crcs[i] = crc32c(data, size, crcs[i]);
    bin.write(data, size, "tensor " + pieces[i].name);
  });
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    const auto& piece = pieces[i];
    Json entry = Json::object();
    entry["name"] = piece.name;
    entry["shape"] = shape_json(piece.shape);
    entry["dtype"] = safetensors_dtype_name(piece.data.scalar_type());
    entry["begin"] = piece.begin;
    entry["end"] = piece.end;
    entry["offset"] = static_cast<std::int64_t>(offsets[i]);
    entry["crc32c"] = static_cast<std::int64_t>(crcs[i]);
    index.push_back(std::move(entry));
  }
  const auto bytes = static_cast<std::int64_t>(bin.size());
  bin.commit();
  Json doc = Json::object();
  doc["rank"] = rank;
  doc["file"] = rank_file(rank, "bin");
  doc["bytes"] = bytes;
  doc["pieces"] = std::move(index);
  write_file_atomically(dir / rank_file(rank, "json"), doc.dump(-1));
  return bytes;
}

/// Rank 0: every rank's index merged by tensor; checks that the pieces of each tensor cover it
/// exactly once (a strategy that saved a range twice or not at all is caught here, not on resume).
Json merge_indices(const fs::path& dir, int world, std::int64_t& max_rank_bytes, Json& files) {
  std::map<std::string, std::vector<const Json*>> by_name;
  std::vector<Json> docs;
  docs.reserve(static_cast<std::size_t>(world));
  for (int r = 0; r < world; ++r) {
    docs.push_back(Json::parse(read_text(dir / rank_file(r, "json"))));
    const std::int64_t bytes = integer(docs.back().find("bytes"), "bytes");
    max_rank_bytes = std::max(max_rank_bytes, bytes);
    files[rank_file(r, "bin")]["bytes"] = bytes;
  }
  std::map<std::string, Json> tensors;
  for (int r = 0; r < world; ++r) {
    for (const auto& p : *docs[static_cast<std::size_t>(r)].find("pieces")->elements()) {
      const std::string name = p.find("name")->string_or("");
      Json& t = tensors[name];
      if (t.find("shape") == nullptr) {
        t["shape"] = *p.find("shape");
        t["dtype"] = *p.find("dtype");
        t["pieces"] = Json::array();
      }
      Json piece = Json::object();
      piece["file"] = rank_file(r, "bin");
      for (const char* key : {"offset", "begin", "end", "crc32c"}) piece[key] = *p.find(key);
      t["pieces"].push_back(std::move(piece));
    }
  }
  Json out = Json::object();
  for (auto& [name, t] : tensors) {
    std::vector<std::pair<std::int64_t, std::int64_t>> ranges;
    for (const auto& p : *t.find("pieces")->elements())
      ranges.emplace_back(integer(p.find("begin"), "begin"), integer(p.find("end"), "end"));
    std::sort(ranges.begin(), ranges.end());
    std::int64_t next = 0;
    for (const auto& [b, e] : ranges) {
      if (b != next)
        throw Error(fmt::format("checkpoint: the ranks saved tensor {} with elements {} {} (ranges must cover it "
                                "exactly once)",
                                name, b < next ? "overlapping at" : "missing before", b),
                    "The strategy's state_pieces(kSave) is wrong; it must split replicated state between the ranks.");
      next = e;
    }
    if (next != numel_of(shape_from(t.find("shape"), name)))
      throw Error(fmt::format("checkpoint: the ranks saved only {} elements of tensor {}", next, name),
                  "The strategy's state_pieces(kSave) is wrong: some rank must save every element.");
    out[name] = std::move(t);
  }
  return out;
}

/// The run that wrote step directory `dir` (its kStepOwnerFile), empty when unknown.
std::string step_owner(const fs::path& dir) {
  std::error_code ec;
  if (!fs::is_regular_file(fs::symlink_status(dir / kStepOwnerFile, ec))) return {};
  std::ifstream in(dir / kStepOwnerFile, std::ios::binary);
  std::string line;
  std::getline(in, line);
  return line.rfind("run ", 0) == 0 ? line.substr(4) : std::string();
}

/// Whether this run may remove `dir`: it wrote it, or it predates owner records (a root is saved
/// into only by the run that owns it, so such a directory is that run's, from an older Strata).
bool written_by(const fs::path& dir, const std::string& run_id) {
  const std::string owner = step_owner(dir);
  return owner.empty() ? !fs::exists(dir / kStepOwnerFile) : owner == run_id;
}

/// Rank 0, after a commit: removes the run's incomplete checkpoints and its complete ones beyond
/// `keep`; a step directory another run wrote is left as it is.
std::vector<std::string> clean_up(const fs::path& root, const fs::path& current, std::int64_t keep,
                                  const std::string& run_id) {
  std::vector<std::string> removed;
  std::error_code ec;
  std::vector<fs::path> complete;
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    const auto name = entry.path().filename().string();
    if (!entry.is_directory(ec) || name.rfind("step_", 0) != 0 || entry.path() == current) continue;
    if (!written_by(entry.path(), run_id)) continue;
    if (is_complete(entry.path())) {
      complete.push_back(entry.path());
    } else if (fs::remove_all(entry.path(), ec); !ec) {
      removed.push_back(name + " (incomplete)");
    }
  }
  if (keep <= 0) return removed;
  std::sort(complete.begin(), complete.end());
  const auto excess = static_cast<std::int64_t>(complete.size()) - (keep - 1);
  for (std::int64_t i = 0; i < excess; ++i)
    if (fs::remove_all(complete[static_cast<std::size_t>(i)], ec); !ec)
      removed.push_back(complete[static_cast<std::size_t>(i)].filename().string());
  return removed;
}

}  // namespace

std::string step_dir_name(std::int64_t step) { return fmt::format("step_{:08}", step); }

bool is_complete(const fs::path& dir) {
  std::error_code ec;
  return fs::is_regular_file(dir / kMetadataFile, ec);
}

SaveResult save(const SaveInput& input, Comm& comm) {
  const auto t0 = Clock::now();
  const int rank = comm.rank(), world = comm.world_size();
  const auto barrier = [&](const char* point) {
    if (input.barrier) input.barrier(fmt::format("checkpoint/{}/{}", input.step, point));
    else comm.barrier();
  };
  SaveResult result;
  result.dir = input.root / step_dir_name(input.step);
  if (rank == 0) {
    std::error_code ec;
    if (fs::exists(fs::symlink_status(result.dir, ec))) {
      // An earlier attempt at this step by this run (incomplete, or a segment resumed from an older
      // step); another run's directory is its record, never removed.
      if (!written_by(result.dir, input.run_id))
        throw Error(fmt::format("checkpoint directory {} exists and was not written by this run (run {}).",
                                result.dir.string(), step_owner(result.dir).empty() ? "unknown" : step_owner(result.dir)),
                    "Give this run a checkpoint root of its own ([checkpoint] dir).");
      fs::remove_all(result.dir, ec);
    }
    fs::create_directories(result.dir, ec);
    if (ec)
      throw Error(fmt::format("cannot create the checkpoint directory {}: {}.", result.dir.string(), ec.message()),
                  "Check that [checkpoint] dir is writable and the disk has space.");
    write_file_atomically(result.dir / kStepOwnerFile, "run " + input.run_id + "\n");
  }
  barrier("created");
  result.bytes = write_rank(result.dir, rank, input.pieces);
  result.max_rank_bytes = result.total_bytes = result.bytes;
  maybe_fault(input.step, rank);
  barrier("written");  // every rank's files are on disk
  if (rank == 0) {
    maybe_slow_commit();
    Json files = Json::object();
    Json tensors = merge_indices(result.dir, world, result.max_rank_bytes, files);
    for (const auto& [name, text] : input.files) {
      write_file_atomically(result.dir / name, text);
      files[name]["bytes"] = static_cast<std::int64_t>(text.size());
      files[name]["crc32c"] = static_cast<std::int64_t>(crc32c(text.data(), text.size()));
    }
    Json meta = Json::object();
    meta[kChecksumKey] = std::string(8, '0');  // first: its own checksum, filled in below
    meta["format"] = kFormat;
    meta["version"] = kVersion;
    meta["step"] = input.step;
    meta["world_size"] = world;
    meta["created"] = utc_time("%Y-%m-%dT%H:%M:%SZ");
    meta["run_id"] = input.run_id;
    if (const auto* extra = input.info.members())
      for (const auto& [key, value] : *extra) meta[key] = value;
    meta["files"] = files;
    meta["tensors"] = std::move(tensors);
    std::int64_t total = 0;
    for (const auto& [name, f] : *files.members()) total += integer(f.find("bytes"), "bytes");
    result.total_bytes = total;
    write_file_atomically(result.dir / kMetadataFile, with_checksum(meta.dump(-1)));  // the commit
    result.removed = clean_up(input.root, result.dir, input.keep, input.run_id);
  }
  barrier("committed");  // nobody goes on (or is told the save succeeded) before the commit
  result.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return result;
}

// ---- reading --------------------------------------------------------------------------------

namespace {

/// Member `key` of `j` (an object), or a strata::Error saying what is missing.
const Json& need(const Json& j, const char* key, const std::string& what) {
  const Json* v = j.find(key);
  if (v == nullptr) throw Error(fmt::format("{} has no \"{}\"", what, key));
  return *v;
}

const Json::Object& object_of(const Json& j, const std::string& what) {
  if (j.members() == nullptr) throw Error(what + " is not an object");
  return *j.members();
}

const Json::Array& array_of(const Json& j, const std::string& what) {
  if (j.elements() == nullptr) throw Error(what + " is not an array");
  return *j.elements();
}

}  // namespace

Checkpoint::Checkpoint(fs::path dir) : dir_(std::move(dir)) {
  const fs::path file = dir_ / kMetadataFile;
  const std::string fix = "Resume from a complete checkpoint: a directory step_N with a metadata.json.";
  const std::string damaged_fix =
      "The checkpoint is damaged: resume from another one (an older step_N, or --resume naming it).";
  std::error_code ec;
  if (!fs::is_regular_file(file, ec))
    throw Error(fmt::format("{} is not a complete checkpoint: it has no {} (the save did not finish).", dir_.string(),
                            kMetadataFile),
                fix);
  const std::string text = read_text(file);
  check_own_checksum(text, file, damaged_fix);
  try {
    metadata_ = Json::parse(text);
  } catch (const Error& err) {
    throw Error(fmt::format("{} is not valid JSON: {}", file.string(), err.what()), damaged_fix);
  }
  if (const auto* f = metadata_.find("format"); f == nullptr || f->string_or("") != kFormat)
    throw Error(fmt::format("{} is not a Strata checkpoint's metadata (no \"format\": \"{}\").", file.string(), kFormat),
                fix);
  try {
    const std::int64_t version = integer(metadata_.find("version"), "version");
    if (version != kVersion)
      throw Error(fmt::format("{} has checkpoint format version {}; this Strata reads version {}.", file.string(),
                              version, kVersion),
                  "Resume it with the Strata version that wrote it, or export its model there.");
    step_ = integer(metadata_.find("step"), "step");
    if (step_ < 0) throw Error(fmt::format("step {} is negative", step_));
    for (const auto& [name, f] : object_of(need(metadata_, "files", "the metadata"), "files"))
      file_bytes_[name] = static_cast<std::uint64_t>(integer(f.find("bytes"), name + " bytes"));
    for (const auto& [name, t] : object_of(need(metadata_, "tensors", "the metadata"), "tensors")) {
      Entry e;
      e.shape = shape_from(t.find("shape"), name);
      for (const auto d : e.shape)
        if (d < 0) throw Error(fmt::format("tensor {} has a negative dimension", name));
      e.dtype = need(t, "dtype", "tensor " + name).string_or("");
      safetensors_dtype(e.dtype);  // a name this Strata does not know is damage too
      for (const auto& p : array_of(need(t, "pieces", "tensor " + name), "the pieces of " + name)) {
        const std::string piece_file = need(p, "file", "a piece of " + name).string_or("");
        if (!file_bytes_.count(piece_file))
          throw Error(fmt::format("a piece of {} is in \"{}\", which is not among its files", name, piece_file));
        e.pieces.push_back({piece_file, static_cast<std::uint64_t>(integer(p.find("offset"), "offset")),
                            integer(p.find("begin"), "begin"), integer(p.find("end"), "end"),
                            static_cast<std::uint32_t>(integer(p.find("crc32c"), "crc32c"))});
        if (e.pieces.back().begin < 0 || e.pieces.back().end < e.pieces.back().begin)
          throw Error(fmt::format("a piece of {} has the element range [{}, {})", name, e.pieces.back().begin,
                                  e.pieces.back().end));
      }
      std::sort(e.pieces.begin(), e.pieces.end(), [](const Saved& a, const Saved& b) { return a.begin < b.begin; });
      tensors_.emplace(name, std::move(e));
    }
  } catch (const Error& err) {
    if (std::string(err.what()).rfind(file.string(), 0) == 0) throw;
    throw Error(fmt::format("{} is damaged: {}.", file.string(), err.what()), damaged_fix);
  }
}

std::string Checkpoint::file_text(const std::string& name) const {
  const Json* f = metadata_.find("files")->find(name);
  if (f == nullptr) throw Error(fmt::format("checkpoint {} has no {}.", dir_.string(), name));
  const std::string text = read_text(dir_ / name);
  if (static_cast<std::int64_t>(text.size()) != integer(f->find("bytes"), "bytes") ||
      crc32c(text.data(), text.size()) != static_cast<std::uint32_t>(integer(f->find("crc32c"), "crc32c")))
    throw Error(fmt::format("{} does not match its size and checksum in {}: the file is corrupted.",
                            (dir_ / name).string(), kMetadataFile),
                "Resume from another checkpoint (an older step).");
  return text;
}

std::vector<std::string> Checkpoint::names() const {
  std::vector<std::string> out;
  for (const auto& [name, e] : tensors_) out.push_back(name);
  return out;
}

namespace {

/// The checkpoint's data files, opened on first use with their size checked.
class DataFiles {
 public:
  DataFiles(const fs::path& dir, const std::map<std::string, std::uint64_t>& bytes) : dir_(dir), bytes_(bytes) {}
  ~DataFiles() {
    for (auto& [name, fd] : fds_) ::close(fd);
  }
  DataFiles(const DataFiles&) = delete;
  DataFiles& operator=(const DataFiles&) = delete;

  /// The bytes of one saved piece, checked against its checksum.
  torch::Tensor read(const std::string& file, std::uint64_t offset, std::int64_t numel, torch::ScalarType dtype,
                     std::uint32_t crc, const std::string& tensor) {
    const int fd = open(file);
    auto out = torch::empty({numel}, torch::TensorOptions().dtype(dtype));
    const auto size = static_cast<std::uint64_t>(out.nbytes());
    const fs::path path = dir_ / file;
    if (size > 0 && !pread_all(fd, out.data_ptr(), size, offset))
      throw Error(fmt::format("cannot read tensor {} from {}: {}.", tensor, path.string(),
                              errno ? errno_text() : "the file ends first"),
                  "The checkpoint is damaged; resume from an older one.");
    if (crc32c(out.data_ptr(), size) != crc)
      throw Error(fmt::format("checkpoint file {} is corrupted: the bytes of tensor {} at offset {} do not match "
                              "their checksum.",
                              path.string(), tensor, offset),
                  "Resume from an older checkpoint (remove this step's directory, or name another with --resume).");
    return out;
  }

 private:
  int open(const std::string& file) {
    if (auto it = fds_.find(file); it != fds_.end()) return it->second;
    const fs::path path = dir_ / file;
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0)
      throw Error(fmt::format("cannot open checkpoint file {}: {}.", path.string(), errno_text()),
                  "The checkpoint is incomplete or damaged; resume from an older one.");
    fds_[file] = fd;
    struct stat st {};
    const auto expected = bytes_.count(file) ? bytes_.at(file) : 0;
    if (::fstat(fd, &st) != 0 || static_cast<std::uint64_t>(st.st_size) != expected)
      throw Error(fmt::format("checkpoint file {} is {} bytes, but its metadata says {}: it was truncated or "
                              "replaced.",
                              path.string(), static_cast<long long>(st.st_size), expected),
                  "Resume from an older checkpoint (remove this step's directory, or name another with --resume).");
    return fd;
  }

  fs::path dir_;
  const std::map<std::string, std::uint64_t>& bytes_;
  std::map<std::string, int> fds_;
};

}  // namespace

void Checkpoint::read_into(const std::vector<TensorPiece>& pieces) const {
  DataFiles files(dir_, file_bytes_);
  std::map<std::pair<std::string, std::uint64_t>, torch::Tensor> small;  // tiny pieces read by several (the step)
  torch::NoGradGuard no_grad;
  for (const auto& piece : pieces) {
    const auto it = tensors_.find(piece.name);
    if (it == tensors_.end())
      throw Error(fmt::format("checkpoint {} has no tensor {}.", dir_.string(), piece.name),
                  "Resume with the model and optimizer that wrote it (the training keys of its config.toml).");
    const Entry& e = it->second;
    if (e.shape != piece.shape)
      throw Error(fmt::format("checkpoint {} holds tensor {} with shape {}, but this run's is {}.", dir_.string(),
                              piece.name, shape_text(e.shape), shape_text(piece.shape)),
                  "Resume with the model that wrote it (the training keys of its config.toml).");
    const torch::ScalarType dtype = safetensors_dtype(e.dtype);
    std::int64_t covered = piece.begin;
    for (const auto& s : e.pieces) {
      const std::int64_t a = std::max(piece.begin, s.begin), b = std::min(piece.end, s.end);
      if (a >= b) continue;
      if (a != covered) break;  // a gap: reported below
      torch::Tensor values;
      const auto key = std::make_pair(s.file, s.offset);
      if (auto hit = small.find(key); hit != small.end()) {
        values = hit->second;
      } else {
        values = files.read(s.file, s.offset, s.end - s.begin, dtype, s.crc, piece.name);
        if (values.numel() <= 64) small.emplace(key, values);
      }
      piece.data.narrow(0, a - piece.begin, b - a).copy_(values.narrow(0, a - s.begin, b - a));
      covered = b;
    }
    if (covered != piece.end)
      throw Error(fmt::format("checkpoint {} lacks elements [{}, {}) of tensor {}.", dir_.string(), covered, piece.end,
                              piece.name),
                  "The checkpoint is incomplete; resume from another one.");
  }
}

void Checkpoint::verify() const {
  for (const auto& [name, f] : *metadata_.find("files")->members())
    if (name.rfind("rank_", 0) != 0) file_text(name);
  DataFiles files(dir_, file_bytes_);
  torch::NoGradGuard no_grad;
  for (const auto& [name, e] : tensors_) {
    const torch::ScalarType dtype = safetensors_dtype(e.dtype);
    for (const auto& s : e.pieces) files.read(s.file, s.offset, s.end - s.begin, dtype, s.crc, name);
  }
}

std::vector<fs::path> complete_checkpoints(const fs::path& root) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    const auto name = entry.path().filename().string();
    if (entry.is_directory(ec) && name.rfind("step_", 0) == 0 && is_complete(entry.path())) out.push_back(entry.path());
  }
  std::sort(out.begin(), out.end());  // step_%08d: lexical order is step order
  return out;
}

}  // namespace strata::ckpt
