// save/load in the safetensors format: the exact bytes written, round trips across devices, atomic writes, and
// every error of load by message (corrupt files are written byte by byte here).
#include <unistd.h>

#include <filesystem>

#include "safetensors_test_helpers.h"

namespace tandem {
namespace {

namespace fs = std::filesystem;
using testing::expect_close;
using testing::expect_values;
using testing::float_bytes;
using testing::le64;
using testing::read_bytes;
using testing::safetensors_file;
using testing::ScratchDir;
using testing::write_bytes;

nn::Linear known_linear() {
  nn::Linear fc(2, 3);
  NoGradGuard no_grad;
  fc.weight.copy_(Tensor::from_vector({1, 2, 3, 4, 5, 6}, {3, 2}));
  fc.bias.copy_(Tensor::from_vector({-1, -2, -3}, {3}));
  return fc;
}

TEST(SerializeTest, WritesTheSafetensorsLayout) {
  ScratchDir dir;
  std::string path = dir.file("linear.safetensors");
  save(known_linear(), path);
  std::string header = R"({"weight":{"dtype":"F32","shape":[3,2],"data_offsets":[0,24]},)"
                       R"("bias":{"dtype":"F32","shape":[3],"data_offsets":[24,36]},"__metadata__":{"format":"pt"}})";
  header.append((8 - header.size() % 8) % 8, ' ');
  EXPECT_EQ(read_bytes(path), le64(header.size()) + header + float_bytes({1, 2, 3, 4, 5, 6, -1, -2, -3}));
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"linear.safetensors"});  // no temporary file left
}

TEST(SerializeTest, ReadsFilesOfOtherWriters) {
  ScratchDir dir;
  std::string path = dir.file("other.safetensors");
  // Names in another order than the data, a scalar, an empty tensor, padding spaces, string metadata.
  std::string header =
      R"({"b":{"dtype":"F32","shape":[],"data_offsets":[8,12]},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
      R"("e":{"dtype":"F32","shape":[0,3],"data_offsets":[12,12]},"__metadata__":{"step":"7"}}   )";
  write_bytes(path, safetensors_file(header, float_bytes({1.5f, -2.5f, 42})));
  TensorFile file = load_tensors(path);
  ASSERT_EQ(file.tensors.size(), 3u);
  EXPECT_EQ(file.tensors[0].first, "a");
  expect_values(file.tensors[0].second, {1.5, -2.5}, {2});
  EXPECT_EQ(file.tensors[1].first, "b");
  expect_values(file.tensors[1].second, {42}, {});
  EXPECT_EQ(file.tensors[2].second.shape(), (Shape{0, 3}));
  EXPECT_EQ(file.metadata, (std::map<std::string, std::string>{{"step", "7"}}));
}

TEST(SerializeTest, SaveTensorsRoundTripsValuesAndMetadata) {
  ScratchDir dir;
  std::string path = dir.file("state.safetensors");
  manual_seed(1);
  Tensor matrix = Tensor::randn({4, 5});
  Tensor view = matrix.t();  // non-contiguous: written in row-major order of the view
  save_tensors({{"matrix", matrix}, {"view", view}, {"scalar", Tensor::scalar(3.0f)}}, path,
               {{"step", "12"}, {"note", "a \"quoted\" value"}});
  TensorFile file = load_tensors(path);
  ASSERT_EQ(file.tensors.size(), 3u);
  EXPECT_EQ(file.tensors[0].first, "matrix");
  expect_close(file.tensors[0].second, matrix, 0, 0);
  expect_close(file.tensors[1].second, view, 0, 0);
  expect_values(file.tensors[2].second, {3}, {});
  EXPECT_EQ(file.metadata.at("step"), "12");
  EXPECT_EQ(file.metadata.at("note"), "a \"quoted\" value");

  EXPECT_ERROR(save_tensors({{"x", matrix}, {"x", matrix}}, path), "save_tensors: two tensors are named 'x'");
  EXPECT_ERROR(save_tensors({{"", matrix}}, path), "save_tensors: tensor 0 has an empty name");
  EXPECT_ERROR(save_tensors({{"__metadata__", matrix}}, path), "is named '__metadata__'");
  EXPECT_ERROR(save_tensors({{"u", Tensor()}}, path), "save_tensors: tensor 'u' is undefined");
}

// Sources that record when they are asked.
struct AskedSources {
  std::vector<std::string> asked;
  TensorSource source(const std::string& name, Tensor values) {
    return {name, values.dtype(), values.shape(), [this, name, values] {
              asked.push_back(name);
              return values;
            }};
  }
};

