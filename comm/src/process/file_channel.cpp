// The host channel of torchrun-style launches: the processes meet through files in a directory they share.
//
// Note [File rendezvous]: TANDEM_INIT_METHOD=file:///path names a DIRECTORY (created when missing; a path that exists
// and is not a directory is refused). The directory is the user's: tandem writes, and ever removes, only inside a
// namespace of its own there, tandem-<job id>/, with the names below (LaunchInfo::job_id: TANDEM_JOB_ID, torchrun's
// TORCHELASTIC_RUN_ID, or MASTER_ADDR:MASTER_PORT; a group of several processes needs one). Everything is a FileStore
// key (file_store.h: one file per key, written whole by temp file + rename, read by polling with a short backoff).
// No network and no server; the one exclusive file is rank 0's owner record.
//
//   <ns>/owner                 rank 0's record "<G> <pid> <host>", published with link(): one rank 0 at a time
//   <ns>/generation            rank 0's fresh 64-bit job id G
//   <ns>/hello.<r>.<N>         rank r > 0: {the G it has seen, its own fresh nonce N}
//   <ns>/job-<G>/ready         rank 0: {G, N_1, ..., N_{size-1}}: the rendezvous is complete
//   <ns>/job-<G>/<k>.<r>       rank r's contribution to round k (every collective is one round)
//   <ns>/job-<G>/refused       rank 0 refused the rendezvous: "<the nonces it answers>\n<message>"
//   <ns>/job-<G>/abort         "<rank>\n<message>" of a rank that aborted the job
//   <ns>/job-<G>/left.<r>      rank r > 0 has destroyed its channel: it reads nothing of this job any more
//   <ns>/job-<G>/progress-request  a rank on its way to abort asks every rank for its progress (gather_progress)
//   <ns>/job-<G>/progress.<r>  rank r's RankProgress, written by its abort watcher while the request is there
//   <path>/tandem.created      a process of a job created the rendezvous directory: it goes when the last job's does
//
// Jobs. Two jobs with different ids never see each other's files. Two live jobs with one id on one path: the second
// rank 0 waits until the first has left (its owner record gone; a record of a process of this host that no longer
// exists is a crashed job's and is removed), and fails when that takes longer than the timeout, naming the holder;
// two processes that answer as one rank of a rendezvous (a hello each) make rank 0 refuse it: its refusal ends
// every waiting rank with that message, and once their hellos are gone rank 0 removes the job's files. Neither pairs
// processes of two jobs, unless a process of one job says hello in the other's rendezvous before the rank of that
// number does: a job id names one live job.
//
// Rendezvous. The namespace may hold the state of an earlier job that crashed (its generation, hellos, job
// directory, even an abort key), and nothing tells a process of this job by looking at a file alone whether it is
// stale. So every process proves freshness with a random id of its own: rank 0, once it holds the namespace, removes
// every job-* directory and hello, creates job-<G> and publishes G; rank r > 0 publishes hello.<r>.<N_r> = {G', N_r}
// for whatever generation G' it reads, republishing whenever the generation changes, until job-<G'>/ready holds G'
// and N_r in slot r. Rank 0 accepts only hellos that carry its own G, and writes ready once every rank's has arrived.
// A stale hello carries an older G; a stale ready lacks N_r; so no process joins an earlier job's state, and every
// key used afterwards lives under job-<G>, where nothing stale can be. A rendezvous file of an unexpected size counts
// as absent (a job of another size, or a corrupt file that this job's writer replaces); anything but a regular file
// under a key is an Error. Both sides are bounded by the creation timeout, whose Error names the ranks that never
// arrived. A rendezvous that fails removes what its process published (rank 0: its job directory, generation and
// owner record; rank r: its hello), and the namespace and a created rendezvous directory when nothing else is left.
// Limits: ids are 64 random bits (a collision is not guarded against); a temporary file of a process that died in
// the middle of a write stays behind (it blocks only the final rmdir).
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
// blocked in NCCL) learns of it within 100 ms from its channel's abort watcher (Note [Aborts reach busy ranks]).
//
// Progress. A rank on its way to abort (Note [Desync reports] in collective_progress.h) publishes its own progress.<r>
// and the progress-request key, then reads the other ranks' progress.<r> until every one is there or its wait is
// over. Every rank's abort watcher (Note [Aborts reach busy ranks]) sees the request within 100 ms and publishes its
// progress.<r> whenever it differs from the one it published last, so a rank answers whatever its other threads do.
// The files live in job-<G>, which the job removes (or the next rendezvous, after an abort).
//
// End. Only rank 0 ever removes a job directory (here, and as stale state in its next rendezvous), so rank 0 alone
// waits when it leaves. A rank r > 0 destroying its channel has read its last round to the end: it publishes
// left.<r> and returns at once. Rank 0's destructor waits until left.<r> exists for every r > 0, then removes
// job-<G>, the generation, its owner record, the namespace when nothing else is in it, and the rendezvous directory
// when a process of a job created it (tandem.created) and nothing else is in it: a directory the user made stays.
// Without that wait a process that creates groups one after another (each destroyed before the next) would, as rank 0
// of the next group, remove job-<G> while a slower rank still polls for rank 0's file of the last round, and that rank
// would hang until its watchdog. The wait is bounded like every other: it follows the abort key, and after the creation
// timeout rank 0 reports the ranks that never left on stderr, releases the namespace and returns, leaving job-<G> in
// place for the next rendezvous to remove (a rank that outlives rank 0's group by that long is using a group its peers
// have left). A clean run leaves no file behind. A rank already in the next rendezvous may have read job G's generation
// and find the namespace gone when it publishes its hello for it: it creates the namespace again and waits for rank
// 0's next generation.
//
// File systems. On one host the page cache is coherent, so rename makes a value visible to every process at once and
// fsync is not needed (durability across a machine crash is no concern of a rendezvous). On NFS, close() sends the
// data to the server before rename (close-to-open consistency) and rename is atomic on the server
// (NFSv3 and later), so correctness holds; a client's attribute cache may delay when a new file becomes visible
// (mount with lookupcache=positive or a small actimeo for fast rounds). Values are native-endian: the hosts of one
// job must share a byte order.

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <random>
#include <string>
#include <thread>
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
constexpr std::string_view kRefusedKey = "refused";
constexpr std::string_view kOwnerKey = "owner";
constexpr std::string_view kCreatedPathKey = "tandem.created";
constexpr std::string_view kProgressRequestKey = "progress-request";
constexpr size_t kAbortTextLimit = 4096;

