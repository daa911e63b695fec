#include "tandem/trainers/text_dataset.h"

#include <algorithm>
#include <optional>

#include "io/byte_source.h"
#include "tandem/core/error.h"

namespace tandem::trainers {
namespace {

// The code point of the UTF-8 sequence at text[at], advancing `at` past it; nullopt (and `at` unchanged) when the
// bytes there are not one well-formed sequence: a stray continuation byte, a truncated sequence, an overlong
// encoding, a surrogate, a value above U+10FFFF.
std::optional<uint32_t> next_code_point(std::string_view text, size_t& at) {
  const auto byte = [&](size_t i) { return static_cast<uint8_t>(text[i]); };
  const uint8_t lead = byte(at);
  if (lead < 0x80) {
    ++at;
    return lead;
  }
  size_t length = 0;
  uint32_t value = 0, smallest = 0;
  if ((lead & 0xE0) == 0xC0) {
    length = 2, value = lead & 0x1F, smallest = 0x80;
  } else if ((lead & 0xF0) == 0xE0) {
    length = 3, value = lead & 0x0F, smallest = 0x800;
  } else if ((lead & 0xF8) == 0xF0) {
    length = 4, value = lead & 0x07, smallest = 0x10000;
  } else {
    return std::nullopt;
  }
  if (text.size() - at < length) return std::nullopt;
  for (size_t i = 1; i < length; ++i) {
    if ((byte(at + i) & 0xC0) != 0x80) return std::nullopt;
    value = (value << 6) | (byte(at + i) & 0x3F);
  }
  if (value < smallest || value > 0x10FFFF || (value >= 0xD800 && value <= 0xDFFF)) return std::nullopt;
  at += length;
  return value;
}

// The UTF-8 text of one code point (a well-formed one: next_code_point's).
std::string utf8_of(uint32_t code) {
  std::string out;
  if (code < 0x80) {
    out += static_cast<char>(code);
  } else if (code < 0x800) {
    out += static_cast<char>(0xC0 | (code >> 6));
    out += static_cast<char>(0x80 | (code & 0x3F));
  } else if (code < 0x10000) {
    out += static_cast<char>(0xE0 | (code >> 12));
    out += static_cast<char>(0x80 | ((code >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (code & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (code >> 18));
    out += static_cast<char>(0x80 | ((code >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((code >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (code & 0x3F));
  }
  return out;
}

std::string hex(uint32_t value) {
  static constexpr char kDigits[] = "0123456789ABCDEF";
  std::string out;
  do {
    out.insert(out.begin(), kDigits[value % 16]);
    value /= 16;
  } while (value != 0);
  return out.size() < 2 ? "0" + out : out;
}

// Every code point of `text` in order. Errors (prefixed with `where`): a sequence that is not UTF-8, by offset.
std::vector<uint32_t> code_points(std::string_view text, const std::string& where) {
  std::vector<uint32_t> codes;
  codes.reserve(text.size());
  for (size_t at = 0; at < text.size();) {
    const std::optional<uint32_t> code = next_code_point(text, at);
    TANDEM_CHECK(code.has_value(), where, "byte ", at, " (0x", hex(static_cast<uint8_t>(text[at])),
                 ") does not start a UTF-8 character; read the file with TextVocabulary::Bytes instead");
    codes.push_back(*code);
  }
  return codes;
}

std::string read_text(const std::string& path, const std::string& where) {
  FileByteSource file(path, where);
  TANDEM_CHECK(file.size() > 0, where, "the file is empty");
  TANDEM_CHECK(file.size() <= TextDataset::kMaxFileBytes, where, "the file has ", file.size(),
               " bytes but at most ", TextDataset::kMaxFileBytes, " are read");
  std::string bytes(static_cast<size_t>(file.size()), '\0');
  file.read(0, bytes.data(), bytes.size());
  return bytes;
}

// The code points of `text` (the byte values with Bytes). Errors: code_points'.
std::vector<uint32_t> codes_of(std::string_view text, TextVocabulary kind, const std::string& where) {
  if (kind == TextVocabulary::Characters) return code_points(text, where);
  std::vector<uint32_t> codes;
  codes.reserve(text.size());
  for (char c : text) codes.push_back(static_cast<uint8_t>(c));
  return codes;
}

}  // namespace

TextDataset::TextDataset(const std::string& path, int64_t block_size, TextDatasetOptions options)
    : block_size_(block_size), kind_(options.vocabulary) {
  const std::string where = "TextDataset: '" + path + "': ";
  TANDEM_CHECK(block_size >= 1, where, "block_size is ", block_size, " but expected >= 1");
  const std::string text = read_text(path, where);
  const std::vector<uint32_t> codes = codes_of(text, kind_, where);
  if (kind_ == TextVocabulary::Bytes) {
    for (uint32_t value = 0; value < 256; ++value) codes_.push_back(value);
  } else {
    codes_ = codes;
    std::sort(codes_.begin(), codes_.end());
    codes_.erase(std::unique(codes_.begin(), codes_.end()), codes_.end());
  }
  for (uint32_t code : codes_) {
    vocabulary_.push_back(kind_ == TextVocabulary::Bytes ? std::string(1, static_cast<char>(code)) : utf8_of(code));
  }
  // The first floor(0.9 n) tokens train, the rest validate (nanoGPT's int(n * 0.9)).
  const size_t train_end = codes.size() / 10 * 9 + codes.size() % 10 * 9 / 10;
  const bool train = options.split == TextSplit::Train;
  const size_t begin = train ? 0 : train_end, end = train ? train_end : codes.size();
  tokens_.reserve(end - begin);
  for (size_t i = begin; i < end; ++i) {
    tokens_.push_back(static_cast<int32_t>(id_of(codes[i])));
  }
  TANDEM_CHECK(num_tokens() > block_size, where, "the ", train ? "training" : "validation", " split has ",
               num_tokens(), " tokens of the file's ", codes.size(), " but block_size ", block_size,
               " needs at least ", block_size + 1);
}

int64_t TextDataset::size() const { return num_tokens() - block_size_; }

void TextDataset::check_index(int64_t index, const char* caller) const {
  TANDEM_CHECK(index >= 0 && index < size(), caller, ": index ", index, " but the data set has ", size(),
               " windows");
}

Example TextDataset::get(int64_t index) const {
  check_index(index, "TextDataset::get");
  Example batch = get_batch({index});
  return {batch.data.view({block_size_}), batch.target.view({block_size_})};
}

Example TextDataset::get_batch(const std::vector<int64_t>& indices) const {
  TANDEM_CHECK(!indices.empty(), "TextDataset::get_batch: no indices");
  const auto n = static_cast<int64_t>(indices.size());
  Tensor data = Tensor::empty({n, block_size_}, DType::Int64);
  Tensor target = Tensor::empty({n, block_size_}, DType::Int64);
  int64_t* x = data.mutable_data_as<int64_t>();
  int64_t* y = target.mutable_data_as<int64_t>();
  for (int64_t row = 0; row < n; ++row) {
    const int64_t start = indices[static_cast<size_t>(row)];
    check_index(start, "TextDataset::get_batch");
    const int32_t* window = tokens_.data() + start;
    std::copy(window, window + block_size_, x + row * block_size_);
    std::copy(window + 1, window + 1 + block_size_, y + row * block_size_);
  }
  return {data, target};
}

const std::string& TextDataset::token_text(int64_t id) const {
  TANDEM_CHECK(id >= 0 && id < vocab_size(), "TextDataset: token id ", id, " is outside the vocabulary [0, ",
               vocab_size(), ")");
  return vocabulary_[static_cast<size_t>(id)];
}

int64_t TextDataset::id_of(uint32_t code) const {
  const auto found = std::lower_bound(codes_.begin(), codes_.end(), code);
  TANDEM_CHECK(found != codes_.end() && *found == code, "TextDataset::encode: character '", utf8_of(code), "' (U+",
               hex(code), ") is not in the vocabulary of ", vocab_size(), " characters");
  return found - codes_.begin();
}

std::vector<int64_t> TextDataset::encode(std::string_view text) const {
  std::vector<int64_t> ids;
  for (const uint32_t code : codes_of(text, kind_, "TextDataset::encode: ")) ids.push_back(id_of(code));
  return ids;
}

std::string TextDataset::decode(const std::vector<int64_t>& ids) const {
  std::string text;
  for (int64_t id : ids) text += token_text(id);
  return text;
}

}  // namespace tandem::trainers
