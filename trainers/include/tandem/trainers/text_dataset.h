#pragma once
// TextDataset: a text file as a character-level language-model data set, as nanoGPT prepares its Shakespeare data: a
// vocabulary of the file's distinct characters (ids in code point order, as Python's sorted(set(text))) or of its 256
// byte values, the first 90% of the file's characters for training and the last 10% for validation, and as example
// i the window of block_size + 1 tokens starting at token i of the split: data its first block_size tokens, target
// the block_size tokens after each (int64, [block_size] each). A shuffled DataLoader over it draws random windows
// with the run's seeded generator, a distributed sampler shards them per rank, as for every other Dataset.
//
//   trainers::TextDataset train("data/shakespeare.txt", 256);
//   trainers::TextDataset val("data/shakespeare.txt", 256, {.split = trainers::TextSplit::Validation});
//   trainers::DataLoader loader(train, {.batch_size = 64, .shuffle = true, .seed = 1337});
//   std::string text = train.decode(train.encode("To be"));   // "To be"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tandem/trainers/dataset.h"

namespace tandem::trainers {

enum class TextSplit { Train, Validation };
enum class TextVocabulary { Characters, Bytes };

struct TextDatasetOptions {
  TextSplit split = TextSplit::Train;
  // Characters: the distinct UTF-8 characters of the whole file (both splits share the ids); Bytes: every byte value.
  TextVocabulary vocabulary = TextVocabulary::Characters;
};

class TextDataset : public Dataset {
 public:
  // The largest file read, in bytes: its tokens are held in memory (4 bytes each).
  static constexpr uint64_t kMaxFileBytes = uint64_t{1} << 30;

  // Reads and encodes `path` (all or nothing). Errors, each naming the file: it cannot be read or is not a regular
  // file; it is empty or larger than kMaxFileBytes; with Characters, a byte sequence that is not UTF-8 (naming its
  // offset); block_size < 1; a split with fewer than block_size + 1 tokens.
  TextDataset(const std::string& path, int64_t block_size, TextDatasetOptions options = {});

  // The windows of the split: its tokens - block_size.
  int64_t size() const override;
  // Tokens [index, index + block_size) as data and [index + 1, index + block_size + 1) as target. Errors: index
  // outside [0, size()).
  Example get(int64_t index) const override;
  // The windows at `indices` as [n, block_size] data and target, copied straight from the tokens.
  Example get_batch(const std::vector<int64_t>& indices) const override;

  int64_t block_size() const { return block_size_; }
  int64_t vocab_size() const { return static_cast<int64_t>(vocabulary_.size()); }
  int64_t num_tokens() const { return static_cast<int64_t>(tokens_.size()); }  // in this split
  // The text of token `id`: one character (UTF-8), or one byte.
  const std::string& token_text(int64_t id) const;
  // The ids of `text`. Errors: a character (or, with Characters, an invalid UTF-8 sequence) outside the vocabulary.
  std::vector<int64_t> encode(std::string_view text) const;
  // The text of `ids`. Errors: an id outside [0, vocab_size()).
  std::string decode(const std::vector<int64_t>& ids) const;

 private:
  void check_index(int64_t index, const char* caller) const;
  int64_t id_of(uint32_t code) const;  // Errors: a code outside the vocabulary

  int64_t block_size_;
  TextVocabulary kind_;
  std::vector<uint32_t> codes_;          // the code point (or byte value) of each id, ascending
  std::vector<std::string> vocabulary_;  // the text of each id
  std::vector<int32_t> tokens_;          // this split's
};

}  // namespace tandem::trainers