HeaderSeal seal_of(std::string value) {
  return {value.size(),
          [](std::string_view placeholder) {
            return std::map<std::string, std::string>{{"a", "before"},
                                                      {"sealed", "{\"checksum\":\"" + std::string(placeholder) + "\"}"},
                                                      {"z", "after 0000"}};
          },
          [value] { return value; }};
}

TEST(SerializeTest, StreamedTensorsAreAskedForInOrderAndSealTheHeader) {
  ScratchDir dir;
  const std::string streamed = dir.file("streamed.safetensors");
  const std::string whole = dir.file("whole.safetensors");
  manual_seed(2);
  const Tensor matrix = Tensor::randn({3, 4});
  const Tensor labels = Tensor::from_vector(std::vector<int64_t>{7, -1}, {2});
  AskedSources sources;
  save_tensors_streamed(
      {sources.source("m", matrix), sources.source("labels", labels), sources.source("t", matrix.t())}, streamed,
      seal_of("0123abcd"));
  EXPECT_EQ(sources.asked, (std::vector<std::string>{"m", "labels", "t"}));
  // The bytes of save_tensors with the seal's value in the placeholder's place.
  save_tensors({{"m", matrix}, {"labels", labels}, {"t", matrix.t()}}, whole, seal_of("0123abcd").metadata("0123abcd"));
  EXPECT_EQ(read_bytes(streamed), read_bytes(whole));
  const TensorFile file = load_tensors(streamed);
  EXPECT_EQ(file.metadata.at("sealed"), R"({"checksum":"0123abcd"})");
  EXPECT_EQ(file.metadata.at("z"), "after 0000");
  expect_close(file.tensors[2].second, matrix.t(), 0, 0);

  const auto refused = [&](const std::vector<TensorSource>& tensors, const HeaderSeal& seal, const std::string& error) {
    EXPECT_ERROR(save_tensors_streamed(tensors, streamed, seal), error);
    EXPECT_EQ(read_bytes(streamed), read_bytes(whole));  // the old file stays
  };
  refused({{"m", DType::Float32, {4, 3}, [&] { return matrix; }}}, seal_of("0123abcd"),
          "save_tensors_streamed: tensor 'm' was declared float32 [4, 3] but its values are float32 [3, 4]");
  refused({{"m", DType::Int64, {3, 4}, [&] { return matrix; }}}, seal_of("0123abcd"), "declared int64 [3, 4]");
  refused({{"m", DType::Float32, {3, 4}, [] { return Tensor(); }}}, seal_of("0123abcd"), "its values are undefined");
  HeaderSeal short_value = seal_of("0123abcd");
  short_value.value = [] { return std::string("0123"); };
  refused({sources.source("m", matrix)}, short_value, "the seal's value \"0123\" is not 8 letters and digits");
  HeaderSeal ignored = seal_of("0123abcd");
  ignored.metadata = [](std::string_view) { return std::map<std::string, std::string>{{"a", "b"}}; };
  refused({sources.source("m", matrix)}, ignored, "the seal's placeholder must appear exactly once in the metadata");
  HeaderSeal twice = seal_of("0123abcd");
  twice.metadata = [](std::string_view placeholder) {
    return std::map<std::string, std::string>{{"a", std::string(placeholder)}, {"b", std::string(placeholder)}};
  };
  refused({sources.source("m", matrix)}, twice, "the seal's placeholder must appear exactly once");
  HeaderSeal quoted = seal_of("0123abcd");
  quoted.value = [] { return std::string("0123abc\""); };
  refused({sources.source("m", matrix)}, quoted, "is not 8 letters and digits");
  EXPECT_EQ(dir.entries(), (std::vector<std::string>{"streamed.safetensors", "whole.safetensors"}));
}

