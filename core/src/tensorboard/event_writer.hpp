#pragma once
/// \file event_writer.hpp
/// Writes TensorBoard event files (TFRecord-framed `Event` protobufs) without TensorFlow,
/// PyTorch or the protobuf library: scalars, markdown text and hyperparameters (HPARAMS tab).
///
/// Example:
/// \code
///   strata::tb::EventWriter writer(run_dir / "tensorboard");
///   writer.add_hparams({{"strategy", std::string("single")}, {"lr", 0.1}, {"bf16", false}},
///                      {"train/loss", "eval/accuracy"});
///   writer.add_scalar("train/loss", 0.25, 100);
///   writer.end_hparams_session(true);
/// \endcode

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <string>
#include <variant>
#include <vector>

namespace strata::tb {

/// A hyperparameter value as TensorBoard's HPARAMS tab shows it: a number (DATA_TYPE_FLOAT64),
/// a string or a bool. Integers must be converted to double by the caller.
using HParamValue = std::variant<double, std::string, bool>;

/// Appends events to one new event file in a directory. Every event is handed to the operating
/// system as soon as it is written, so TensorBoard can tail a live run and a crash loses
/// nothing already added. Methods are safe to call from several threads (one internal mutex).
class EventWriter {
 public:
  /// Creates `dir` (and parents) if needed, then the file
  /// `events.out.tfevents.<unix seconds>.<hostname>.<pid>.strata` in it (a `.<n>` is inserted
  /// before `.strata` if that name is taken) and writes the first event, whose `file_version`
  /// is "brain.Event:2". Throws strata::Error naming the path when the directory or the file
  /// cannot be created.
  explicit EventWriter(const std::filesystem::path& dir);
  /// Flushes and closes the file; never throws.
  ~EventWriter();
  EventWriter(const EventWriter&) = delete;
  EventWriter& operator=(const EventWriter&) = delete;

  /// One scalar point under `tag` (e.g. "train/loss") at training step `step`. TensorBoard
  /// stores `value` as a 32-bit float (simple_value), so it is rounded to float here.
  void add_scalar(const std::string& tag, double value, std::int64_t step);

  /// A text-plugin summary: `markdown` (UTF-8, rendered as Markdown by TensorBoard's TEXT
  /// tab) under `tag` at `step`, stored as a scalar DT_STRING tensor.
  void add_text(const std::string& tag, const std::string& markdown, std::int64_t step);

  /// Registers this run with the HPARAMS tab, as torch.utils.tensorboard's add_hparams does:
  /// writes the "_hparams_/experiment" summary (one HParamInfo per entry, typed FLOAT64,
  /// STRING or BOOL; one MetricInfo per scalar tag in `metric_tags`) and the
  /// "_hparams_/session_start_info" summary with the values and the current time. Call it
  /// once per writer (TensorBoard keeps only the first summary of each tag), before or after
  /// the metric scalars; finish with end_hparams_session().
  void add_hparams(const std::map<std::string, HParamValue>& hparams,
                   const std::vector<std::string>& metric_tags);

  /// Writes the "_hparams_/session_end_info" summary: status STATUS_SUCCESS when `success`,
  /// else STATUS_FAILURE, and the current time as end time.
  void end_hparams_session(bool success);

  /// A SessionLog START event at `step`: TensorBoard then discards the points at `step` and
  /// after that earlier event files of the directory hold (a run resumed from a checkpoint
  /// continues the step axis without the steps of an abandoned attempt).
  void add_session_start(std::int64_t step);

  /// Pushes everything written so far to the operating system (std::ofstream::flush). Throws
  /// strata::Error if the file can no longer be written (for example a full disk).
  void flush();

  /// Full path of the event file being written.
  const std::filesystem::path& path() const noexcept { return path_; }

 private:
  /// Frames one serialized Event as a TFRecord, appends it and flushes; throws on failure.
  void write_event(const std::string& event);
  /// Throws strata::Error naming path_ when the stream is in a failed state.
  void check_stream() const;

  std::filesystem::path path_;
  std::ofstream out_;
  std::mutex mutex_;
};

}  // namespace strata::tb
