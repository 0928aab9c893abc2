// Dataset plugin `text`: next-token prediction on local UTF-8 text. The text is one file, or every
// regular file directly inside a directory (sorted by name, joined with a newline). It is
// tokenized once (bytes, or a SentencePiece model) and the token stream is cut into consecutive,
// non-overlapping windows of seq_len + 1 tokens; a window's first seq_len tokens are the input and
// its last seq_len the targets (the input shifted by one). The last eval_fraction of the windows
// is the evaluation split, so evaluation text follows training text and never overlaps it. The
// tail shorter than a window is dropped.
//
// Files must be UTF-8 without NUL bytes: a binary file (or another encoding) in the directory is
// an error naming it and the offending byte, not silently read as bytes.
//
// Without `path` the default is Debian's /usr/share/common-licenses (the license texts that
// base-files installs on every Debian system: about 240 KB of English), so the dataset works out
// of the box as a small smoke-test corpus.

#include <algorithm>
#include <cmath>
#include <cstdint>
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
using strata::tokenizer::TokenId;

constexpr const char* kEnvVar = "STRATA_TEXT_PATH";
constexpr const char* kDefaultPath = "/usr/share/common-licenses";
/// SentencePiece encodes the text in pieces of about this many bytes, cut after a newline, so that
/// its working memory stays small whatever the corpus size. Bytes need no cut.
constexpr std::size_t kEncodeChunk = std::size_t{1} << 20;

constexpr const char* kPathFix =
    "Point `[dataset] path` (or the STRATA_TEXT_PATH environment variable) at a UTF-8 text file or a "
    "directory of them; without either, Debian's /usr/share/common-licenses is read.";

/// Options of the `text` dataset.
struct TextOptions {
  std::string path;              ///< file or directory; "" = $STRATA_TEXT_PATH, else /usr/share/common-licenses
  std::string tokenizer = "byte";  ///< "byte" or the path of a SentencePiece tokenizer.model
  std::int64_t seq_len = 128;    ///< tokens per example (inputs and targets alike)
  double eval_fraction = 0.1;    ///< share of the windows, taken from the end, held out for evaluation
  std::int64_t max_bytes = 0;    ///< read at most this many bytes of text in all (0 = everything)
};

/// Token windows: int32 [windows, seq_len + 1], training rows first.
class Text final : public strata::Dataset {
 public:
  Text(torch::Tensor windows, std::int64_t eval_windows, std::int64_t vocab_size)
      : train_(windows.narrow(0, 0, windows.size(0) - eval_windows)),
        eval_(windows.narrow(0, windows.size(0) - eval_windows, eval_windows)),
        seq_len_(windows.size(1) - 1),
        vocab_size_(vocab_size) {}

  std::int64_t size(strata::Split split) const override { return rows(split).size(0); }

  strata::Batch get(strata::Split split, const torch::Tensor& indices) const override {
    const torch::Tensor index = indices.to(torch::kLong).reshape({-1});
    const torch::Tensor w = rows(split).index_select(0, index).to(torch::kLong);
    return {w.narrow(1, 0, seq_len_), w.narrow(1, 1, seq_len_), {}};  // unpadded: no mask
  }

  strata::DataSpec spec() const override {
    strata::DataSpec s;
    s.input_shape = {seq_len_};
    s.input_dtype = torch::kInt64;
    s.num_classes = 0;
    s.vocab_size = vocab_size_;
    s.seq_len = seq_len_;
    s.pad_id = -1;
    s.ignored_targets = false;
    s.targets_per_sample = seq_len_;
    return s;
  }

 private:
  const torch::Tensor& rows(strata::Split split) const { return split == strata::Split::kTrain ? train_ : eval_; }

  torch::Tensor train_;  // views of one int32 tensor
  torch::Tensor eval_;
  std::int64_t seq_len_;
  std::int64_t vocab_size_;
};

/// Tokens of `text`, encoded in chunks that end after a newline (see kEncodeChunk).
std::vector<TokenId> encode(const strata::tokenizer::Tokenizer& tokenizer, std::string_view text) {
  std::vector<TokenId> tokens;
  if (tokenizer.byte_level()) {
    tokenizer.encode(text, tokens);
    return tokens;
  }
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.size();
    if (end - start > kEncodeChunk) {
      const std::size_t newline = text.rfind('\n', start + kEncodeChunk);
      end = newline != std::string_view::npos && newline >= start ? newline + 1 : start + kEncodeChunk;
      // No newline in a whole chunk: cut at a character boundary instead.
      while (end < text.size() && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) ++end;
    }
    tokenizer.encode(text.substr(start, end - start), tokens);
    start = end;
  }
  return tokens;
}