std::string round_key(uint64_t round, int rank) { return std::to_string(round) + "." + std::to_string(rank); }
std::string left_key(int rank) { return "left." + std::to_string(rank); }
std::string progress_key(int rank) { return "progress." + std::to_string(rank); }

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

// Where one job's files live (Note [File rendezvous]): the user's directory, and the namespace inside it.
struct RendezvousPaths {
  std::string root;       // the rendezvous path, without trailing slashes
  std::string job_space;  // root + "/tandem-<job id>"
};

bool is_directory(const std::string& path) {
  std::error_code error;
  return fs::is_directory(path, error);
}

// Makes sure the rendezvous path is a directory and the job's namespace exists inside it, creating either when
// missing; a process that created the rendezvous path records it (kCreatedPathKey) so that the path is removed with
// the job's files, and only then.
RendezvousPaths prepare_directories(const LaunchInfo& info) {
  const std::string& path = info.rendezvous_path;
  TANDEM_CHECK(!path.empty() && path.front() == '/', "comm::make_file_channel: rendezvous path ", excerpt(path, 200),
               " is not absolute but expected file:///absolute/path in TANDEM_INIT_METHOD");
  RendezvousPaths paths;
  paths.root = path;
  while (paths.root.size() > 1 && paths.root.back() == '/') paths.root.pop_back();
  std::error_code error;
  fs::file_status status = fs::status(paths.root, error);
  TANDEM_CHECK(!fs::exists(status) || fs::is_directory(status), "comm::make_file_channel: rendezvous path ",
               excerpt(paths.root, 200), " exists and is not a directory but expected a directory (or a path to ",
               "create one at) that every process of the job can reach");
  paths.job_space = paths.root + "/tandem-" + (info.job_id.empty() ? std::string("job") : info.job_id);
  // Rank 0 of the job before (a group destroyed just now) may remove a rendezvous directory that a job created
  // between this process's steps (Note [File rendezvous]: End): then both are made again. A directory removed during
  // its creation fails it with "no such file" or, where it was seen to exist first, "file exists" (std::filesystem
  // checks an existing path's type after mkdir refused it).
  // What counts is that the directory exists afterwards, whoever made it (another process of the job may, at once).
  const auto vanished = [](const std::error_code& error) {
    return !error || error == std::errc::no_such_file_or_directory || error == std::errc::file_exists;
  };
  for (int attempt = 0;; ++attempt) {
    if (attempt > 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    const bool created = fs::create_directories(paths.root, error);
    if (!is_directory(paths.root)) {
      if (vanished(error) && attempt < 100) continue;
      TANDEM_FAIL("comm::make_file_channel: cannot create the rendezvous directory ", excerpt(paths.root, 200), ": ",
                  error.message());
    }
    fs::create_directory(paths.job_space, error);
    if (!is_directory(paths.job_space)) {
      if (vanished(error) && attempt < 100) continue;
      TANDEM_FAIL("comm::make_file_channel: cannot create ", excerpt(paths.job_space, 200), ": ", error.message());
    }
    try {
      if (created) FileStore(paths.root).set(kCreatedPathKey, {});
    } catch (const Error&) {
      if (is_directory(paths.root) || attempt >= 100) throw;
      continue;  // removed again meanwhile
    }
    return paths;
  }
}

// Removes the job's namespace when it is empty, and then the rendezvous path itself when a process of a job created
// it (kCreatedPathKey) and nothing else is left in it (Note [File rendezvous]: End). Best effort.
void remove_unused_directories(const RendezvousPaths& paths) noexcept {
  ::rmdir(paths.job_space.c_str());  // fails, leaving it, unless empty
  std::error_code error;
  for (fs::directory_iterator it(paths.root, error), end; !error && it != end; it.increment(error)) {
    if (it->path().filename() != kCreatedPathKey) return;  // the user's files, or another job's namespace
  }
  const FileStore root(paths.root);
  if (error || !root.contains(kCreatedPathKey)) return;
  root.remove(kCreatedPathKey);
  ::rmdir(paths.root.c_str());
}

// hello.<rank>.<nonce, 16 hex digits>: one file per process, so that two processes claiming one rank never share one.
std::string hello_key(int rank, uint64_t nonce) {
  char name[48];
  std::snprintf(name, sizeof(name), "hello.%d.%016llx", rank, static_cast<unsigned long long>(nonce));
  return name;
}

// The nonces of the hellos in `space` that carry `generation`, per rank (ranks outside [0, size) ignored).
std::vector<std::vector<uint64_t>> hellos_for(const FileStore& space, uint64_t generation, int size) {
  std::vector<std::vector<uint64_t>> nonces(static_cast<size_t>(size));
  std::error_code error;
  for (fs::directory_iterator it(space.directory(), error), end; !error && it != end; it.increment(error)) {
    const std::string name = it->path().filename().string();
    int rank = -1;
    unsigned long long nonce = 0;
    int consumed = 0;
    if (std::sscanf(name.c_str(), "hello.%d.%16llx%n", &rank, &nonce, &consumed) != 2 ||
        static_cast<size_t>(consumed) != name.size() || rank < 0 || rank >= size || name != hello_key(rank, nonce)) {
      continue;
    }
    std::vector<uint64_t> hello(2);
    if (space.try_read(name, writable_bytes_of(hello)) != sizeof(uint64_t) * 2) continue;  // corrupt, or gone
    if (hello[0] != generation || hello[1] != nonce) continue;                             // another generation's
    nonces[static_cast<size_t>(rank)].push_back(nonce);
  }
  return nonces;
}

std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0) return "?";
  return name;
}

