// AtomicFile: readers see the old contents or the new; links, modes and special files survive; no temp file is left.
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "support/test_support.h"

namespace tandem {
namespace {

namespace fs = std::filesystem;

class AtomicFileTest : public ::testing::Test {
 protected:
  // A fresh directory per test and process, so that listing it shows exactly what the test made.
  void SetUp() override {
    dir_ = testing::scratch_path(::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    fs::permissions(dir_, fs::perms::owner_all, fs::perm_options::add);
    fs::remove_all(dir_);
  }

  std::string path(const std::string& name) const { return dir_ + "/" + name; }

  // The names in the directory, sorted (hidden ones included).
  std::vector<std::string> listing() const {
    std::vector<std::string> names;
    for (const auto& entry : fs::directory_iterator(dir_)) names.push_back(entry.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }

  std::string dir_;
};

std::string read_file(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  std::ostringstream contents;
  contents << file.rdbuf();
  return contents.str();
}

void make_file(const std::string& path, const std::string& contents) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << contents;
}

mode_t mode_of(const std::string& path) {
  struct stat status {};
  EXPECT_EQ(::lstat(path.c_str(), &status), 0) << path;
  return status.st_mode;
}

std::string hostname() {
  char name[256] = {};
  ::gethostname(name, sizeof(name) - 1);
  return name;
}

// A pid that no process has: a child that has exited and been reaped.
pid_t dead_pid() {
  const pid_t child = fork();
  if (child == 0) _exit(0);
  int status = 0;
  waitpid(child, &status, 0);
  return child;
}

// Restores the umask when the test ends.
struct UmaskGuard {
  explicit UmaskGuard(mode_t mask) : previous(::umask(mask)) {}
  ~UmaskGuard() { ::umask(previous); }
  mode_t previous;
};

TEST_F(AtomicFileTest, WritesAndReplacesContents) {
  const std::string file = path("file.json");
  write_file_atomically(file, "first", "test");
  EXPECT_EQ(read_file(file), "first");
  write_file_atomically(file, "second, longer", "test");
  EXPECT_EQ(read_file(file), "second, longer");
  write_file_atomically(file, "", "test");
  EXPECT_EQ(read_file(file), "");
  EXPECT_EQ(listing(), std::vector<std::string>{"file.json"});

  AtomicFile pieces(file, "test");
  pieces.write("ab", 2);
  pieces.write(std::string_view("cd"));
  EXPECT_EQ(pieces.target(), file);
  pieces.commit();
  EXPECT_EQ(read_file(file), "abcd");
}

TEST_F(AtomicFileTest, WritesThroughASymlinkWhichStaysALink) {
  make_file(path("real"), "old");
  fs::create_symlink("real", path("link"));
  AtomicFile file(path("link"), "test");
  EXPECT_EQ(file.target(), path("real"));
  file.write("new");
  file.commit();
  EXPECT_TRUE(fs::is_symlink(path("link")));
  EXPECT_EQ(fs::read_symlink(path("link")), "real");
  EXPECT_EQ(read_file(path("real")), "new");
  EXPECT_EQ(listing(), (std::vector<std::string>{"link", "real"}));
}

TEST_F(AtomicFileTest, WritesThroughAChainOfTwoLinks) {
  make_file(path("real"), "old");
  fs::create_symlink(path("real"), path("second"));  // absolute
  fs::create_symlink("second", path("first"));       // relative
  write_file_atomically(path("first"), "new", "test");
  EXPECT_TRUE(fs::is_symlink(path("first")));
  EXPECT_TRUE(fs::is_symlink(path("second")));
  EXPECT_EQ(read_file(path("real")), "new");
}

TEST_F(AtomicFileTest, ADanglingLinkCreatesItsTarget) {
  fs::create_symlink("made_later", path("link"));
  write_file_atomically(path("link"), "new", "test");
  EXPECT_TRUE(fs::is_symlink(path("link")));
  EXPECT_TRUE(fs::is_regular_file(path("made_later")));
  EXPECT_EQ(read_file(path("link")), "new");
  EXPECT_EQ(listing(), (std::vector<std::string>{"link", "made_later"}));
}

TEST_F(AtomicFileTest, RelativeLinkIsReadAgainstTheLinksDirectory) {
  fs::create_directories(path("sub"));
  make_file(path("real"), "old");
  fs::create_symlink("../real", path("sub/link"));
  write_file_atomically(path("sub/link"), "new", "test");
  EXPECT_EQ(read_file(path("real")), "new");
  EXPECT_TRUE(fs::is_symlink(path("sub/link")));

  // Through a directory symlink, "../" leaves the directory the link really is in (as the kernel reads it), not the
  // one its path names: alias/link -> ../target means deep/target, not <dir>/target.
  fs::create_directories(path("deep/inner"));
  fs::create_symlink("deep/inner", path("alias"));
  fs::create_symlink("../target", path("deep/inner/link"));
  write_file_atomically(path("alias/link"), "through", "test");
  EXPECT_EQ(read_file(path("deep/target")), "through");
  EXPECT_FALSE(fs::exists(path("target")));
}

TEST_F(AtomicFileTest, BareNamesAreReadAgainstTheWorkingDirectory) {
  make_file(path("real"), "old");
  fs::create_symlink("real", path("bare"));
  const pid_t child = fork();
  if (child == 0) {  // chdir in a child, so that the other tests keep their working directory
    if (::chdir(dir_.c_str()) != 0) _exit(3);
    AtomicFile file("bare", "test");
    file.write("new");
    file.commit();
    _exit(file.target() == "real" ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "1: another target, 3: no chdir";
  EXPECT_EQ(read_file(path("real")), "new");
  EXPECT_EQ(listing(), (std::vector<std::string>{"bare", "real"}));
}

TEST_F(AtomicFileTest, SymlinkLoopIsAnError) {
  fs::create_symlink("b", path("a"));
  fs::create_symlink("a", path("b"));
  EXPECT_ERROR(AtomicFile(path("a"), "test"), "test: cannot write '" + path("a") + "'");
  EXPECT_ERROR(AtomicFile(path("a"), "test"), "too many levels of symbolic links");
  fs::create_symlink("self", path("self"));
  EXPECT_ERROR(write_file_atomically(path("self"), "x", "test"), "too many levels of symbolic links");
  EXPECT_EQ(listing(), (std::vector<std::string>{"a", "b", "self"}));
}

TEST_F(AtomicFileTest, KeepsTheModeOfAnExistingFile) {
  for (mode_t mode : {mode_t{0600}, mode_t{0640}, mode_t{0755}}) {
    SCOPED_TRACE(mode);
    const std::string file = path("file");
    make_file(file, "old");
    ::chmod(file.c_str(), mode);
    write_file_atomically(file, "new", "test");
    EXPECT_EQ(mode_of(file) & 07777, mode);
    EXPECT_EQ(read_file(file), "new");
  }
}

// A file protected from writing (0444, or 0400 for someone else) is never replaced, also by root, and nothing is
// left behind: the check before a run refuses it too.
TEST_F(AtomicFileTest, AReadOnlyFileIsNeverReplaced) {
  const std::string file = path("protected");
  for (mode_t mode : {mode_t{0444}, mode_t{0400}, mode_t{0555}}) {
    SCOPED_TRACE(mode);
    make_file(file, "precious");
    ::chmod(file.c_str(), mode);
    const std::string fragment = "test: cannot write '" + file + "': it is read-only (mode 0" +
                                 std::to_string(mode / 64) + std::to_string(mode / 8 % 8) + std::to_string(mode % 8) +
                                 ")";
    EXPECT_ERROR(write_file_atomically(file, "new", "test"), fragment);
    EXPECT_ERROR(check_writable(file, "test"), fragment);
    EXPECT_EQ(read_file(file), "precious");
    EXPECT_EQ(listing(), (std::vector<std::string>{"protected"}));
    ::chmod(file.c_str(), 0644);
    fs::remove(file);
  }
  // Through a symlink, the target's mode counts.
  make_file(file, "precious");
  ::chmod(file.c_str(), 0444);
  fs::create_symlink("protected", path("link"));
  EXPECT_ERROR(write_file_atomically(path("link"), "new", "test"), "it is read-only (mode 0444)");
  EXPECT_EQ(read_file(file), "precious");
  ::chmod(file.c_str(), 0644);
}

TEST_F(AtomicFileTest, NewFileGetsTheUmaskedDefaultMode) {
  for (mode_t mask : {mode_t{022}, mode_t{027}, mode_t{077}}) {
    SCOPED_TRACE(mask);
    UmaskGuard guard(mask);
    const std::string file = path("new" + std::to_string(mask));
    write_file_atomically(file, "new", "test");
    EXPECT_EQ(mode_of(file) & 07777, 0666 & ~mask);
  }
}

TEST_F(AtomicFileTest, RootKeepsTheOwnerOfAnExistingFile) {
  if (geteuid() != 0) GTEST_SKIP() << "only root can give a file another owner";
  const std::string file = path("owned");
  make_file(file, "old");
  ASSERT_EQ(::chown(file.c_str(), 4242, 4343), 0);
  write_file_atomically(file, "new", "test");
  struct stat status {};
  ASSERT_EQ(::stat(file.c_str(), &status), 0);
  EXPECT_EQ(status.st_uid, 4242u);
  EXPECT_EQ(status.st_gid, 4343u);
}

TEST_F(AtomicFileTest, RefusesTargetsThatAreNotRegularFiles) {
  fs::create_directories(path("directory"));
  ASSERT_EQ(::mkfifo(path("fifo").c_str(), 0600), 0);
  fs::create_symlink("/dev/null", path("null_link"));
  EXPECT_ERROR(AtomicFile(path("directory"), "test"),
               "test: cannot write '" + path("directory") + "': it is a directory but expected a regular file");
  EXPECT_ERROR(AtomicFile(path("fifo"), "test"), "it is a FIFO but expected a regular file");
  EXPECT_ERROR(AtomicFile("/dev/null", "test"), "it is a character device but expected a regular file");
  EXPECT_ERROR(write_file_atomically(path("null_link"), "x", "test"),
               "test: cannot write '" + path("null_link") + "' (through symlinks: '/dev/null'): it is a character");
  EXPECT_ERROR(AtomicFile(path("directory/"), "test"), "it is a directory");

  EXPECT_TRUE(S_ISDIR(mode_of(path("directory"))));
  EXPECT_TRUE(S_ISFIFO(mode_of(path("fifo"))));
  EXPECT_TRUE(S_ISCHR(mode_of("/dev/null")));
  EXPECT_TRUE(fs::is_symlink(path("null_link")));
  EXPECT_EQ(listing(), (std::vector<std::string>{"directory", "fifo", "null_link"}));
  EXPECT_TRUE(fs::is_empty(path("directory")));
}

TEST_F(AtomicFileTest, MissingDirectoryIsAnError) {
  EXPECT_ERROR(
      AtomicFile(path("nowhere/file"), "test"),
      "test: cannot write '" + path("nowhere/file") + "': the directory '" + path("nowhere") + "' does not exist");
  fs::create_symlink("nowhere/file", path("link"));
  EXPECT_ERROR(AtomicFile(path("link"), "test"), "the directory '" + path("nowhere") + "' does not exist");
  make_file(path("plain"), "x");
  EXPECT_ERROR(AtomicFile(path("plain/file"), "test"), "Not a directory");
  EXPECT_ERROR(AtomicFile("", "test"), "test: cannot write '': the path is empty");
  EXPECT_ERROR(AtomicFile(path("new_dir/"), "test"), "the path names a directory but expected a file");
}

TEST_F(AtomicFileTest, DestroyedWithoutCommitLeavesTheOldFileAndNoTempFile) {
  const std::string file = path("file");
  make_file(file, "old");
  {
    AtomicFile abandoned(file, "test");
    abandoned.write("partial new contents");
    EXPECT_EQ(listing().size(), 2u);  // the target and the temp file
  }
  EXPECT_EQ(read_file(file), "old");
  EXPECT_EQ(listing(), std::vector<std::string>{"file"});
}

TEST_F(AtomicFileTest, TwoWritersOfOnePathGetDifferentTempFiles) {
  const std::string file = path("file");
  AtomicFile first(file, "test");
  AtomicFile second(file, "test");
  std::vector<std::string> names = listing();
  ASSERT_EQ(names.size(), 2u);
  EXPECT_NE(names[0], names[1]);
  const std::string prefix = ".file.tandem-tmp." + hostname() + "." + std::to_string(getpid()) + ".";
  for (const std::string& name : names) EXPECT_EQ(name.rfind(prefix, 0), 0u) << name;
  first.write("first");
  second.write("second");
  first.commit();
  EXPECT_EQ(read_file(file), "first");
  second.commit();
  EXPECT_EQ(read_file(file), "second");
  EXPECT_EQ(listing(), std::vector<std::string>{"file"});
}

TEST_F(AtomicFileTest, RemovesOnlyStaleTempFilesOfDeadProcessesOnThisHost) {
  const std::string host = hostname();
  const std::string dead = std::to_string(dead_pid());
  const std::string alive = std::to_string(getpid());
  const std::string dead_here = ".file.tandem-tmp." + host + "." + dead + ".0";
  const std::string alive_here = ".file.tandem-tmp." + host + "." + alive + ".0";
  const std::string dead_elsewhere = ".file.tandem-tmp.another-host." + dead + ".0";
  const std::string other_name = ".other.tandem-tmp." + host + "." + dead + ".0";
  const std::string not_a_temp = ".file.tandem-tmp." + host + "." + dead + ".0.keep";
  for (const std::string& name : {dead_here, alive_here, dead_elsewhere, other_name, not_a_temp}) {
    make_file(path(name), "left behind");
  }
  AtomicFile file(path("file"), "test");
  std::vector<std::string> names = listing();
  EXPECT_EQ(std::count(names.begin(), names.end(), dead_here), 0);
  for (const std::string& name : {alive_here, dead_elsewhere, other_name, not_a_temp}) {
    EXPECT_EQ(std::count(names.begin(), names.end(), name), 1) << name;
  }
  EXPECT_EQ(names.size(), 5u);  // the four kept and this writer's own temp file
}

// Exit codes of the child in WriteFailureKeepsTheOldFileAndRemovesTheTempFile: 0 when all held, else these bits.
enum WriteFailureCheck { kNoError = 1, kWrongMessage = 2, kOldFileChanged = 4, kTempFileLeft = 8, kNoLaterError = 16 };

TEST_F(AtomicFileTest, WriteFailureKeepsTheOldFileAndRemovesTheTempFile) {
  const std::string file = path("file");
  make_file(file, "old");
  const pid_t child = fork();
  if (child == 0) {
    // A file size limit makes write() fail with EFBIG past 1 KiB (instead of raising SIGXFSZ), as a full disk would.
    ::signal(SIGXFSZ, SIG_IGN);
    const rlimit limit{1024, 1024};
    ::setrlimit(RLIMIT_FSIZE, &limit);
    int failures = kNoError;
    AtomicFile writer(file, "test");
    try {
      writer.write(std::string(4096, 'x'));
    } catch (const Error& e) {
      failures &= ~kNoError;
      const std::string message = e.what();
      if (message.find("test: cannot write '" + file + "': writing '") == std::string::npos ||
          message.find("File too large") == std::string::npos) {
        failures |= kWrongMessage;
      }
    }
    if (read_file(file) != "old") failures |= kOldFileChanged;
    if (listing() != std::vector<std::string>{"file"}) failures |= kTempFileLeft;  // removed before the destructor
    try {
      writer.commit();
      failures |= kNoLaterError;
    } catch (const Error&) {
    }
    _exit(failures);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << "the child was killed by signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0) << "failed checks (bits of WriteFailureCheck): " << WEXITSTATUS(status);
  EXPECT_EQ(read_file(file), "old");
  EXPECT_EQ(listing(), std::vector<std::string>{"file"});
}

TEST_F(AtomicFileTest, OverwriteReplacesBytesAlreadyWritten) {
  const std::string file = path("file");
  AtomicFile pieces(file, "test");
  pieces.write(std::string_view("header:????;"));
  pieces.write(std::string_view("data"));
  pieces.overwrite(7, "seal", 4);
  pieces.write(std::string_view("!"));  // the end of the file stays where writing goes on
  EXPECT_ERROR(pieces.overwrite(15, "xyz", 3),
               "test: cannot write '" + file + "': overwrite of 3 bytes at offset 15 but only 17 bytes are written");
  EXPECT_ERROR(pieces.overwrite(18, "", 0), "overwrite of 0 bytes at offset 18");
  pieces.overwrite(17, "", 0);
  pieces.commit();
  EXPECT_EQ(read_file(file), "header:seal;data!");
  EXPECT_ERROR(pieces.overwrite(0, "h", 1), "overwrite after commit()");
  EXPECT_EQ(listing(), std::vector<std::string>{"file"});
}

TEST_F(AtomicFileTest, UseAfterCommitIsAnError) {
  AtomicFile file(path("file"), "test");
  file.commit();
  EXPECT_ERROR(file.write("late"), "test: cannot write '" + path("file") + "': write after commit()");
  EXPECT_ERROR(file.commit(), "commit after commit()");
  EXPECT_EQ(read_file(path("file")), "");
}

TEST_F(AtomicFileTest, CheckWritablePassesForWritablePaths) {
  make_file(path("existing"), "old");
  fs::create_symlink("not_yet", path("dangling"));
  for (const char* name : {"new", "existing", "dangling"}) {
    SCOPED_TRACE(name);
    EXPECT_NO_THROW(check_writable(path(name), "test"));
  }
  EXPECT_EQ(read_file(path("existing")), "old");
  EXPECT_EQ(listing(), (std::vector<std::string>{"dangling", "existing"}));  // nothing written, no temp file
}

TEST_F(AtomicFileTest, CheckWritableRefusesWhatAWriteWouldRefuse) {
  fs::create_directories(path("directory"));
  ASSERT_EQ(::mkfifo(path("fifo").c_str(), 0600), 0);
  make_file(path("plain"), "x");
  fs::create_symlink("loop", path("loop"));
  fs::create_symlink("nowhere/file", path("broken"));
  const std::pair<std::string, std::string> cases[] = {
      {path("nowhere/file"), "the directory '" + path("nowhere") + "' does not exist"},
      {path("broken"), "the directory '" + path("nowhere") + "' does not exist"},
      {path("plain/file"), "Not a directory"},
      {path("directory"), "it is a directory but expected a regular file"},
      {path("fifo"), "it is a FIFO but expected a regular file"},
      {"/dev/null", "it is a character device"},
      {path("loop"), "too many levels of symbolic links"},
  };
  for (const auto& [target, fragment] : cases) {
    SCOPED_TRACE(target);
    EXPECT_ERROR(check_writable(target, "--out"), "--out: cannot write '" + target + "'");
    EXPECT_ERROR(check_writable(target, "--out"), fragment);
  }

  // A read-only directory, checked in a child that is not root (root may write anywhere): 0 when the error came.
  fs::permissions(path("directory"), fs::perms::owner_read | fs::perms::owner_exec | fs::perms::group_read |
                                         fs::perms::group_exec | fs::perms::others_read | fs::perms::others_exec);
  const pid_t child = fork();
  if (child == 0) {
    if (geteuid() == 0 && setuid(65534) != 0) _exit(3);
    try {
      check_writable(path("directory/file"), "--out");
      _exit(1);
    } catch (const Error& e) {
      const std::string expected = "the directory '" + path("directory") + "' is not writable: Permission denied";
      _exit(std::string(e.what()).find(expected) != std::string::npos ? 0 : 2);
    }
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "1: no error, 2: another message, 3: no setuid";
}

}  // namespace
}  // namespace tandem
