// Safetensors reading and writing, and loading Hugging Face style checkpoints into a model.
#include "test_support.hpp"

#include <cstring>
#include <string>
#include <vector>

#include "io/safetensors.hpp"
#include "strata/errors.hpp"
#include "strata/model.hpp"
#include "train/saved_model.hpp"

namespace {

using strata::test::temporaries;

using strata::test::TempDir;
namespace fs = std::filesystem;

using strata::test::error_of;

using strata::test::contains;

/// Same dtype, shape and bytes (works for dtypes LibTorch cannot compare, such as uint16).
bool same_bytes(const torch::Tensor& a, const torch::Tensor& b) {
  if (a.scalar_type() != b.scalar_type() || a.sizes() != b.sizes()) return false;
  const auto x = a.contiguous(), y = b.contiguous();
  return std::memcmp(x.data_ptr(), y.data_ptr(), static_cast<std::size_t>(x.numel() * x.element_size())) == 0;
}

/// A safetensors file from a header text and a buffer, for damaged-file cases.
std::string file_bytes(const std::string& header, const std::string& buffer, std::uint64_t length_field = 0) {
  const std::uint64_t n = length_field ? length_field : header.size();
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[static_cast<std::size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + header + buffer;
}

std::string read_file(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

}  // namespace

TEST_CASE("safetensors round trip keeps every dtype, shape, value and the metadata") {
  TempDir dir;
  const auto base = torch::arange(-6, 6, torch::kFloat64).reshape({3, 4});
  std::vector<std::pair<std::string, torch::Tensor>> tensors{
      {"f64", base},
      {"f32", base.to(torch::kFloat32)},
      {"f16", base.to(torch::kHalf)},
      {"bf16", base.to(torch::kBFloat16).t()},  // not contiguous: written contiguous
      {"i64", base.to(torch::kInt64)},
      {"i32", base.to(torch::kInt32)},
      {"i16", base.to(torch::kInt16)},
      {"i8", base.to(torch::kInt8)},
      {"u8", (base + 6).to(torch::kUInt8)},
      {"bool", base.gt(0)},
      {"u16", (base + 6).to(torch::kUInt8).to(torch::kUInt16)},
      {"u32", (base + 6).to(torch::kUInt8).to(torch::kUInt32)},
      {"u64", (base + 6).to(torch::kUInt8).to(torch::kUInt64)},
      {"f8_e4m3", base.to(torch::kFloat8_e4m3fn)},
      {"f8_e5m2", base.to(torch::kFloat8_e5m2)},
      {"scalar", torch::tensor(2.5)},
      {"empty", torch::zeros({0, 3})},
  };
  const auto file = dir.path() / "all.safetensors";
  strata::write_safetensors(file, tensors, {{"format", "pt"}, {"note", "x"}});
  CHECK(temporaries(dir.path()).empty());

  strata::SafetensorsFile in(file);
  CHECK(in.entries().size() == tensors.size());
  CHECK(in.metadata() == std::map<std::string, std::string>{{"format", "pt"}, {"note", "x"}});
  for (const auto& [name, tensor] : tensors) {
    INFO(name);
    CHECK(same_bytes(in.read(name), tensor.contiguous()));
  }
  CHECK(in.find("bf16")->dtype == "BF16");
  CHECK(in.find("bf16")->shape == std::vector<std::int64_t>{4, 3});
  CHECK(in.find("scalar")->shape.empty());

  // The reference layout: header length a multiple of 8, each tensor aligned to its element size.
  const auto bytes = read_file(file);
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[static_cast<std::size_t>(i)]);
  CHECK(n % 8 == 0);
  CHECK(bytes[8] == '{');
  for (const auto& entry : in.entries())
    CHECK(entry.begin % c10::elementSize(strata::safetensors_dtype(entry.dtype)) == 0);
}

TEST_CASE("safetensors reads a chosen subset of tensors, and names the file for an absent one") {
  TempDir dir;
  const auto file = dir.path() / "subset.safetensors";
  strata::write_safetensors(file, {{"a", torch::ones({1000})}, {"b", torch::arange(6).reshape({2, 3})}});
  strata::SafetensorsFile in(file);
  CHECK(torch::equal(in.read("b"), torch::arange(6).reshape({2, 3})));
  CHECK(in.find("c") == nullptr);
  const auto error = error_of([&] { in.read("c"); });
  CHECK(contains(error, file.string()));
  CHECK(contains(error, "no tensor c"));
}

TEST_CASE("safetensors converts half-precision data to float32 exactly") {
  TempDir dir;
  const auto file = dir.path() / "bf16.safetensors";
  const auto values = torch::tensor({1.0f, -2.5f, 0.1f, 3e38f});
  strata::write_safetensors(file, {{"w", values.to(torch::kBFloat16)}});
  const auto back = strata::SafetensorsFile(file).read("w");
  CHECK((back.scalar_type() == torch::kBFloat16));
  CHECK(torch::equal(back.to(torch::kFloat32), values.to(torch::kBFloat16).to(torch::kFloat32)));
}

TEST_CASE("damaged safetensors files give an error naming the file and the tensor") {
  TempDir dir;
  const std::string good = R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  const std::string eight(8, '\0');
  struct Case {
    const char* name;
    std::string bytes;
    std::vector<std::string> expected;
  };
  const std::vector<Case> cases{
      {"short", std::string(5, '\0'), {"fewer than the 8"}},
      {"header_too_big", file_bytes(good, eight, 1u << 20), {"header length is 1048576 bytes"}},
      {"bad_json", file_bytes(R"({"w":{"dtype":"F32",)", eight), {"not valid JSON"}},
      {"not_object", file_bytes("[1, 2]", eight), {"not a JSON object"}},
      {"truncated", file_bytes(good, std::string(6, '\0')), {"tensor w", "beyond the end", "truncated"}},
      {"wrong_size", file_bytes(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", eight),
       {"tensor w", "has 8 bytes of data, but F32 [3] takes 12 bytes"}},
      {"overlap",
       file_bytes(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                  R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                  eight),
       {"tensors a (bytes [0, 8)) and b (bytes [4, 8)) overlap"}},
      {"unknown_dtype", file_bytes(R"({"w":{"dtype":"F12","shape":[2],"data_offsets":[0,8]}})", eight),
       {"tensor w", "unknown dtype \"F12\"", "BF16"}},
      {"bad_offsets", file_bytes(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", eight),
       {"tensor w", "data_offsets"}},
      {"bad_shape", file_bytes(R"({"w":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", eight),
       {"tensor w", "shape"}},
      {"no_fields", file_bytes(R"({"w":{"dtype":"F32"}})", eight), {"tensor w", "data_offsets"}},
      {"bad_metadata", file_bytes(R"({"__metadata__":{"k":1}})", ""), {"__metadata__", "\"k\""}},
  };
  for (const auto& c : cases) {
    INFO(std::string(c.name));
    const auto file = dir.write(std::string(c.name) + ".safetensors", c.bytes);
    const auto error = error_of([&] { strata::SafetensorsFile{file}; });
    CHECK(contains(error, file.string()));
    for (const auto& part : c.expected) CHECK_MESSAGE(contains(error, part), error);
  }
  // The well-formed header the damaged ones start from reads.
  const auto ok = dir.write("ok.safetensors", file_bytes(good, eight));
  CHECK(strata::SafetensorsFile(ok).read("w").numel() == 2);
}

TEST_CASE("writing safetensors checks names and reports the system error") {
  TempDir dir;
  const auto twice = error_of([&] {
    strata::write_safetensors(dir.path() / "x", {{"a", torch::ones(1)}, {"a", torch::ones(1)}});
  });
  CHECK(contains(twice, "tensor a appears twice"));
  const auto error = error_of([&] {
    strata::write_safetensors(dir.path() / "no_such_dir" / "m.safetensors", {{"a", torch::ones(1)}});
  });
  CHECK(contains(error, "no_such_dir/m.safetensors"));
  CHECK(contains(error, std::strerror(ENOENT)));
}

// ---- init_from and save_final ---------------------------------------------------------------

namespace {

class Linear final : public strata::Unit {
 public:
  Linear(std::int64_t out, std::int64_t in) {
    w = register_parameter("w", torch::randn({out, in}));
    table = register_buffer("table", torch::arange(in, torch::kFloat32));  // derived, not in HF files
  }
  torch::Tensor forward(const torch::Tensor& x, const strata::BatchContext&) override { return x.matmul(w.t()); }
  torch::Tensor w, table;
};

/// Two units with Hugging Face names; head.w also answers to a tied alias when `tied`.
class Toy final : public strata::Model {
 public:
  explicit Toy(bool external = true, bool tied = false) : external_(external), tied_(tied) {
    add_unit("embed", std::make_shared<Linear>(4, 3));
    add_unit("head", std::make_shared<Linear>(2, 4));
  }
  std::vector<std::pair<std::string, std::string>> external_names() const override {
    if (!external_) return {};
    std::vector<std::pair<std::string, std::string>> names{{"embed.w", "model.embed.weight"},
                                                           {"head.w", "lm_head.weight"}};
    if (tied_) names.emplace_back("head.w", "model.head_alias.weight");
    return names;
  }
  std::string external_config() const override { return external_ ? R"({"model_type": "toy"})" : ""; }

 private:
  bool external_, tied_;
};

torch::Tensor param(strata::Model& m, const std::string& name) { return m.named_parameters()[name]; }

}  // namespace

TEST_CASE("init_from loads a Hugging Face safetensors file, a directory and a sharded index") {
  TempDir dir;
  Toy source;
  const auto embed = param(source, "embed.w").detach(), head = param(source, "head.w").detach();
  // bf16 and f64 in the file, external names, and a rotary table the model does not hold.
  strata::write_safetensors(dir.path() / "model.safetensors", {{"model.embed.weight", embed.to(torch::kBFloat16)},
                                                               {"lm_head.weight", head.to(torch::kFloat64)},
                                                               {"model.rotary_emb.inv_freq", torch::ones({2})}});
  for (const auto& path : {dir.path() / "model.safetensors", dir.path()}) {
    INFO(path.string());
    Toy target;
    strata::load_state_dict(target, path);
    CHECK(torch::equal(param(target, "embed.w"), embed.to(torch::kBFloat16).to(torch::kFloat32)));
    CHECK(torch::equal(param(target, "head.w"), head));
  }

  // Sharded: each tensor in its own file, Strata names in one, external names in the other.
  TempDir sharded;
  strata::write_safetensors(sharded.path() / "model-00001-of-00002.safetensors", {{"embed.w", embed}});
  strata::write_safetensors(sharded.path() / "model-00002-of-00002.safetensors", {{"lm_head.weight", head}});
  sharded.write("model.safetensors.index.json",
                R"({"metadata": {"total_size": 80}, "weight_map": {"embed.w": "model-00001-of-00002.safetensors",)"
                R"( "lm_head.weight": "model-00002-of-00002.safetensors"}})");
  Toy from_shards;
  strata::load_state_dict(from_shards, sharded.path());
  CHECK(torch::equal(param(from_shards, "embed.w"), embed));
  CHECK(torch::equal(param(from_shards, "head.w"), head));

  sharded.write("bad.index.json", R"({"weight_map": {"embed.w": "model-00002-of-00002.safetensors"}})");
  const auto error = error_of([&] { strata::load_state_dict(from_shards, sharded.path() / "bad.index.json"); });
  CHECK(contains(error, "bad.index.json"));
  CHECK(contains(error, "embed.w"));
  CHECK(contains(error, "holds no such tensor"));
}

TEST_CASE("init_from names what it looked for in a directory and lists every misfit with shapes") {
  TempDir dir;
  Toy model;
  const auto empty = error_of([&] { strata::load_state_dict(model, dir.path()); });
  CHECK(contains(empty, "model.safetensors nor model.safetensors.index.json"));

  std::vector<std::pair<std::string, torch::Tensor>> tensors{{"model.embed.weight", torch::zeros({3, 4})}};
  for (int i = 0; i < 11; ++i) tensors.emplace_back("extra." + std::to_string(i), torch::zeros({5}));
  strata::write_safetensors(dir.path() / "model.safetensors", tensors);
  const auto error = error_of([&] { strata::load_state_dict(model, dir.path()); });
  CHECK(contains(error, (dir.path() / "model.safetensors").string()));
  CHECK(contains(error, "missing head.w [2, 4]"));
  CHECK(contains(error, "model.embed.weight = embed.w (file [3, 4], model [4, 3])"));
  CHECK(contains(error, "not in the model extra.0 [5]"));
  CHECK(contains(error, "... and 3 more"));

  strata::write_safetensors(dir.path() / "ints.safetensors", {{"embed.w", torch::zeros({4, 3}, torch::kInt64)},
                                                              {"head.w", torch::zeros({2, 4})}});
  CHECK(contains(error_of([&] { strata::load_state_dict(model, dir.path() / "ints.safetensors"); }),
                 "embed.w (file dtype Long, model Float)"));
}

TEST_CASE("init_from accepts tied aliases only when they agree") {
  TempDir dir;
  Toy model(true, true);
  const auto head = torch::randn({2, 4});
  strata::write_safetensors(dir.path() / "same.safetensors", {{"model.embed.weight", torch::zeros({4, 3})},
                                                              {"lm_head.weight", head},
                                                              {"model.head_alias.weight", head}});
  strata::load_state_dict(model, dir.path() / "same.safetensors");
  CHECK(torch::equal(param(model, "head.w"), head));
  strata::write_safetensors(dir.path() / "differ.safetensors", {{"model.embed.weight", torch::zeros({4, 3})},
                                                                {"lm_head.weight", head},
                                                                {"model.head_alias.weight", head + 1}});
  CHECK(contains(error_of([&] { strata::load_state_dict(model, dir.path() / "differ.safetensors"); }),
                 "values differ"));
}

namespace {

/// Registers one tensor under a unit's name and under another's (tied weights).
class Shared final : public strata::Unit {
 public:
  explicit Shared(torch::Tensor w) { this->w = register_parameter("w", w.defined() ? w : torch::randn({3, 3})); }
  torch::Tensor forward(const torch::Tensor& x, const strata::BatchContext&) override { return x.matmul(w); }
  torch::Tensor w;
};

class TiedToy final : public strata::Model {
 public:
  TiedToy() {
    auto first = std::make_shared<Shared>(torch::Tensor());
    add_unit("a", first);
    add_unit("b", std::make_shared<Shared>(first->w));
  }
  std::vector<std::pair<std::string, std::string>> external_names() const override {
    return {{"a.w", "embed.weight"}, {"b.w", "lm_head.weight"}};
  }
};

}  // namespace

TEST_CASE("init_from fills a tensor registered under two names from either name") {
  TempDir dir;
  const auto w = torch::randn({3, 3});
  strata::write_safetensors(dir.path() / "tied.safetensors", {{"embed.weight", w}});  // as HF saves tied models
  TiedToy model;
  strata::load_state_dict(model, dir.path() / "tied.safetensors");
  CHECK(torch::equal(param(model, "a.w"), w));
  CHECK(torch::equal(param(model, "b.w"), w));
  strata::write_safetensors(dir.path() / "untied.safetensors", {{"embed.weight", w}, {"lm_head.weight", w + 1}});
  CHECK(contains(error_of([&] { strata::load_state_dict(model, dir.path() / "untied.safetensors"); }),
                 "embed.weight and lm_head.weight both hold the model's b.w, but their values differ"));
}

TEST_CASE("a safetensors save_final writes external names and config.json that init_from reads back") {
  TempDir run;
  Toy model;
  strata::StateDict state;
  for (const auto& p : model.named_parameters()) state.emplace_back(p.key(), p.value().detach());
  for (const auto& b : model.named_buffers()) state.emplace_back(b.key(), b.value());
  const auto saved = strata::write_final_model(model, state, run.path(), "safetensors");
  CHECK(saved.name == "final_model");
  strata::SafetensorsFile file(run.path() / "final_model" / "model.safetensors");
  CHECK(file.metadata().at("format") == "pt");
  CHECK(file.entries().size() == 2);  // buffers without an external name stay out
  CHECK(file.find("lm_head.weight") != nullptr);
  CHECK(read_file(run.path() / "final_model" / "config.json") == R"({"model_type": "toy"})");
  Toy back;
  strata::load_state_dict(back, run.path() / saved.name);
  CHECK(torch::equal(param(back, "head.w"), param(model, "head.w")));

  // Without external names: Strata names, buffers included, no config.json; "pt" as before.
  TempDir plain;
  Toy anonymous(false);
  CHECK(strata::write_final_model(anonymous, state, plain.path(), "safetensors").name == "final_model");
  CHECK(strata::SafetensorsFile(plain.path() / "final_model" / "model.safetensors").find("embed.table") != nullptr);
  CHECK_FALSE(fs::exists(plain.path() / "final_model" / "config.json"));
  CHECK(strata::write_final_model(anonymous, state, plain.path(), "pt").name == "final_model.pt");
  Toy from_pt(false);
  strata::load_state_dict(from_pt, plain.path() / "final_model.pt");
  CHECK(torch::equal(param(from_pt, "embed.w"), param(model, "embed.w")));
}
