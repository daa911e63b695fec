// The host channel of torchrun-style launches: the processes meet through files in a directory they share.
//
// Note [File rendezvous]: TANDEM_INIT_METHOD=file:///path names a DIRECTORY (created when missing; a path that exists
// and is not a directory is refused). Everything is a FileStore key in it (file_store.h: one file per key, written
// whole by temp file + rename, read by polling with a short backoff). No locks, no network, no server.
//
//   <path>/generation        rank 0's fresh 64-bit job id G, rewritten by every new job
//   <path>/hello.<r>         rank r > 0: {the G it has seen, its own fresh nonce N_r}
//   <path>/job-<G>/ready     rank 0: {G, N_1, ..., N_{size-1}}: the rendezvous is complete
//   <path>/job-<G>/<k>.<r>   rank r's contribution to round k (every collective is one round)
//   <path>/job-<G>/abort     "<rank>\n<message>" of a rank that aborted the job
//   <path>/job-<G>/left.<r>  rank r > 0 has destroyed its channel: it reads nothing of this job any more
//
// Rendezvous. A directory may hold the state of an earlier job that crashed (its generation, hellos, job directory,
// even an abort key), and nothing tells a process of this job by looking at a file alone whether it is stale. So every
// process proves freshness with a random id of its own: rank 0 removes stale job-* directories (and hello files of
// ranks >= size), creates job-<G> and publishes G; rank r > 0 publishes hello.<r> = {G', N_r} for whatever
// generation G' it reads, republishing whenever the generation changes, until job-<G'>/ready holds G' and N_r in
// slot r. Rank 0 accepts only hellos that carry its own G, and writes ready once every rank's has arrived. A stale
// hello carries an older G; a stale ready lacks N_r; so no process joins an earlier job's state, and every key used
// afterwards lives under job-<G>, where nothing stale can be. A rendezvous file of an unexpected size counts as
// absent (a job of another size, or a corrupt file that this job's writer replaces); anything but a regular file
// under a key is an Error. Both sides are bounded by the creation timeout, whose
// Error names the ranks that never arrived. Limits: ids are 64 random bits (a collision is not guarded against);
// every process of an earlier job on the path must have left it (destroyed its channel, see End) or ended, and two
// jobs must never share a path at once (rank 0's clean-up would remove a live job's directory; PyTorch's FileStore
// likewise needs a file no other job uses); a temporary file of a process that died in the middle of a write stays
// behind (it blocks only the final rmdir).
//
// Rounds. Every collective is one round k in which EVERY rank publishes <k>.<rank> (empty when it has nothing to
// send, as a broadcast's non-roots and a barrier) and waits until every rank's file of round k exists, reading those
// it needs. Hence no rank leaves round k before every rank has entered it. When rank r enters round k it removes its
// own file of round k-2: having left round k-1, it knows every rank entered round k-1, so every rank has left round
// k-2 and no longer reads it; its file of round k-1 may still be being read and stays. A job directory therefore
// holds at most two round files per rank. all_reduce_sum reads every rank's floats and adds them in rank order,
// ((x_0 + x_1) + x_2) + ..., the same additions on every rank, so the results are bit-identical.
//
// Abort. abort() writes the abort key (unless one exists: the first failure is the cause) and ends the process with
// _exit(1), running no destructors; it touches only its own temporary file, so it is safe while another thread waits.
// Every poll loop of a round, and the start of every round, checks the abort key: a rank that finds it prints
// "comm: rank R: aborting: rank Q failed: <message>" and exits with status 1. A rank busy elsewhere (computing, or
// blocked in NCCL) learns of it at its next round or through its own watchdog.
//
// End. Only rank 0 ever removes a job directory (here, and as stale state in its next rendezvous), so rank 0 alone
// waits when it leaves. A rank r > 0 destroying its channel has read its last round to the end: it publishes
// left.<r> and returns at once. Rank 0's destructor waits until left.<r> exists for every r > 0, then removes
// job-<G>, the generation and the directory itself (rmdir: only when nothing else is in it). Without that wait a
// process that creates groups one after another (each destroyed before the next) would, as rank 0 of the next group,
// remove job-<G> while a slower rank still polls for rank 0's file of the last round, and that rank would hang until
// its watchdog. The wait is bounded like every other: it follows the abort key, and after the creation timeout rank 0
// reports the ranks that never left on stderr and returns, leaving job-<G> in place for the next rendezvous to remove
// (a rank that outlives rank 0's group by that long is using a group its peers have left). A clean run leaves no
// file behind. A rank already in the next rendezvous may have read job G's generation and find the directory gone
// when it publishes its hello for it: it skips that hello (stale anyway) and waits for rank 0's next generation, which
// rank 0 publishes in the directory it creates anew.
//
// File systems. On one host the page cache is coherent, so rename makes a value visible to every process at once and
// fsync is not needed (durability across a machine crash is no concern of a rendezvous). On NFS, close() sends the
// data to the server before rename (close-to-open consistency) and rename is atomic on the server
// (NFSv3 and later), so correctness holds; a client's attribute cache may delay when a new file becomes visible
// (mount with lookupcache=positive or a small actimeo for fast rounds). Values are native-endian: the hosts of one
// job must share a byte order.

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "process/file_store.h"
#include "process/host_channel.h"
#include "tandem/core/error.h"

