// Unit tests for the TensorBoard event writer: TFRecord framing and its masked CRC-32C, the protobuf
// encoder and a byte-level round trip through an event file.

#include "test_support.hpp"

#include <atomic>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "strata/errors.hpp"
#include "tensorboard/event_writer.hpp"
#include "tensorboard/hparams.hpp"
#include "tensorboard/protobuf.hpp"
#include "tensorboard/tfrecord.hpp"

namespace {

namespace fs = std::filesystem;

std::uint64_t read_le(std::string_view bytes, std::size_t offset, int width) {
  std::uint64_t v = 0;
  for (int i = 0; i < width; ++i)
    v |= static_cast<std::uint64_t>(static_cast<unsigned char>(bytes[offset + i])) << (8 * i);
  return v;
}

/// A fresh path under the system temp dir (not created), removed with its contents when the guard goes away.
struct ScratchPath {
  fs::path path;
  ScratchPath() {
    static std::atomic<int> counter{0};
    const auto ticks = std::chrono::steady_clock::now().time_since_epoch().count();
    path = fs::temp_directory_path() /
           ("strata_tb_test_" + std::to_string(ticks) + "_" + std::to_string(counter++));
  }
  ~ScratchPath() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

/// Splits a TFRecord file into payloads, checking both masked CRCs of every record.
std::vector<std::string> read_records(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  REQUIRE(in.is_open());
  const std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> records;
  std::size_t pos = 0;
  while (pos < data.size()) {
    REQUIRE(data.size() - pos >= 12);
    const std::uint64_t length = read_le(data, pos, 8);
    CHECK(read_le(data, pos + 8, 4) == strata::tb::masked_crc32c(data.data() + pos, 8));
    REQUIRE(data.size() - pos - 12 >= length + 4);
    const std::string payload = data.substr(pos + 12, length);
    CHECK(read_le(data, pos + 12 + length, 4) ==
          strata::tb::masked_crc32c(payload.data(), payload.size()));
    records.push_back(payload);
    pos += 16 + length;
  }
  return records;
}

/// One decoded protobuf field: varints and fixed values in `number`, length-delimited in `bytes`.
struct Field {
  std::uint32_t number = 0;
  std::uint32_t wire_type = 0;
  std::uint64_t value = 0;
  std::string bytes;
};

std::uint64_t read_varint(std::string_view s, std::size_t& pos) {
  std::uint64_t v = 0;
  for (int shift = 0; pos < s.size() && shift < 64; shift += 7) {
    const auto byte = static_cast<unsigned char>(s[pos++]);
    v |= static_cast<std::uint64_t>(byte & 0x7F) << shift;
    if ((byte & 0x80) == 0) return v;
  }
  FAIL("truncated varint");
  return v;
}

/// Decodes the top level of a message (enough to check what the writer produced).
std::vector<Field> parse_message(std::string_view s) {
  std::vector<Field> fields;
  std::size_t pos = 0;
  while (pos < s.size()) {
    const std::uint64_t key = read_varint(s, pos);
    Field f;
    f.number = static_cast<std::uint32_t>(key >> 3);
    f.wire_type = static_cast<std::uint32_t>(key & 7);
    switch (f.wire_type) {
      case 0: f.value = read_varint(s, pos); break;
      case 1: REQUIRE(pos + 8 <= s.size()); f.value = read_le(s, pos, 8); pos += 8; break;
      case 5: REQUIRE(pos + 4 <= s.size()); f.value = read_le(s, pos, 4); pos += 4; break;
      case 2: {
        const std::uint64_t n = read_varint(s, pos);
        REQUIRE(pos + n <= s.size());
        f.bytes = std::string(s.substr(pos, n));
        pos += n;
        break;
      }
      default: FAIL("unexpected wire type " << f.wire_type);
    }
    fields.push_back(std::move(f));
  }
  return fields;
}

std::optional<Field> find_field(const std::vector<Field>& fields, std::uint32_t number) {
  for (const Field& f : fields)
    if (f.number == number) return f;
  return std::nullopt;
}

}  // namespace

TEST_CASE("masked_crc32c rotates and adds the TFRecord delta") {
  const std::string digits = "123456789";
  // crc = 0xE3069283; rotate right by 15: (crc >> 15) = 0x0001C60D, (crc << 17) = 0x25060000
  // (mod 2^32), OR = 0x2507C60D; + 0xA282EAD8 = 0xC78AB0E5.
  CHECK(strata::tb::masked_crc32c(digits.data(), digits.size()) == 0xC78AB0E5u);
}

TEST_CASE("tfrecord_frame lays out length, length CRC, payload and payload CRC") {
  const std::string payload = "abc";
  const std::string frame = strata::tb::tfrecord_frame(payload);
  REQUIRE(frame.size() == payload.size() + 16);
  const std::string length_bytes("\x03\0\0\0\0\0\0\0", 8);
  CHECK(frame.substr(0, 8) == length_bytes);
  CHECK(read_le(frame, 8, 4) == strata::tb::masked_crc32c(length_bytes.data(), 8));
  CHECK(frame.substr(12, 3) == payload);
  CHECK(read_le(frame, 15, 4) == strata::tb::masked_crc32c(payload.data(), payload.size()));
  CHECK(strata::tb::tfrecord_frame("").size() == 16);
}

TEST_CASE("protobuf encoder matches the wire-format reference examples") {
  using strata::tb::detail::ProtoWriter;
  // The protobuf encoding guide: field 1 = 150 is 08 96 01; field 2 = "testing" is 12 07 ...
  CHECK(ProtoWriter().uint_field(1, 150).bytes() == std::string("\x08\x96\x01"));
  CHECK(ProtoWriter().bytes_field(2, "testing").bytes() == std::string("\x12\x07testing"));
  CHECK(ProtoWriter().int_field(1, -1).bytes() ==
        std::string("\x08\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", 11));
  CHECK(ProtoWriter().float_field(2, 1.0f).bytes() == std::string("\x15\x00\x00\x80\x3f", 5));
  CHECK(ProtoWriter().double_field(1, 1.0).bytes() ==
        std::string("\x09\x00\x00\x00\x00\x00\x00\xf0\x3f", 9));
  ProtoWriter inner;
  inner.uint_field(1, 150);
  CHECK(ProtoWriter().message_field(3, inner).bytes() == std::string("\x1a\x03\x08\x96\x01"));
  CHECK(ProtoWriter().message_field(2, ProtoWriter()).bytes() == std::string("\x12\x00", 2));
}

TEST_CASE("EventWriter writes CRC-valid records TensorBoard can read") {
  ScratchPath tmp;
  fs::path file;
  {
    strata::tb::EventWriter writer(tmp.path / "tb");
    file = writer.path();
    CHECK(file.parent_path() == tmp.path / "tb");
    CHECK(file.filename().string().find("tfevents") != std::string::npos);
    writer.add_scalar("train/loss", 0.1, 7);
    writer.add_text("notes", "**hello**", 3);
    writer.add_hparams_experiment({{"strategy", strata::tb::HParamType::kString, true, "the strategy"},
                                   {"lr", strata::tb::HParamType::kFloat64, false, ""}},
                                  {{"summary/samples_per_s", "mean throughput"}}, "a sweep");
    writer.start_hparams_session({{"strategy", std::string("single")}, {"lr", 0.5}, {"bf16", false}});
    writer.end_hparams_session(true);
    writer.flush();
    CHECK(read_records(file).size() == 6);
  }
  const std::vector<std::string> records = read_records(file);
  REQUIRE(records.size() == 6);

  // First event: wall_time (double, field 1) and file_version (field 3).
  CHECK(records[0].find("brain.Event:2") != std::string::npos);
  const auto first = parse_message(records[0]);
  REQUIRE(find_field(first, 1));
  CHECK(find_field(first, 1)->wire_type == 1);
  CHECK(std::bit_cast<double>(find_field(first, 1)->value) > 1.5e9);
  CHECK(find_field(first, 3)->bytes == "brain.Event:2");

  // Scalar event: step 7, summary.value[0] = {tag, simple_value as float32}.
  CHECK(records[1].find("train/loss") != std::string::npos);
  const auto scalar = parse_message(records[1]);
  CHECK(find_field(scalar, 2)->value == 7u);
  const auto summary = parse_message(find_field(scalar, 5)->bytes);
  const auto value = parse_message(find_field(summary, 1)->bytes);
  CHECK(find_field(value, 1)->bytes == "train/loss");
  REQUIRE(find_field(value, 2));
  CHECK(find_field(value, 2)->wire_type == 5);
  CHECK(std::bit_cast<float>(static_cast<std::uint32_t>(find_field(value, 2)->value)) == 0.1f);

  // Text event: DT_STRING tensor holding the markdown, text plugin metadata.
  const auto text_value = parse_message(
      find_field(parse_message(find_field(parse_message(records[2]), 5)->bytes), 1)->bytes);
  const auto tensor = parse_message(find_field(text_value, 8)->bytes);
  CHECK(find_field(tensor, 1)->value == 7u);
  CHECK(find_field(tensor, 2)->bytes.empty());
  CHECK(find_field(tensor, 8)->bytes == "**hello**");
  CHECK(find_field(text_value, 9)->bytes.find("text") != std::string::npos);

  CHECK(records[3].find("_hparams_/experiment") != std::string::npos);
  // Summary.value.metadata.plugin_data.content = HParamsPluginData{experiment (2) = Experiment{
  // description (1), time_created_secs (3), hparam_infos (4) {name 1, description 3, type 4,
  // differs 7}, metric_infos (5) {name 1 {tag 2}, description 4}}}.
  const auto experiment_value = parse_message(
      find_field(parse_message(find_field(parse_message(records[3]), 5)->bytes), 1)->bytes);
  const auto plugin_data = parse_message(find_field(parse_message(find_field(experiment_value, 9)->bytes), 1)->bytes);
  CHECK(find_field(plugin_data, 1)->bytes == "hparams");
  const auto experiment = parse_message(find_field(parse_message(find_field(plugin_data, 2)->bytes), 2)->bytes);
  CHECK(find_field(experiment, 1)->bytes == "a sweep");
  std::vector<std::vector<Field>> infos;
  for (const auto& f : experiment)
    if (f.number == 4) infos.push_back(parse_message(f.bytes));
  REQUIRE(infos.size() == 2);
  CHECK(find_field(infos[0], 1)->bytes == "strategy");
  CHECK(find_field(infos[0], 3)->bytes == "the strategy");
  CHECK(find_field(infos[0], 4)->value == 1u);  // DATA_TYPE_STRING
  REQUIRE(find_field(infos[0], 7));
  CHECK(find_field(infos[0], 7)->value == 1u);  // differs
  CHECK(find_field(infos[1], 1)->bytes == "lr");
  CHECK(find_field(infos[1], 4)->value == 3u);  // DATA_TYPE_FLOAT64
  CHECK_FALSE(find_field(infos[1], 7));         // differs = false: the default, not written
  const auto metric = parse_message(find_field(experiment, 5)->bytes);
  CHECK(find_field(parse_message(find_field(metric, 1)->bytes), 2)->bytes == "summary/samples_per_s");
  CHECK(find_field(metric, 4)->bytes == "mean throughput");
  CHECK(records[4].find("_hparams_/session_start_info") != std::string::npos);
  CHECK(records[4].find("single") != std::string::npos);
  CHECK(records[5].find("_hparams_/session_end_info") != std::string::npos);
}

TEST_CASE("EventWriter reports a directory it cannot create") {
  ScratchPath tmp;
  fs::create_directories(tmp.path);
  const fs::path blocker = tmp.path / "not_a_dir";
  std::ofstream(blocker) << "x";
  CHECK_THROWS_AS(strata::tb::EventWriter(blocker / "tb"), strata::Error);
  try {
    strata::tb::EventWriter writer(blocker / "tb");
  } catch (const strata::Error& e) {
    CHECK(std::string(e.what()).find("not_a_dir") != std::string::npos);
    CHECK_FALSE(e.fix().empty());
  }
}

TEST_CASE("hparam values and names follow the experiment's keys") {
  using strata::tb::HParamValue;
  CHECK(strata::tb::hparam_value("0.01") == HParamValue(0.01));
  CHECK(strata::tb::hparam_value("64") == HParamValue(64.0));
  CHECK(strata::tb::hparam_value("true") == HParamValue(true));
  CHECK(strata::tb::hparam_value("\"ddp\"") == HParamValue(std::string("ddp")));
  CHECK(strata::tb::hparam_value("[32, 32]") == HParamValue(std::string("[32, 32]")));
  CHECK(strata::tb::hparam_name("strategy.name") == "strategy");
  CHECK(strata::tb::hparam_name("optimizer.lr") == "lr");
  CHECK(strata::tb::hparam_name("model.hidden") == "model.hidden");
  // strategy and world_size lead the list the HPARAMS tab shows.
  REQUIRE(strata::tb::core_hparams().size() >= 2);
  CHECK(strata::tb::core_hparams()[0].name == "strategy");
  CHECK(strata::tb::core_hparams()[1].name == "world_size");
}

TEST_CASE("summary figures carry results.csv's names and summary.json's numbers") {
  const auto summary = strata::Json::parse(
      R"({"samples_per_s": 1000.5, "memory": {"model_state_bytes": {"params": 4, "grads": 4, "optimizer": 8},
          "peak_bytes": 100}, "eval": {"accuracy": 0.5, "loss": null}})");
  std::map<std::string, double> values;
  for (const auto& f : strata::tb::summary_figures()) values[f.name] = strata::tb::figure_value(summary, f);
  CHECK(values.at("samples_per_s") == 1000.5);
  CHECK(values.at("model_state_bytes") == 16);
  CHECK(values.at("peak_bytes") == 100);
  CHECK(values.at("eval_accuracy") == 0.5);
  CHECK(std::isnan(values.at("eval_loss")));
  CHECK(std::isnan(values.at("final_loss")));
  // Every name is one definition: no figure appears twice.
  CHECK(values.size() == strata::tb::summary_figures().size());

  ScratchPath tmp;
  fs::path file;
  {
    strata::tb::EventWriter writer(tmp.path);
    file = writer.path();
    strata::tb::add_summary_scalars(writer, summary, 12);
  }
  const auto records = read_records(file);
  // The file version, then one scalar per finite figure (devices is an hparam, not a scalar).
  // samples_per_s, model_state_bytes, peak_bytes, eval_accuracy and the three parts of the state.
  REQUIRE(records.size() == 1 + 7);
  CHECK(records[1].find("summary/samples_per_s") != std::string::npos);
  CHECK(find_field(parse_message(records[1]), 2)->value == 12u);
}

