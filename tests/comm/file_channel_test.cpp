// The file channel (comm/src/process/file_channel.cpp): ranks as forked processes meeting in a temporary directory,
// their collectives, channels one after another, leaving and clean-up, stale state of a crashed job, abort, rendezvous
// timeouts and bad paths.
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <thread>

#include "process/desync_report.h"
#include "process/host_channel.h"
#include "support/test_support.h"

namespace tandem::comm::detail {
namespace {

namespace fs = std::filesystem;
using std::chrono::milliseconds;
using std::chrono::seconds;
using namespace std::chrono_literals;

constexpr milliseconds kTimeout{20000};

constexpr const char* kJob = "test-job";

LaunchInfo launch_info(int rank, int size, const std::string& path, const std::string& job = kJob) {
  LaunchInfo info;
  info.job_id = job;
  info.channel = LaunchInfo::Channel::File;
  info.rank = info.local_rank = rank;
  info.size = info.local_size = size;
  info.rendezvous_path = path;
  return info;
}

std::string read_text(const std::string& path) {
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

size_t count_files(const std::string& directory) {
  size_t count = 0;
  std::error_code error;
  for (fs::recursive_directory_iterator it(directory, error), end; !error && it != end; it.increment(error)) {
    if (it->is_regular_file()) ++count;
  }
  return count;
}

struct Outcome {
  int status = -1;     // the exit status, -1 when the process did not end by itself in time
  std::string stderr;  // what it wrote to stderr
};

class FileChannelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ = testing::scratch_path(::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(base_);
    fs::create_directories(base_);
    rendezvous_ = base_ + "/rendezvous";
  }
  void TearDown() override { fs::remove_all(base_); }

  // Runs body(rank) in one forked process per entry of `ranks`; a process's exit status is what body returns, or 2
  // when it throws (the message on its stderr). Processes still running after 60 s, or 5 s after one of them failed,
  // are killed.
  std::vector<Outcome> run(const std::vector<int>& ranks, const std::function<int(int rank)>& body) {
    std::vector<pid_t> pids;
    for (int rank : ranks) {
      std::string log = base_ + "/stderr." + std::to_string(rank);
      pid_t pid = fork();
      if (pid == 0) {
        FILE* redirected = std::freopen(log.c_str(), "w", stderr);
        int status = redirected ? 0 : 3;
        try {
          if (status == 0) status = body(rank);
        } catch (const std::exception& e) {
          std::fprintf(stderr, "%s\n", e.what());
          status = 2;
        }
        std::fflush(stderr);
        ::_exit(status);
      }
      pids.push_back(pid);
    }
    std::vector<Outcome> outcomes(ranks.size());
    auto deadline = std::chrono::steady_clock::now() + seconds(60);
    for (size_t done = 0; done < pids.size();) {
      for (size_t i = 0; i < pids.size(); ++i) {
        int status = 0;
        if (pids[i] <= 0 || waitpid(pids[i], &status, WNOHANG) != pids[i]) continue;
        outcomes[i].status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        pids[i] = 0;
        ++done;
        // The others may wait for a rank that failed a check: they get 5 s more.
        if (outcomes[i].status != 0) deadline = std::min(deadline, std::chrono::steady_clock::now() + seconds(5));
      }
      if (done == pids.size()) break;
      if (std::chrono::steady_clock::now() > deadline) {
        ADD_FAILURE() << "ranks still running after 60 s (or 5 s after one failed); killed";
        for (pid_t& pid : pids) {
          if (pid <= 0) continue;
          kill(pid, SIGKILL);
          waitpid(pid, nullptr, 0);
        }
        break;
      }
      std::this_thread::sleep_for(milliseconds(5));
    }
    for (size_t i = 0; i < ranks.size(); ++i)
      outcomes[i].stderr = read_text(base_ + "/stderr." + std::to_string(ranks[i]));
    return outcomes;
  }
  std::vector<Outcome> run_all(int size, const std::function<int(int rank)>& body) {
    std::vector<int> ranks(static_cast<size_t>(size));
    for (int r = 0; r < size; ++r) ranks[r] = r;
    return run(ranks, body);
  }
  static void expect_success(const std::vector<Outcome>& outcomes) {
    for (size_t r = 0; r < outcomes.size(); ++r) {
      EXPECT_EQ(outcomes[r].status, 0) << "rank " << r << " stderr: " << outcomes[r].stderr;
    }
  }
  std::unique_ptr<HostChannel> channel(int rank, int size) const {
    return make_file_channel(launch_info(rank, size, rendezvous_), kTimeout);
  }

  std::string base_;
  std::string rendezvous_;
};

// A failed check inside a rank: the message on stderr and a nonzero status for the parent to report.
#define RANK_CHECK(cond)                                                      \
  do {                                                                        \
    if (!(cond)) {                                                            \
      std::fprintf(stderr, "check failed at line %d: %s\n", __LINE__, #cond); \
      return 1;                                                               \
    }                                                                         \
  } while (false)

TEST_F(FileChannelTest, AllGatherConcatenatesInRankOrder) {
  expect_success(run_all(3, [&](int rank) {
    auto group = channel(rank, 3);
    RANK_CHECK(group->rank() == rank && group->size() == 3);
    std::vector<std::byte> mine = {std::byte(rank), std::byte(10 + rank), std::byte(20 + rank)};
    std::vector<std::byte> all = group->all_gather(mine);
    RANK_CHECK(all.size() == 9);
    for (int r = 0; r < 3; ++r) {
      for (int i = 0; i < 3; ++i) RANK_CHECK(all[static_cast<size_t>(3 * r + i)] == std::byte(10 * i + r));
    }
    return 0;
  }));
}

TEST_F(FileChannelTest, BroadcastFromEveryRoot) {
  expect_success(run_all(3, [&](int rank) {
    auto group = channel(rank, 3);
    for (int root = 0; root < 3; ++root) {
      std::vector<std::byte> data(5, std::byte(rank == root ? 0 : 0xEE));
      if (rank == root) {
        for (size_t i = 0; i < data.size(); ++i) data[i] = std::byte(root * 16 + static_cast<int>(i));
      }
      group->broadcast(data, root);
      for (size_t i = 0; i < data.size(); ++i) RANK_CHECK(data[i] == std::byte(root * 16 + static_cast<int>(i)));
    }
    return 0;
  }));
}

TEST_F(FileChannelTest, AllReduceSumAddsInRankOrderBitIdenticallyEverywhere) {
  expect_success(run_all(3, [&](int rank) {
    auto group = channel(rank, 3);
    // Exact in float: the closed form 1000 * (0 + 1 + 2) + 3 i.
    std::vector<float> exact(64);
    for (size_t i = 0; i < exact.size(); ++i) exact[i] = 1000.0f * static_cast<float>(rank) + static_cast<float>(i);
    group->all_reduce_sum(exact);
    for (size_t i = 0; i < exact.size(); ++i) RANK_CHECK(exact[i] == 3000.0f + 3.0f * static_cast<float>(i));
    // Rounded in float: the result is ((x0 + x1) + x2) exactly, and the same bits on every rank.
    auto value = [](int r, size_t i) { return 0.1f * static_cast<float>(r + 1) + 1e-7f * static_cast<float>(i); };
    std::vector<float> rounded(64);
    for (size_t i = 0; i < rounded.size(); ++i) rounded[i] = value(rank, i);
    group->all_reduce_sum(rounded);
    for (size_t i = 0; i < rounded.size(); ++i) RANK_CHECK(rounded[i] == (value(0, i) + value(1, i)) + value(2, i));
    std::span<const std::byte> bits = std::as_bytes(std::span<const float>(rounded));
    std::vector<std::byte> everyone = group->all_gather(bits);
    for (int r = 0; r < 3; ++r) {
      RANK_CHECK(std::equal(bits.begin(), bits.end(), everyone.begin() + static_cast<ptrdiff_t>(r * bits.size())));
    }
    return 0;
  }));
}

TEST_F(FileChannelTest, BarrierWaitsForTheLastRank) {
  std::string marker = base_ + "/late_rank_was_here";
  expect_success(run_all(3, [&](int rank) {
    auto group = channel(rank, 3);
    if (rank == 2) {
      std::this_thread::sleep_for(milliseconds(300));
      std::ofstream(marker) << "here";
    }
    group->barrier();
    RANK_CHECK(fs::exists(marker));
    return 0;
  }));
}

TEST_F(FileChannelTest, FiftyRoundsKeepTwoFilesPerRankAndLeaveNothingBehind) {
  expect_success(run_all(3, [&](int rank) {
    auto group = channel(rank, 3);
    for (int round = 0; round < 50; ++round) {
      switch (round % 4) {
        case 0: {
          std::vector<float> data(8, static_cast<float>(rank + round));
          group->all_reduce_sum(data);
          RANK_CHECK(data[7] == static_cast<float>(3 * round + 3));
          break;
        }
        case 1: {
          std::vector<std::byte> data(4, std::byte(rank == round % 3 ? round : 0));
          group->broadcast(data, round % 3);
          RANK_CHECK(data[3] == std::byte(round));
          break;
        }
        case 2: {
          std::vector<std::byte> mine(2, std::byte(rank));
          RANK_CHECK(group->all_gather(mine)[5] == std::byte(2));
          break;
        }
        default:
          group->barrier();
      }
    }
    // Round files of at most two rounds per rank, the generation, ready, the owner record, the record of the created
    // directory, and temporary files of writes in flight.
    RANK_CHECK(count_files(rendezvous_) <= 3 * 3 + 4);
    return 0;
  }));
  EXPECT_FALSE(fs::exists(rendezvous_)) << "rank 0 removes the rendezvous directory once every rank has left";
}

// Rank 0 reaches each broadcast from rank 1 last, finds rank 1's file at once and goes on to the next channel on the
// same path while ranks 1 and 2 may still be polling for rank 0's file: that job directory must outlive their reads.
TEST_F(FileChannelTest, ChannelsOneAfterAnotherOnOnePath) {
  expect_success(run_all(3, [&](int rank) {
    for (int job = 0; job < 10; ++job) {
      auto group = channel(rank, 3);
      if (rank == 0) std::this_thread::sleep_for(milliseconds(20));
      std::vector<std::byte> data(4, std::byte(rank == 1 ? job : 0xEE));
      group->broadcast(data, 1);
      RANK_CHECK(data[3] == std::byte(job));
    }
    return 0;
  }));
  EXPECT_FALSE(fs::exists(rendezvous_));
}

// Rank 0's channel, destroyed, waits for rank 2 to destroy its own; ranks > 0 leave without waiting.
TEST_F(FileChannelTest, RankZeroLeavesOnlyAfterEveryRankHasLeft) {
  expect_success(run_all(3, [&](int rank) {
    auto group = channel(rank, 3);
    group->barrier();
    if (rank == 2) std::this_thread::sleep_for(milliseconds(300));
    const auto start = std::chrono::steady_clock::now();
    group.reset();
    const auto leaving = std::chrono::steady_clock::now() - start;
    if (rank == 0) RANK_CHECK(leaving >= milliseconds(250));
    if (rank == 1) RANK_CHECK(leaving < milliseconds(250));
    return 0;
  }));
  EXPECT_FALSE(fs::exists(rendezvous_));
}

// A rank that keeps its channel past rank 0's timeout: rank 0 stops waiting, says so, and leaves the job directory,
// which the next job on the path removes.
TEST_F(FileChannelTest, RankZeroStopsWaitingForARankThatDoesNotLeaveWithinTheTimeout) {
  std::vector<Outcome> outcomes = run_all(2, [&](int rank) {
    auto group = make_file_channel(launch_info(rank, 2, rendezvous_), milliseconds(300));
    group->barrier();
    if (rank == 1) std::this_thread::sleep_for(milliseconds(1500));
    const auto start = std::chrono::steady_clock::now();
    group.reset();
    if (rank == 0) RANK_CHECK(std::chrono::steady_clock::now() - start < milliseconds(1200));
    return 0;
  });
  expect_success(outcomes);
  EXPECT_NE(outcomes[0].stderr.find("comm: rank 0: ranks that did not leave the file rendezvous within 300 ms of rank "
                                    "0: 1; "),
            std::string::npos)
      << outcomes[0].stderr;
  EXPECT_EQ(outcomes[1].stderr, "");
  EXPECT_TRUE(fs::exists(rendezvous_));
  expect_success(run_all(2, [&](int rank) {
    channel(rank, 2)->barrier();
    return 0;
  }));
  EXPECT_FALSE(fs::exists(rendezvous_));
}

// Rank 1 aborts after rank 0 has destroyed its channel: rank 0, waiting for it to leave, ends with the message.
TEST_F(FileChannelTest, AbortEndsRankZeroWhileItWaitsForTheOthersToLeave) {
  std::vector<Outcome> outcomes = run_all(2, [&](int rank) {
    auto group = channel(rank, 2);
    group->barrier();
    if (rank == 1) {
      std::this_thread::sleep_for(milliseconds(200));
      group->abort("comm: rank 1: fails after the last collective");
    }
    group.reset();
    return 0;
  });
  EXPECT_EQ(outcomes[0].status, 1);
  EXPECT_EQ(outcomes[0].stderr,
            "comm: rank 0: aborting: rank 1 ended the job: comm: rank 1: fails after the last collective\n");
  EXPECT_EQ(outcomes[1].status, 1);
}

// Note [File rendezvous]: Progress. Rank 0 gathers the ranks' progress while rank 1 waits in a barrier for it (its
// abort watcher answers) and rank 2, which never called answer_progress, cannot answer; then rank 0 joins the barrier.
TEST_F(FileChannelTest, GatherProgressReachesARankBlockedInARound) {
  expect_success(run_all(3, [&](int rank) {
    auto group = channel(rank, 3);
    CollectiveProgress progress;
    progress.begin("all_reduce", 16);
    progress.complete();
    if (rank != 0) progress.begin("barrier", 0);  // before rank 1 answers: where it waits
    if (rank != 2) group->answer_progress(progress);
    if (rank == 0) {
      const auto start = std::chrono::steady_clock::now();
      const std::vector<std::optional<RankProgress>> ranks = group->gather_progress(progress.snapshot(), 500ms);
      RANK_CHECK(std::chrono::steady_clock::now() - start >= 500ms);  // waited for rank 2 until the end
      RANK_CHECK(ranks.size() == 3 && ranks[1] && !ranks[2]);
      RANK_CHECK(ranks[1]->pending.describe() == "barrier #2");
      RANK_CHECK(desync_report(ranks) ==
                 "rank 0 is in no collective, after all_reduce #1 of 16 bytes; rank 1 waits in barrier #2; rank 2 did "
                 "not answer");
    }
    group->barrier();
    return 0;
  }));
}

TEST_F(FileChannelTest, AGroupOfOneNeedsNobodyElse) {
  {
    auto group = channel(0, 1);
    std::vector<float> data = {1.5f, -2.0f};
    group->all_reduce_sum(data);
    EXPECT_EQ(data, (std::vector<float>{1.5f, -2.0f}));
    std::vector<std::byte> mine = {std::byte(7)};
    EXPECT_EQ(group->all_gather(mine), mine);
    group->barrier();
  }
  EXPECT_FALSE(fs::exists(rendezvous_));
}

TEST_F(FileChannelTest, StateOfACrashedJobIsNotMistakenForThisJobs) {
  // A job whose rank 1 aborts after one barrier: its generation, job directory and abort key stay behind.
  std::vector<Outcome> crashed = run_all(2, [&](int rank) {
    auto group = channel(rank, 2);
    group->barrier();
    if (rank == 1) group->abort("comm: rank 1: the earlier job fails");
    group->barrier();
    return 0;
  });
  ASSERT_EQ(crashed[0].status, 1) << crashed[0].stderr;
  ASSERT_EQ(crashed[1].status, 1) << crashed[1].stderr;
  const std::string space = rendezvous_ + "/tandem-" + kJob;
  ASSERT_GT(count_files(space), 0u);
  // Hellos of a rank the next job does not have, of one it has from another generation, and a corrupt one.
  std::ofstream(space + "/hello.5.00000000000000aa") << "0123456789abcdef";
  std::ofstream(space + "/hello.2.00000000000000bb") << "0123456789abcdef";
  std::ofstream(space + "/hello.1.00000000000000cc") << "corrupt";

  expect_success(run_all(3, [&](int rank) {
    if (rank == 2) std::this_thread::sleep_for(milliseconds(200));  // its stale hello is there while others meet
    auto group = channel(rank, 3);
    std::vector<float> data = {static_cast<float>(rank)};
    group->all_reduce_sum(data);
    RANK_CHECK(data[0] == 3.0f);
    return 0;
  }));
  EXPECT_FALSE(fs::exists(rendezvous_)) << "the stale state is cleaned up with this job's";
}

// The rendezvous directory is the user's: files of any name there (even tandem-looking ones) stay, and so does the
// directory itself when the user made it; only the job's namespace comes and goes.
TEST_F(FileChannelTest, OnlyItsOwnFilesAreEverRemoved) {
  fs::create_directories(rendezvous_ + "/job-0000000000000001");
  std::ofstream(rendezvous_ + "/job-0000000000000001/1.0") << "a user's file";
  const std::vector<std::string> theirs = {"generation", "hello.1",   "hello.7",
                                           "owner",      "notes.txt", "tandem-other-job/hello.1.00000000000000aa"};
  fs::create_directories(rendezvous_ + "/tandem-other-job");
  for (const std::string& name : theirs) std::ofstream(rendezvous_ + "/" + name) << "keep me";
  for (int job = 0; job < 2; ++job) {
    expect_success(run_all(3, [&](int rank) {
      auto group = channel(rank, 3);
      group->barrier();
      return 0;
    }));
  }
  for (const std::string& name : theirs) EXPECT_EQ(read_text(rendezvous_ + "/" + name), "keep me") << name;
  EXPECT_EQ(read_text(rendezvous_ + "/job-0000000000000001/1.0"), "a user's file");
  EXPECT_FALSE(fs::exists(rendezvous_ + "/tandem-" + kJob));

  fs::remove_all(rendezvous_);
  fs::create_directories(rendezvous_);  // an empty directory of the user's
  expect_success(run_all(2, [&](int rank) {
    channel(rank, 2)->barrier();
    return 0;
  }));
  EXPECT_TRUE(fs::is_directory(rendezvous_)) << "a directory the user made is not removed";
  EXPECT_TRUE(fs::is_empty(rendezvous_));
}

// Two jobs with their own ids on one directory at once: each meets only its own processes.
TEST_F(FileChannelTest, JobsWithDifferentIdsOnOnePathNeverMeet) {
  for (int trial = 0; trial < 3; ++trial) {
    expect_success(run({0, 1, 2, 10, 11, 12}, [&](int process) {
      const int job = process / 10;
      const int rank = process % 10;
      auto group = make_file_channel(launch_info(rank, 3, rendezvous_, "job" + std::to_string(job)), kTimeout);
      for (int round = 0; round < 5; ++round) {
        std::vector<std::byte> mine(1, std::byte(job));
        const std::vector<std::byte> all = group->all_gather(mine);
        for (std::byte seen : all) RANK_CHECK(seen == std::byte(job));
      }
      return 0;
    }));
  }
  EXPECT_FALSE(fs::exists(rendezvous_));
}

// A second job with the same id waits until the first has left, and refuses to wait longer than its timeout,
// naming the holder.
TEST_F(FileChannelTest, ASecondJobWithTheSameIdWaitsForTheFirst) {
  std::vector<Outcome> outcomes = run({0, 1, 10}, [&](int process) {
    if (process == 10) {
      std::this_thread::sleep_for(milliseconds(100));  // the first job holds the namespace by now
      const auto start = std::chrono::steady_clock::now();
      auto alone = channel(0, 1);
      RANK_CHECK(std::chrono::steady_clock::now() - start >= milliseconds(300));
      return 0;
    }
    auto group = channel(process, 2);
    std::this_thread::sleep_for(milliseconds(500));
    group->barrier();
    return 0;
  });
  expect_success(outcomes);

  outcomes = run({0, 1, 10}, [&](int process) {
    if (process == 10) {
      std::this_thread::sleep_for(milliseconds(100));
      make_file_channel(launch_info(0, 1, rendezvous_), milliseconds(200));
      return 0;
    }
    auto group = channel(process, 2);
    std::this_thread::sleep_for(milliseconds(800));
    group->barrier();
    return 0;
  });
  EXPECT_EQ(outcomes[0].status, 0) << outcomes[0].stderr;
  EXPECT_EQ(outcomes[1].status, 0) << outcomes[1].stderr;
  EXPECT_EQ(outcomes[2].status, 2);
  EXPECT_NE(outcomes[2].stderr.find("rank 0 of 1: another job holds the rendezvous"), std::string::npos)
      << outcomes[2].stderr;
  EXPECT_NE(outcomes[2].stderr.find("give each job its own rendezvous directory or its own TANDEM_JOB_ID"),
            std::string::npos);
  EXPECT_FALSE(fs::exists(rendezvous_));
}

// Two processes answering as rank 1 of one rendezvous: rank 0 refuses it, and every process waiting ends with why.
TEST_F(FileChannelTest, TwoProcessesAnsweringAsOneRankAreRefused) {
  std::vector<Outcome> outcomes = run({0, 1, 101}, [&](int process) {
    if (process == 0) std::this_thread::sleep_for(milliseconds(300));  // both hellos are there when it looks
    channel(process == 0 ? 0 : 1, 3);
    return 0;
  });
  for (const Outcome& outcome : outcomes) {
    EXPECT_EQ(outcome.status, 2) << outcome.stderr;
    EXPECT_NE(outcome.stderr.find("two processes answered as rank 1 in"), std::string::npos) << outcome.stderr;
  }
  EXPECT_NE(outcomes[1].stderr.find("rank 1 of 3: rank 0 refused the rendezvous: "), std::string::npos);
  EXPECT_FALSE(fs::exists(rendezvous_)) << "a refused rendezvous leaves nothing behind";
}

// A rendezvous that times out removes what each process published, and the directory it created.
TEST_F(FileChannelTest, AFailedRendezvousLeavesNothingBehind) {
  std::vector<Outcome> outcomes = run({0, 1}, [&](int rank) {
    make_file_channel(launch_info(rank, 3, rendezvous_), milliseconds(300));
    return 0;
  });
  for (const Outcome& outcome : outcomes) EXPECT_EQ(outcome.status, 2) << outcome.stderr;
  EXPECT_FALSE(fs::exists(rendezvous_));
  EXPECT_ERROR(make_file_channel(launch_info(1, 2, rendezvous_), milliseconds(100)), "ranks that never arrived: 0");
  EXPECT_FALSE(fs::exists(rendezvous_));
}

TEST_F(FileChannelTest, SeveralProcessesNeedAJobId) {
  EXPECT_ERROR(make_file_channel(launch_info(0, 2, rendezvous_, ""), kTimeout),
               "comm::make_file_channel: rank 0 of 2: no job id, but a file rendezvous of several processes needs "
               "one; set TANDEM_JOB_ID");
  EXPECT_FALSE(fs::exists(rendezvous_));
  {
    auto alone = make_file_channel(launch_info(0, 1, rendezvous_, ""), kTimeout);  // a group of one needs none
  }
  EXPECT_FALSE(fs::exists(rendezvous_));
}

// Note [Naming the rank waited for]: while a round waits for rank 2, the channel says so (the watchdog's message).
TEST_F(FileChannelTest, AWaitNamesTheRankItWaitsFor) {
  expect_success(run_all(3, [&](int rank) {
    auto group = channel(rank, 3);
    if (rank == 2) std::this_thread::sleep_for(milliseconds(400));
    std::string seen;
    std::thread watcher([&] {
      std::this_thread::sleep_for(milliseconds(200));
      seen = group->waiting_for();
    });
    group->barrier();
    watcher.join();
    if (rank != 2)
      RANK_CHECK(seen == "waiting for rank 2, which has not entered round 0 (stopped, or on another code path)");
    RANK_CHECK(group->waiting_for().empty());
    return 0;
  }));
}

TEST_F(FileChannelTest, AbortEndsEveryRankWithTheMessage) {
  std::vector<Outcome> outcomes = run_all(3, [&](int rank) {
    auto group = channel(rank, 3);
    group->barrier();
    if (rank == 1) group->abort("comm: rank 1: something failed");
    group->barrier();  // ranks 0 and 2 wait here for rank 1, which never comes
    return 0;
  });
  for (int r = 0; r < 3; ++r) EXPECT_EQ(outcomes[r].status, 1) << "rank " << r << ": " << outcomes[r].stderr;
  EXPECT_EQ(outcomes[1].stderr, "comm: rank 1: something failed\n");
  EXPECT_EQ(outcomes[0].stderr, "comm: rank 0: aborting: rank 1 ended the job: comm: rank 1: something failed\n");
  EXPECT_EQ(outcomes[2].stderr, "comm: rank 2: aborting: rank 1 ended the job: comm: rank 1: something failed\n");
}

TEST_F(FileChannelTest, AbortFromAnotherThreadEndsAWaitInProgress) {
  std::vector<Outcome> outcomes = run_all(3, [&](int rank) {
    auto group = channel(rank, 3);
    if (rank == 0) {
      std::thread([&] {
        std::this_thread::sleep_for(milliseconds(100));
        group->abort("comm: rank 0: the watchdog fires");
      }).detach();
    }
    // Arrives after the abort, with a margin for ranks that start late on a loaded machine.
    if (rank == 2) std::this_thread::sleep_for(milliseconds(1500));
    group->barrier();
    return 0;
  });
  for (int r = 0; r < 3; ++r) EXPECT_EQ(outcomes[r].status, 1) << "rank " << r << ": " << outcomes[r].stderr;
  EXPECT_EQ(outcomes[0].stderr, "comm: rank 0: the watchdog fires\n");
  EXPECT_EQ(outcomes[1].stderr, "comm: rank 1: aborting: rank 0 ended the job: comm: rank 0: the watchdog fires\n");
  EXPECT_EQ(outcomes[2].stderr, "comm: rank 2: aborting: rank 0 ended the job: comm: rank 0: the watchdog fires\n");
}

TEST_F(FileChannelTest, DifferentSizesAreAnErrorNotGarbage) {
  std::vector<Outcome> outcomes = run_all(2, [&](int rank) {
    auto group = channel(rank, 2);
    std::vector<std::byte> mine(rank == 0 ? 4 : 3);
    group->all_gather(mine);
    return 0;
  });
  EXPECT_EQ(outcomes[0].status, 2);
  EXPECT_NE(outcomes[0].stderr.find("round 0: rank 1 sent 3 bytes"), std::string::npos) << outcomes[0].stderr;
  EXPECT_NE(outcomes[0].stderr.find("but rank 0 expected 4"), std::string::npos) << outcomes[0].stderr;
  EXPECT_EQ(outcomes[1].status, 2);
  EXPECT_NE(outcomes[1].stderr.find("rank 0 sent 4 bytes"), std::string::npos) << outcomes[1].stderr;
}

TEST_F(FileChannelTest, RendezvousTimeoutNamesTheRanksThatNeverArrived) {
  std::vector<Outcome> outcomes = run({0, 1}, [&](int rank) {
    make_file_channel(launch_info(rank, 3, rendezvous_), milliseconds(300));
    return 0;
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(outcomes[r].status, 2);
    EXPECT_NE(outcomes[r].stderr.find("rank " + std::to_string(r) + " of 3: the rendezvous in"), std::string::npos)
        << outcomes[r].stderr;
    EXPECT_NE(outcomes[r].stderr.find("within 300 ms; ranks that never arrived: 2\n"), std::string::npos)
        << outcomes[r].stderr;
  }
}

TEST_F(FileChannelTest, RendezvousTimeoutWithoutRankZeroNamesIt) {
  EXPECT_ERROR(make_file_channel(launch_info(1, 2, rendezvous_), milliseconds(100)), "ranks that never arrived: 0");
  EXPECT_ERROR(make_file_channel(launch_info(0, 3, rendezvous_), milliseconds(100)), "ranks that never arrived: 1, 2");
}

TEST_F(FileChannelTest, SomethingOtherThanAFileUnderAKeyIsAnError) {
  fs::create_directories(rendezvous_ + "/tandem-" + kJob);
  ASSERT_EQ(mkfifo((rendezvous_ + "/tandem-" + kJob + "/generation").c_str(), 0600), 0);
  EXPECT_ERROR(make_file_channel(launch_info(1, 2, rendezvous_), kTimeout),
               "generation is not a regular file but expected a value written by tandem");
}

TEST_F(FileChannelTest, RefusesBadPathsAndArguments) {
  EXPECT_ERROR(make_file_channel(launch_info(0, 1, "relative/dir"), kTimeout),
               "rendezvous path relative/dir is not absolute but expected file:///absolute/path");
  EXPECT_ERROR(make_file_channel(launch_info(0, 1, ""), kTimeout), "is not absolute");
  std::string file = base_ + "/a_file";
  std::ofstream(file) << "not a directory";
  EXPECT_ERROR(make_file_channel(launch_info(0, 1, file), kTimeout), "a_file exists and is not a directory");
  EXPECT_ERROR(make_file_channel(launch_info(0, 1, file + "/below"), kTimeout), "cannot create the rendezvous");
  EXPECT_ERROR(make_file_channel(launch_info(2, 2, rendezvous_), kTimeout), "got rank 2 of size 2");
  EXPECT_ERROR(make_file_channel(launch_info(0, 1, rendezvous_), milliseconds(0)), "got a timeout of 0 ms");
}

// Under tests/distributed/run_env.sh (ctest comm.file_channel_env3): the launched processes meet through the file
// of TANDEM_INIT_METHOD. Skipped when run without that launcher.
TEST(FileChannelUnderLauncher, CollectivesAcrossTheLaunchedProcesses) {
  const char* rank_text = std::getenv("RANK");
  const char* size_text = std::getenv("WORLD_SIZE");
  const char* init_method = std::getenv("TANDEM_INIT_METHOD");
  if (!rank_text || !size_text || !init_method) GTEST_SKIP() << "runs under tests/distributed/run_env.sh";
  std::string method = init_method;
  ASSERT_EQ(method.rfind("file://", 0), 0u) << method;
  int rank = std::atoi(rank_text);
  int size = std::atoi(size_text);
  {
    auto group = make_file_channel(launch_info(rank, size, method.substr(7)), kTimeout);
    ASSERT_EQ(group->rank(), rank);
    std::vector<float> data = {static_cast<float>(rank + 1)};
    group->all_reduce_sum(data);
    EXPECT_EQ(data[0], static_cast<float>(size * (size + 1) / 2));
    std::vector<std::byte> id(16, std::byte(rank == 0 ? 42 : 0));
    group->broadcast(id, 0);
    EXPECT_EQ(id[15], std::byte(42));
    group->barrier();
  }
}

}  // namespace
}  // namespace tandem::comm::detail
