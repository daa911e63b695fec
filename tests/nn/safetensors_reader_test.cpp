// Reading untrusted safetensors files: every hostile header and layout is refused with a bounded message, the same
// from a file and from memory; paths that are not regular files are refused without blocking; a file costs its
// tensors once in memory.
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <functional>

#include "safetensors_test_helpers.h"

namespace tandem {
namespace {

using testing::expect_values;
using testing::error_message_of;
using testing::float_bytes;
using testing::le64;
using testing::read_bytes;
using testing::safetensors_file;
using testing::ScratchDir;
using testing::write_bytes;

std::string entry(const std::string& name, const std::string& shape, uint64_t begin, uint64_t end,
                  const std::string& dtype = "\"F32\"") {
  return "\"" + name + "\":{\"dtype\":" + dtype + ",\"shape\":" + shape + ",\"data_offsets\":[" +
         std::to_string(begin) + "," + std::to_string(end) + "]}";
}

std::string repeated(const std::string& text, size_t count) {
  std::string out;
  out.reserve(text.size() * count);
  for (size_t i = 0; i < count; ++i) out += text;
  return out;
}

class SafetensorsReaderTest : public ::testing::Test {
 protected:
  // Expects load_tensors (from a file) and load_tensors_from_bytes to refuse `bytes` with one message, after their
  // prefixes, that contains `fragment` and stays short.
  void expect_refused(const std::string& bytes, const std::string& fragment) {
    write_bytes(path_, bytes);
    const std::string from_file = error_message_of([&] { load_tensors(path_); });
    const std::string from_memory = error_message_of([&] { load_tensors_from_bytes(bytes, "hostile"); });
    const std::string file_prefix = "load_tensors: '" + path_ + "': ";
    const std::string memory_prefix = "load_tensors_from_bytes: 'hostile': ";
    ASSERT_TRUE(from_file.starts_with(file_prefix)) << from_file;
    ASSERT_TRUE(from_memory.starts_with(memory_prefix)) << from_memory;
    EXPECT_EQ(from_file.substr(file_prefix.size()), from_memory.substr(memory_prefix.size()));
    EXPECT_NE(from_file.find(fragment), std::string::npos)
        << "message: " << from_file << "\nexpected to contain: " << fragment;
    EXPECT_LT(from_file.size() - file_prefix.size(), 400u) << from_file;
  }
  void expect_refused_header(const std::string& header, const std::string& fragment) {
    expect_refused(safetensors_file(header, ""), fragment);
  }

  // Loads `bytes` from a file and from memory, expects the same tensors and metadata, and returns them.
  TensorFile expect_loaded(const std::string& bytes) {
    write_bytes(path_, bytes);
    TensorFile from_file = load_tensors(path_);
    TensorFile from_memory = load_tensors_from_bytes(bytes);
    EXPECT_EQ(from_file.metadata, from_memory.metadata);
    EXPECT_EQ(from_file.tensors.size(), from_memory.tensors.size());
    for (size_t i = 0; i < std::min(from_file.tensors.size(), from_memory.tensors.size()); ++i) {
      EXPECT_EQ(from_file.tensors[i].first, from_memory.tensors[i].first);
      EXPECT_EQ(from_file.tensors[i].second.device(), Device::cpu());
      testing::expect_close(from_file.tensors[i].second, from_memory.tensors[i].second, 0, 0);
    }
    return from_file;
  }

