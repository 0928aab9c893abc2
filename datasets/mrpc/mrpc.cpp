// Dataset plugin `mrpc`: the Microsoft Research Paraphrase Corpus (Dolan & Brockett 2005), as in
// the GLUE benchmark (Wang et al. 2018): pairs of news sentences, label 1 when they paraphrase
// each other. Read from either layout of `path`:
//   GLUE:      train.tsv (training) and dev.tsv (evaluation)
//   Microsoft: msr_paraphrase_train.txt (training) and msr_paraphrase_test.txt (evaluation)
// Both are UTF-8 (a leading byte order mark is skipped), one header line
// `Quality<TAB>#1 ID<TAB>#2 ID<TAB>#1 String<TAB>#2 String`, then one pair per line with exactly
// those five tab-separated columns; blank lines are skipped, "\r\n" endings accepted.
//
// An example is [BOS] sentence1 [SEP] sentence2 [EOS] in token ids, truncated to seq_len by
// shortening the longer sentence first (so both sentences keep their beginnings). Special ids:
//   tokenizer "byte": ids 0..255 are bytes, BOS = 256, SEP = 257, PAD = 258 (vocab 259), no EOS.
//   SentencePiece:    BOS = the model's bos id, SEP = EOS = its eos id (either left out when the
//                     model has none), PAD = its pad id, else its unk id (vocab = piece count).
//                     Unk rather than eos for padding: eos appears in every example, and a model
//                     that treats pad_id specially (say, a zero padding embedding) must not touch
//                     a real token; padded positions are masked anyway.
// Batches are padded on the right to their longest example (pad_to = "longest") or to seq_len
// (pad_to = "max"), with a mask [n, T] (1 real token, 0 padding) and targets [n] (labels 0/1).

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <torch/types.h>

#include "strata/dataset.hpp"
#include "strata/errors.hpp"
#include "strata/options.hpp"
#include "strata/plugin.hpp"
#include "strata/registry.hpp"
#include "text_files.hpp"
#include "tokenizer.hpp"

namespace {

namespace fs = std::filesystem;
using strata::tokenizer::quoted;
using strata::tokenizer::TokenId;

constexpr const char* kEnvVar = "STRATA_MRPC_DIR";
constexpr const char* kDefaultDir = "data/mrpc";  // relative to the experiment file
constexpr std::string_view kHeader = "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String";
constexpr std::size_t kColumns = 5;
// Byte-level special ids, after the 256 byte values.
constexpr TokenId kByteBos = 256;
constexpr TokenId kByteSep = 257;
constexpr TokenId kBytePad = 258;
constexpr std::int64_t kByteVocab = 259;

constexpr const char* kPathFix =
    "Point `[dataset] path` (or the STRATA_MRPC_DIR environment variable) at a directory holding GLUE's "
    "MRPC train.tsv and dev.tsv, or Microsoft's msr_paraphrase_train.txt and msr_paraphrase_test.txt "
    "(tab-separated: Quality, #1 ID, #2 ID, #1 String, #2 String, with that header line).";

/// Options of the `mrpc` dataset.
struct MrpcOptions {
  std::string path;                ///< data directory; "" = $STRATA_MRPC_DIR, else data/mrpc next to the experiment file
  std::string tokenizer = "byte";  ///< "byte" or the path of a SentencePiece tokenizer.model
  std::int64_t seq_len = 128;      ///< longest example in tokens, special tokens included
  std::string pad_to = "longest";  ///< "longest": pad a batch to its longest example; "max": to seq_len
  std::int64_t train_limit = 0;    ///< use only the first N training pairs; 0 = all
  std::int64_t eval_limit = 0;     ///< use only the first N evaluation pairs; 0 = all
};

/// Special ids of the examples; -1 = not used.
struct Specials {
  TokenId bos = -1;
  TokenId sep = -1;
  TokenId eos = -1;
  TokenId pad = -1;
  std::int64_t vocab_size = 0;
  std::int64_t count() const { return (bos >= 0) + (sep >= 0) + (eos >= 0); }
};

Specials specials_of(const strata::tokenizer::Tokenizer& tokenizer) {
  if (tokenizer.byte_level()) return {kByteBos, kByteSep, -1, kBytePad, kByteVocab};
  const TokenId pad = tokenizer.pad_id() >= 0 ? tokenizer.pad_id() : tokenizer.unk_id();
  return {tokenizer.bos_id(), tokenizer.eos_id(), tokenizer.eos_id(), pad, tokenizer.vocab_size()};
}

/// The examples of one split: token ids of all examples back to back.
struct SplitData {
  std::vector<TokenId> tokens;
  std::vector<std::int64_t> offsets{0};  ///< example i is tokens[offsets[i], offsets[i + 1])
  std::vector<std::int64_t> labels;      ///< 0 or 1
  std::int64_t size() const { return static_cast<std::int64_t>(labels.size()); }
};

/// MRPC sentence pairs in memory.
class Mrpc final : public strata::Dataset {
 public:
  Mrpc(SplitData train, SplitData eval, Specials specials, std::int64_t seq_len, bool pad_to_max)
      : train_(std::move(train)), eval_(std::move(eval)), specials_(specials), seq_len_(seq_len), pad_to_max_(pad_to_max) {}

