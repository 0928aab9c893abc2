#pragma once
/// \file tokenizer.hpp
/// The tokenizer shared by the token datasets (`text`, `mrpc`), chosen by their `tokenizer`
/// option: "byte" (every UTF-8 byte is its own id, 0..255) or the path of a SentencePiece
/// `tokenizer.model` (ids as the model assigns them). Part of the static library
/// strata_tokenizer, compiled into each plugin that uses it.

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace strata::tokenizer {

/// Token id type of the stored token streams: every vocabulary we read fits in 31 bits.
using TokenId = std::int32_t;

/// A tokenizer: text in, ids in [0, vocab_size()) out. Thread-compatible for const access.
class Tokenizer {
 public:
  virtual ~Tokenizer();
  /// Number of ids the tokenizer itself produces (256 for bytes, the piece count for SentencePiece).
  virtual std::int64_t vocab_size() const = 0;
  /// Appends the ids of `text` (valid UTF-8) to `out`; no special tokens.
  virtual void encode(std::string_view text, std::vector<TokenId>& out) const = 0;
  /// Special ids of the model, -1 when it has none (byte level: all -1).
  virtual TokenId bos_id() const { return -1; }
  virtual TokenId eos_id() const { return -1; }
  virtual TokenId pad_id() const { return -1; }
  virtual TokenId unk_id() const { return -1; }
  /// True for the byte-level tokenizer.
  virtual bool byte_level() const { return false; }
  /// For messages and logs: "byte" or "SentencePiece model '<path>' (<n> pieces)".
  virtual std::string describe() const = 0;
};

/// Opens the tokenizer named by `spec`: "byte", or the path of a SentencePiece model (absolute, or
/// relative to `config_dir`). Throws strata::OptionError(`option`) naming the file when it does
/// not exist or is not a SentencePiece model, or when this build has no SentencePiece.
std::unique_ptr<Tokenizer> open_tokenizer(const std::string& spec, const std::filesystem::path& config_dir,
                                          const std::string& option = "tokenizer");

/// One-line description of the `tokenizer` option, shared by the schemas of the datasets.
inline constexpr const char* kTokenizerDoc =
    "\"byte\" (ids = UTF-8 bytes, 0..255) or the path of a SentencePiece tokenizer.model";

/// Whether this build can read SentencePiece models (libsentencepiece was found at configure time).
bool sentencepiece_available() noexcept;

}  // namespace strata::tokenizer