namespace tandem::comm::detail {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr std::string_view kGenerationKey = "generation";
constexpr std::string_view kReadyKey = "ready";
constexpr std::string_view kAbortKey = "abort";
constexpr size_t kAbortTextLimit = 4096;

std::string hello_key(int rank) { return "hello." + std::to_string(rank); }
std::string round_key(uint64_t round, int rank) { return std::to_string(round) + "." + std::to_string(rank); }
std::string left_key(int rank) { return "left." + std::to_string(rank); }

std::string job_directory(const std::string& root, uint64_t generation) {
  char name[32];
  std::snprintf(name, sizeof(name), "job-%016llx", static_cast<unsigned long long>(generation));
  return root + "/" + name;
}

// A fresh nonzero 64-bit id (generation or nonce): the system's random source, mixed with the pid and the clock in
// case that source is weak.
uint64_t fresh_id() {
  std::random_device device;
  uint64_t id = (static_cast<uint64_t>(device()) << 32) ^ device();
  id ^= static_cast<uint64_t>(::getpid()) * 0x9E3779B97F4A7C15ull;
  id ^= static_cast<uint64_t>(Clock::now().time_since_epoch().count());
  return id == 0 ? 1 : id;
}

template <typename T>
std::span<const std::byte> bytes_of(const std::vector<T>& values) {
  return std::as_bytes(std::span<const T>(values));
}
template <typename T>
std::span<std::byte> writable_bytes_of(std::vector<T>& values) {
  return std::as_writable_bytes(std::span<T>(values));
}

// "1, 3" for the ranks not marked as arrived.
std::string missing_ranks(const std::vector<bool>& arrived) {
  std::string list;
  for (size_t r = 0; r < arrived.size(); ++r) {
    if (arrived[r]) continue;
    list += (list.empty() ? "" : ", ") + std::to_string(r);
  }
  return list;
}

[[noreturn]] void fail_rendezvous(const LaunchInfo& info, std::chrono::milliseconds timeout,
                                  const std::vector<bool>& arrived) {
  TANDEM_FAIL("comm::make_file_channel: rank ", info.rank, " of ", info.size, ": the rendezvous in ",
              excerpt(info.rendezvous_path, 200), " did not complete within ", timeout.count(),
              " ms; ranks that never arrived: ", missing_ranks(arrived));
}

// Makes sure `path` is a directory, creating it when missing, and returns it without trailing slashes.
std::string prepare_directory(const std::string& path) {
  TANDEM_CHECK(!path.empty() && path.front() == '/', "comm::make_file_channel: rendezvous path ", excerpt(path, 200),
               " is not absolute but expected file:///absolute/path in TANDEM_INIT_METHOD");
  std::string directory = path;
  while (directory.size() > 1 && directory.back() == '/') directory.pop_back();
  std::error_code error;
  fs::file_status status = fs::status(directory, error);
  TANDEM_CHECK(!fs::exists(status) || fs::is_directory(status), "comm::make_file_channel: rendezvous path ",
               excerpt(directory, 200), " exists and is not a directory but expected a directory (or a path to ",
               "create one at) that every process of the job can reach");
  fs::create_directories(directory, error);
  TANDEM_CHECK(!error && fs::is_directory(directory, error), "comm::make_file_channel: cannot create the rendezvous ",
               "directory ", excerpt(directory, 200), ": ", error.message());
  return directory;
}

// Rank 0's clean-up before a new generation (Note [File rendezvous]): earlier jobs' directories and hello files of
// ranks this job does not have. Failures are left to surface later (a rank that cannot write gets an Error).
void remove_stale_state(const std::string& root, int size) {
  std::error_code error;
  for (fs::directory_iterator it(root, error), end; !error && it != end; it.increment(error)) {
    std::string name = it->path().filename().string();
    bool stale_job = name.starts_with("job-");
    bool stale_hello = false;
    if (name.starts_with("hello.")) {
      std::string rank = name.substr(6);
      stale_hello = rank.empty() || rank.size() > 9 || rank.find_first_not_of("0123456789") != std::string::npos ||
                    std::stoi(rank) >= size;
    }
    std::error_code ignored;
    if (stale_job) fs::remove_all(it->path(), ignored);
    if (stale_hello) fs::remove(it->path(), ignored);
  }
}

uint64_t lead_rendezvous(const LaunchInfo& info, const std::string& root, std::chrono::milliseconds timeout) {
  auto deadline = Clock::now() + timeout;
  FileStore directory(root);
  remove_stale_state(root, info.size);
  uint64_t generation = fresh_id();
  std::string job = job_directory(root, generation);
  std::error_code error;
  TANDEM_CHECK(fs::create_directory(job, error) && !error, "comm::make_file_channel: cannot create ", excerpt(job, 200),
               ": ", error.message());
  directory.set(kGenerationKey, bytes_of(std::vector<uint64_t>{generation}));

  std::vector<uint64_t> ready(static_cast<size_t>(info.size), 0);
  ready[0] = generation;
  std::vector<bool> arrived(static_cast<size_t>(info.size), false);
  arrived[0] = true;
  Backoff backoff;
  for (int waiting = info.size - 1; waiting > 0;) {
    for (int r = 1; r < info.size; ++r) {
      if (arrived[r]) continue;
      std::vector<uint64_t> hello(2);
      if (directory.try_read(hello_key(r), writable_bytes_of(hello)) != sizeof(uint64_t) * 2) continue;
      if (hello[0] != generation) continue;  // stale, or written before this generation was published
      ready[r] = hello[1];
      arrived[r] = true;
      --waiting;
    }
    if (waiting == 0) break;
    if (Clock::now() > deadline) fail_rendezvous(info, timeout, arrived);
    backoff.sleep();
  }
  FileStore(job).set(kReadyKey, bytes_of(ready));
  return generation;
}

// Publishes rank's hello for `generation`. Returns false when that failed because the generation has ended: rank 0
// removed the generation and the directory at the end of the previous job (Note [File rendezvous]: End) after this
// rank read it, and publishes the next generation in the directory it creates anew.
bool publish_hello(const FileStore& directory, int rank, uint64_t generation, uint64_t nonce) {
  try {
    directory.set(hello_key(rank), bytes_of(std::vector<uint64_t>{generation, nonce}));
    return true;
  } catch (const Error&) {
    std::vector<uint64_t> current(1);
    if (directory.try_read(kGenerationKey, writable_bytes_of(current)) == sizeof(uint64_t) && current[0] == generation)
      throw;
    return false;
  }
}

uint64_t join_rendezvous(const LaunchInfo& info, const std::string& root, std::chrono::milliseconds timeout) {
  auto deadline = Clock::now() + timeout;
  FileStore directory(root);
  const uint64_t nonce = fresh_id();
  const size_t ready_bytes = sizeof(uint64_t) * static_cast<size_t>(info.size);
  uint64_t announced = 0;  // the generation of this rank's hello; ids are never 0
  Backoff backoff;
  for (;;) {
    std::vector<uint64_t> generation(1);
    if (directory.try_read(kGenerationKey, writable_bytes_of(generation)) == sizeof(uint64_t) &&
        generation[0] != announced && publish_hello(directory, info.rank, generation[0], nonce)) {
      announced = generation[0];
    }
    if (announced != 0) {
      std::vector<uint64_t> ready(static_cast<size_t>(info.size));
      if (FileStore(job_directory(root, announced)).try_read(kReadyKey, writable_bytes_of(ready)) == ready_bytes &&
          ready[0] == announced && ready[info.rank] == nonce) {
        directory.remove(hello_key(info.rank));
        return announced;
      }
    }
    if (Clock::now() > deadline) {
      // Who is missing, as far as this rank can tell: every rank whose hello lacks the generation seen here, or
      // rank 0 when there is no generation at all or every hello is there (rank 0 did not confirm).
      std::vector<bool> arrived(static_cast<size_t>(info.size), true);
      arrived[0] = announced != 0;
      for (int r = 1; r < info.size && announced != 0; ++r) {
        std::vector<uint64_t> hello(2);
        arrived[r] =
            directory.try_read(hello_key(r), writable_bytes_of(hello)) == sizeof(uint64_t) * 2 && hello[0] == announced;
      }
      if (missing_ranks(arrived).empty()) arrived[0] = false;
      fail_rendezvous(info, timeout, arrived);
    }
    backoff.sleep();
  }
}

class FileChannel final : public HostChannel {
 public:
  FileChannel(const LaunchInfo& info, std::string root, uint64_t generation, std::chrono::milliseconds timeout)
      : rank_(info.rank),
        size_(info.size),
        root_(std::move(root)),
        generation_(generation),
        timeout_(timeout),
        job_(job_directory(root_, generation)) {}
  ~FileChannel() override;
  FileChannel(const FileChannel&) = delete;
  FileChannel& operator=(const FileChannel&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  std::vector<std::byte> all_gather(std::span<const std::byte> mine) override {
    uint64_t round = begin_round(mine);
    std::vector<std::byte> all(mine.size() * static_cast<size_t>(size_));
    for (int r = 0; r < size_; ++r) {
      std::span<std::byte> slot(all.data() + mine.size() * static_cast<size_t>(r), mine.size());
      if (r == rank_) {
        std::copy(mine.begin(), mine.end(), slot.begin());
      } else {
        wait_for(round, r, slot);
      }
    }
    return all;
  }

  void broadcast(std::span<std::byte> data, int root) override {
    TANDEM_CHECK(root >= 0 && root < size_, "comm::FileChannel::broadcast: got root ", root,
                 " but expected a rank in [0, ", size_, ")");
    uint64_t round = begin_round(rank_ == root ? std::span<const std::byte>(data) : std::span<const std::byte>());
    for (int r = 0; r < size_; ++r) {
      if (r != rank_) wait_for(round, r, r == root ? data : std::span<std::byte>());
    }
  }

  void all_reduce_sum(std::span<float> data) override {
    uint64_t round = begin_round(std::as_bytes(data));
    std::vector<float> total(data.size());
    std::vector<float> other(data.size());
    for (int r = 0; r < size_; ++r) {
      std::span<const float> values = data;
      if (r != rank_) {
        wait_for(round, r, writable_bytes_of(other));
        values = other;
      }
      if (r == 0) {
        std::copy(values.begin(), values.end(), total.begin());
      } else {
        for (size_t i = 0; i < total.size(); ++i) total[i] += values[i];
      }
    }
    std::copy(total.begin(), total.end(), data.begin());
  }

  void barrier() override {
    uint64_t round = begin_round({});
    for (int r = 0; r < size_; ++r) {
      if (r != rank_) wait_for(round, r, {});
    }
  }

  [[noreturn]] void abort(std::string_view message) override {
    std::string line = std::string(message) + "\n";
    write_stderr(line);
    try {
      if (!job_.contains(kAbortKey)) {
        std::string record = std::to_string(rank_) + "\n" + std::string(message);
        job_.set(kAbortKey, std::as_bytes(std::span<const char>(record)));
      }
    } catch (const std::exception& e) {
      write_stderr(std::string("comm: rank ") + std::to_string(rank_) + ": the other ranks could not be told (" +
                   e.what() + "); their watchdogs will end them\n");
    }
    ::_exit(1);
  }

 private:
  static void write_stderr(const std::string& text) {
    size_t done = 0;
    while (done < text.size()) {
      ssize_t put = ::write(STDERR_FILENO, text.data() + done, text.size() - done);
      if (put <= 0) return;
      done += static_cast<size_t>(put);
    }
  }

  // Starts the next round with this rank's contribution (Note [File rendezvous]: every rank publishes one file per
  // round, and its file of two rounds ago is no longer read by anyone).
  uint64_t begin_round(std::span<const std::byte> mine) {
    check_abort();
    uint64_t round = next_round_++;
    if (round >= 2) job_.remove(round_key(round - 2, rank_));
    job_.set(round_key(round, rank_), mine);
    return round;
  }

  // Waits until rank r's file of `round` exists and reads it into out, whose size it must have.
  void wait_for(uint64_t round, int r, std::span<std::byte> out) {
    Backoff backoff;
    for (;;) {
      if (std::optional<uint64_t> size = job_.try_read(round_key(round, r), out)) {
        TANDEM_CHECK(*size == out.size(), "comm::FileChannel: round ", round, ": rank ", r, " sent ", *size, " bytes (",
                     excerpt(job_.path_of(round_key(round, r)), 200), ") but rank ", rank_, " expected ", out.size(),
                     "; every process must call the same collectives with the same sizes");
        return;
      }
      check_abort();
      backoff.sleep();
    }
  }

  void check_abort() const {
    if (job_.contains(kAbortKey)) follow_abort();
  }

  [[noreturn]] void follow_abort() const {
    std::string record = job_.try_read_text(kAbortKey, kAbortTextLimit).value_or("");
    size_t newline = record.find('\n');
    std::string who = record.substr(0, newline);
    if (who.empty() || who.size() > 9 || who.find_first_not_of("0123456789") != std::string::npos) who = "?";
    std::string message = newline == std::string::npos ? "" : record.substr(newline + 1);
    write_stderr("comm: rank " + std::to_string(rank_) + ": aborting: rank " + who +
                 " failed: " + excerpt(message, kAbortTextLimit) + "\n");
    ::_exit(1);
  }

  // Rank 0's departure: waits until every other rank has published left.<r> (Note [File rendezvous]: End).
  // Returns false when the timeout passed first, after reporting the ranks that never left on stderr.
  bool wait_until_every_rank_left() const {
    const auto deadline = Clock::now() + timeout_;
    std::vector<bool> left(static_cast<size_t>(size_), false);
    left[0] = true;
    Backoff backoff;
    for (int waiting = size_ - 1; waiting > 0;) {
      for (int r = 1; r < size_; ++r) {
        if (left[r] || !job_.contains(left_key(r))) continue;
        left[r] = true;
        --waiting;
      }
      if (waiting == 0) break;
      check_abort();
      if (Clock::now() > deadline) {
        write_stderr("comm: rank 0: ranks that did not leave the file rendezvous within " +
                     std::to_string(timeout_.count()) + " ms of rank 0: " + missing_ranks(left) + "; " +
                     excerpt(job_.directory(), 200) + " stays for the next rendezvous to remove\n");
        return false;
      }
      backoff.sleep();
    }
    return true;
  }

  // Removes everything of this job once every rank has left (Note [File rendezvous]).
  void remove_job_files() {
    std::error_code ignored;
    fs::remove_all(job_.directory(), ignored);
    FileStore directory(root_);
    std::vector<uint64_t> generation(1);
    if (directory.try_read(kGenerationKey, writable_bytes_of(generation)) == sizeof(uint64_t) &&
        generation[0] == generation_) {
      directory.remove(kGenerationKey);
    }
    ::rmdir(root_.c_str());
  }

  const int rank_;
  const int size_;
  const std::string root_;
  const uint64_t generation_;
  const std::chrono::milliseconds timeout_;  // bounds rank 0's wait for the others to leave
  const FileStore job_;
  uint64_t next_round_ = 0;
};

FileChannel::~FileChannel() {
  static constinit tandem::detail::ReportOnce failures("leaving the file rendezvous");
  failures.run([&] {
    if (rank_ != 0) {
      job_.set(left_key(rank_), {});
    } else if (wait_until_every_rank_left()) {
      remove_job_files();
    }
  });
}

}  // namespace

std::unique_ptr<HostChannel> make_file_channel(const LaunchInfo& info, std::chrono::milliseconds timeout) {
  TANDEM_CHECK(info.size >= 1 && info.rank >= 0 && info.rank < info.size, "comm::make_file_channel: got rank ",
               info.rank, " of size ", info.size, " but expected 0 <= rank < size");
  TANDEM_CHECK(timeout.count() > 0, "comm::make_file_channel: got a timeout of ", timeout.count(),
               " ms but expected a positive one");
  std::string root = prepare_directory(info.rendezvous_path);
  uint64_t generation = info.rank == 0 ? lead_rendezvous(info, root, timeout) : join_rendezvous(info, root, timeout);
  return std::make_unique<FileChannel>(info, std::move(root), generation, timeout);
}

}  // namespace tandem::comm::detail