  std::int64_t size(strata::Split split) const override { return data(split).size(); }

  strata::Batch get(strata::Split split, const torch::Tensor& indices) const override {
    const SplitData& d = data(split);
    const torch::Tensor index = indices.to(torch::kLong).reshape({-1}).contiguous();
    const std::int64_t n = index.size(0);
    const auto* idx = index.data_ptr<std::int64_t>();
    std::int64_t longest = 1;
    for (std::int64_t i = 0; i < n; ++i) {
      if (idx[i] < 0 || idx[i] >= d.size())
        throw strata::Error("mrpc: index " + std::to_string(idx[i]) + " is outside [0, " + std::to_string(d.size()) + ")");
      longest = std::max(longest, d.offsets[idx[i] + 1] - d.offsets[idx[i]]);
    }
    const std::int64_t width = pad_to_max_ ? seq_len_ : longest;
    torch::Tensor inputs = torch::full({n, width}, static_cast<std::int64_t>(specials_.pad), torch::kLong);
    torch::Tensor mask = torch::zeros({n, width}, torch::kLong);
    torch::Tensor targets = torch::empty({n}, torch::kLong);
    auto* in = inputs.data_ptr<std::int64_t>();
    auto* m = mask.data_ptr<std::int64_t>();
    auto* t = targets.data_ptr<std::int64_t>();
    for (std::int64_t i = 0; i < n; ++i) {
      const std::int64_t begin = d.offsets[idx[i]];
      const std::int64_t length = d.offsets[idx[i] + 1] - begin;
      std::copy_n(d.tokens.begin() + begin, length, in + i * width);
      std::fill_n(m + i * width, length, 1);
      t[i] = d.labels[idx[i]];
    }
    return {inputs, targets, mask};
  }

  strata::DataSpec spec() const override {
    strata::DataSpec s;
    s.input_shape = {seq_len_};
    s.input_dtype = torch::kInt64;
    s.num_classes = 2;
    s.vocab_size = specials_.vocab_size;
    s.seq_len = seq_len_;
    s.pad_id = specials_.pad;
    s.ignored_targets = false;  // one label per pair, never ignored
    s.targets_per_sample = 1;
    return s;
  }

 private:
  const SplitData& data(strata::Split split) const { return split == strata::Split::kTrain ? train_ : eval_; }