  ScratchDir dir_;
  std::string path_ = dir_.file("hostile.safetensors");
};

TEST_F(SafetensorsReaderTest, DeepNestingIsRefusedBeforeParsing) {
  const std::string deep = repeated("[", 100000) + repeated("]", 100000);
  const std::string too_deep = "the JSON nests arrays and objects more than 64 levels deep";
  expect_refused_header(R"({"a":{"dtype":"F32","shape":)" + deep + R"(,"data_offsets":[0,0]}})",
                        too_deep + " (at byte 90)");
  expect_refused_header(R"({"__metadata__":{"note":)" + deep + "}}", too_deep + " (at byte 86)");
  expect_refused_header(repeated("{\"a\":", 100000) + "1" + repeated("}", 100000), too_deep + " (at byte 320)");

  // 64 levels pass the scan (and the schema then refuses the array); 65 do not.
  expect_refused_header(R"({"__metadata__":{"note":)" + repeated("[", 62) + repeated("]", 62) + "}}",
                        "__metadata__ entry 'note' is an array, not a string");
  expect_refused_header(R"({"__metadata__":{"note":)" + repeated("[", 63) + repeated("]", 63) + "}}", too_deep);

  // Brackets inside strings, escaped quotes included, are text.
  const std::string brackets = "\\\"" + repeated("[{", 50000);
  TensorFile file = expect_loaded(safetensors_file(R"({"__metadata__":{"note":")" + brackets + "\"}}", ""));
  EXPECT_EQ(file.metadata.at("note"), "\"" + repeated("[{", 50000));
}

TEST_F(SafetensorsReaderTest, HeaderLengthIsCheckedBeforeAllocating) {
  expect_refused(le64(uint64_t{1} << 63) + "{}",
                 "the header length 9223372036854775808 is over the limit of 100000000 bytes");
  expect_refused(le64(100000001) + "{}", "the header length 100000001 is over the limit of 100000000 bytes");
  expect_refused(le64(100000000) + "{}",
                 "the header length 100000000 runs past the end of the file (2 bytes follow the length)");
  expect_refused(le64(3) + "{}", "the header length 3 runs past the end of the file (2 bytes follow the length)");
  expect_refused(std::string("\x02\0\0", 3), "the file is truncated: it has 3 bytes");
  expect_refused("", "the file is truncated: it has 0 bytes");
}

TEST_F(SafetensorsReaderTest, HeaderMustBeOneJsonObjectOfValidUtf8) {
  expect_refused_header("", "the header is not a JSON object: it starts with ''");
  expect_refused_header("[]", "the header is not a JSON object: it starts with '[]'");
  expect_refused_header("\"text\"", "the header is not a JSON object: it starts with '\"text\"'");
  expect_refused_header(" {}", "the header is not a JSON object: it starts with ' {}'");
  expect_refused_header("\xef\xbb\xbf{}", "the header is not a JSON object: it starts with '\\xef\\xbb\\xbf{}'");
  expect_refused_header("{}x", "the header is not valid JSON: ");
  expect_refused_header("{} {}", "the header is not valid JSON: ");
  expect_refused_header("{\"a\":{\"dtype\":", "unexpected end of input");
  expect_refused_header("{\"\xff\":{}}", "ill-formed UTF-8 byte");
  expect_refused_header("{\"\xc0\xaf\":{}}", "ill-formed UTF-8 byte");
  expect_refused_header(R"({"\ud800":{}})", "surrogate U+D800..U+DBFF must be followed by U+DC00..U+DFFF");
  expect_refused_header(std::string("{\"a\0\":{}}", 9), "control character U+0000");
  // nlohmann's parser would stop at a NUL and take the object before it.
  expect_refused_header(std::string("{}\0{\"x\":1}", 10), "the JSON holds a NUL byte at byte 2 (7 bytes after it)");
  // A huge invalid token is quoted by an excerpt.
  expect_refused_header("{\"" + std::string(100000, 'a') + "\xff\":{}}", "... (100002 bytes)'");
  // Space padding after the object is the format's; an empty object is an empty file.
  TensorFile empty = expect_loaded(safetensors_file("{}      ", ""));
  EXPECT_TRUE(empty.tensors.empty());
  EXPECT_TRUE(empty.metadata.empty());
}

TEST_F(SafetensorsReaderTest, KeysAreUniqueInEveryObject) {
  const std::string data = float_bytes({1});
  expect_refused(safetensors_file("{" + entry("a", "[]", 0, 4) + "," + entry("a", "[]", 0, 4) + "}", data),
                 "the header has the key 'a' twice");
  expect_refused_header(R"({"__metadata__":{},"__metadata__":{}})", "the header has the key '__metadata__' twice");
  expect_refused(safetensors_file(R"({"a":{"dtype":"F32","shape":[],"dtype":"F32","data_offsets":[0,4]}})", data),
                 "tensor 'a' has the key 'dtype' twice");
  expect_refused_header(R"({"__metadata__":{"k":"1","j":"2","k":"3"}})", "__metadata__ has the key 'k' twice");
  // Keys are compared after unescaping.
  expect_refused_header(R"({"__metadata__":{"k":"1","\u006b":"3"}})", "__metadata__ has the key 'k' twice");
}

TEST_F(SafetensorsReaderTest, EntriesFollowTheSchema) {
  const std::string data = float_bytes({1, 2});
  auto header_with = [&](const std::string& a) { return safetensors_file("{" + a + "}", data); };
  expect_refused(header_with(entry("a", "[2]", 0, 8, "\"XYZ\"")),
                 "tensor 'a' has dtype 'XYZ', which is not a safetensors dtype (and only F32, I64 and BF16 are "
                 "supported)");
  expect_refused(header_with(entry("a", "[2]", 0, 8, "\"F16\"")),
                 "tensor 'a' has dtype 'F16', but only F32, I64 and BF16 are supported");
  expect_refused(header_with(entry("a", "[2]", 0, 8, "32")), "tensor 'a' has the dtype 32, but a dtype is a string");
  expect_refused(header_with(entry("a", "[2]", 0, 8, "\"" + std::string(5000, 'F') + "\"")),
                 "has dtype 'FFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFF... (5000 bytes)'");
  expect_refused(header_with(R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"offsets":[0,8]})"),
                 "tensor 'a' has the unknown key 'offsets' (an entry has only dtype, shape and data_offsets)");
  expect_refused(header_with(R"("a":{"dtype":"F32","data_offsets":[0,8]})"), "tensor 'a' has no shape");
  expect_refused(header_with(R"("a":[1,2])"), "tensor 'a' is described by an array, not by a JSON object");
  expect_refused(header_with(R"("a":5)"), "tensor 'a' is described by 5, not by a JSON object");
  expect_refused(header_with(R"("__metadata__":["x"])"), "__metadata__ is an array, not a JSON object");
  expect_refused(header_with(R"("__metadata__":{"k":null})"), "__metadata__ entry 'k' is null, not a string");
  expect_refused(header_with(R"("__metadata__":{"k":{}})"), "__metadata__ entry 'k' is an object, not a string");
  // Names are quoted by an excerpt, escaped.
  expect_refused(header_with(entry(std::string(1000, 'n') + "\\n", "[2]", 0, 8, "\"F64\"")),
                 "tensor 'nnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnn... (1001 bytes)' has dtype");
  expect_refused(header_with(entry("tab\\t", "[2]", 0, 8, "\"F64\"")), "tensor 'tab\\x09' has dtype 'F64'");
}

