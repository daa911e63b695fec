// TextDataset: the vocabulary, the 90/10 split, the windows and their batches, through a DataLoader, on the
// bundled Shakespeare text and on small hostile files.
#include <fstream>
#include <set>

#include "support/test_support.h"
#include "tandem/trainers/loader.h"
#include "tandem/trainers/text_dataset.h"

namespace tandem::trainers {
namespace {

const std::string kShakespeare = TANDEM_SOURCE_DIR "/data/shakespeare.txt";

std::string write_file(const std::string& name, const std::string& bytes) {
  const std::string path = testing::scratch_path(name);
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

std::vector<int64_t> values_of(const Tensor& t) { return t.to_vector_as<int64_t>(); }

TEST(TextDataset, ShakespeareSplitsLikeNanoGptWithItsSortedCharacters) {
  const TextDataset train(kShakespeare, 256);
  const TextDataset val(kShakespeare, 256, {.split = TextSplit::Validation});
  EXPECT_EQ(train.vocab_size(), 84);  // data/README.md
  EXPECT_EQ(val.vocab_size(), 84);
  EXPECT_EQ(train.num_tokens(), 4551553);
  EXPECT_EQ(val.num_tokens(), 505729);
  EXPECT_EQ(train.size(), 4551553 - 256);
  EXPECT_EQ(train.token_text(0), "\n");  // ids in code point order: newline, space, then punctuation
  EXPECT_EQ(train.token_text(1), " ");
  for (int64_t id = 1; id < train.vocab_size(); ++id) EXPECT_LT(train.token_text(id - 1), train.token_text(id));

  std::ifstream file(kShakespeare, std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  const Example first = train.get(0);
  EXPECT_EQ(first.data.shape(), (Shape{256}));
  EXPECT_EQ(first.data.dtype(), DType::Int64);
  EXPECT_EQ(train.decode(values_of(first.data)), text.substr(0, 256));
  EXPECT_EQ(train.decode(values_of(first.target)), text.substr(1, 256));
  const Example last = val.get(val.size() - 1);
  EXPECT_EQ(val.decode(values_of(last.target)), text.substr(text.size() - 256));
  EXPECT_EQ(val.decode(values_of(val.get(0).data)), text.substr(4551553, 256));
  EXPECT_EQ(train.encode("To be, or not to be"), train.encode(std::string("To be, or not to be")));
  EXPECT_EQ(train.decode(train.encode("To be, or not to be")), "To be, or not to be");
}

TEST(TextDataset, BatchesAreTheWindowsAtTheirIndicesAndALoaderShufflesThemBySeed) {
  const TextDataset data(write_file("abc.txt", "abcdefghijklmnopqrstuvwxyz"), 4);
  EXPECT_EQ(data.vocab_size(), 26);
  EXPECT_EQ(data.num_tokens(), 23);  // floor(0.9 * 26)
  EXPECT_EQ(data.size(), 19);
  const Example batch = data.get_batch({0, 5, 18});
  EXPECT_EQ(batch.data.shape(), (Shape{3, 4}));
  EXPECT_EQ(values_of(batch.data), (std::vector<int64_t>{0, 1, 2, 3, 5, 6, 7, 8, 18, 19, 20, 21}));
  EXPECT_EQ(values_of(batch.target), (std::vector<int64_t>{1, 2, 3, 4, 6, 7, 8, 9, 19, 20, 21, 22}));
  const Example collated = data.collate({data.get(0), data.get(5), data.get(18)});
  EXPECT_EQ(values_of(collated.data), values_of(batch.data));

  std::vector<std::vector<int64_t>> epochs;
  for (int workers : {0, 2}) {
    DataLoader loader(data, {.batch_size = 5, .shuffle = true, .seed = 7, .num_workers = workers});
    loader.begin_epoch();
    std::vector<int64_t> starts;
    for (int64_t b = 0; b < loader.num_batches(); ++b) {
      const Batch next = loader.batch(b);
      const std::vector<int64_t> x = values_of(next.features), y = values_of(next.targets);
      for (size_t row = 0; row < x.size() / 4; ++row) {
        starts.push_back(x[row * 4]);
        for (size_t i = 0; i < 4; ++i) {
          EXPECT_EQ(x[row * 4 + i], x[row * 4] + static_cast<int64_t>(i));
          EXPECT_EQ(y[row * 4 + i], x[row * 4 + i] + 1);
        }
      }
    }
    EXPECT_EQ(std::set<int64_t>(starts.begin(), starts.end()).size(), 19u);  // every window once
    epochs.push_back(starts);
  }
  EXPECT_EQ(epochs[0], epochs[1]);
  std::vector<int64_t> in_order(19);
  for (int64_t i = 0; i < 19; ++i) in_order[i] = i;
  EXPECT_NE(epochs[0], in_order);
}

TEST(TextDataset, CharactersAreUtf8CodePointsAndBytesAreBytes) {
  const std::string path = write_file("utf8.txt", "h\xC3\xA9llo w\xC3\xB6rld \xE2\x82\xAC\xF0\x9F\x98\x80 h\xC3\xA9llo");
  const TextDataset characters(path, 2);
  EXPECT_EQ(characters.vocab_size(), 11);  // space, d, h, l, o, r, w, e-acute, o-umlaut, euro, emoji
  EXPECT_EQ(characters.token_text(characters.vocab_size() - 1), "\xF0\x9F\x98\x80");
  EXPECT_EQ(characters.decode(characters.encode("\xE2\x82\xAC h\xC3\xA9")), "\xE2\x82\xAC h\xC3\xA9");
  EXPECT_EQ(characters.num_tokens(), 18);  // 20 characters, floor(0.9 * 20)
  const TextDataset bytes(path, 2, {.vocabulary = TextVocabulary::Bytes});
  EXPECT_EQ(bytes.vocab_size(), 256);
  EXPECT_EQ(bytes.num_tokens(), 25);  // 28 bytes
  EXPECT_EQ(bytes.encode("\xC3\xA9"), (std::vector<int64_t>{0xC3, 0xA9}));
  EXPECT_EQ(values_of(bytes.get(0).data), (std::vector<int64_t>{'h', 0xC3}));
}

TEST(TextDataset, BadFilesAndArgumentsAreErrors) {
  const std::string path = write_file("short.txt", "0123456789");
  EXPECT_ERROR(TextDataset(path, 0), "block_size is 0 but expected >= 1");
  EXPECT_ERROR(TextDataset(path, 1, {.split = TextSplit::Validation}),
               "the validation split has 1 tokens of the file's 10 but block_size 1 needs at least 2");
  EXPECT_ERROR(TextDataset(path, 9), "the training split has 9 tokens of the file's 10 but block_size 9 needs at least 10");
  EXPECT_ERROR(TextDataset(write_file("empty.txt", ""), 4), "the file is empty");
  EXPECT_ERROR(TextDataset(testing::scratch_path("missing.txt"), 4), "missing.txt");
  EXPECT_ERROR(TextDataset(testing::scratch_path(""), 4), "only regular files can be read");
  for (const std::string& bad : {std::string("ab\x80") + "cdefgh", std::string("ab\xC3") + "(cdefgh",
                                 std::string("ab\xC0\xAF") + "cdefgh", std::string("ab\xED\xA0\x80") + "cdefgh",
                                 std::string("abcdefgh\xF0\x9F\x98")}) {
    EXPECT_ERROR(TextDataset(write_file("bad.txt", bad), 2), "does not start a UTF-8 character");
  }
  EXPECT_ERROR(TextDataset(write_file("bad.txt", std::string("ab\x80") + "cdefgh"), 2), "byte 2 (0x80)");
  EXPECT_EQ(TextDataset(write_file("bad.txt", std::string("ab\x80") + "cdefgh"), 2, {.vocabulary = TextVocabulary::Bytes})
                .num_tokens(),
            8);

  const TextDataset data(write_file("abc.txt", "abcabcabcabc"), 2);
  EXPECT_ERROR(data.get(data.size()), "TextDataset::get: index 8 but the data set has 8 windows");
  EXPECT_ERROR(data.get_batch({1, -1}), "TextDataset::get_batch: index -1");
  EXPECT_ERROR(data.encode("abd"), "character 'd' (U+64) is not in the vocabulary of 3 characters");
  EXPECT_ERROR(data.decode({0, 3}), "token id 3 is outside the vocabulary [0, 3)");
}

}  // namespace
}  // namespace tandem::trainers