  SplitData train_;
  SplitData eval_;
  Specials specials_;
  std::int64_t seq_len_;
  bool pad_to_max_;
};

/// Builds [BOS] a [SEP] b [EOS] within `seq_len` tokens, shortening the longer sentence first.
void append_pair(std::vector<TokenId> a, std::vector<TokenId> b, const Specials& sp, std::int64_t seq_len,
                 SplitData& out) {
  const auto budget = static_cast<std::size_t>(seq_len - sp.count());
  if (a.size() + b.size() > budget) {
    const std::size_t half = budget / 2;
    if (a.size() <= half) b.resize(budget - a.size());
    else if (b.size() <= half) a.resize(budget - b.size());
    else {
      a.resize(budget - half);
      b.resize(half);
    }
  }
  auto& t = out.tokens;
  if (sp.bos >= 0) t.push_back(sp.bos);
  t.insert(t.end(), a.begin(), a.end());
  if (sp.sep >= 0) t.push_back(sp.sep);
  t.insert(t.end(), b.begin(), b.end());
  if (sp.eos >= 0) t.push_back(sp.eos);
  out.offsets.push_back(static_cast<std::int64_t>(t.size()));
}

/// The start of `line` in quotes for a message: whole characters, tabs as spaces, control
/// characters escaped.
std::string excerpt(std::string_view line) {
  constexpr std::size_t kShown = 60;
  std::size_t cut = std::min(line.size(), kShown);
  while (cut > 0 && cut < line.size() && (static_cast<unsigned char>(line[cut]) & 0xC0) == 0x80) --cut;
  std::string shown(line.substr(0, cut));
  for (char& c : shown)
    if (c == '\t') c = ' ';
  return "\"" + strata::tokenizer::printable(shown) + (cut < line.size() ? "...\"" : "\"");
}

/// Reads and checks one MRPC file, every line of it, and tokenizes its first `limit` pairs (0 = all).
SplitData read_pairs(const fs::path& file, const strata::tokenizer::Tokenizer& tokenizer, const Specials& specials,
                     std::int64_t seq_len, std::int64_t limit) {
  const std::string text = strata::tokenizer::read_text_file(file, 0, kPathFix);
  const std::string name = strata::tokenizer::quoted(file);
  SplitData out;
  std::vector<TokenId> first;
  std::vector<TokenId> second;
  std::int64_t line_number = 0;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string_view line(text.data() + start, end - start);
    start = end + 1;
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line_number == 1) {
      if (line != kHeader)
        throw strata::OptionError("path",
                                  name + " line 1: expected the MRPC header \"Quality<TAB>#1 ID<TAB>#2 ID<TAB>#1 "
                                         "String<TAB>#2 String\", found " + excerpt(line),
                                  kPathFix);
      continue;
    }
    if (line.find_first_not_of(" \t") == std::string_view::npos) continue;  // blank line

    std::vector<std::string_view> columns;
    for (std::size_t from = 0;;) {
      const std::size_t tab = line.find('\t', from);
      columns.push_back(line.substr(from, tab == std::string_view::npos ? std::string_view::npos : tab - from));
      if (tab == std::string_view::npos) break;
      from = tab + 1;
    }
    const std::string where = name + " line " + std::to_string(line_number);
    if (columns.size() != kColumns)
      throw strata::OptionError("path",
                                where + " has " + std::to_string(columns.size()) +
                                    " tab-separated columns; MRPC lines have 5 (Quality, #1 ID, #2 ID, #1 String, "
                                    "#2 String): " + excerpt(line),
                                kPathFix);
    if (columns[0] != "0" && columns[0] != "1")
      throw strata::OptionError("path",
                                where + ": label (Quality) is " + excerpt(columns[0]) + "; it must be 0 or 1",
                                kPathFix);
    if (limit > 0 && out.size() >= limit) continue;  // checked, not used
    first.clear();
    second.clear();
    tokenizer.encode(columns[3], first);
    tokenizer.encode(columns[4], second);
    append_pair(first, second, specials, seq_len, out);
    out.labels.push_back(columns[0] == "1" ? 1 : 0);
  }
  if (line_number == 0)
    throw strata::OptionError("path", name + " is empty; it needs the MRPC header line and sentence pairs", kPathFix);
  if (out.size() == 0)
    throw strata::OptionError("path", name + " holds no sentence pairs after its header", kPathFix);
  return out;
}

