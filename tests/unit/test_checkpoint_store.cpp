// Checkpoint pieces and files on one rank: the pieces of flat groups cover every element once over
// the ranks (replicas split theirs), a checkpoint written in one layout reads back in another, and
// a damaged file is named instead of loaded.
#include "test_support.hpp"

#include <algorithm>
#include <fstream>
#include <iterator>
#include <map>

#include "ckpt/store.hpp"
#include "strata/errors.hpp"
#include "strata/flat_params.hpp"
#include "strata/sharded_state.hpp"

namespace {

using strata::test::make_params;

strata::FlatGroupOptions sharded(int rank, int n) {
  return {rank, n, strata::Residency::kPersistent, strata::GradHolding::kFull, strata::Precision()};
}

/// Elements saved per tensor name over the pieces given.
std::map<std::string, std::vector<int>> coverage(const std::vector<strata::TensorPiece>& pieces) {
  std::map<std::string, std::vector<int>> seen;
  for (const auto& p : pieces) {
    std::int64_t n = 1;
    for (auto d : p.shape) n *= d;
    auto& v = seen[p.name];
    v.resize(static_cast<std::size_t>(n));
    for (auto i = p.begin; i < p.end; ++i) ++v[static_cast<std::size_t>(i)];
  }
  return seen;
}

}  // namespace

TEST_CASE("the pieces of sharded and of replicated flat groups cover every element once") {
  // Three shard ranks of [5, 3] (padded to 9): the chunks cut "a" at 3 and 6, "b" lies in the last.
  std::vector<strata::TensorPiece> all;
  for (int r = 0; r < 3; ++r) {
    strata::FlatGroups groups;
    groups.push_back(std::make_unique<strata::FlatGroup>(make_params({5, 3}), std::vector<std::string>{"a", "b"},
                                                         sharded(r, 3)));
    for (auto& p : strata::flat_state_pieces(groups, nullptr, strata::StateAccess::kSave, {0, 1, r == 0}))
      all.push_back(std::move(p));
  }
  for (const auto& [name, counts] : coverage(all))
    for (int c : counts) CHECK_MESSAGE(c == 1, name);
  // Two replicas of an unsharded group write half each; for loading, each holds everything.
  std::vector<strata::TensorPiece> halves;
  for (int q = 0; q < 2; ++q) {
    strata::FlatGroups groups;
    groups.push_back(std::make_unique<strata::FlatGroup>(make_params({7}), std::vector<std::string>{"w"}, sharded(0, 1)));
    for (auto& p : strata::flat_state_pieces(groups, nullptr, strata::StateAccess::kSave, {q, 2, q == 0}))
      halves.push_back(std::move(p));
    CHECK(strata::flat_state_pieces(groups, nullptr, strata::StateAccess::kLoad, {q, 2, q == 0}).at(0).end == 7);
  }
  CHECK(halves.size() == 2);
  const auto covered = coverage(halves);
  CHECK(covered.at("model/w") == std::vector<int>(7, 1));
}