// "<generation in hex> <pid> <host>": who holds the namespace (kOwnerKey).
std::string owner_record(uint64_t generation) {
  char text[64];
  std::snprintf(text, sizeof(text), "%016llx %d ", static_cast<unsigned long long>(generation),
                static_cast<int>(::getpid()));
  return text + host_name();
}

// Whether an owner record names a process of this host that no longer exists (its job crashed).
bool owner_is_gone(const std::string& record) {
  unsigned long long generation = 0;
  int pid = 0;
  int consumed = 0;
  if (std::sscanf(record.c_str(), "%16llx %d %n", &generation, &pid, &consumed) != 2 || pid <= 0) return false;
  if (record.substr(static_cast<size_t>(consumed)) != host_name()) return false;
  return ::kill(pid, 0) != 0 && errno == ESRCH;
}

// Rank 0's exclusive hold of the namespace: its owner record is published with link(), which fails when one exists,
// so two rank 0s never hold one namespace at once. A record left by a crashed job of this host is removed; one of a
// live job (or of another host) is waited for, until the deadline.
void acquire_job_space(const LaunchInfo& info, const FileStore& space, uint64_t generation, Clock::time_point deadline,
                       std::chrono::milliseconds timeout) {
  const std::string record = owner_record(generation);
  const std::string staged = ".owner." + std::to_string(generation);
  space.set(staged, std::as_bytes(std::span<const char>(record)));
  const std::string owner = space.path_of(kOwnerKey);
  Backoff backoff;
  for (;;) {
    if (::link(space.path_of(staged).c_str(), owner.c_str()) == 0) break;
    const int reason = errno;
    if (reason != EEXIST) {
      space.remove(staged);
      TANDEM_FAIL("comm::make_file_channel: cannot create ", excerpt(owner, 200), ": ", std::strerror(reason));
    }
    const std::string holder = space.try_read_text(kOwnerKey, 512).value_or("");
    if (owner_is_gone(holder)) {
      space.remove(kOwnerKey);
      continue;
    }
    if (Clock::now() > deadline) {
      space.remove(staged);
      TANDEM_FAIL("comm::make_file_channel: rank 0 of ", info.size, ": another job holds the rendezvous ",
                  excerpt(space.directory(), 200), " (its rank 0: \"", excerpt(holder, 200),
                  "\", generation pid host) and did not leave it within ", timeout.count(),
                  " ms; give each job its own rendezvous directory or its own TANDEM_JOB_ID");
    }
    backoff.sleep();
  }
  space.remove(staged);
}