// Sources that are collectives stay in step across processes: a failed write still asks every source once, and a
// source that fails ends the asking.
TEST(SerializeTest, AFailedStreamedWriteStillAsksEverySource) {
  ScratchDir dir;
  const Tensor values = Tensor::ones({2});
  AskedSources sources;
  const std::vector<TensorSource> three = {sources.source("a", values), sources.source("b", values),
                                           sources.source("c", values)};
  EXPECT_ERROR(save_tensors_streamed(three, dir.file("missing/dir/file"), seal_of("00000000")),
               "save_tensors_streamed: cannot write");
  EXPECT_EQ(sources.asked, (std::vector<std::string>{"a", "b", "c"}));

  sources.asked.clear();
  std::vector<TensorSource> mismatched = three;
  mismatched[1].shape = {3};
  EXPECT_ERROR(save_tensors_streamed(mismatched, dir.file("file"), seal_of("00000000")), "tensor 'b' was declared");
  EXPECT_EQ(sources.asked, (std::vector<std::string>{"a", "b", "c"}));

  sources.asked.clear();
  std::vector<TensorSource> failing = three;
  failing[1].values = [&]() -> Tensor {
    sources.asked.push_back("b fails");
    TANDEM_FAIL("the gather failed");
  };
  EXPECT_ERROR(save_tensors_streamed(failing, dir.file("file"), seal_of("00000000")), "the gather failed");
  EXPECT_EQ(sources.asked, (std::vector<std::string>{"a", "b fails"}));

  sources.asked.clear();
  std::vector<TensorSource> repeated = three;
  repeated[2].name = "a";
  EXPECT_ERROR(save_tensors_streamed(repeated, dir.file("file"), seal_of("00000000")), "two tensors are named 'a'");
  EXPECT_EQ(sources.asked, (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_TRUE(dir.entries().empty());
}

class SerializeDeviceTest : public testing::EveryDevice {};

TEST_P(SerializeDeviceTest, RoundTripIntoExistingParametersAcrossDevices) {
  ScratchDir dir;
  std::string path = dir.file("net.safetensors");
  manual_seed(3);
  nn::Sequential saved{std::make_shared<nn::Linear>(3, 4), std::make_shared<nn::Tanh>(),
                       std::make_shared<nn::Linear>(4, 2)};
  saved.to(device());
  save(saved, path);

  for (Device target : {device(), Device::cpu(1)}) {
    nn::Sequential loaded{std::make_shared<nn::Linear>(3, 4), std::make_shared<nn::Tanh>(),
                          std::make_shared<nn::Linear>(4, 2)};
    loaded.to(target);
    std::vector<Tensor> before = loaded.parameters();
    optim::SGD sgd(before, {.lr = 0.1});
    load(loaded, path);
    std::vector<Tensor> after = loaded.parameters();
    for (size_t i = 0; i < after.size(); ++i) {
      EXPECT_TRUE(after[i].is_same(before[i]));  // written in place: the optimizer still holds them
      EXPECT_EQ(after[i].device(), target);
      expect_close(after[i], saved.parameters()[i], 0, 0);
    }
  }
}

TANDEM_INSTANTIATE_ON_EVERY_DEVICE(SerializeDeviceTest);

TEST(SerializeTest, OverwritesAtomicallyAndRefusesWhatItCannotReplace) {
  ScratchDir dir;
  std::string path = dir.file("model.safetensors");
  save(known_linear(), path);
  std::string old_bytes = read_bytes(path);
  nn::Linear other(2, 3);
  save(other, path);  // replaces the file
  EXPECT_NE(read_bytes(path), old_bytes);
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"model.safetensors"});

  // A directory in the target's place is refused before anything is written.
  std::string blocked = dir.file("blocked");
  fs::create_directories(blocked + "/inside");
  EXPECT_ERROR(save(known_linear(), blocked),
               "save: cannot write '" + blocked + "': it is a directory but expected a regular file");
  EXPECT_EQ(dir.entries(), (std::vector<std::string>{"blocked", "model.safetensors"}));

  EXPECT_ERROR(save(known_linear(), dir.file("missing/dir/model.safetensors")),
               "the directory '" + dir.file("missing/dir") + "' does not exist");
}

TEST(SerializeTest, SavingThroughASymlinkKeepsTheLinkAndTheMode) {
  ScratchDir dir;
  const std::string real = dir.file("run1.safetensors");
  const std::string link = dir.file("latest.safetensors");
  save(known_linear(), real);
  fs::permissions(real, fs::perms::owner_read | fs::perms::owner_write);
  fs::create_symlink("run1.safetensors", link);

  nn::Linear other(2, 3);
  save(other, link);
  EXPECT_TRUE(fs::is_symlink(link));
  EXPECT_EQ(fs::status(real).permissions(), fs::perms::owner_read | fs::perms::owner_write);
  nn::Linear loaded(2, 3);
  load(loaded, link);
  expect_close(loaded.weight, other.weight);
  expect_close(loaded.bias, other.bias);
  EXPECT_EQ(dir.entries(), (std::vector<std::string>{"latest.safetensors", "run1.safetensors"}));
}

class LoadErrorTest : public ::testing::Test {
 protected:
  // Writes `bytes` to a file and expects load into a Linear(2, 3) to fail with `fragment`; the parameters must
  // keep their values (every check runs before any parameter is written).
  void expect_load_error(const std::string& bytes, const std::string& fragment) {
    write_bytes(path_, bytes);
    nn::Linear fc = known_linear();
    EXPECT_ERROR(load(fc, path_), fragment);
    expect_values(fc.weight, {1, 2, 3, 4, 5, 6}, {3, 2});
    expect_values(fc.bias, {-1, -2, -3}, {3});
  }
  static std::string entry(const std::string& name, const std::string& shape, uint64_t begin, uint64_t end,
                           const std::string& dtype = "F32") {
    return "\"" + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape + ",\"data_offsets\":[" +
           std::to_string(begin) + "," + std::to_string(end) + "]}";
  }
  static std::string weight_and_bias_data() { return float_bytes({9, 9, 9, 9, 9, 9, 7, 7, 7}); }