TEST_CASE("a checkpoint saved in halves reads back into other ranges and names a damaged file") {
  strata::test::TempDir dir;
  auto comm = strata::make_local_comm();
  const auto values = torch::arange(10.0f);
  strata::ckpt::SaveInput in;
  in.root = dir.path();
  in.step = 7;
  in.pieces = {{"model/w", {2, 5}, 0, 4, values.narrow(0, 0, 4)}, {"model/w", {2, 5}, 4, 10, values.narrow(0, 4, 6)}};
  in.files = {{"trainer.json", "{}"}};
  const auto saved = strata::ckpt::save(in, *comm);
  CHECK(saved.dir.filename() == "step_00000007");
  CHECK(strata::ckpt::complete_checkpoints(dir.path()).size() == 1);

  strata::ckpt::Checkpoint c(saved.dir);
  CHECK(c.step() == 7);
  CHECK(c.file_text("trainer.json") == "{}");
  auto target = torch::zeros({5}, torch::kFloat64);  // elements 3..7, across both saved pieces, another dtype
  c.read_into({{"model/w", {2, 5}, 3, 8, target}});
  CHECK(torch::equal(target, torch::arange(3.0, 8.0, torch::kFloat64)));
  CHECK_THROWS_WITH_AS(c.read_into({{"model/w", {10}, 0, 10, torch::zeros({10})}}),
                       doctest::Contains("shape [2, 5]"), strata::Error);
  CHECK_THROWS_WITH_AS(c.read_into({{"model/v", {1}, 0, 1, torch::zeros({1})}}), doctest::Contains("no tensor model/v"),
                       strata::Error);

  {  // flip a bit of the data
    std::fstream f(saved.dir / "rank_00000.bin", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(20);
    f.put('\x7f');
  }
  CHECK_THROWS_WITH_AS(c.read_into({{"model/w", {2, 5}, 4, 10, torch::zeros({6})}}), doctest::Contains("corrupted"),
                       strata::Error);
  std::filesystem::resize_file(saved.dir / "rank_00000.bin", 12);
  strata::ckpt::Checkpoint again(saved.dir);
  CHECK_THROWS_WITH_AS(again.read_into({{"model/w", {2, 5}, 0, 2, torch::zeros({2})}}), doctest::Contains("truncated"),
                       strata::Error);
  // Without its commit marker the directory is no checkpoint.
  std::filesystem::remove(saved.dir / "metadata.json");
  CHECK(strata::ckpt::complete_checkpoints(dir.path()).empty());
  CHECK_THROWS_WITH_AS(strata::ckpt::Checkpoint(saved.dir), doctest::Contains("not a complete checkpoint"),
                       strata::Error);
}

TEST_CASE("a save removes only its own run's step directories, never another run's") {
  strata::test::TempDir dir;
  auto comm = strata::make_local_comm();
  const auto values = torch::arange(4.0f);
  const auto save = [&](std::int64_t step, const std::string& run, std::int64_t keep) {
    strata::ckpt::SaveInput in;
    in.root = dir.path();
    in.step = step;
    in.keep = keep;
    in.run_id = run;
    in.pieces = {{"model/w", {4}, 0, 4, values}};
    in.files = {{"trainer.json", "{}"}};
    return strata::ckpt::save(in, *comm);
  };
  save(1, "mine", 0);
  save(2, "mine", 0);
  const auto theirs = save(3, "theirs", 0);
  // Incomplete, from before owner records: the root's owner's leftover. One whose owner record is
  // unreadable is nobody's to remove.
  std::filesystem::create_directories(dir.path() / "step_00000004");
  std::filesystem::create_directories(dir.path() / "step_00000006");
  std::ofstream(dir.path() / "step_00000006" / ".strata-owner") << "garbage\n";
  const auto kept = save(5, "mine", 1);
  auto removed = kept.removed;
  std::sort(removed.begin(), removed.end());
  CHECK(removed == std::vector<std::string>{"step_00000001", "step_00000002", "step_00000004 (incomplete)"});
  const auto left = strata::ckpt::complete_checkpoints(dir.path());
  CHECK(left == std::vector<std::filesystem::path>{theirs.dir, kept.dir});
  CHECK(std::filesystem::is_directory(dir.path() / "step_00000006"));
  // A step directory another run wrote is never overwritten by a save of the same step.
  CHECK_THROWS_WITH_AS(save(3, "mine", 0), doctest::Contains("not written by this run"), strata::Error);
  CHECK(strata::ckpt::Checkpoint(theirs.dir).metadata().find("run_id")->string_or("") == "theirs");
}

TEST_CASE("metadata.json carries its own checksum: any flipped bit is named, never loaded") {
  strata::test::TempDir dir;
  auto comm = strata::make_local_comm();
  strata::ckpt::SaveInput in;
  in.root = dir.path();
  in.step = 10;
  in.run_id = "run";
  in.pieces = {{"model/w", {3}, 0, 3, torch::arange(3.0f)}};
  in.files = {{"trainer.json", "{}"}};
  const auto saved = strata::ckpt::save(in, *comm);
  const auto file = saved.dir / "metadata.json";
  std::string text;
  {
    std::ifstream f(file, std::ios::binary);
    text.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  }
  REQUIRE(text.rfind("{\"metadata_crc32c\":\"", 0) == 0);
  CHECK(strata::ckpt::Checkpoint(saved.dir).step() == 10);
  // Every byte of the file, one bit at a time (a key name, the step's digits, the checksum itself).
  for (std::size_t i = 0; i < text.size(); ++i) {
    std::string damaged = text;
    damaged[i] = static_cast<char>(damaged[i] ^ 0x04);
    std::ofstream(file, std::ios::binary | std::ios::trunc) << damaged;
    std::int64_t step = -1;
    try {
      step = strata::ckpt::Checkpoint(saved.dir).step();
    } catch (const strata::Error& err) {
      CHECK(std::string(err.what()).find(file.string()) != std::string::npos);
      continue;
    }
    // Only damage the checksum cannot see may load: none that changes what is read.
    CHECK(step == 10);
  }
  std::ofstream(file, std::ios::binary | std::ios::trunc) << text;
  CHECK(strata::ckpt::Checkpoint(saved.dir).step() == 10);
}

// ---- the bytes of the pieces, through the staging buffers ------------------------------------------

#include "ckpt/piece_bytes.hpp"

namespace {
/// Each piece's bytes as for_each_piece_span hands them over, checking the order of the calls and
/// the size of each span.
std::vector<std::vector<std::uint8_t>> spans_of(const std::vector<strata::TensorPiece>& pieces, std::int64_t stage,
                                                bool stage_host) {
  std::vector<std::vector<std::uint8_t>> bytes(pieces.size());
  std::vector<int> calls(pieces.size(), 0);
  std::size_t last = 0;
  strata::ckpt::for_each_piece_span(
      pieces,
      [&](std::size_t i, const void* data, std::size_t size) {
        CHECK(i >= last);  // pieces in order
        last = i;
        ++calls[i];
        if (stage_host) CHECK(static_cast<std::int64_t>(size) <= stage);
        const auto* p = static_cast<const std::uint8_t*>(data);
        bytes[i].insert(bytes[i].end(), p, p + size);
      },
      stage, stage_host);
  for (const int c : calls) CHECK(c >= 1);  // empty pieces too
  return bytes;
}

std::vector<std::uint8_t> raw_bytes(const torch::Tensor& t) {
  const auto c = t.contiguous();
  const auto* p = static_cast<const std::uint8_t*>(c.const_data_ptr());
  return {p, p + c.numel() * c.element_size()};
}
}  // namespace

TEST_CASE("checkpoint pieces reach the writer byte for byte, whether read in place or through staging buffers") {
  std::vector<strata::TensorPiece> pieces;
  const auto add = [&](const std::string& name, torch::Tensor data) {
    strata::TensorPiece p;
    p.name = name;
    p.shape = {data.numel()};
    p.end = data.numel();
    p.data = std::move(data);
    pieces.push_back(std::move(p));
  };
  add("floats", torch::randn({10}));                                              // 40 bytes: crosses stages
  add("empty", torch::empty({0}));
  add("strided", torch::arange(12, torch::kInt64).view({3, 4}).t());              // not contiguous
  add("flags", torch::tensor({true, false, true}));
  add("halves", torch::randn({7}).to(torch::kBFloat16));
  add("big", torch::randn({100}));                                                // several stages alone
  for (const bool stage_host : {true, false}) {
    for (const std::int64_t stage : {std::int64_t{1}, std::int64_t{24}, std::int64_t{64}, strata::ckpt::kStageBytes}) {
      CAPTURE(stage_host);
      CAPTURE(stage);
      const auto bytes = spans_of(pieces, stage, stage_host);
      for (std::size_t i = 0; i < pieces.size(); ++i) {
        CAPTURE(pieces[i].name);
        CHECK(bytes[i] == raw_bytes(pieces[i].data));
      }
    }
  }
}
