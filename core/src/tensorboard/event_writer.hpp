#pragma once
/// \file event_writer.hpp
/// Writes TensorBoard event files (TFRecord-framed `Event` protobufs) without TensorFlow,
/// PyTorch or the protobuf library: scalars, markdown text and hyperparameters (HPARAMS tab).
///
/// The HPARAMS tab (tensorboard/plugins/hparams/backend_context.py) uses the first
/// "_hparams_/experiment" summary it finds in any run of the log directory; without one it infers
/// the experiment from every run's session start info, marking an hparam `differs` when its
/// values differ between runs. So a single run writes only its session (start_hparams_session,
/// end_hparams_session), and `strata compare` writes the one experiment of its directory
/// (add_hparams_experiment), listing its axes first.
///
/// Example:
/// \code
///   strata::tb::EventWriter writer(run_dir / "tensorboard");
///   writer.start_hparams_session({{"strategy", std::string("single")}, {"lr", 0.1}, {"bf16", false}});
///   writer.add_scalar("train/loss", 0.25, 100);
///   writer.end_hparams_session(true);
/// \endcode

#include <cstdint>
#include <filesystem>
#include <map>
#include <mutex>
#include <string>
#include <variant>
#include <vector>

#include "io/atomic_file.hpp"

namespace strata::tb {

/// A hyperparameter value as TensorBoard's HPARAMS tab shows it: a number (DATA_TYPE_FLOAT64),
/// a string or a bool. Integers must be converted to double by the caller.
using HParamValue = std::variant<double, std::string, bool>;

/// The hparams plugin's DataType of a value (api.proto's numbers).
enum class HParamType { kString = 1, kBool = 2, kFloat64 = 3 };

/// The type of `value`.
HParamType type_of(const HParamValue& value);

/// One hyperparameter of an experiment (api.proto's HParamInfo, without a domain: the tab then
/// takes the values the sessions have).
struct HParamInfo {
  std::string name;          ///< as in the sessions' start info, e.g. "strategy"
  HParamType type = HParamType::kString;
  bool differs = false;      ///< shown by default: the runs differ in it
  std::string description;   ///< tooltip text; may be empty
};

/// One metric of an experiment: a scalar tag every session run writes.
struct MetricInfo {
  std::string tag;          ///< e.g. "summary/samples_per_s"
  std::string description;  ///< tooltip text; may be empty
};

/// Appends events to one new event file in a directory. Every event is handed to the operating
/// system as soon as it is written, so TensorBoard can tail a live run and a crash loses
/// nothing already added. An event that cannot be written (a full disk) is a strata::Error naming
/// the file and the system's reason, and is cut off again: the file always ends with a complete
/// record. Methods are safe to call from several threads (one internal mutex).
class EventWriter {
 public:
  /// Creates `dir` (and parents) if needed, then the file
  /// `events.out.tfevents.<unix seconds>.<hostname>.<pid>.strata` in it (a `.<n>` is inserted
  /// before `.strata` if that name is taken) and writes the first event, whose `file_version`
  /// is "brain.Event:2". Throws strata::Error naming the path and the system's reason when the
  /// directory or the file cannot be created, or the first event written (then no file is left).
  explicit EventWriter(const std::filesystem::path& dir);
  /// Closes the file; never throws.
  ~EventWriter();
  EventWriter(const EventWriter&) = delete;
  EventWriter& operator=(const EventWriter&) = delete;

  /// One scalar point under `tag` (e.g. "train/loss") at training step `step`. TensorBoard
  /// stores `value` as a 32-bit float (simple_value), so it is rounded to float here.
  void add_scalar(const std::string& tag, double value, std::int64_t step);

  /// A text-plugin summary: `markdown` (UTF-8, rendered as Markdown by TensorBoard's TEXT
  /// tab) under `tag` at `step`, stored as a scalar DT_STRING tensor.
  void add_text(const std::string& tag, const std::string& markdown, std::int64_t step);

  /// Registers this directory as a session of the HPARAMS tab: writes the
  /// "_hparams_/session_start_info" summary with `hparams` (typed FLOAT64, STRING or BOOL) and
  /// the current time. Call it once per writer (TensorBoard keeps only the first summary of each
  /// tag), before or after the metric scalars; finish with end_hparams_session().
  void start_hparams_session(const std::map<std::string, HParamValue>& hparams);

  /// Writes the "_hparams_/experiment" summary: the hparams and metrics the HPARAMS tab shows
  /// for every session below this writer's directory, in this order (TensorBoard then sorts the
  /// differing ones first). `description` is shown as the experiment's description.
  void add_hparams_experiment(const std::vector<HParamInfo>& hparams, const std::vector<MetricInfo>& metrics,
                              const std::string& description = {});

  /// Writes the "_hparams_/session_end_info" summary: status STATUS_SUCCESS when `success`,
  /// else STATUS_FAILURE, and the current time as end time.
  void end_hparams_session(bool success);

  /// A SessionLog START event at `step`: TensorBoard then discards the points at `step` and
  /// after that earlier event files of the directory hold (a run resumed from a checkpoint
  /// continues the step axis without the steps of an abandoned attempt).
  void add_session_start(std::int64_t step);

  /// Nothing to do: every event reached the operating system when it was added (or threw then).
  /// Kept so that callers mark where a run's events must be out.
  void flush() {}

  /// Full path of the event file being written.
  const std::filesystem::path& path() const noexcept { return path_; }

 private:
  /// Frames one serialized Event as a TFRecord and appends it whole; throws on failure.
  void write_event(const std::string& event);

  std::filesystem::path path_;
  StreamedFile file_;
  std::mutex mutex_;
};

}  // namespace strata::tb