TEST_F(SafetensorsReaderTest, ShapesAreNonNegativeIntegersWithCheckedProducts) {
  const std::string data = float_bytes({1, 2});
  auto with_shape = [&](const std::string& shape) {
    return safetensors_file("{" + entry("a", shape, 0, 8) + "}", data);
  };
  const std::string sizes = ", but sizes are integers in [0, 2^63 - 1]";
  expect_refused(with_shape("[2.0]"), "tensor 'a' has the shape size 2.0" + sizes);
  expect_refused(with_shape("[2e0]"), "tensor 'a' has the shape size 2e0" + sizes);
  expect_refused(with_shape("[-2]"), "tensor 'a' has the shape size -2" + sizes);
  expect_refused(with_shape("[-0]"), "tensor 'a' has the shape size 0" + sizes);
  expect_refused(with_shape("[true]"), "tensor 'a' has the shape size true" + sizes);
  expect_refused(with_shape("[\"2\"]"), "tensor 'a' has the shape size the string '2'" + sizes);
  expect_refused(with_shape("[[2]]"), "tensor 'a' has the shape size an array" + sizes);
  expect_refused(with_shape("[9223372036854775808]"), "tensor 'a' has the shape size 9223372036854775808" + sizes);
  expect_refused(with_shape("[18446744073709551616]"), "tensor 'a' has the shape size 18446744073709551616" + sizes);
  expect_refused(with_shape("2"), "tensor 'a' has the shape 2, but a shape is an array of sizes");
  expect_refused(with_shape("[4294967296,4294967296]"),
                 "tensor 'a': shape [4294967296, 4294967296] has more than 2^63 - 1 elements");
  expect_refused(with_shape("[2305843009213693952]"),
                 "tensor 'a': shape [2305843009213693952] (2305843009213693952 elements of 4 bytes) needs more than "
                 "2^63 - 1 bytes");
  expect_refused(with_shape("[4294967296,4294967296,0]"), "has more than 2^63 - 1 elements");

  // Rank 64 is the limit.
  const std::string ones = "[" + repeated("1,", 63) + "1";
  expect_refused(safetensors_file("{" + entry("a", ones + ",1]", 0, 4) + "}", float_bytes({5})),
                 "tensor 'a' has a shape of more than 64 dimensions");
  TensorFile file = expect_loaded(safetensors_file("{" + entry("a", ones + "]", 0, 4) + "}", float_bytes({5})));
  EXPECT_EQ(file.tensors.at(0).second.dim(), 64);
  EXPECT_EQ(file.tensors.at(0).second.item(), 5.0f);
}