std::shared_ptr<strata::Dataset> make_mrpc(const MrpcOptions& options, const strata::DatasetContext& context) {
  const auto tokenizer = strata::tokenizer::open_tokenizer(options.tokenizer, context.config_dir);
  const Specials specials = specials_of(*tokenizer);
  if (options.seq_len < specials.count() + 2)
    throw strata::OptionError("seq_len",
                              "seq_len is " + std::to_string(options.seq_len) + "; an MRPC example needs " +
                                  std::to_string(specials.count()) + " special tokens and at least one token of "
                                  "each sentence",
                              "Use seq_len = 128 (the default) or more; byte tokens need about 256 for whole pairs.");

  const auto where = strata::locate_data(options.path, kEnvVar, kDefaultDir, context);
  std::error_code ec;
  if (!fs::is_directory(where.path, ec))
    throw strata::OptionError("path",
                              "MRPC directory " + quoted(where.path) + where.from() +
                                  (fs::exists(where.path, ec) ? " is not a directory" : " does not exist"),
                              kPathFix);
  fs::path train_file;
  fs::path eval_file;
  if (fs::exists(where.path / "train.tsv", ec)) {
    train_file = where.path / "train.tsv";
    eval_file = where.path / "dev.tsv";
  } else if (fs::exists(where.path / "msr_paraphrase_train.txt", ec)) {
    train_file = where.path / "msr_paraphrase_train.txt";
    eval_file = where.path / "msr_paraphrase_test.txt";
  } else {
    throw strata::OptionError("path",
                              "MRPC directory " + quoted(where.path) + where.from() +
                                  " holds neither train.tsv (GLUE) nor msr_paraphrase_train.txt (Microsoft)",
                              kPathFix);
  }
  if (!fs::exists(eval_file, ec))
    throw strata::OptionError("path",
                              "MRPC directory " + quoted(where.path) + where.from() + " has " +
                                  train_file.filename().string() + " but lacks " + eval_file.filename().string() +
                                  " (the evaluation split)",
                              kPathFix);

  SplitData train = read_pairs(train_file, *tokenizer, specials, options.seq_len, options.train_limit);
  SplitData eval = read_pairs(eval_file, *tokenizer, specials, options.seq_len, options.eval_limit);
  return std::make_shared<Mrpc>(std::move(train), std::move(eval), specials, options.seq_len, options.pad_to == "max");
}

void register_mrpc(strata::Registry& registry) {
  strata::Schema<MrpcOptions> schema;
  schema
      .option("path", &MrpcOptions::path,
              "directory of train.tsv + dev.tsv (GLUE) or msr_paraphrase_{train,test}.txt (Microsoft); "
              "\"\" = $STRATA_MRPC_DIR, else data/mrpc next to the experiment file",
              strata::file_path())
      .option("tokenizer", &MrpcOptions::tokenizer,
              std::string(strata::tokenizer::kTokenizerDoc) +
                  " (relative to the experiment file); byte adds BOS 256, SEP 257, PAD 258")
      .option("seq_len", &MrpcOptions::seq_len,
              "longest example in tokens, special tokens included (longer pairs lose the end of the longer "
              "sentence first)",
              strata::at_least(1))
      .option("pad_to", &MrpcOptions::pad_to,
              "pad each batch to its longest example (\"longest\") or to seq_len (\"max\")",
              strata::one_of({"longest", "max"}))
      .option("train_limit", &MrpcOptions::train_limit, "use only the first N training pairs (0 = all)",
              strata::at_least(0))
      .option("eval_limit", &MrpcOptions::eval_limit, "use only the first N evaluation pairs (0 = all)",
              strata::at_least(0));
  registry.add_dataset<MrpcOptions>(
      "mrpc", "GLUE MRPC: is sentence 2 a paraphrase of sentence 1? (3668 train / 408 dev pairs in GLUE's files)",
      schema, make_mrpc);
}

}  // namespace

STRATA_PLUGIN(dataset, "mrpc", "0.1.0", register_mrpc)