// Rank 0's clean-up once it holds the namespace (Note [File rendezvous]): the job directories and hellos of earlier
// generations. A hello of a live process of this job is published again when it sees the new generation.
void remove_stale_state(const FileStore& space) {
  std::error_code error;
  std::vector<fs::path> stale;
  for (fs::directory_iterator it(space.directory(), error), end; !error && it != end; it.increment(error)) {
    const std::string name = it->path().filename().string();
    if (name.starts_with("job-") || name.starts_with("hello.")) stale.push_back(it->path());
  }
  for (const fs::path& path : stale) {
    std::error_code ignored;
    fs::remove_all(path, ignored);
  }
}

// Rank 0's files of a rendezvous that did not complete, or of a job that ended: its job directory (unless
// keep_job_directory: a rank still reads it), and the generation and owner record when they are still its own.
void release_job_space(const FileStore& space, uint64_t generation, bool keep_job_directory = false) noexcept {
  std::error_code ignored;
  if (!keep_job_directory) fs::remove_all(job_directory(space.directory(), generation), ignored);
  std::vector<uint64_t> published(1);
  try {
    if (space.try_read(kGenerationKey, writable_bytes_of(published)) == sizeof(uint64_t) &&
        published[0] == generation) {
      space.remove(kGenerationKey);
    }
    if (space.try_read_text(kOwnerKey, 512).value_or("") == owner_record(generation)) space.remove(kOwnerKey);
  } catch (const std::exception&) {
    // something other than a file under a key: not ours to remove
  }
}