TEST_F(SafetensorsReaderTest, DataOffsetsAreTwoNonNegativeIntegers) {
  const std::string data = float_bytes({1, 2});
  auto with_offsets = [&](const std::string& offsets) {
    return safetensors_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":)" + offsets + "}}", data);
  };
  expect_refused(with_offsets("[]"), "tensor 'a' has data_offsets with 0 elements, but expected [begin, end]");
  expect_refused(with_offsets("[0]"), "tensor 'a' has data_offsets with 1 elements, but expected [begin, end]");
  expect_refused(with_offsets("[0,8,8]"), "tensor 'a' has data_offsets with more than 2 elements");
  expect_refused(with_offsets("[0,-8]"), "tensor 'a' has the data_offsets element -8, but offsets are non-negative");
  expect_refused(with_offsets("[0.0,8]"), "tensor 'a' has the data_offsets element 0.0");
  expect_refused(with_offsets("[\"0\",8]"), "tensor 'a' has the data_offsets element the string '0'");
  expect_refused(with_offsets("{\"begin\":0}"), "tensor 'a' has the data_offsets an object, but expected [begin, end]");
  expect_refused(with_offsets("[8,0]"), "tensor 'a' has data_offsets [8, 0] that end before they begin");
  expect_refused(with_offsets("[0,18446744073709551615]"),
                 "tensor 'a' has data_offsets [0, 18446744073709551615] outside the data section of 8 bytes");
  expect_refused(with_offsets("[0,4]"), "tensor 'a' has data_offsets [0, 4] (4 bytes) but its shape [2] needs 8 bytes");
}

TEST_F(SafetensorsReaderTest, RangesCoverTheDataSectionExactly) {
  const std::string a = entry("a", "[2]", 0, 8);
  const std::string b = entry("b", "[1]", 8, 12);
  expect_loaded(safetensors_file("{" + b + "," + a + "}", float_bytes({1, 2, 3})));

  expect_refused(safetensors_file("{" + a + "," + b + "}", float_bytes({1, 2, 3, 4})),
                 "the data section has 4 trailing bytes that no tensor covers (the tensors end at byte 12 of 16)");
  expect_refused(safetensors_file("{}", "xyz"),
                 "the data section has 3 trailing bytes that no tensor covers (the tensors end at byte 0 of 3)");
  expect_refused(safetensors_file("{" + a + "," + entry("b", "[1]", 12, 16) + "}", float_bytes({1, 2, 3, 4})),
                 "the data section has 4 bytes that no tensor covers before tensor 'b' [12, 16] (after tensor 'a' "
                 "[0, 8])");
  expect_refused(safetensors_file("{" + entry("b", "[1]", 4, 8) + "}", float_bytes({1, 2})),
                 "the data section has 4 bytes that no tensor covers before tensor 'b' [4, 8] (at its start)");
  expect_refused(safetensors_file("{" + a + "," + entry("b", "[1]", 4, 8) + "}", float_bytes({1, 2})),
                 "tensors 'a' [0, 8] and 'b' [4, 8] overlap in the data section");
  expect_refused(safetensors_file("{" + a + "," + entry("b", "[2]", 0, 8) + "}", float_bytes({1, 2})),
                 "tensors 'a' [0, 8] and 'b' [0, 8] overlap in the data section");
  // A zero-size tensor inside another one's range overlaps it; at a boundary it is fine, ordered by name.
  expect_refused(safetensors_file("{" + a + "," + entry("e", "[0]", 4, 4) + "}", float_bytes({1, 2})),
                 "tensors 'a' [0, 8] and 'e' [4, 4] overlap in the data section");
  TensorFile file = expect_loaded(safetensors_file(
      "{" + entry("z", "[0]", 8, 8) + "," + entry("y", "[0]", 8, 8) + "," + a + "," + entry("x", "[3,0]", 0, 0) + "}",
      float_bytes({1, 2})));
  std::vector<std::string> names;
  for (const auto& [name, tensor] : file.tensors) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"x", "a", "y", "z"}));
  expect_values(file.tensors[1].second, {1, 2}, {2});
}

TEST_F(SafetensorsReaderTest, AtMostAMillionTensors) {
  std::string header = "{";
  for (int i = 0; i <= 1000000; ++i) header += entry("t" + std::to_string(i), "[0]", 0, 0) + ",";
  header.back() = '}';
  expect_refused_header(header, "the header describes more than 1000000 tensors");
}

