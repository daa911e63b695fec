// LaunchInfo::from_environment: how this process was started, read from the launcher's variables.
//
// Note [Launcher precedence]: a process may see the variables of several launchers at once (srun starting an MPI
// program sets SLURM_* and PMI*; a job script may export RANK for its own use). The first family found wins:
//   1. OpenMPI (mpirun/mpiexec, also under srun --mpi=pmix): OMPI_COMM_WORLD_RANK / _SIZE / _LOCAL_RANK /
//      _LOCAL_SIZE;
//   2. PMI (MPICH/Intel MPI hydra, srun --mpi=pmi2): PMI_RANK / PMI_SIZE, local placement from MPI_LOCALRANKID /
//      MPI_LOCALNRANKS;
//   3. Slurm's srun: SLURM_PROCID / SLURM_NTASKS / SLURM_LOCALID, local size from SLURM_NTASKS_PER_NODE or
//      SLURM_STEP_TASKS_PER_NODE (this node's entry, SLURM_NODEID);
//   4. PMIx alone: PMIX_RANK; the size is MPI_COMM_WORLD's, learnt when the channel starts (size 0 until then);
//   5. torchrun-style: RANK / WORLD_SIZE / LOCAL_RANK / LOCAL_WORLD_SIZE with TANDEM_INIT_METHOD;
//   6. none of them: a group of one process.
// MPI launchers come first because under them MPI is the channel whatever else is set. A launcher that gives no
// local placement counts as one process per machine (local rank 0 of 1).

#include <charconv>
#include <cstdlib>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tandem/comm/process_group.h"
#include "tandem/core/error.h"