// Refuses the rendezvous of `generation`: its abort key tells every rank waiting for ready why, and rank 0 waits
// (until `deadline`) for their hellos to go, which they remove as they leave, so that it can remove the job's files.
[[noreturn]] void refuse_duplicate(const LaunchInfo& info, const FileStore& space, const FileStore& job,
                                   uint64_t generation, Clock::time_point deadline, int rank) {
  const std::string message = "comm::make_file_channel: rank 0 of " + std::to_string(info.size) +
                              ": two processes answered as rank " + std::to_string(rank) + " in " +
                              excerpt(job.directory(), 200) +
                              ": another job shares this rendezvous directory and job id; give each job its own "
                              "rendezvous directory or its own TANDEM_JOB_ID";
  // The refusal names the nonces of the hellos it answers, so that no process follows a refusal of another
  // rendezvous (a stale job directory of a generation it read).
  std::string record;
  char nonce[24];
  for (const std::vector<uint64_t>& nonces : hellos_for(space, generation, info.size)) {
    for (const uint64_t n : nonces) {
      std::snprintf(nonce, sizeof(nonce), "%016llx ", static_cast<unsigned long long>(n));
      record += nonce;
    }
  }
  record += "\n" + message;
  job.set(kRefusedKey, std::as_bytes(std::span<const char>(record)));
  for (Backoff backoff; Clock::now() < deadline; backoff.sleep()) {
    const std::vector<std::vector<uint64_t>> hellos = hellos_for(space, generation, info.size);
    if (std::all_of(hellos.begin(), hellos.end(), [](const auto& nonces) { return nonces.empty(); })) break;
  }
  TANDEM_FAIL(message);
}

uint64_t lead_rendezvous(const LaunchInfo& info, const FileStore& space, std::chrono::milliseconds timeout) {
  auto deadline = Clock::now() + timeout;
  uint64_t generation = fresh_id();
  acquire_job_space(info, space, generation, deadline, timeout);
  try {
    remove_stale_state(space);
    const FileStore job(job_directory(space.directory(), generation));
    std::error_code error;
    TANDEM_CHECK(fs::create_directory(job.directory(), error) && !error, "comm::make_file_channel: cannot create ",
                 excerpt(job.directory(), 200), ": ", error.message());
    space.set(kGenerationKey, bytes_of(std::vector<uint64_t>{generation}));

    std::vector<uint64_t> ready(static_cast<size_t>(info.size), 0);
    ready[0] = generation;
    std::vector<bool> arrived(static_cast<size_t>(info.size), false);
    arrived[0] = true;
    Backoff backoff;
    for (;;) {
      const std::vector<std::vector<uint64_t>> hellos = hellos_for(space, generation, info.size);
      bool all = true;
      for (int r = 1; r < info.size; ++r) {
        const std::vector<uint64_t>& nonces = hellos[static_cast<size_t>(r)];
        if (nonces.size() > 1 || (arrived[r] && !nonces.empty() && nonces[0] != ready[r])) {
          refuse_duplicate(info, space, job, generation, deadline, r);
        }
        if (!nonces.empty()) {
          ready[r] = nonces[0];
          arrived[r] = true;
        }
        all = all && arrived[r];
      }
      if (all) break;
      if (Clock::now() > deadline) fail_rendezvous(info, timeout, arrived);
      backoff.sleep();
    }
    job.set(kReadyKey, bytes_of(ready));
  } catch (...) {
    release_job_space(space, generation);
    throw;
  }
  return generation;
}

