#include "tensorboard/event_writer.hpp"

#include <cerrno>
#include <chrono>
#include <cstring>
#include <system_error>
#include <type_traits>

#include <unistd.h>

#include "io/build_info.hpp"
#include "strata/errors.hpp"
#include "tensorboard/tfrecord.hpp"
#include "tensorboard/protobuf.hpp"

// Field numbers below are those of tensorboard/compat/proto/{event,summary,tensor}.proto,
// tensorboard/plugins/hparams/{plugin_data,api}.proto and google/protobuf/struct.proto.
// Fields are emitted in field-number order and proto3 defaults outside a oneof are skipped,
// as the official serializers do.

namespace strata::tb {
namespace {

using detail::ProtoWriter;

// Event
constexpr std::uint32_t kEventWallTime = 1;     // double
constexpr std::uint32_t kEventStep = 2;         // int64
constexpr std::uint32_t kEventFileVersion = 3;  // string (oneof what)
constexpr std::uint32_t kEventSummary = 5;      // Summary (oneof what)
constexpr std::uint32_t kEventSessionLog = 7;   // SessionLog (oneof what)
constexpr std::uint32_t kSessionLogStatus = 1;  // enum SessionStatus
constexpr std::int64_t kSessionLogStart = 1;    // START
// Summary / Summary.Value
constexpr std::uint32_t kSummaryValue = 1;
constexpr std::uint32_t kValueTag = 1;
constexpr std::uint32_t kValueSimpleValue = 2;  // float (oneof value)
constexpr std::uint32_t kValueTensor = 8;       // TensorProto (oneof value)
constexpr std::uint32_t kValueMetadata = 9;     // SummaryMetadata
// SummaryMetadata / PluginData
constexpr std::uint32_t kMetadataPluginData = 1;
constexpr std::uint32_t kPluginDataName = 1;
constexpr std::uint32_t kPluginDataContent = 2;
// TensorProto
constexpr std::uint32_t kTensorDtype = 1;
constexpr std::uint32_t kTensorShape = 2;
constexpr std::uint32_t kTensorStringVal = 8;
constexpr std::int64_t kDtString = 7;
// hparams: HParamsPluginData (version = 0 is the default and is not written)
constexpr std::uint32_t kPluginDataExperiment = 2;
constexpr std::uint32_t kPluginDataSessionStart = 3;
constexpr std::uint32_t kPluginDataSessionEnd = 4;
constexpr std::uint32_t kExperimentDescription = 1;
constexpr std::uint32_t kExperimentTimeCreated = 3;
constexpr std::uint32_t kExperimentHParamInfos = 4;
constexpr std::uint32_t kExperimentMetricInfos = 5;
constexpr std::uint32_t kHParamInfoName = 1;
constexpr std::uint32_t kHParamInfoDescription = 3;
constexpr std::uint32_t kHParamInfoType = 4;
constexpr std::uint32_t kHParamInfoDiffers = 7;
constexpr std::uint32_t kMetricInfoName = 1;
constexpr std::uint32_t kMetricInfoDescription = 4;
constexpr std::uint32_t kMetricNameTag = 2;
constexpr std::uint32_t kSessionStartHParams = 1;
constexpr std::uint32_t kSessionStartTime = 5;
constexpr std::uint32_t kSessionEndStatus = 1;
constexpr std::uint32_t kSessionEndTime = 2;
constexpr std::uint32_t kMapEntryKey = 1;
constexpr std::uint32_t kMapEntryValue = 2;
// google.protobuf.Value
constexpr std::uint32_t kValueNumber = 2;
constexpr std::uint32_t kValueString = 3;
constexpr std::uint32_t kValueBool = 4;
// hparams enums (DataType: HParamType's values)
constexpr std::int64_t kStatusSuccess = 1;
constexpr std::int64_t kStatusFailure = 2;

constexpr const char* kFileVersion = "brain.Event:2";
constexpr const char* kTextPlugin = "text";
constexpr const char* kHParamsPlugin = "hparams";
constexpr const char* kExperimentTag = "_hparams_/experiment";
constexpr const char* kSessionStartTag = "_hparams_/session_start_info";
constexpr const char* kSessionEndTag = "_hparams_/session_end_info";

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

/// The host's name as part of a file name.
std::string file_host_name() {
  std::string name = host_name();
  for (char& c : name)
    if (c == '/' || c == '\\') c = '_';
  return name;
}

/// Event{wall_time, step} with `what` to be appended by the caller.
ProtoWriter event_header(std::int64_t step) {
  ProtoWriter event;
  event.double_field(kEventWallTime, now_seconds());
  if (step != 0) event.int_field(kEventStep, step);
  return event;
}

/// A complete Event holding a Summary with the single value `value`.
std::string summary_event(const ProtoWriter& value, std::int64_t step) {
  ProtoWriter summary;
  summary.message_field(kSummaryValue, value);
  ProtoWriter event = event_header(step);
  event.message_field(kEventSummary, summary);
  return std::move(event).take();
}

/// SummaryMetadata{plugin_data{plugin_name, content}}.
ProtoWriter plugin_metadata(std::string_view plugin_name, std::string_view content) {
  ProtoWriter plugin_data;
  plugin_data.bytes_field(kPluginDataName, plugin_name);
  if (!content.empty()) plugin_data.bytes_field(kPluginDataContent, content);
  ProtoWriter metadata;
  metadata.message_field(kMetadataPluginData, plugin_data);
  return metadata;
}

/// Summary.Value{tag, metadata = hparams plugin with HParamsPluginData{<field> = message}}.
ProtoWriter hparams_value(const char* tag, std::uint32_t field, const ProtoWriter& message) {
  ProtoWriter plugin_data;
  plugin_data.message_field(field, message);
  ProtoWriter value;
  value.bytes_field(kValueTag, tag);
  value.message_field(kValueMetadata, plugin_metadata(kHParamsPlugin, plugin_data.bytes()));
  return value;
}

}  // namespace

EventWriter::EventWriter(const std::filesystem::path& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec || !std::filesystem::is_directory(dir)) {
    throw Error("cannot create the TensorBoard directory '" + dir.string() + "'" +
                    (ec ? ": " + ec.message() : std::string()),
                "Check that the run directory is writable and is not a file.");
  }
  const auto seconds = static_cast<long long>(now_seconds());
  const std::string stem = "events.out.tfevents." + std::to_string(seconds) + "." + file_host_name() +
                           "." + std::to_string(static_cast<long long>(getpid()));
  path_ = dir / (stem + ".strata");
  // Two writers in one directory within the same second would otherwise share a name: the
  // exclusive creation gives each its own.
  for (int n = 1; !file_.open(path_, /*exclusive=*/true, "the TensorBoard event file"); ++n) {
    if (errno != EEXIST)
      throw Error("cannot create the TensorBoard event file '" + path_.string() + "': " + std::strerror(errno) + ".",
                  "Check that the run directory is writable and the disk is not full.");
    path_ = dir / (stem + "." + std::to_string(n) + ".strata");
  }
  ProtoWriter event = event_header(0);
  event.bytes_field(kEventFileVersion, kFileVersion);
  try {
    write_event(event.bytes());
  } catch (...) {
    file_.remove();  // an empty event file would be all that is left
    throw;
  }
}