TEST_F(SafetensorsReaderTest, OnlyRegularFilesAreOpened) {
  const std::string fifo = dir_.file("fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_ERROR(load_tensors(fifo), "load_tensors: '" + fifo + "': it is a FIFO, but only regular files can be read");
  EXPECT_ERROR(load_tensors(dir_.file("")), "it is a directory, but only regular files can be read");
  EXPECT_ERROR(load_tensors("/dev/zero"), "load_tensors: '/dev/zero': it is a character device");
  EXPECT_ERROR(load_tensors(dir_.file("absent")),
               "load_tensors: '" + dir_.file("absent") + "': cannot open the file: No such file or directory");
  nn::Linear fc(2, 3);
  EXPECT_ERROR(load(fc, fifo), "load: '" + fifo + "': it is a FIFO");
}

TEST_F(SafetensorsReaderTest, FilesOfTheWriterReadTheSameFromMemory) {
  manual_seed(4);
  const std::string path = dir_.file("saved.safetensors");
  save_tensors({{"w", Tensor::randn({3, 5})}, {"s", Tensor::scalar(2)}, {"e", Tensor::empty({0, 4})}}, path,
               {{"step", "3"}});
  TensorFile file = expect_loaded(read_bytes(path));
  ASSERT_EQ(file.tensors.size(), 3u);
  EXPECT_EQ(file.tensors[0].first, "w");
  EXPECT_EQ(file.metadata.at("step"), "3");
  EXPECT_ERROR(load_tensors_from_bytes("{}"), "load_tensors_from_bytes: '<memory>': the file is truncated");
}

// Note [Measuring the peak]: ru_maxrss is the peak resident size of the whole process, so the load runs in a forked
// child whose peak starts at what it inherits (this test binary, a few tens of MB). The file is written in chunks, so
// this process never holds its data.
TEST_F(SafetensorsReaderTest, LoadingCostsTheTensorsOnce) {
  constexpr int kTensors = 4;
  constexpr int64_t kRows = 12800, kColumns = 1024;  // 50 MiB per tensor, 200 MiB in all
  constexpr uint64_t kTensorBytes = kRows * kColumns * sizeof(float);
  std::string header = "{";
  for (int i = 0; i < kTensors; ++i)
    header +=
        (i > 0 ? "," : "") + entry("t" + std::to_string(i), "[12800,1024]", i * kTensorBytes, (i + 1) * kTensorBytes);
  header += "}";
  const std::string path = dir_.file("large.safetensors");
  {
    std::ofstream out(path, std::ios::binary);
    const std::string prefix = safetensors_file(header, "");
    out.write(prefix.data(), static_cast<std::streamsize>(prefix.size()));
    std::vector<float> row(kColumns);
    for (int i = 0; i < kTensors; ++i) {
      for (int64_t r = 0; r < kRows; ++r) {
        row.front() = static_cast<float>(i * kRows + r);
        out.write(reinterpret_cast<const char*>(row.data()), static_cast<std::streamsize>(kColumns * sizeof(float)));
      }
    }
  }
  const uint64_t file_bytes = std::filesystem::file_size(path);
  ASSERT_GT(file_bytes, uint64_t{200} << 20);

  int pipe_fds[2];
  ASSERT_EQ(::pipe(pipe_fds), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {  // exit codes: 0 loaded and right, 1 an exception, 2 wrong values
    ::close(pipe_fds[0]);
    int status = 0;
    try {
      TensorFile file = load_tensors(path);
      for (int i = 0; i < kTensors; ++i) {
        const float* data = file.tensors.at(i).second.data();
        if (data[0] != static_cast<float>(i * kRows) || data[kRows * kColumns - kColumns] != i * kRows + kRows - 1)
          status = 2;
      }
    } catch (...) {
      status = 1;
    }
    struct rusage usage {};
    ::getrusage(RUSAGE_SELF, &usage);
    const std::string peak_kib = std::to_string(usage.ru_maxrss);
    (void)!::write(pipe_fds[1], peak_kib.data(), peak_kib.size());
    ::_exit(status);
  }
  ::close(pipe_fds[1]);
  char buffer[32] = {};
  const ssize_t got = ::read(pipe_fds[0], buffer, sizeof(buffer) - 1);
  ::close(pipe_fds[0]);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  ASSERT_GT(got, 0);
  const uint64_t peak_bytes = std::stoull(std::string(buffer, static_cast<size_t>(got))) * 1024;
  const uint64_t limit = file_bytes + file_bytes / 2 + (uint64_t{64} << 20);
  std::printf("peak resident size loading a %.1f MiB file: %.1f MiB (limit %.1f MiB)\n", file_bytes / 1048576.0,
              peak_bytes / 1048576.0, limit / 1048576.0);
  EXPECT_LT(peak_bytes, limit);
}

}  // namespace
}  // namespace tandem