  ScratchDir dir_;
  std::string path_ = dir_.file("bad.safetensors");
};

TEST_F(LoadErrorTest, MissingTruncatedAndMalformedFiles) {
  nn::Linear fc(2, 3);
  EXPECT_ERROR(load(fc, dir_.file("absent.safetensors")),
               "load: '" + dir_.file("absent.safetensors") + "': cannot open the file: No such file or directory");
  expect_load_error(std::string("\x10\0\0\0\0", 5),
                    "load: '" + path_ +
                        "': the file is truncated: it has 5 bytes, but a safetensors file starts "
                        "with an 8-byte header length");
  expect_load_error(le64(1000) + std::string(24, ' '),
                    "the header length 1000 runs past the end of the file (24 bytes follow the length)");
  expect_load_error(safetensors_file("{\"weight\": {\"dtype\": ", ""), "the header is not valid JSON: ");
  expect_load_error(safetensors_file("[1, 2]", ""), "the header is not a JSON object");
  expect_load_error(safetensors_file(R"({"__metadata__":{"step":7}})", ""),
                    "__metadata__ entry 'step' is 7, not a string");
}

TEST_F(LoadErrorTest, BadEntries) {
  std::string data = weight_and_bias_data();
  std::string bias = entry("bias", "[3]", 24, 36);
  expect_load_error(safetensors_file("{" + entry("weight", "[3,2]", 0, 24, "F64") + "," + bias + "}", data),
                    "tensor 'weight' has dtype 'F64', but only F32, I64 and BF16 are supported");
  expect_load_error(safetensors_file("{" + entry("weight", "[3,-2]", 0, 24) + "," + bias + "}", data),
                    "tensor 'weight' has the shape size -2, but sizes are integers in [0, 2^63 - 1]");
  expect_load_error(safetensors_file(R"({"weight":{"dtype":"F32","shape":[3,2]}})", data),
                    "tensor 'weight' has no data_offsets");
  expect_load_error(safetensors_file(R"({"weight":{"shape":[3,2],"data_offsets":[0,24]}})", data),
                    "tensor 'weight' has no dtype");
  expect_load_error(safetensors_file("{" + entry("weight", "[3,2]", 0, 400) + "," + bias + "}", data),
                    "tensor 'weight' has data_offsets [0, 400] outside the data section of 36 bytes");
  expect_load_error(safetensors_file("{" + entry("weight", "[3,2]", 0, 8) + "," + bias + "}", data),
                    "tensor 'weight' has data_offsets [0, 8] (8 bytes) but its shape [3, 2] needs 24 bytes");
  expect_load_error(
      safetensors_file("{" + entry("weight", "[3,2]", 0, 24) + "," + entry("bias", "[3]", 20, 32) + "}", data),
      "tensors 'weight' [0, 24] and 'bias' [20, 32] overlap in the data section");
}

TEST_F(LoadErrorTest, NamesAndShapesMustMatchTheModule) {
  std::string data = weight_and_bias_data();
  expect_load_error(safetensors_file("{" + entry("weight", "[3,2]", 0, 24) + "}", data.substr(0, 24)),
                    "load: checkpoint has no tensor 'bias'");
  expect_load_error(safetensors_file("{" + entry("weight", "[3,2]", 0, 24) + "," + entry("bias", "[3]", 24, 36) + "," +
                                         entry("extra", "[]", 32, 36) + "}",
                                     data),
                    "overlap");
  expect_load_error(safetensors_file("{" + entry("weight", "[3,2]", 0, 24) + "," + entry("bias", "[2]", 24, 32) + "," +
                                         entry("extra", "[]", 32, 36) + "}",
                                     data),
                    "load: 'bias' has shape [2] in the file but [3] in the module");
  expect_load_error(safetensors_file("{" + entry("weight", "[3,2]", 0, 24) + "," + entry("bias", "[3]", 24, 36) + "," +
                                         entry("extra", "[0]", 36, 36) + "}",
                                     data),
                    "load: checkpoint has a tensor 'extra' that Linear does not have");
  expect_load_error(
      safetensors_file("{" + entry("weight", "[2,3]", 0, 24) + "," + entry("bias", "[3]", 24, 36) + "}", data),
      "load: 'weight' has shape [2, 3] in the file but [3, 2] in the module");
}

}  // namespace
}  // namespace tandem