EventWriter::~EventWriter() = default;

void EventWriter::add_scalar(const std::string& tag, double value, std::int64_t step) {
  ProtoWriter v;
  v.bytes_field(kValueTag, tag);
  v.float_field(kValueSimpleValue, static_cast<float>(value));
  write_event(summary_event(v, step));
}

void EventWriter::add_text(const std::string& tag, const std::string& markdown, std::int64_t step) {
  ProtoWriter tensor;
  tensor.int_field(kTensorDtype, kDtString);
  tensor.message_field(kTensorShape, ProtoWriter{});  // no dims: a scalar
  tensor.bytes_field(kTensorStringVal, markdown);
  ProtoWriter v;
  v.bytes_field(kValueTag, tag);
  v.message_field(kValueTensor, tensor);
  v.message_field(kValueMetadata, plugin_metadata(kTextPlugin, {}));  // TextPluginData{}: empty
  write_event(summary_event(v, step));
}

HParamType type_of(const HParamValue& value) {
  if (std::holds_alternative<double>(value)) return HParamType::kFloat64;
  if (std::holds_alternative<bool>(value)) return HParamType::kBool;
  return HParamType::kString;
}

void EventWriter::start_hparams_session(const std::map<std::string, HParamValue>& hparams) {
  ProtoWriter start;
  for (const auto& [name, value] : hparams) {
    ProtoWriter typed;  // google.protobuf.Value
    std::visit(
        [&](const auto& v) {
          using T = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<T, double>) typed.double_field(kValueNumber, v);
          else if constexpr (std::is_same_v<T, std::string>) typed.bytes_field(kValueString, v);
          else typed.bool_field(kValueBool, v);
        },
        value);
    ProtoWriter entry;
    entry.bytes_field(kMapEntryKey, name).message_field(kMapEntryValue, typed);
    start.message_field(kSessionStartHParams, entry);
  }
  start.double_field(kSessionStartTime, now_seconds());
  write_event(summary_event(hparams_value(kSessionStartTag, kPluginDataSessionStart, start), 0));
}

void EventWriter::add_hparams_experiment(const std::vector<HParamInfo>& hparams, const std::vector<MetricInfo>& metrics,
                                         const std::string& description) {
  ProtoWriter experiment;
  if (!description.empty()) experiment.bytes_field(kExperimentDescription, description);
  experiment.double_field(kExperimentTimeCreated, now_seconds());
  for (const auto& h : hparams) {
    ProtoWriter info;
    info.bytes_field(kHParamInfoName, h.name);
    if (!h.description.empty()) info.bytes_field(kHParamInfoDescription, h.description);
    info.int_field(kHParamInfoType, static_cast<std::int64_t>(h.type));
    if (h.differs) info.bool_field(kHParamInfoDiffers, true);
    experiment.message_field(kExperimentHParamInfos, info);
  }
  for (const auto& m : metrics) {
    ProtoWriter metric_name;
    metric_name.bytes_field(kMetricNameTag, m.tag);
    ProtoWriter info;
    info.message_field(kMetricInfoName, metric_name);
    if (!m.description.empty()) info.bytes_field(kMetricInfoDescription, m.description);
    experiment.message_field(kExperimentMetricInfos, info);
  }
  write_event(summary_event(hparams_value(kExperimentTag, kPluginDataExperiment, experiment), 0));
}

void EventWriter::end_hparams_session(bool success) {
  ProtoWriter end;
  end.int_field(kSessionEndStatus, success ? kStatusSuccess : kStatusFailure);
  end.double_field(kSessionEndTime, now_seconds());
  write_event(summary_event(hparams_value(kSessionEndTag, kPluginDataSessionEnd, end), 0));
}

void EventWriter::add_session_start(std::int64_t step) {
  ProtoWriter event = event_header(step);
  ProtoWriter log;
  log.int_field(kSessionLogStatus, kSessionLogStart);
  event.message_field(kEventSessionLog, log);
  write_event(event.bytes());
}

void EventWriter::write_event(const std::string& event) {
  const std::string record = tfrecord_frame(event);
  std::lock_guard lock(mutex_);
  file_.append(record.data(), record.size());
}

}  // namespace strata::tb