// Publishes this rank's hello for `generation` (recreating the namespace, which rank 0 of the previous job removes
// when it ends). Returns false when that failed because the generation has ended meanwhile: rank 0 publishes the
// next one in the namespace it creates anew.
bool publish_hello(const FileStore& space, const std::string& hello, uint64_t generation, uint64_t nonce) {
  std::error_code ignored;
  fs::create_directory(space.directory(), ignored);
  try {
    space.set(hello, bytes_of(std::vector<uint64_t>{generation, nonce}));
    return true;
  } catch (const Error&) {
    std::vector<uint64_t> current(1);
    if (space.try_read(kGenerationKey, writable_bytes_of(current)) == sizeof(uint64_t) && current[0] == generation)
      throw;
    return false;
  }
}

// Throws the refusal of the rendezvous in `job` when there is one that answers this process's hello (`nonce`).
void follow_refusal(const LaunchInfo& info, const FileStore& job, uint64_t nonce) {
  const std::optional<std::string> record = job.try_read_text(kRefusedKey, kAbortTextLimit);
  if (!record) return;
  const size_t newline = record->find('\n');
  char mine[24];
  std::snprintf(mine, sizeof(mine), "%016llx ", static_cast<unsigned long long>(nonce));
  if (newline == std::string::npos || record->substr(0, newline).find(mine) == std::string::npos) return;
  TANDEM_FAIL("comm::make_file_channel: rank ", info.rank, " of ", info.size,
              ": rank 0 refused the rendezvous: ", excerpt(record->substr(newline + 1), kAbortTextLimit));
}

uint64_t join_rendezvous(const LaunchInfo& info, const FileStore& space, std::chrono::milliseconds timeout) {
  auto deadline = Clock::now() + timeout;
  const uint64_t nonce = fresh_id();
  const std::string hello = hello_key(info.rank, nonce);
  const size_t ready_bytes = sizeof(uint64_t) * static_cast<size_t>(info.size);
  uint64_t announced = 0;  // the generation of this rank's hello; ids are never 0
  Backoff backoff;
  try {
    for (;;) {
      std::vector<uint64_t> generation(1);
      if (space.try_read(kGenerationKey, writable_bytes_of(generation)) == sizeof(uint64_t) &&
          generation[0] != announced && publish_hello(space, hello, generation[0], nonce)) {
        announced = generation[0];
      }
      if (announced != 0) {
        const FileStore job(job_directory(space.directory(), announced));
        std::vector<uint64_t> ready(static_cast<size_t>(info.size));
        if (job.try_read(kReadyKey, writable_bytes_of(ready)) == ready_bytes && ready[0] == announced &&
            ready[info.rank] == nonce) {
          space.remove(hello);
          return announced;
        }
        follow_refusal(info, job, nonce);
      }
      if (Clock::now() > deadline) {
        // Who is missing, as far as this rank can tell: every rank without a hello for the generation seen here, or
        // rank 0 when there is no generation at all or every hello is there (rank 0 did not confirm).
        std::vector<bool> arrived(static_cast<size_t>(info.size), true);
        arrived[0] = announced != 0;
        if (announced != 0) {
          const std::vector<std::vector<uint64_t>> hellos = hellos_for(space, announced, info.size);
          for (int r = 1; r < info.size; ++r) arrived[r] = !hellos[static_cast<size_t>(r)].empty();
        }
        if (missing_ranks(arrived).empty()) arrived[0] = false;
        fail_rendezvous(info, timeout, arrived);
      }
      backoff.sleep();
    }
  } catch (...) {
    space.remove(hello);
    throw;
  }
}

class FileChannel final : public HostChannel {
 public:
  FileChannel(const LaunchInfo& info, RendezvousPaths paths, uint64_t generation, std::chrono::milliseconds timeout)
      : rank_(info.rank),
        size_(info.size),
        paths_(std::move(paths)),
        generation_(generation),
        timeout_(timeout),
        job_(job_directory(paths_.job_space, generation)),
        abort_watcher_([this] { watch_for_abort(); }) {}
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

  void answer_progress(const CollectiveProgress& progress) override { progress_.store(&progress); }