namespace tandem::comm {
namespace {

constexpr const char* kFn = "LaunchInfo::from_environment";

std::optional<std::string_view> variable(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr) return std::nullopt;
  return std::string_view(value);
}

// A decimal integer in [minimum, int max]: digits only (no sign, spaces or trailing text).
int parse_int(const char* name, std::string_view text, int minimum) {
  int value = 0;
  const bool digits_only = !text.empty() && text.find_first_not_of("0123456789") == std::string_view::npos;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  TANDEM_CHECK(digits_only && error == std::errc() && end == text.data() + text.size() && value >= minimum, kFn, ": ",
               name, " is \"", excerpt(text), "\" but expected a decimal integer in [", minimum, ", ",
               std::numeric_limits<int>::max(), "]");
  return value;
}

std::optional<int> optional_int(const char* name, int minimum) {
  const auto text = variable(name);
  if (!text) return std::nullopt;
  return parse_int(name, *text, minimum);
}

int required_int(const char* name, int minimum, const char* because) {
  const auto text = variable(name);
  TANDEM_CHECK(text.has_value(), kFn, ": ", name, " is not set but expected it with ", because);
  return parse_int(name, *text, minimum);
}

// Slurm's per-node task counts, "2(x3),1": node n's entry. Returns nullopt when node is past the list.
std::optional<int> tasks_on_node(const char* name, std::string_view list, int node) {
  auto malformed = [&] {
    TANDEM_FAIL(kFn, ": ", name, " is \"", excerpt(list), "\" but expected counts like \"2(x3),1\"");
  };
  int first_node = 0;
  size_t at = 0;
  while (at <= list.size()) {
    const size_t comma = std::min(list.find(',', at), list.size());
    const std::string_view entry = list.substr(at, comma - at);
    const size_t paren = entry.find('(');
    std::string_view count = entry.substr(0, paren);
    int repeat = 1;
    if (paren != std::string_view::npos) {
      if (entry.size() < paren + 4 || entry.substr(paren, 2) != "(x" || entry.back() != ')') malformed();
      const std::string_view times = entry.substr(paren + 2, entry.size() - paren - 3);
      if (times.empty() || times.find_first_not_of("0123456789") != std::string_view::npos) malformed();
      repeat = parse_int(name, times, 1);
    }
    if (count.empty() || count.find_first_not_of("0123456789") != std::string_view::npos) malformed();
    const int tasks = parse_int(name, count, 1);
    // first_node <= node throughout, so neither side can overflow however large the repeats are.
    if (node - first_node < repeat) return tasks;
    first_node += repeat;
    at = comma + 1;
  }
  return std::nullopt;
}

// Both or neither: `names` lists the variables they come from, for the message.
void set_local(LaunchInfo& info, std::optional<int> local_rank, std::optional<int> local_size,
               const std::string& names) {
  if (local_rank || local_size) {
    TANDEM_CHECK(local_rank && local_size, kFn, ": got a local ", local_rank ? "rank" : "size", " but no local ",
                 local_rank ? "size" : "rank", " (expected both or neither of ", names, ")");
    info.local_rank = *local_rank;
    info.local_size = *local_size;
  }
}

// The local placement from a launcher's pair of variables, both or neither.
void set_local(LaunchInfo& info, const char* local_rank_name, const char* local_size_name) {
  set_local(info, optional_int(local_rank_name, 0), optional_int(local_size_name, 1),
            std::string(local_rank_name) + " and " + local_size_name);
}

// An MPI launcher's rank and size, from a pair of variables that come together.
LaunchInfo mpi_world(const char* rank_name, const char* size_name) {
  LaunchInfo info;
  info.channel = LaunchInfo::Channel::Mpi;
  info.rank = required_int(rank_name, 0, size_name);
  info.size = required_int(size_name, 1, rank_name);
  return info;
}

LaunchInfo from_openmpi() {
  LaunchInfo info = mpi_world("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE");
  set_local(info, "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE");
  return info;
}

LaunchInfo from_pmi() {
  LaunchInfo info = mpi_world("PMI_RANK", "PMI_SIZE");
  set_local(info, "MPI_LOCALRANKID", "MPI_LOCALNRANKS");
  return info;
}

LaunchInfo from_slurm() {
  LaunchInfo info = mpi_world("SLURM_PROCID", "SLURM_NTASKS");
  std::optional<int> local_size = optional_int("SLURM_NTASKS_PER_NODE", 1);
  if (!local_size) {
    if (const auto list = variable("SLURM_STEP_TASKS_PER_NODE")) {
      const int node = optional_int("SLURM_NODEID", 0).value_or(0);
      local_size = tasks_on_node("SLURM_STEP_TASKS_PER_NODE", *list, node);
      TANDEM_CHECK(local_size.has_value(), kFn, ": SLURM_STEP_TASKS_PER_NODE is \"", excerpt(*list),
                   "\" but SLURM_NODEID is ", node, ", past its last node");
    }
  }
  set_local(info, optional_int("SLURM_LOCALID", 0), local_size,
            "SLURM_LOCALID and SLURM_NTASKS_PER_NODE or SLURM_STEP_TASKS_PER_NODE");
  return info;
}

LaunchInfo from_pmix() {
  LaunchInfo info;
  info.channel = LaunchInfo::Channel::Mpi;
  info.rank = required_int("PMIX_RANK", 0, "PMIx");
  info.size = 0;  // MPI_COMM_WORLD's, filled in by the MPI channel (Note [Launcher precedence])
  return info;
}

// "file:///absolute/path" -> "/absolute/path".
std::string rendezvous_path(std::string_view method) {
  constexpr std::string_view kScheme = "file://";
  const bool ok = method.starts_with(kScheme) && method.size() > kScheme.size() + 1 && method[kScheme.size()] == '/' &&
                  method.find('\0') == std::string_view::npos;
  TANDEM_CHECK(ok, kFn, ": TANDEM_INIT_METHOD is \"", excerpt(method),
               "\" but expected file:///absolute/path (a path on a file system every process shares)");
  return std::string(method.substr(kScheme.size()));
}

// The job's id (LaunchInfo::job_id): the first of the variables that names one, checked.
std::string job_id() {
  std::string id;
  const char* from = nullptr;
  if (const auto tandem = variable("TANDEM_JOB_ID")) {
    id = *tandem;
    from = "TANDEM_JOB_ID";
  } else if (const auto run = variable("TORCHELASTIC_RUN_ID"); run && *run != "none" && !run->empty()) {
    id = *run;
    from = "TORCHELASTIC_RUN_ID";
  } else if (const auto addr = variable("MASTER_ADDR"), port = variable("MASTER_PORT"); addr && port) {
    id = std::string(*addr) + ":" + std::string(*port);
    from = "MASTER_ADDR:MASTER_PORT";
  }
  if (from == nullptr) return id;
  const bool ok =
      !id.empty() && id.size() <= 128 &&
      id.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.:_-") == std::string::npos &&
      id != "." && id != "..";
  TANDEM_CHECK(ok, kFn, ": ", from, " is \"", excerpt(id),
               "\" but expected a job id of 1 to 128 letters, digits and "
               "\".:_-\" (it names the job's files in the rendezvous directory)");
  return id;
}

std::optional<LaunchInfo> from_torchrun() {
  const auto method = variable("TANDEM_INIT_METHOD");
  const bool any = variable("RANK") || variable("WORLD_SIZE") || variable("LOCAL_RANK") || variable("LOCAL_WORLD_SIZE");
  if (!any) {
    TANDEM_CHECK(!method, kFn, ": TANDEM_INIT_METHOD is \"", excerpt(*method),
                 "\" but RANK and WORLD_SIZE are not set (expected torchrun-style variables with it)");
    return std::nullopt;
  }
  LaunchInfo info;
  info.rank = required_int("RANK", 0, "torchrun-style variables");
  info.size = required_int("WORLD_SIZE", 1, "torchrun-style variables");
  set_local(info, "LOCAL_RANK", "LOCAL_WORLD_SIZE");
  if (method) {
    info.channel = LaunchInfo::Channel::File;
    info.rendezvous_path = rendezvous_path(*method);
    info.job_id = job_id();
  } else {
    TANDEM_CHECK(info.size == 1, kFn, ": WORLD_SIZE is ", info.size,
                 " but TANDEM_INIT_METHOD is not set (expected file:///path for the processes to meet)");
  }
  return info;
}

void check_ranges(const LaunchInfo& info) {
  TANDEM_CHECK(info.size <= LaunchInfo::kMaxProcesses, kFn, ": the size is ", info.size, " but tandem runs at most ",
               LaunchInfo::kMaxProcesses, " processes (the rendezvous and the device exchange hold a record each)");
  if (info.size > 0) {
    TANDEM_CHECK(info.rank < info.size, kFn, ": the rank is ", info.rank, " but the size is ", info.size,
                 " (expected rank < size)");
    TANDEM_CHECK(info.local_size <= info.size, kFn, ": the local size is ", info.local_size, " but the size is ",
                 info.size, " (expected local size <= size)");
  }
  TANDEM_CHECK(info.local_rank < info.local_size, kFn, ": the local rank is ", info.local_rank,
               " but the local size is ", info.local_size, " (expected local rank < local size)");
}

}  // namespace

LaunchInfo LaunchInfo::from_environment() {
  LaunchInfo info;
  if (variable("OMPI_COMM_WORLD_RANK") || variable("OMPI_COMM_WORLD_SIZE")) {
    info = from_openmpi();
  } else if (variable("PMI_RANK") || variable("PMI_SIZE")) {
    info = from_pmi();
  } else if (variable("SLURM_PROCID") && variable("SLURM_NTASKS")) {
    info = from_slurm();
  } else if (variable("PMIX_RANK")) {
    info = from_pmix();
  } else if (auto torchrun = from_torchrun()) {
    info = *torchrun;
  }
  check_ranges(info);
  return info;
}

}  // namespace tandem::comm