std::shared_ptr<strata::Dataset> make_text(const TextOptions& options, const strata::DatasetContext& context) {
  if (!(options.eval_fraction > 0.0 && options.eval_fraction < 1.0))
    throw strata::OptionError("eval_fraction",
                              "eval_fraction is " + std::to_string(options.eval_fraction) +
                                  "; it must lie strictly between 0 and 1",
                              "Hold out a share of the windows, e.g. eval_fraction = 0.1.");
  const auto tokenizer = strata::tokenizer::open_tokenizer(options.tokenizer, context.config_dir);

  const auto where = strata::locate_data(options.path, kEnvVar, kDefaultPath, context);
  const auto files = strata::tokenizer::list_text_files(where, kPathFix);
  std::string text;
  const auto budget = static_cast<std::uint64_t>(options.max_bytes);
  for (const auto& file : files) {
    if (budget > 0 && text.size() >= budget) break;
    if (!text.empty()) text += '\n';
    text += strata::tokenizer::read_text_file(file, budget > 0 ? budget - std::min<std::uint64_t>(budget, text.size()) : 0,
                                              kPathFix);
  }
  std::vector<TokenId> tokens = encode(*tokenizer, text);

  const std::int64_t window = options.seq_len + 1;
  const auto count = static_cast<std::int64_t>(tokens.size()) / window;
  const std::string source = "the text at " + strata::tokenizer::quoted(where.path) + " (from " + where.origin + "; " +
                             std::to_string(files.size()) + (files.size() == 1 ? " file, " : " files, ") +
                             std::to_string(text.size()) + " bytes, " + std::to_string(tokens.size()) +
                             " tokens with tokenizer " + tokenizer->describe() + ")";
  if (count < 2)
    throw strata::OptionError("path",
                              source + " is too short for seq_len " + std::to_string(options.seq_len) +
                                  ": it makes " + std::to_string(count) + " window(s) of seq_len + 1 = " +
                                  std::to_string(window) + " tokens, and each split needs at least one",
                              "Use a smaller seq_len, more text (or a larger max_bytes), or another path.");
  const std::int64_t eval_windows =
      std::clamp<std::int64_t>(std::llround(static_cast<double>(count) * options.eval_fraction), 1, count - 1);

  // The windows are a view of the token vector (no copy; the tail shorter than a window stays unused).
  auto* owned = new std::vector<TokenId>(std::move(tokens));
  torch::Tensor windows =
      torch::from_blob(owned->data(), {count, window}, [owned](void*) { delete owned; }, torch::kInt32);
  return std::make_shared<Text>(std::move(windows), eval_windows, tokenizer->vocab_size());
}

void register_text(strata::Registry& registry) {
  strata::Constraint open_unit = strata::between(0, 1);
  open_unit.min_exclusive = open_unit.max_exclusive = true;
  strata::Schema<TextOptions> schema;
  schema
      .option("path", &TextOptions::path,
              "UTF-8 text file, or directory whose files (sorted by name, not recursive) are joined; "
              "\"\" = $STRATA_TEXT_PATH, else /usr/share/common-licenses",
              strata::file_path())
      .option("tokenizer", &TextOptions::tokenizer,
              std::string(strata::tokenizer::kTokenizerDoc) + " (relative to the experiment file)")
      .option("seq_len", &TextOptions::seq_len, "tokens per example; windows hold seq_len + 1 tokens",
              strata::at_least(1))
      .option("eval_fraction", &TextOptions::eval_fraction,
              "share of the windows held out for evaluation, taken from the end of the text", open_unit)
      .option("max_bytes", &TextOptions::max_bytes, "read at most this many bytes of text (0 = all)",
              strata::at_least(0));
  registry.add_dataset<TextOptions>(
      "text", "next-token prediction on local UTF-8 text (a file or directory), byte or SentencePiece tokens",
      schema, make_text);
}

}  // namespace

STRATA_PLUGIN(dataset, "text", "0.1.0", register_text)