  // Note [File rendezvous]: Progress.
  std::vector<std::optional<RankProgress>> gather_progress(const RankProgress& mine,
                                                           std::chrono::milliseconds wait) override {
    std::vector<std::optional<RankProgress>> ranks(static_cast<size_t>(size_));
    ranks[rank_] = mine;
    try {
      job_.set(progress_key(rank_), std::as_bytes(std::span(&mine, 1)));
      if (!job_.contains(kProgressRequestKey)) job_.set(kProgressRequestKey, {});
      const auto deadline = Clock::now() + wait;
      Backoff backoff;
      for (int missing = size_ - 1; missing > 0 && Clock::now() < deadline; backoff.sleep()) {
        for (int r = 0; r < size_; ++r) {
          RankProgress theirs;
          if (ranks[r] ||
              job_.try_read(progress_key(r), std::as_writable_bytes(std::span(&theirs, 1))) != sizeof(RankProgress)) {
            continue;
          }
          ranks[r] = theirs;
          --missing;
        }
      }
    } catch (const std::exception&) {
      // the directory went bad: the ranks not read yet count as not answering
    }
    return ranks;
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

  std::string waiting_for() const override {
    const int64_t waiting = waiting_for_.load(std::memory_order_acquire);
    if (waiting < 0) return {};
    return "waiting for rank " + std::to_string(waiting >> 40) + ", which has not entered round " +
           std::to_string(waiting & ((int64_t{1} << 40) - 1)) + " (stopped, or on another code path)";
  }

  // Waits until rank r's file of `round` exists and reads it into out, whose size it must have.
  void wait_for(uint64_t round, int r, std::span<std::byte> out) {
    Backoff backoff;
    // Note [Naming the rank waited for]: the watchdog's thread reads waiting_for_ when the deadline passes, so the
    // message names the rank that did not come (rank and round in one word: rank in the high bits).
    waiting_for_.store((static_cast<int64_t>(r) << 40) | static_cast<int64_t>(round & ((uint64_t{1} << 40) - 1)),
                       std::memory_order_release);
    struct Done {
      std::atomic<int64_t>& waiting;
      ~Done() { waiting.store(-1, std::memory_order_release); }
    } done{waiting_for_};
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

  // Note [Aborts reach busy ranks]: a rank busy outside the channel (computing, sleeping, blocked in NCCL) would see
  // another rank's abort only at its next round; so a thread per channel looks for the abort key every 100 ms and
  // ends the process as a round would, and a failed rank ends the whole job even when the others never call again.
  void watch_for_abort() {
    std::unique_lock lock(watcher_mutex_);
    while (!watcher_wake_.wait_for(lock, std::chrono::milliseconds(100), [this] { return watcher_stopping_; })) {
      try {
        check_abort();
        answer_progress_request();
      } catch (const std::exception&) {
        // something other than a file under a key: the rounds report it
      }
    }
  }

  // Publishes progress.<rank> while a progress request is there and this rank's progress changed since it last did
  // (Note [File rendezvous]: Progress); on the abort watcher's thread.
  void answer_progress_request() {
    const CollectiveProgress* progress = progress_.load();
    if (progress == nullptr || !job_.contains(kProgressRequestKey)) return;
    const RankProgress now = progress->snapshot();
    if (answered_ && std::memcmp(&now, &answered_progress_, sizeof(RankProgress)) == 0) return;
    job_.set(progress_key(rank_), std::as_bytes(std::span(&now, 1)));
    answered_progress_ = now;
    answered_ = true;
  }

  // The abort watcher and a wait in progress on another thread may both find the record: the first reports it and
  // ends the process, the other waits for that end, so the report is written once.
  [[noreturn]] void follow_abort() const {
    if (following_abort_.exchange(true)) {
      for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
    }
    std::string record = job_.try_read_text(kAbortKey, kAbortTextLimit).value_or("");
    size_t newline = record.find('\n');
    std::string who = record.substr(0, newline);
    if (who.empty() || who.size() > 9 || who.find_first_not_of("0123456789") != std::string::npos) who = "?";
    std::string message = newline == std::string::npos ? "" : record.substr(newline + 1);
    write_stderr("comm: rank " + std::to_string(rank_) + ": aborting: rank " + who +
                 " ended the job: " + excerpt(message, kAbortTextLimit) + "\n");
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

  const int rank_;
  const int size_;
  const RendezvousPaths paths_;
  const uint64_t generation_;
  const std::chrono::milliseconds timeout_;  // bounds rank 0's wait for the others to leave
  const FileStore job_;
  uint64_t next_round_ = 0;
  std::atomic<int64_t> waiting_for_{-1};                      // Note [Naming the rank waited for]; -1: no wait
  std::atomic<const CollectiveProgress*> progress_{nullptr};  // answer_progress's
  mutable std::atomic<bool> following_abort_{false};          // follow_abort() is reporting the abort
  bool answered_ = false;                                     // abort watcher: progress.<rank> published
  RankProgress answered_progress_;                            // abort watcher: what it holds
  std::mutex watcher_mutex_;
  std::condition_variable watcher_wake_;
  bool watcher_stopping_ = false;
  std::thread abort_watcher_;  // last: it starts once everything it reads is there
};

FileChannel::~FileChannel() {
  {
    std::lock_guard lock(watcher_mutex_);
    watcher_stopping_ = true;
  }
  watcher_wake_.notify_all();
  abort_watcher_.join();
  static constinit tandem::detail::ReportOnce failures("leaving the file rendezvous");
  failures.run([&] {
    if (rank_ != 0) {
      job_.set(left_key(rank_), {});
      return;
    }
    // Once every rank has left, everything of this job goes (Note [File rendezvous]: End); otherwise the job directory
    // stays for the rank still reading it, and the next rendezvous removes it.
    const bool everyone_left = wait_until_every_rank_left();
    release_job_space(FileStore(paths_.job_space), generation_, /*keep_job_directory=*/!everyone_left);
    if (everyone_left) remove_unused_directories(paths_);
  });
}

}  // namespace

std::unique_ptr<HostChannel> make_file_channel(const LaunchInfo& info, std::chrono::milliseconds timeout) {
  TANDEM_CHECK(info.size >= 1 && info.rank >= 0 && info.rank < info.size, "comm::make_file_channel: got rank ",
               info.rank, " of size ", info.size, " but expected 0 <= rank < size");
  TANDEM_CHECK(timeout.count() > 0, "comm::make_file_channel: got a timeout of ", timeout.count(),
               " ms but expected a positive one");
  TANDEM_CHECK(info.size == 1 || !info.job_id.empty(), "comm::make_file_channel: rank ", info.rank, " of ", info.size,
               ": no job id, but a file rendezvous of several processes needs one; set TANDEM_JOB_ID to an id that "
               "this job's processes share and no other job on ",
               excerpt(info.rendezvous_path, 200),
               " uses (torchrun's TORCHELASTIC_RUN_ID, or MASTER_ADDR with MASTER_PORT, count as one)");
  // Until this process's first file lies in the job's namespace, rank 0 of the job before may remove the namespace
  // as empty (Note [File rendezvous]: End); a rendezvous whose namespace vanished under it starts again.
  for (int attempt = 0;; ++attempt) {
    RendezvousPaths paths = prepare_directories(info);
    const FileStore space(paths.job_space);
    try {
      const uint64_t generation =
          info.rank == 0 ? lead_rendezvous(info, space, timeout) : join_rendezvous(info, space, timeout);
      return std::make_unique<FileChannel>(info, std::move(paths), generation, timeout);
    } catch (...) {
      const bool vanished = !is_directory(paths.job_space);  // before the clean-up below, which may remove it
      remove_unused_directories(paths);  // Note [File rendezvous]: a failed rendezvous leaves nothing of its own
      if (vanished && attempt < 100) continue;
      throw;
    }
  }
}

}  // namespace tandem::comm::detail