TEST_CASE("EventWriter names a full disk and keeps only complete records") {
  ScratchPath tmp;
  fs::create_directories(tmp.path);
  fs::path file;
  std::string error;
  {
    strata::tb::EventWriter writer(tmp.path);
    file = writer.path();
    const auto before = fs::file_size(file);
    strata::test::FileSizeLimit limit(before + 100);  // EFBIG past it, as ENOSPC on a full disk
    try {
      for (int step = 1; step < 100; ++step) writer.add_scalar("train/loss", 0.5, step);
    } catch (const strata::Error& e) {
      error = e.what();
    }
  }
  CHECK(error.find(file.string()) != std::string::npos);
  CHECK(error.find("TensorBoard event file") != std::string::npos);
  CHECK(error.find("File too large") != std::string::npos);
  const auto records = read_records(file);  // every record whole: the torn one was cut off
  CHECK(records.size() > 1);
  CHECK(records.size() < 100);

  // A writer whose first event cannot be written leaves no (empty) file behind.
  const fs::path empty_dir = tmp.path / "empty";
  fs::create_directories(empty_dir);
  {
    strata::test::FileSizeLimit limit(0);
    CHECK_THROWS_AS(strata::tb::EventWriter{empty_dir}, strata::Error);
  }
  CHECK(fs::is_empty(empty_dir));
}
