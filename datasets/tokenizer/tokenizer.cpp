#include "tokenizer.hpp"

#include <system_error>

#if STRATA_HAVE_SENTENCEPIECE
#include <sentencepiece_processor.h>
#endif

#include "strata/errors.hpp"

namespace strata::tokenizer {

namespace fs = std::filesystem;

Tokenizer::~Tokenizer() = default;

namespace {

/// Every byte of the UTF-8 text is one id: no vocabulary file, no unknown tokens.
class ByteTokenizer final : public Tokenizer {
 public:
  std::int64_t vocab_size() const override { return 256; }
  void encode(std::string_view text, std::vector<TokenId>& out) const override {
    out.reserve(out.size() + text.size());
    for (const char c : text) out.push_back(static_cast<unsigned char>(c));
  }
  bool byte_level() const override { return true; }
  std::string describe() const override { return "byte"; }
};

#if STRATA_HAVE_SENTENCEPIECE
/// A SentencePiece model (Kudo & Richardson 2018), as used by Llama, T5, ... tokenizers.
class SentencePieceTokenizer final : public Tokenizer {
 public:
  SentencePieceTokenizer(fs::path file, std::unique_ptr<sentencepiece::SentencePieceProcessor> processor)
      : file_(std::move(file)), processor_(std::move(processor)) {}

  std::int64_t vocab_size() const override { return processor_->GetPieceSize(); }

  void encode(std::string_view text, std::vector<TokenId>& out) const override {
    std::vector<int> ids;
    const auto status = processor_->Encode(text, &ids);
    if (!status.ok())
      throw strata::Error("SentencePiece model '" + file_.string() + "' failed to encode text: " + status.ToString());
    out.insert(out.end(), ids.begin(), ids.end());
  }

  TokenId bos_id() const override { return processor_->bos_id(); }
  TokenId eos_id() const override { return processor_->eos_id(); }
  TokenId pad_id() const override { return processor_->pad_id(); }
  TokenId unk_id() const override { return processor_->unk_id(); }

  std::string describe() const override {
    return "SentencePiece model '" + file_.string() + "' (" + std::to_string(vocab_size()) + " pieces)";
  }

 private:
  fs::path file_;
  // Encode() is const and keeps no state between calls, so concurrent const use is safe.
  std::unique_ptr<sentencepiece::SentencePieceProcessor> processor_;
};
#endif

}  // namespace

bool sentencepiece_available() noexcept { return STRATA_HAVE_SENTENCEPIECE != 0; }

std::unique_ptr<Tokenizer> open_tokenizer(const std::string& spec, const fs::path& config_dir,
                                          const std::string& option) {
  if (spec.empty() || spec == "byte") return std::make_unique<ByteTokenizer>();

  fs::path file = spec;
  if (file.is_relative() && !config_dir.empty()) file = config_dir / file;
  file = fs::absolute(file).lexically_normal();
  const std::string fix =
      "Set " + option + " = \"byte\", or to the path of a SentencePiece tokenizer.model (relative paths "
      "start at the experiment file's directory).";
  std::error_code ec;
  if (!fs::exists(file, ec))
    throw strata::OptionError(option,
                              option + " = \"" + spec + "\" is neither \"byte\" nor an existing file: '" +
                                  file.string() + "' does not exist",
                              fix);
  if (!fs::is_regular_file(file, ec))
    throw strata::OptionError(option, "tokenizer model '" + file.string() + "' is not a regular file", fix);
#if STRATA_HAVE_SENTENCEPIECE
  auto processor = std::make_unique<sentencepiece::SentencePieceProcessor>();
  const auto status = processor->Load(file.string());
  if (!status.ok())
    throw strata::OptionError(option,
                              "tokenizer model '" + file.string() + "' is not a SentencePiece model: " +
                                  status.ToString(),
                              fix);
  if (processor->GetPieceSize() <= 0)
    throw strata::OptionError(option, "SentencePiece model '" + file.string() + "' has no pieces", fix);
  return std::make_unique<SentencePieceTokenizer>(file, std::move(processor));
#else
  throw strata::OptionError(option,
                            "tokenizer model '" + file.string() +
                                "' needs SentencePiece, but this Strata build was configured without it",
                            "Install libsentencepiece-dev (Debian) and re-run cmake, or use tokenizer = \"byte\".");
#endif
}

}  // namespace strata::tokenizer
