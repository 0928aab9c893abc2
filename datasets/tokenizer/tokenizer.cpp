#include "tokenizer.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <system_error>

#if STRATA_HAVE_SENTENCEPIECE
#include <sentencepiece_processor.h>
#endif

#include "strata/errors.hpp"
#include "text_files.hpp"

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
// Real tokenizer.model files are a few MB (Llama 2: 0.5 MB, Gemma: 4 MB); a larger one is not a
// tokenizer, and a file that never ends (a /proc file) must not be read forever.
constexpr std::size_t kMaxModelBytes = std::size_t{1} << 30;

/// The bytes of `file`, read with C stdio rather than SentencePiece's own loader: its iostream
/// failures ("basic_filebuf::underflow ...") name neither the file nor the option, and errno does.
std::string read_model_file(const fs::path& file, const std::string& option, const std::string& fix) {
  const auto fail = [&](const std::string& what) {
    return strata::OptionError(option, "cannot read tokenizer model " + quoted(file) + ": " + what, fix);
  };
  std::FILE* in = std::fopen(file.c_str(), "rb");
  if (in == nullptr) throw fail(std::strerror(errno));
  std::string bytes;
  char buffer[1 << 16];
  std::size_t n = 0;
  while ((n = std::fread(buffer, 1, sizeof buffer, in)) > 0 && bytes.size() <= kMaxModelBytes) bytes.append(buffer, n);
  const int error = std::ferror(in) ? errno : 0;
  std::fclose(in);
  if (error != 0) throw fail(std::strerror(error));
  if (bytes.size() > kMaxModelBytes) throw fail("it is larger than 1 GiB, far more than any tokenizer model");
  return bytes;
}

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
      throw strata::Error("SentencePiece model " + quoted(file_) + " failed to encode text: " + status.ToString());
    out.insert(out.end(), ids.begin(), ids.end());
  }

  TokenId bos_id() const override { return processor_->bos_id(); }
  TokenId eos_id() const override { return processor_->eos_id(); }
  TokenId pad_id() const override { return processor_->pad_id(); }
  TokenId unk_id() const override { return processor_->unk_id(); }

  std::string describe() const override {
    return "SentencePiece model " + quoted(file_) + " (" + std::to_string(vocab_size()) + " pieces)";
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
                              option + " = \"" + printable(spec) + "\" is neither \"byte\" nor an existing file: " +
                                  quoted(file) + " does not exist",
                              fix);
  if (!fs::is_regular_file(file, ec))
    throw strata::OptionError(option, "tokenizer model " + quoted(file) + " is not a regular file", fix);
#if STRATA_HAVE_SENTENCEPIECE
  auto processor = std::make_unique<sentencepiece::SentencePieceProcessor>();
  // SentencePiece's status text names its own source lines ("./src/sentencepiece_processor.cc(1101)
  // [model_proto->ParseFromArray(...)]"): of no use to the user, so it is not shown.
  if (!processor->LoadFromSerializedProto(read_model_file(file, option, fix)).ok())
    throw strata::OptionError(option,
                              quoted(file) + " is not a SentencePiece model (it does not parse as one)",
                              "Set " + option + " to the tokenizer.model file that comes with the model (for "
                              "example models/TinyLlama-1.1B/tokenizer.model), or to \"byte\".");
  if (processor->GetPieceSize() <= 0)
    throw strata::OptionError(option, "SentencePiece model " + quoted(file) + " has no pieces", fix);
  return std::make_unique<SentencePieceTokenizer>(file, std::move(processor));
#else
  throw strata::OptionError(option,
                            "tokenizer model " + quoted(file) +
                                " needs SentencePiece, but this Strata build was configured without it",
                            "Install libsentencepiece-dev (Debian) and re-run cmake, or use tokenizer = \"byte\".");
#endif
}

}  // namespace strata::tokenizer
