// tandem-train, run as a program: exit statuses, messages, summary and metrics files, resume.

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <thread>

#include "support/test_support.h"

namespace tandem::trainers {
namespace {

namespace fs = std::filesystem;

struct ToolRun {
  int status = -1;
  std::string output;  // stdout and stderr together
};

// Runs tandem-train with `arguments` through sh, after the shell commands `setup` (e.g. "ulimit -f 0;").
ToolRun run_tool(const std::string& arguments, const std::string& setup = "") {
  const std::string command = setup + " " TANDEM_BINARY_DIR "/bin/tandem-train " + arguments + " 2>&1";
  ToolRun run;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) {
    ADD_FAILURE() << "popen failed for " << command;
    return run;
  }
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) run.output.append(buffer, n);
  const int status = pclose(pipe);
  run.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return run;
}

nlohmann::json read_json(const std::string& path) {
  std::ifstream file(path);
  return nlohmann::json::parse(file);
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

TEST(TandemTrain, DefaultsReachTheLeastSquaresFit) {
  const std::string summary = testing::scratch_path("defaults.json");
  ToolRun run = run_tool("--summary-json " + summary);
  ASSERT_EQ(run.status, 0) << run.output;
  nlohmann::json result = read_json(summary);
  // Ordinary least squares reaches test R^2 0.5502 on the last 88 rows (data/README.md).
  EXPECT_GE(result.at("test_r2").get<double>(), 0.50);
  EXPECT_NEAR(result.at("test_r2").get<double>(), 0.5502, 0.01);
  EXPECT_EQ(result.at("epochs"), 100);
  EXPECT_EQ(result.at("steps"), 600);
  EXPECT_EQ(result.at("test_rows"), 88);
  std::vector<std::string> devices;
  for (const Device& device : default_devices()) devices.push_back(device.str());
  EXPECT_EQ(result.at("devices").get<std::vector<std::string>>(), devices);
  EXPECT_GT(result.at("seconds").get<double>(), 0.0);
  EXPECT_GT(result.at("setup_seconds").get<double>(), 0.0);  // the set-up before that clock
  // The run's setup beside its results: the hyperparameters as its checkpoints record them.
  const nlohmann::json& setup = result.at("setup");
  EXPECT_EQ(setup.at("lr"), "0.01");
  EXPECT_EQ(setup.at("batch_size"), "64");
  EXPECT_EQ(setup.at("epochs"), "100");
  EXPECT_EQ(setup.at("optimizer"), "sgd");
  EXPECT_EQ(setup.at("target"), "target");
  EXPECT_EQ(setup.at("test_fraction"), "0.2");
  EXPECT_NE(setup.at("train_data").get<std::string>().find("354 rows x 10 features"), std::string::npos);
  EXPECT_NE(run.output.find("epoch 100/100  train_loss "), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("test:  mse "), std::string::npos) << run.output;
}

TEST(TandemTrain, SameResultOnOneTwoAndThreeCpuDevices) {
  std::vector<double> r2;
  for (const char* devices : {"cpu:0", "cpu:0,cpu:1", "cpu:0,cpu:1,cpu:2"}) {
    const std::string summary = testing::scratch_path("devices.json");
    ToolRun run = run_tool(std::string("--quiet --devices ") + devices + " --summary-json " + summary);
    ASSERT_EQ(run.status, 0) << run.output;
    r2.push_back(read_json(summary).at("test_r2").get<double>());
  }
  EXPECT_NEAR(r2[1], r2[0], 1e-5);
  EXPECT_NEAR(r2[2], r2[0], 1e-5);
}

TEST(TandemTrain, QuietPrintsOnlyTheSummary) {
  ToolRun run = run_tool("--quiet --epochs 2 --devices cpu:0");
  ASSERT_EQ(run.status, 0) << run.output;
  std::vector<std::string> lines = lines_of(run.output);
  ASSERT_EQ(lines.size(), 4u) << run.output;
  EXPECT_EQ(lines[0].rfind("done: 2 epochs, 12 steps in ", 0), 0u) << lines[0];
  EXPECT_EQ(lines[1], "steps: eager (capture needs CUDA devices, but the model runs on cpu:0)");
}

// The steps' mode, in the output and the summary: eager on CPU devices (which never capture, so --no-capture changes
// nothing but the reason), and the flags that turn capture off.
TEST(TandemTrain, CaptureFlagsAndTheStepModeInTheSummary) {
  const std::string summary = testing::scratch_path("capture.json");
  std::vector<double> test_mse;
  for (const char* flag : {"", "--capture on", "--capture off", "--no-capture"}) {
    SCOPED_TRACE(flag);
    ToolRun run =
        run_tool(std::string("--quiet --epochs 3 --devices cpu:0,cpu:1 ") + flag + " --summary-json " + summary);
    ASSERT_EQ(run.status, 0) << run.output;
    const nlohmann::json result = read_json(summary);
    const bool off = std::string(flag).find("off") != std::string::npos || std::string(flag) == "--no-capture";
    const std::string reason = off ? "capture is off (TrainerOptions::capture is false)"
                                   : "capture needs CUDA devices, but the model runs on cpu:0";
    EXPECT_EQ(result.at("step_mode"), "eager");
    EXPECT_EQ(result.at("eager_reason"), reason);
    EXPECT_EQ(result.at("captured_steps"), 0);
    EXPECT_NE(run.output.find("\nsteps: eager (" + reason + ")\n"), std::string::npos) << run.output;
    test_mse.push_back(result.at("test_mse").get<double>());
  }
  for (double mse : test_mse) EXPECT_EQ(mse, test_mse.front());  // bit-identical on CPU devices

  ToolRun bad = run_tool("--capture maybe");
  EXPECT_EQ(bad.status, 2);
  EXPECT_EQ(bad.output, "tandem-train: --capture must be on or off, got \"maybe\"\n");
  bad = run_tool("--capture off --no-capture");
  EXPECT_EQ(bad.status, 2);
  EXPECT_NE(bad.output.find("--capture excludes --no-capture"), std::string::npos) << bad.output;
}

TEST(TandemTrain, AccumulateTrainsAsTheLargerBatch) {
  // --accumulate 3 with --batch-size 16 takes the steps of --batch-size 48 (the diabetes table's 354 training rows:
  // 8 steps per epoch, the last on 18 rows in two micro-batches of 16 and 2).
  std::vector<nlohmann::json> results;
  for (const char* flags : {"--batch-size 16 --accumulate 3", "--batch-size 48"}) {
    const std::string summary = testing::scratch_path("accumulate.json");
    ToolRun run =
        run_tool(std::string("--epochs 4 --quiet --devices cpu:0,cpu:1 --summary-json ") + summary + " " + flags);
    ASSERT_EQ(run.status, 0) << flags << "\n" << run.output;
    results.push_back(read_json(summary));
    std::filesystem::remove(summary);
  }
  EXPECT_EQ(results[0].at("steps"), 32);
  EXPECT_EQ(results[0].at("steps"), results[1].at("steps"));
  for (const char* key : {"train_mse", "test_mse"}) {
    const double expected = results[1].at(key).get<double>();
    EXPECT_NEAR(results[0].at(key).get<double>(), expected, 1e-6 * expected) << key;
  }
  EXPECT_EQ(results[0].at("setup").at("accumulate_steps"), "3");
  EXPECT_FALSE(results[1].at("setup").contains("accumulate_steps"));
}

TEST(TandemTrain, BadFlagsExitWithStatusTwoAndOneLine) {
  const std::pair<const char*, const char*> cases[] = {
      {"--epochs 0", "--epochs must be an integer in [1, 1000000000], got \"0\""},
      {"--epochs ten", "--epochs must be an integer in [1, 1000000000], got \"ten\""},
      {"--epochs 99999999999999999999", "--epochs must be an integer in [1, 1000000000], got \"99999999999999999999\""},
      {"--epochs 0x10", "--epochs must be an integer in [1, 1000000000], got \"0x10\""},
      {"--epochs 1e3", "--epochs must be an integer"},
      {"--timeout 0", "--timeout must be an integer in [1, 604800], got \"0\""},
      {"--batch-size 0", "--batch-size must be an integer in [1, 2147483648], got \"0\""},
      {"--batch-size 9223372036854775807", "--batch-size must be an integer in [1, 2147483648]"},
      {"--accumulate 0", "--accumulate must be an integer in [1, 2147483648], got \"0\""},
      {"--accumulate -1", "--accumulate must be an integer in [1, 2147483648], got \"-1\""},
      {"--lr 0", "--lr must be a positive number"},
      {"--momentum 1.5", "--momentum must lie in [0, 1), got 1.5"},
      {"--hidden 0", "--hidden must be an integer in [1, 16777216], got \"0\""},
      {"--hidden 4611686018427387904", "--hidden must be an integer in [1, 16777216]"},
      {"--activation sigmoid", "--activation: parse_activation: \"sigmoid\" is not an activation"},
      {"--devices gpu:0", "--devices: Device::parse: cannot parse 'gpu:0'"},
      {"--devices cpu:0,cpu:0", "--devices"},
      {"--test-fraction 1", "--test-fraction must lie in [0, 1), got 1"},
      {"--seed -3", "--seed must be an integer in [0, 18446744073709551615], got \"-3\""},
      {"--seed 18446744073709551616", "--seed must be an integer in [0, 18446744073709551615]"},
      {"--lr 1e999", "--lr must be a finite decimal number, got \"1e999\""},
      {"--lr nan", "--lr must be a finite decimal number, got \"nan\""},
      {"--lr 0x1p-3", "--lr must be a finite decimal number, got \"0x1p-3\""},
      {"--lr ' 0.1'", "--lr must be a finite decimal number, got \" 0.1\""},
      {"--lr ''", "--lr must be a finite decimal number, got \"\""},
      {"--momentum inf", "--momentum must be a finite decimal number, got \"inf\""},
      {"--weight-decay 0X1P0", "--weight-decay must be a finite decimal number, got \"0X1P0\""},
      {"--dropout '0.1 '", "--dropout must be a finite decimal number, got \"0.1 \""},
      {"--test-fraction 0x0.8p0", "--test-fraction must be a finite decimal number, got \"0x0.8p0\""},
      // A flag with an empty value is refused, not taken for its default.
      {"--epochs ''", "--epochs must be an integer in [1, 1000000000], got \"\""},
      {"--optimizer ''", "--optimizer must be sgd, adam or adamw, got \"\""},
      {"--layers ''", "--layers takes comma-separated widths such as 128,64, got \"\""},
      {"--hidden ''", "--hidden must be an integer in [1, 16777216], got \"\""},
      {"--features ''", "--features takes comma-separated column names, got \"\""},
      {"--lr-schedule ''", "--lr-schedule: parse_lr_schedule: \"\""},
      {"--activation ''", "--activation: parse_activation: \"\" is not an activation"},
      {"--checkpoint-every 2", "--checkpoint-every requires --checkpoint"},
      {"--checkpoint x --epochs 3 --checkpoint-every 4", "--checkpoint-every must be at most --epochs (3), got 4"},
      {"--allow-change lr", "--allow-change requires --resume"},
      {"--data /nonexistent.csv", "/nonexistent.csv"},
      {"--resume /nonexistent.safetensors", "/nonexistent.safetensors"},
      {"--target nosuch", "--target: no column \"nosuch\" (columns: age, sex, bmi"},
      {"--summary-json /nonexistent/dir/summary.json",
       "--summary-json: cannot write '/nonexistent/dir/summary.json': the directory '/nonexistent/dir' does not exist"},
      {"--metrics /dev/null", "--metrics: cannot write '/dev/null': it is a character device"},
      {"--checkpoint /", "--checkpoint: cannot write '/': it is a directory"},
      {"--no-such-flag", "--no-such-flag"},
      {"stray", "stray"},
  };
  for (const auto& [arguments, fragment] : cases) {
    SCOPED_TRACE(arguments);
    ToolRun run = run_tool(arguments);
    EXPECT_EQ(run.status, 2) << run.output;
    EXPECT_EQ(lines_of(run.output).size(), 1u) << run.output;
    EXPECT_EQ(run.output.rfind("tandem-train: ", 0), 0u) << run.output;
    EXPECT_NE(run.output.find(fragment), std::string::npos) << run.output;
  }
}

TEST(TandemTrain, HelpExitsWithStatusZero) {
  ToolRun run = run_tool("--help");
  EXPECT_EQ(run.status, 0);
  EXPECT_NE(run.output.find("--devices"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("--summary-json"), std::string::npos) << run.output;
}

TEST(TandemTrain, VersionSaysHowTandemWasBuilt) {
  ToolRun run = run_tool("--version");
  EXPECT_EQ(run.status, 0) << run.output;
  EXPECT_EQ(run.output, "tandem-train: " + build_summary());
  ToolRun with_others = run_tool("--epochs 3 --version");
  EXPECT_EQ(with_others.status, 0) << with_others.output;
  EXPECT_EQ(with_others.output, run.output);
}

// PMIx's variable without a PMIx launcher behind it: MPI starts alone, as rank 0 of 1, which must be a user's error
// naming both ranks, not an internal one.
TEST(TandemTrain, ALauncherVariableWithoutItsLauncherIsRefused) {
  // OpenMPI leaves its allocations at exit, which LeakSanitizer would report (as for tests/distributed).
  ToolRun run = run_tool("--epochs 1 --quiet", "PMIX_RANK=5 LSAN_OPTIONS=detect_leaks=0");
  EXPECT_EQ(run.status, 1) << run.output;
  EXPECT_EQ(run.output.find("internal"), std::string::npos) << run.output;
  const std::string expected =
      build_info().mpi ? "the launcher's variables say rank 5 but MPI_COMM_WORLD has rank 0 of 1"
                       : "the process was started by an MPI launcher (rank 5 of 0) but tandem was built without MPI";
  EXPECT_NE(run.output.find(expected), std::string::npos) << run.output;
}

TEST(TandemTrain, FlagsNamingOneFileTwiceAreRefusedBeforeTraining) {
  const std::string data = testing::scratch_path("data.csv");
  std::ofstream(data) << "x,y\n1,2\n2,4\n3,6\n4,8\n5,10\n";
  const std::string link = testing::scratch_path("link.csv");
  fs::create_symlink(data, link);
  const std::string out = testing::scratch_path("out.json");
  const std::pair<std::string, std::string> cases[] = {
      {"--data " + data + " --metrics " + data, "--data and --metrics name the same file"},
      {"--data " + data + " --summary-json " + link, "--data and --summary-json name the same file"},
      {"--metrics " + out + " --plot " + out, "--metrics and --plot name the same file"},
      {"--checkpoint " + out + " --summary-json " + testing::scratch_dir() + "/./out.json",
       "--checkpoint and --summary-json name the same file"},
  };
  for (const auto& [arguments, fragment] : cases) {
    SCOPED_TRACE(arguments);
    ToolRun run = run_tool(arguments + " --epochs 1 --quiet");
    EXPECT_EQ(run.status, 2) << run.output;
    EXPECT_NE(run.output.find(fragment), std::string::npos) << run.output;
  }
  EXPECT_EQ(testing::file_text(data), "x,y\n1,2\n2,4\n3,6\n4,8\n5,10\n");
  EXPECT_FALSE(fs::exists(out));
}

TEST(TandemTrain, RuntimeErrorsExitWithStatusOneAndTheMessage) {
  const std::string ragged = testing::scratch_path("ragged.csv");
  std::ofstream(ragged) << "a,b,y\n1,2,3\n4,5\n";
  ToolRun bad_csv = run_tool("--data " + ragged);
  EXPECT_EQ(bad_csv.status, 1) << bad_csv.output;
  EXPECT_NE(bad_csv.output.find("tandem-train: read_csv: " + ragged + " line 3 has 2 cells but the header has 3"),
            std::string::npos)
      << bad_csv.output;

  const std::string not_checkpoint = testing::scratch_path("not_a_checkpoint.safetensors");
  std::ofstream(not_checkpoint) << "garbage";
  ToolRun bad_resume = run_tool("--resume " + not_checkpoint);
  EXPECT_EQ(bad_resume.status, 1) << bad_resume.output;
  EXPECT_NE(bad_resume.output.find(not_checkpoint), std::string::npos) << bad_resume.output;

  ToolRun diverging = run_tool("--lr 1e10 --devices cpu:0");
  EXPECT_EQ(diverging.status, 1) << diverging.output;
  EXPECT_NE(diverging.output.find("Trainer::fit: the loss is "), std::string::npos) << diverging.output;
  EXPECT_NE(diverging.output.find(" at epoch 1, step "), std::string::npos) << diverging.output;
}

// An output that cannot be written is refused at once, with one line, rather than after the whole run.
TEST(TandemTrain, SummaryJsonInAMissingDirectoryFailsBeforeTraining) {
  const std::string summary = testing::scratch_path("missing_dir") + "/summary.json";
  ToolRun run = run_tool("--summary-json " + summary);
  EXPECT_NE(run.status, 0) << run.output;
  ASSERT_EQ(lines_of(run.output).size(), 1u) << run.output;
  EXPECT_EQ(testing::without_error_location(lines_of(run.output)[0]),
            "tandem-train: --summary-json: cannot write '" + summary + "': the directory '" +
                testing::scratch_path("missing_dir") + "' does not exist");
}

TEST(TandemTrain, FailedSummaryWriteExitsNonZeroAndKeepsTheOldFile) {
  const std::string summary = testing::scratch_path("unwritable.json");
  std::ofstream(summary) << "{\"old\": true}\n";
  // No file may grow past 0 bytes (and SIGXFSZ is ignored, so write() fails with EFBIG), as on a full disk.
  ToolRun run = run_tool("--quiet --epochs 2 --devices cpu:0 --summary-json " + summary, "trap '' XFSZ; ulimit -f 0;");
  EXPECT_EQ(run.status, 1) << run.output;
  const std::vector<std::string> lines = lines_of(run.output);
  ASSERT_FALSE(lines.empty());
  EXPECT_EQ(lines.back().rfind("tandem-train: --summary-json: cannot write '" + summary + "': writing '", 0), 0u)
      << run.output;
  EXPECT_NE(lines.back().find("File too large"), std::string::npos) << run.output;
  EXPECT_EQ(read_json(summary), nlohmann::json({{"old", true}}));
  const std::string temp_prefix = "." + fs::path(summary).filename().string() + ".tandem-tmp.";
  for (const auto& entry : fs::directory_iterator(fs::path(summary).parent_path())) {
    EXPECT_NE(entry.path().filename().string().rfind(temp_prefix, 0), 0u) << entry.path();
  }
}

TEST(TandemTrain, SymlinkedSummaryJsonStaysALink) {
  const std::string real = testing::scratch_path("summary_target.json");
  const std::string link = testing::scratch_path("summary_link.json");
  std::ofstream(real) << "{}\n";
  fs::remove(link);
  fs::create_symlink(real, link);
  ToolRun run = run_tool("--quiet --epochs 2 --devices cpu:0 --summary-json " + link);
  ASSERT_EQ(run.status, 0) << run.output;
  EXPECT_TRUE(fs::is_symlink(link));
  EXPECT_EQ(fs::read_symlink(link), real);
  EXPECT_EQ(read_json(real).at("epochs"), 2);
}

TEST(TandemTrain, OwnCsvWithTargetByName) {
  const std::string data = testing::scratch_path("line.csv");
  {
    std::ofstream file(data);
    file << "y,x\n";
    for (int i = 0; i < 50; ++i) file << 3 * i + 1 << "," << i << "\n";  // y = 3x + 1 exactly
  }
  const std::string summary = testing::scratch_path("line.json");
  ToolRun run = run_tool("--quiet --data " + data + " --target y --epochs 200 --summary-json " + summary);
  ASSERT_EQ(run.status, 0) << run.output;
  EXPECT_GT(read_json(summary).at("test_r2").get<double>(), 0.999);
}

TEST(TandemTrain, MissingValuesAreAnErrorOrDroppedRows) {
  const std::string data = testing::scratch_path("missing.csv");
  {
    std::ofstream file(data);
    file << "x,y\n";
    for (int i = 0; i < 40; ++i) file << (i == 7 ? std::string("NA") : std::to_string(i)) << "," << 2 * i << "\n";
  }
  ToolRun refused = run_tool("--quiet --data " + data);
  EXPECT_EQ(refused.status, 1) << refused.output;
  EXPECT_NE(refused.output.find("line 9, column 1 (x): missing value \"NA\""), std::string::npos) << refused.output;
  ToolRun dropped = run_tool("--epochs 1 --data " + data + " --missing drop-row");
  EXPECT_EQ(dropped.status, 0) << dropped.output;
  EXPECT_NE(dropped.output.find("39 rows (1 rows with missing values dropped)"), std::string::npos) << dropped.output;
  EXPECT_EQ(run_tool("--missing sometimes").status, 2);
}

// Data as users have it: a semicolon-separated file with a text column that is not among --features is read (the
// column is skipped unread), and --standardize off trains on the features as they are, which the setup records.
TEST(TandemTrain, DelimitersTextColumnsAndStandardization) {
  const std::string data = testing::scratch_path("semicolons.csv");
  const std::string summary = testing::scratch_path("semicolons.json");
  {
    std::ofstream file(data);
    file << "name;x1;x2;y\n";
    for (int i = 0; i < 60; ++i)
      file << "row " << i << ";" << i % 7 << ";" << i % 5 << ";" << 2 * (i % 7) + i % 5 << "\n";
  }
  const std::string common = "--quiet --epochs 3 --devices cpu:0 --data " + data + " --summary-json " + summary;
  ToolRun comma = run_tool(common);
  EXPECT_EQ(comma.status, 1) << comma.output;  // one column "name;x1;x2;y" of text
  ToolRun text = run_tool(common + " --delimiter ';'");
  EXPECT_EQ(text.status, 1);
  EXPECT_NE(text.output.find("(name): \"row 0\" is not a finite number"), std::string::npos) << text.output;
  ToolRun run = run_tool(common + " --delimiter ';' --features x1,x2");
  ASSERT_EQ(run.status, 0) << run.output;
  EXPECT_EQ(read_json(summary).at("setup").at("features"), "x1,x2");
  EXPECT_FALSE(read_json(summary).at("setup").contains("standardize_features"));
  ToolRun raw = run_tool(common + " --delimiter ';' --features x1,x2 --standardize off");
  ASSERT_EQ(raw.status, 0) << raw.output;
  EXPECT_EQ(read_json(summary).at("setup").at("standardize_features"), "false");
  EXPECT_EQ(read_json(summary).at("setup").at("standardize_target"), "false");
  EXPECT_EQ(run_tool(common + " --delimiter ';;'").status, 2);
  EXPECT_EQ(run_tool(common + " --standardize maybe").status, 2);
  std::filesystem::remove(data);
  std::filesystem::remove(summary);
}

TEST(TandemTrain, ResumeRefusesAnotherSetupUnlessAllowed) {
  const std::string checkpoint = testing::scratch_path("setup.safetensors");
  ASSERT_EQ(run_tool("--quiet --epochs 2 --checkpoint " + checkpoint).status, 0);
  ToolRun other = run_tool("--quiet --epochs 2 --resume " + checkpoint + " --lr 0.02 --batch-size 32");
  EXPECT_EQ(other.status, 1) << other.output;
  EXPECT_EQ(lines_of(other.output).size(), 1u) << other.output;
  EXPECT_NE(other.output.find("belongs to another setup: batch_size: 64 in the checkpoint, 32 now; lr: 0.01 in the "
                              "checkpoint, 0.02 now"),
            std::string::npos)
      << other.output;
  EXPECT_NE(other.output.find("--allow-change lr allows changing the learning rate"), std::string::npos)
      << other.output;
  EXPECT_EQ(run_tool("--quiet --epochs 2 --resume " + checkpoint + " --activation relu").status, 1);
  EXPECT_EQ(run_tool("--quiet --epochs 2 --resume " + checkpoint + " --target bmi").status, 1);
  ToolRun allowed = run_tool("--quiet --epochs 3 --resume " + checkpoint + " --lr 0.02 --allow-change lr,epochs");
  EXPECT_EQ(allowed.status, 0) << allowed.output;
  EXPECT_NE(allowed.output.find("done: 3 epochs"), std::string::npos) << allowed.output;
  // More epochs need no flag: the everyday resume.
  ToolRun longer = run_tool("--quiet --epochs 4 --resume " + checkpoint);
  EXPECT_EQ(longer.status, 0) << longer.output;
  EXPECT_NE(longer.output.find("done: 4 epochs"), std::string::npos) << longer.output;
  // A schedule over the epochs changes with them: still refused.
  const std::string cosine = testing::scratch_path("cosine.safetensors");
  ASSERT_EQ(run_tool("--quiet --epochs 2 --lr-schedule cosine --checkpoint " + cosine).status, 0);
  ToolRun reshaped = run_tool("--quiet --epochs 4 --lr-schedule cosine --resume " + cosine);
  EXPECT_EQ(reshaped.status, 1);
  EXPECT_NE(reshaped.output.find("lr_schedule: cosine (t_max 2) in the checkpoint, cosine (t_max 4) now"),
            std::string::npos)
      << reshaped.output;
  std::filesystem::remove(cosine);
}

// Starts tandem-train with `arguments` (no shell in between, so a signal reaches it) and returns its pid.
pid_t spawn_tool(const std::vector<std::string>& arguments) {
  std::vector<std::string> argv_strings = {TANDEM_BINARY_DIR "/bin/tandem-train"};
  argv_strings.insert(argv_strings.end(), arguments.begin(), arguments.end());
  const pid_t pid = fork();
  if (pid == 0) {
    std::vector<char*> argv;
    for (std::string& argument : argv_strings) argv.push_back(argument.data());
    argv.push_back(nullptr);
    freopen("/dev/null", "w", stdout);
    execv(argv[0], argv.data());
    _exit(127);
  }
  return pid;
}

TEST(TandemTrain, CheckpointsSurviveKillNine) {
  const std::string directory = testing::scratch_path("kill9");
  std::filesystem::remove_all(directory);
  std::filesystem::create_directory(directory);
  const std::string checkpoint = directory + "/run.safetensors";
  const std::vector<std::string> run = {"--quiet", "--devices",    "cpu:0",   "--epochs",
                                        "1000000", "--checkpoint", checkpoint};
  std::mt19937 random(7);
  int64_t last_epoch = 0;
  for (int kill_number = 0; kill_number < 12; ++kill_number) {
    std::vector<std::string> arguments = run;
    if (std::filesystem::exists(checkpoint)) arguments.insert(arguments.end(), {"--resume", checkpoint});
    const pid_t pid = spawn_tool(arguments);
    ASSERT_GT(pid, 0);
    // The kill comes at a random instant after the run has written a checkpoint of its own (so that a slow start on a
    // loaded machine cannot make every run die before its first write), while it goes on writing more.
    const auto written = [&checkpoint] {
      std::error_code missing;
      const auto time = std::filesystem::last_write_time(checkpoint, missing);
      return missing ? std::filesystem::file_time_type::min() : time;
    };
    const auto written_before = written();
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (written() == written_before && std::chrono::steady_clock::now() < give_up) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(random() % 200));
    ASSERT_EQ(kill(pid, SIGKILL), 0);
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFSIGNALED(status)) << "the run ended before it was killed";
    if (!std::filesystem::exists(checkpoint)) continue;
    // Whatever instant the kill hit, the checkpoint is a complete one, never older than the one before.
    const Checkpoint loaded = load_checkpoint(checkpoint);
    EXPECT_GE(loaded.epoch, last_epoch);
    last_epoch = loaded.epoch;
  }
  EXPECT_GT(last_epoch, 0) << "no checkpoint was written in any run";
  // A last run finishes; its checkpoint writes sweep the temporary files that the killed runs left behind.
  const std::string epochs = std::to_string(last_epoch + 1);
  ToolRun finish = run_tool("--quiet --devices cpu:0 --epochs " + epochs + " --checkpoint " + checkpoint +
                            " --resume " + checkpoint + " --allow-change epochs");
  ASSERT_EQ(finish.status, 0) << finish.output;
  EXPECT_EQ(load_checkpoint(checkpoint).epoch, last_epoch + 1);
  for (const auto& entry : std::filesystem::directory_iterator(directory)) {
    EXPECT_EQ(entry.path().filename().string().find("tandem-tmp"), std::string::npos) << entry.path();
  }
  std::filesystem::remove_all(directory);
}

// Runs `common` for 10 epochs, and for 4 epochs with a checkpoint that a second run resumes up to 10: both must end
// with the same metrics, bit for bit.
void expect_resume_matches_an_uninterrupted_run(const std::string& common, const std::string& name) {
  const std::string full = testing::scratch_path(name + "_full.json");
  ASSERT_EQ(run_tool(common + "--epochs 10 --summary-json " + full).status, 0);
  const std::string checkpoint = testing::scratch_path(name + ".safetensors");
  std::filesystem::remove(checkpoint);
  ToolRun first = run_tool(common + "--epochs 4 --checkpoint " + checkpoint);
  ASSERT_EQ(first.status, 0) << first.output;
  const std::string resumed = testing::scratch_path(name + "_resumed.json");
  ToolRun second =
      run_tool(common + "--epochs 10 --resume " + checkpoint + " --allow-change epochs --summary-json " + resumed);
  ASSERT_EQ(second.status, 0) << second.output;
  const nlohmann::json expected = read_json(full);
  const nlohmann::json actual = read_json(resumed);
  for (const char* key : {"train_mse", "test_mse", "test_r2", "steps"}) {
    EXPECT_EQ(actual.at(key), expected.at(key)) << key;
  }
}

TEST(TandemTrain, AdamAndAdamWResumesMatchAnUninterruptedRun) {
  for (const char* optimizer : {"adam", "adamw"}) {
    SCOPED_TRACE(optimizer);
    expect_resume_matches_an_uninterrupted_run(
        "--quiet --devices cpu:0,cpu:1 --activation tanh --optimizer " + std::string(optimizer) + " ", optimizer);
  }
  // Their lr and weight decay are facts of the setup, as SGD's are.
  const std::string checkpoint = testing::scratch_path("adamw.safetensors");
  ToolRun other = run_tool(
      "--quiet --devices cpu:0 --activation tanh --optimizer adamw --epochs 4 --lr 0.002 "
      "--weight-decay 0.1 "
      "--resume " +
      checkpoint);
  EXPECT_EQ(other.status, 1) << other.output;
  EXPECT_NE(other.output.find("lr: 0.001 in the checkpoint, 0.002 now; weight_decay: 0.01 in the checkpoint, 0.1 now"),
            std::string::npos)
      << other.output;
}

TEST(TandemTrain, ResumeMatchesAnUninterruptedRun) {
  const std::string common = "--quiet --devices cpu:0,cpu:1 --activation tanh ";
  const std::string full = testing::scratch_path("full.json");
  ASSERT_EQ(run_tool(common + "--epochs 10 --summary-json " + full).status, 0);

  const std::string checkpoint = testing::scratch_path("resume.safetensors");
  const std::string metrics = testing::scratch_path("resume.jsonl");
  std::filesystem::remove(checkpoint);
  ToolRun first =
      run_tool(common + "--epochs 4 --checkpoint " + checkpoint + " --checkpoint-every 3 --metrics " + metrics);
  ASSERT_EQ(first.status, 0) << first.output;
  EXPECT_EQ(load_checkpoint(checkpoint).epoch, 4);  // epochs 3 and 4 (the last) were written

  const std::string resumed = testing::scratch_path("resumed.json");
  ToolRun second = run_tool(common + "--epochs 10 --resume " + checkpoint + " --allow-change epochs --metrics " +
                            metrics + " --summary-json " + resumed);
  ASSERT_EQ(second.status, 0) << second.output;

  nlohmann::json expected = read_json(full);
  nlohmann::json actual = read_json(resumed);
  for (const char* key : {"train_mse", "test_mse", "test_r2"}) {
    EXPECT_EQ(actual.at(key).get<double>(), expected.at(key).get<double>()) << key;
  }
  EXPECT_EQ(actual.at("epochs"), 10);
  EXPECT_EQ(actual.at("steps"), expected.at("steps"));

  std::ifstream lines(metrics);
  int64_t epoch = 0;
  for (std::string line; std::getline(lines, line);) EXPECT_EQ(nlohmann::json::parse(line).at("epoch"), ++epoch);
  EXPECT_EQ(epoch, 10);  // 4 lines from the first run, 6 appended by the resumed one
}

}  // namespace
}  // namespace tandem::trainers

namespace tandem::trainers {
namespace {

// The digits data (data/README.md) with the classification defaults, last 20% of rows as the test set: ahead of
// scikit-learn's MLPClassifier (0.90 to 0.93) on two devices, and the same run on one device agrees.
TEST(TandemTrainClassification, DigitsReachTheReferenceAccuracyOnTwoDevicesAndOneAgrees) {
  std::vector<nlohmann::json> results;
  for (const std::string devices : {"cpu:0,cpu:1", "cpu:0"}) {
    const std::string summary = testing::scratch_path("digits_" + std::to_string(results.size()) + ".json");
    const std::string plot = testing::scratch_path("digits.svg");
    ToolRun run = run_tool("--data " TANDEM_SOURCE_DIR "/data/digits.csv --task classification --quiet --devices " +
                           devices + " --summary-json " + summary + " --plot " + plot);
    ASSERT_EQ(run.status, 0) << run.output;
    results.push_back(read_json(summary));
    EXPECT_EQ(results.back().at("test_rows"), 359);
  }
  EXPECT_GE(results[0].at("test_accuracy").get<double>(), 0.93);
  EXPECT_EQ(results[0].at("test_accuracy"), results[1].at("test_accuracy"));
  EXPECT_NEAR(results[0].at("test_loss").get<double>(), results[1].at("test_loss").get<double>(), 1e-3);
  int64_t total = 0;
  for (const auto& row : results[0].at("confusion_matrix")) {
    for (const auto& count : row) total += count.get<int64_t>();
  }
  EXPECT_EQ(total, 359);
  EXPECT_EQ(results[0].at("classes").size(), 10u);
}

// A data set the defaults never saw: three Gaussian blobs with labels 1, 5, 9 and a column that is not a feature.
TEST(TandemTrainClassification, UnseenBlobsTrainWithDefaultsAndFeaturesByName) {
  const std::string data = testing::scratch_path("blobs.csv");
  {
    std::ofstream out(data);
    out << "id,x,label,y\n";
    std::mt19937 random(7);
    std::normal_distribution<double> noise(0.0, 1.0);
    for (int r = 0; r < 300; ++r) {
      const int c = r % 3;
      out << r << "," << 4 * c + noise(random) << "," << 1 + 4 * c << "," << -3 * c + noise(random) << "\n";
    }
  }
  const std::string summary = testing::scratch_path("blobs.json");
  const std::string plot = testing::scratch_path("blobs.svg");
  ToolRun run = run_tool("--data " + data +
                         " --task classification --target label --features x,y --devices "
                         "cpu:0,cpu:1 --summary-json " +
                         summary + " --plot " + plot);
  ASSERT_EQ(run.status, 0) << run.output;
  EXPECT_NE(run.output.find("Linear(2, 512)"), std::string::npos) << run.output;
  const nlohmann::json result = read_json(summary);
  EXPECT_GE(result.at("test_accuracy").get<double>(), 0.95);
  EXPECT_EQ(result.at("classes"), nlohmann::json({1, 5, 9}));
  std::ifstream svg_file(plot);
  const std::string svg((std::istreambuf_iterator<char>(svg_file)), std::istreambuf_iterator<char>());
  EXPECT_EQ(svg.rfind("<?xml", 0), 0u);
  EXPECT_NE(svg.find("data-name=\"train\""), std::string::npos);
  EXPECT_NE(svg.find("data-name=\"test\""), std::string::npos);
  EXPECT_NE(svg.find(">accuracy</text>"), std::string::npos);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
}

TEST(TandemTrainClassification, BadNewFlagsExitWithStatusTwo) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--task ranking", "--task must be regression, classification or language-model, got \"ranking\""},
      {"--optimizer lbfgs", "--optimizer must be sgd, adam or adamw, got \"lbfgs\""},
      {"--weight-decay -1", "--weight-decay must be a number >= 0, got -1"},
      {"--lr-schedule step:0:0.5", "has step size \"0\" but expected an integer in [1"},
      {"--lr-schedule warmup:2+cosine", "needs at least 2 epochs (a warm-up, then a decay), but epochs is 1"},
      {"--lr-schedule warmup:2", "has warm-up epochs \"2\" but expected an integer in [1, 1]"},
      {"--lr-schedule linear", "\"linear\" is not a schedule; expected none, step:S:GAMMA, cosine"},
      {"--layers 128,,64", "--layers must be an integer in [1, 16777216], got \"\""},
      {"--layers 128,0", "--layers must be an integer in [1, 16777216], got \"0\""},
      {"--hidden 8 --layers 8", "--hidden excludes --layers"},
      {"--features age,nope", "--features: no column \"nope\""},
      {"--features age,age", "--features names \"age\" twice"},
      {"--features target", "--features: \"target\" is the target column"},
      {"--optimizer adam --momentum 0.5", "--momentum applies to --optimizer sgd only, got --optimizer adam"},
      {"--plot /nonexistent-dir/plot.svg", "--plot"},
      {"--dropout 1", "--dropout must lie in [0, 1), got 1"},
      {"--dropout -0.1", "--dropout must lie in [0, 1), got -0.1"},
      {"--dropout nan", "--dropout must be a finite decimal number, got \"nan\""},
      {"--dropout half", "--dropout"},
      {"--precision fp16", "--precision: parse_precision: got 'fp16' but expected fp32, tf32 or bf16"},
  };
  for (const auto& [arguments, message] : cases) {
    ToolRun run = run_tool("--epochs 1 --quiet " + arguments);
    EXPECT_EQ(run.status, 2) << arguments << "\n" << run.output;
    EXPECT_NE(run.output.find(message), std::string::npos) << arguments << "\n" << run.output;
  }
  const std::string data = testing::scratch_path("fractional_labels.csv");
  std::ofstream(data) << "a,label\n1,0\n2,1\n3,0.5\n";
  ToolRun labels = run_tool("--data " + data + " --task classification --epochs 1 --quiet");
  EXPECT_EQ(labels.status, 1) << labels.output;
  EXPECT_NE(labels.output.find("target \"label\" is 0.5 in row 3 but a class label must be an integer"),
            std::string::npos)
      << labels.output;
}

// --dropout puts a Dropout layer after each hidden activation: digits still trains to a good accuracy with it.
TEST(TandemTrainClassification, DigitsTrainWithDropout) {
  const std::string summary = testing::scratch_path("digits_dropout.json");
  ToolRun run = run_tool("--data " TANDEM_SOURCE_DIR
                         "/data/digits.csv --task classification --dropout 0.2 --devices "
                         "cpu:0,cpu:1 --summary-json " +
                         summary);
  ASSERT_EQ(run.status, 0) << run.output;
  EXPECT_NE(run.output.find("model: Linear(64, 512) -> relu -> dropout 0.2 -> Linear(512, 256) -> relu -> dropout "
                            "0.2 -> Linear(256, 10) (167178 parameters)"),
            std::string::npos)
      << run.output;
  EXPECT_GE(read_json(summary).at("test_accuracy").get<double>(), 0.90);
}

// The dropout rate is part of a checkpoint's setup: a resume with another rate (or none) is refused, and one with
// the same rate continues the masks where they stopped, as an uninterrupted run draws them.
TEST(TandemTrain, DropoutIsPartOfTheSetupAndResumesExactly) {
  const std::string common = "--quiet --devices cpu:0,cpu:1 --activation relu --dropout 0.2 ";
  const std::string checkpoint = testing::scratch_path("dropout.safetensors");
  std::filesystem::remove(checkpoint);
  ASSERT_EQ(run_tool(common + "--epochs 2 --checkpoint " + checkpoint).status, 0);

  ToolRun other =
      run_tool("--quiet --devices cpu:0,cpu:1 --activation relu --dropout 0.1 --epochs 2 --resume " + checkpoint);
  EXPECT_EQ(other.status, 1) << other.output;
  EXPECT_NE(other.output.find("dropout: 0.2 in the checkpoint, 0.1 now"), std::string::npos) << other.output;
  ToolRun none = run_tool("--quiet --devices cpu:0,cpu:1 --activation relu --epochs 2 --resume " + checkpoint);
  EXPECT_EQ(none.status, 1) << none.output;
  EXPECT_NE(none.output.find("dropout: 0.2 in the checkpoint, (none) now"), std::string::npos) << none.output;

  const std::string resumed = testing::scratch_path("dropout_resumed.json");
  ASSERT_EQ(run_tool(common + "--epochs 5 --resume " + checkpoint + " --allow-change epochs --summary-json " + resumed)
                .status,
            0);
  const std::string full = testing::scratch_path("dropout_full.json");
  ASSERT_EQ(run_tool(common + "--epochs 5 --summary-json " + full).status, 0);
  const std::string plain = testing::scratch_path("dropout_plain.json");
  ASSERT_EQ(run_tool("--quiet --devices cpu:0,cpu:1 --activation relu --epochs 5 --summary-json " + plain).status, 0);
  for (const char* key : {"train_mse", "test_mse"}) {
    EXPECT_EQ(read_json(resumed).at(key).get<double>(), read_json(full).at(key).get<double>()) << key;
    EXPECT_NE(read_json(full).at(key).get<double>(), read_json(plain).at(key).get<double>()) << key;
  }
}

// --precision bf16 trains the diabetes net in mixed precision to about the float32 fit, shows the precision in the
// banner and records it in checkpoints (a float32 run records none, so older checkpoints keep their facts): a resume
// in another precision is refused.
TEST(TandemTrain, PrecisionTrainsAndIsPartOfTheSetup) {
  const std::string common = "--devices cpu:0,cpu:1 ";
  const std::string checkpoint = testing::scratch_path("bf16.safetensors");
  const std::string bf16 = testing::scratch_path("bf16.json");
  const std::string fp32 = testing::scratch_path("fp32.json");
  std::filesystem::remove(checkpoint);
  ToolRun run = run_tool(common + "--epochs 3 --precision bf16 --checkpoint " + checkpoint + " --summary-json " + bf16);
  ASSERT_EQ(run.status, 0) << run.output;
  EXPECT_NE(run.output.find(", precision bf16"), std::string::npos) << run.output;
  ASSERT_EQ(run_tool(common + "--epochs 3 --quiet --summary-json " + fp32).status, 0);
  const double mixed = read_json(bf16).at("test_mse").get<double>();
  const double plain = read_json(fp32).at("test_mse").get<double>();
  EXPECT_NE(mixed, plain) << "bfloat16 products round";
  EXPECT_NEAR(mixed, plain, 0.05 * plain);

  ToolRun other = run_tool(common + "--quiet --epochs 4 --allow-change epochs --resume " + checkpoint);
  EXPECT_EQ(other.status, 1) << other.output;
  EXPECT_NE(other.output.find("precision: bf16 in the checkpoint, (none) now"), std::string::npos) << other.output;
  EXPECT_EQ(
      run_tool(common + "--quiet --precision bf16 --epochs 4 --allow-change epochs --resume " + checkpoint).status, 0);
}

}  // namespace
}  // namespace tandem::trainers

namespace tandem::trainers {
namespace {

// A tiny GPT on the bundled text: the banner, an evaluation line per --eval-every, the summary's fields, a sample.
TEST(TandemTrainLanguageModel, TrainsAGptAndWritesItsSummary) {
  const std::string summary = testing::scratch_path("lm.json");
  ToolRun run = run_tool("--task language-model --data " TANDEM_SOURCE_DIR
                         "/data/shakespeare.txt --devices "
                         "cpu:0,cpu:1 --n-layer 1 --n-head 2 --n-embd 32 --block-size 32 --steps 40 --eval-every 20 "
                         "--eval-batches 4 --batch-size 16 --warmup-steps 5 --sample 50 --summary-json " +
                         summary);
  ASSERT_EQ(run.status, 0) << run.output;
  EXPECT_NE(run.output.find("model: GPT 1 layers, 2 heads, width 32, context 32, dropout 0.2"), std::string::npos)
      << run.output;
  EXPECT_NE(run.output.find("step 20: train loss"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("sample:\n"), std::string::npos) << run.output;
  const nlohmann::json result = read_json(summary);
  EXPECT_EQ(result.at("steps"), 40);
  EXPECT_EQ(result.at("tokens"), 40 * 16 * 32);
  EXPECT_EQ(result.at("evaluations").size(), 2u);
  EXPECT_EQ(result.at("evaluations")[1].at("step"), 40);
  const double val = result.at("val_loss");
  EXPECT_LT(val, std::log(84.0)) << "below the uniform loss over the 84 characters";
  EXPECT_GT(result.at("tokens_per_second").get<double>(), 0.0);
  EXPECT_EQ(result.at("model").at("vocab_size"), 84);
  EXPECT_EQ(result.at("precision"), "fp32") << "bf16 is the default on GPUs only";
  EXPECT_EQ(result.at("step_mode"), "eager");
  EXPECT_EQ(result.at("sample").get<std::string>().size(), 50u);
}

// The flags of a tiny GPT on the bundled text, 8 steps of 16 windows between evaluations.
std::string tiny_language_model(const std::string& more, int n_layer = 1) {
  return "--quiet --task language-model --data " TANDEM_SOURCE_DIR
         "/data/shakespeare.txt --devices cpu:0,cpu:1 "
         "--n-layer " +
         std::to_string(n_layer) +
         " --n-head 2 --n-embd 16 --block-size 16 --batch-size 16 --eval-every 8 --eval-batches 2 "
         "--warmup-steps 4 --dropout 0.1 " +
         more;
}

// 8 steps with a checkpoint, resumed to 16: the straight run's evaluations, bit for bit; --metrics has a line per
// evaluation (those before the checkpoint kept) and --plot draws both splits.
TEST(TandemTrainLanguageModel, ACheckpointAndAResumeEqualTheStraightRun) {
  const std::string straight = testing::scratch_path("straight.json"), resumed = testing::scratch_path("resumed.json");
  const std::string checkpoint = testing::scratch_path("lm.ckpt"), metrics = testing::scratch_path("lm.jsonl");
  const std::string plot = testing::scratch_path("lm.svg");
  ASSERT_EQ(run_tool(tiny_language_model("--steps 16 --summary-json " + straight)).status, 0);
  ToolRun first = run_tool(
      tiny_language_model("--steps 8 --lr-decay-steps 16 --checkpoint " + checkpoint + " --metrics " + metrics));
  ASSERT_EQ(first.status, 0) << first.output;
  ToolRun rest = run_tool(tiny_language_model("--steps 16 --lr-decay-steps 16 --resume " + checkpoint +
                                              " --checkpoint " + checkpoint + " --metrics " + metrics + " --plot " +
                                              plot + " --summary-json " + resumed));
  ASSERT_EQ(rest.status, 0) << rest.output;
  const nlohmann::json whole = read_json(straight), again = read_json(resumed);
  EXPECT_EQ(again.at("train_loss"), whole.at("train_loss"));
  EXPECT_EQ(again.at("val_loss"), whole.at("val_loss"));
  EXPECT_EQ(again.at("evaluations"), whole.at("evaluations"));
  EXPECT_EQ(again.at("steps"), 16);
  EXPECT_EQ(again.at("tokens"), 8 * 16 * 16) << "this run's steps";

  std::istringstream lines(testing::file_text(metrics));
  std::vector<nlohmann::json> entries;
  for (std::string line; std::getline(lines, line);) entries.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(entries.size(), 2u);
  for (size_t i = 0; i < entries.size(); ++i) {
    EXPECT_EQ(entries[i].at("step"), 8 * static_cast<int>(i + 1));
    EXPECT_EQ(entries[i].at("train_loss"), whole.at("evaluations")[i].at("train_loss"));
    EXPECT_EQ(entries[i].at("val_loss"), whole.at("evaluations")[i].at("val_loss"));
    EXPECT_GT(entries[i].at("tokens_per_second").get<double>(), 0.0);
    EXPECT_GT(entries[i].at("lr").get<double>(), 0.0);
  }
  const std::string svg = testing::file_text(plot);
  EXPECT_NE(svg.find("<svg"), std::string::npos) << svg.substr(0, 100);
  EXPECT_NE(svg.find("data-name=\"train\""), std::string::npos);
  EXPECT_NE(svg.find("data-name=\"val\""), std::string::npos);

  ToolRun other = run_tool(tiny_language_model("--steps 16 --lr-decay-steps 16 --resume " + checkpoint, 2));
  EXPECT_EQ(other.status, 1) << other.output;
  EXPECT_NE(other.output.find("belongs to another setup: n_layer: 1 in the checkpoint, 2 now"), std::string::npos)
      << other.output;
  ToolRun longer = run_tool(tiny_language_model("--steps 24 --resume " + checkpoint));
  EXPECT_EQ(longer.status, 1) << longer.output;
  EXPECT_NE(longer.output.find("lr_decay_steps: 16 in the checkpoint, 24 now"), std::string::npos) << longer.output;
  EXPECT_NE(longer.output.find("give --lr-decay-steps"), std::string::npos) << longer.output;
  for (const std::string& path : {straight, resumed, checkpoint, metrics, plot}) std::remove(path.c_str());
}

TEST(TandemTrainLanguageModel, FlagsOfTheOtherTasksAreRefusedAndItsOwnNeedIt) {
  const std::string data = "--data " TANDEM_SOURCE_DIR "/data/shakespeare.txt";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--task language-model", "--task language-model needs --data, a text file"},
      {"--task language-model --epochs 3 " + data, "--epochs does not apply to --task language-model"},
      {"--task language-model --layers 8 " + data, "--layers does not apply to --task language-model"},
      {"--task language-model --optimizer sgd " + data, "--optimizer does not apply to --task language-model"},
      {"--task language-model --accumulate 2 " + data, "--accumulate does not apply to --task language-model"},
      {"--task language-model --allow-change lr --resume " TANDEM_SOURCE_DIR "/data/README.md " + data,
       "--allow-change does not apply to --task language-model"},
      {"--task language-model --checkpoint /tmp/x.ckpt --steps 10 --checkpoint-every 11 " + data,
       "--checkpoint-every must be at most --steps (10), got 11"},
      {"--task language-model --lr-decay-steps 50 --warmup-steps 60 " + data,
       "--lr-decay-steps must be an integer in [60, "},
      {"--task language-model --metrics " + std::string(TANDEM_SOURCE_DIR) + "/data/shakespeare.txt " + data,
       "--data and --metrics name the same file"},
      {"--lr-decay-steps 10", "--lr-decay-steps applies to --task language-model only"},
      {"--task language-model --n-embd 30 --n-head 4 " + data, "--n-embd (30) must be a multiple of --n-head (4)"},
      {"--task language-model --temperature 0 " + data, "--temperature must be positive, got 0"},
      {"--steps 10", "--steps applies to --task language-model only"},
      {"--n-layer 2", "--n-layer applies to --task language-model only"},
  };
  for (const auto& [arguments, message] : cases) {
    ToolRun run = run_tool("--quiet " + arguments);
    EXPECT_EQ(run.status, 2) << arguments << "\n" << run.output;
    EXPECT_NE(run.output.find(message), std::string::npos) << arguments << "\n" << run.output;
  }
}

// --model cnn on the digits (data/README.md): make_cnn on random crops of the raw pixels reaches test accuracy 0.97
// or more on two devices, ahead of the MLP (0.936) and the RBF SVM (0.958); its summary, plot and checkpoint are
// written as the MLP's.
TEST(TandemTrainCnn, DigitsReachTestAccuracy097OnTwoDevices) {
  const std::string summary = testing::scratch_path("cnn.json");
  const std::string plot = testing::scratch_path("cnn.svg");
  const std::string checkpoint = testing::scratch_path("cnn.ckpt");
  ToolRun run = run_tool("--model cnn --image-shape 1,8,8 --data " TANDEM_SOURCE_DIR
                         "/data/digits.csv --task classification --devices cpu:0,cpu:1 --summary-json " +
                         summary + " --plot " + plot + " --checkpoint " + checkpoint + " --checkpoint-every 6");
  ASSERT_EQ(run.status, 0) << run.output;
  EXPECT_NE(run.output.find("model: Unflatten(1, [1, 8, 8]) -> Conv2d(1, 32, 3, padding 1) -> relu -> Conv2d(32, 64, "
                            "3, padding 1) -> relu -> MaxPool2d(2) -> Flatten -> Linear(1024, 128) -> relu -> "
                            "Linear(128, 10) (151306 parameters)"),
            std::string::npos)
      << run.output;
  EXPECT_NE(run.output.find("training on random crops of the images padded by 1"), std::string::npos) << run.output;
  const nlohmann::json result = read_json(summary);
  EXPECT_GE(result.at("test_accuracy").get<double>(), 0.97);
  EXPECT_EQ(result.at("test_rows"), 359);
  EXPECT_EQ(result.at("epochs"), 12);
  const nlohmann::json& setup = result.at("setup");
  EXPECT_EQ(setup.at("image_shape"), "[1, 8, 8]");
  EXPECT_EQ(setup.at("crop_padding"), "1");
  EXPECT_EQ(setup.at("optimizer"), "adamw");
  EXPECT_EQ(setup.at("standardize_features"), "false");
  EXPECT_TRUE(fs::exists(plot));
  EXPECT_TRUE(fs::exists(checkpoint));
  for (const std::string& path : {summary, plot, checkpoint}) std::remove(path.c_str());
}

// One epoch of the digits CNN on cpu:0 with `flags`: its output, and its summary (null when it failed).
struct CnnFlagRun {
  ToolRun tool;
  nlohmann::json summary;
};

CnnFlagRun run_cnn_with(const std::string& flags) {
  const std::string json = testing::scratch_path("cnn_flags.json");
  CnnFlagRun run{run_tool("--model cnn --image-shape 1,8,8 --data " TANDEM_SOURCE_DIR
                          "/data/digits.csv --task classification --devices cpu:0 --epochs 1 --summary-json " +
                          json + " " + flags),
                 {}};
  EXPECT_EQ(run.tool.status, 0) << flags << "\n" << run.tool.output;
  if (run.tool.status == 0) run.summary = read_json(json);
  std::remove(json.c_str());
  return run;
}

// --flip trains on images flipped with probability 1/2 (ImageTransforms' own tests check the flips), and
// --normalize-mean/--normalize-std normalize every image per channel in training and in the evaluations
// (CnnTrainer.EvalTransformNormalizesTheEvaluationsAsTrainingIs checks the values): each is recorded in the setup and
// trains otherwise than the same run without it.
TEST(TandemTrainCnn, FlipAndNormalizationAreRecordedAndChangeTheTraining) {
  const CnnFlagRun plain = run_cnn_with("");
  const CnnFlagRun flipped = run_cnn_with("--flip");
  const CnnFlagRun normalized = run_cnn_with("--normalize-mean 4.5 --normalize-std 6");
  ASSERT_FALSE(plain.summary.is_null() || flipped.summary.is_null() || normalized.summary.is_null());
  EXPECT_NE(flipped.tool.output.find("training on images flipped left to right with probability 1/2"),
            std::string::npos)
      << flipped.tool.output;
  EXPECT_NE(normalized.tool.output.find("normalizing every image per channel: mean 4.5, std 6"), std::string::npos)
      << normalized.tool.output;
  EXPECT_EQ(flipped.summary.at("setup").at("horizontal_flip"), "true");
  EXPECT_EQ(normalized.summary.at("setup").at("normalize_mean"), "4.5");
  EXPECT_EQ(normalized.summary.at("setup").at("normalize_std"), "6");
  EXPECT_FALSE(plain.summary.at("setup").contains("horizontal_flip"));
  EXPECT_FALSE(plain.summary.at("setup").contains("normalize_mean"));
  const double plain_loss = plain.summary.at("train_loss").get<double>();
  EXPECT_NE(flipped.summary.at("train_loss").get<double>(), plain_loss);
  EXPECT_NE(normalized.summary.at("train_loss").get<double>(), plain_loss);
}

TEST(TandemTrainCnn, FlagErrors) {
  const std::string digits = " --data " TANDEM_SOURCE_DIR "/data/digits.csv --task classification";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--model rnn", "--model must be mlp or cnn, got \"rnn\""},
      {"--model cnn --image-shape 1,8,8", "--model cnn needs --task classification"},
      {"--model cnn" + digits, "--model cnn needs --image-shape C,H,W (such as 1,8,8)"},
      {"--model cnn --image-shape 1,8" + digits, "--image-shape takes C,H,W (channels, height, width) such as 1,8,8"},
      {"--model cnn --image-shape 1,8,8,1" + digits, "--image-shape takes C,H,W"},
      {"--model cnn --image-shape 1,0,8" + digits, "--image-shape must be an integer in [1, 16777216], got \"0\""},
      {"--model cnn --image-shape 1,8,9" + digits,
       "--image-shape 1,8,9 holds 72 pixels but the data has 64 feature columns; expected C*H*W to equal them"},
      {"--model cnn --image-shape 1,8,8 --layers 64" + digits, "--layers does not apply to --model cnn"},
      {"--model cnn --image-shape 1,8,8 --hidden 64" + digits, "--hidden does not apply to --model cnn"},
      {"--model cnn --image-shape 1,8,8 --activation tanh" + digits, "--activation does not apply to --model cnn"},
      {"--model cnn --image-shape 1,8,8 --crop-padding 9" + digits,
       "--crop-padding must be an integer in [0, 8], got \"9\""},
      {"--image-shape 1,8,8" + digits, "--image-shape applies to --model cnn only"},
      {"--crop-padding 1" + digits, "--crop-padding applies to --model cnn only"},
      {"--flip" + digits, "--flip applies to --model cnn only"},
      {"--model cnn --image-shape 1,8,8 --normalize-mean 4" + digits,
       "--normalize-mean and --normalize-std go together: give both or neither"},
      {"--model cnn --image-shape 1,8,8 --normalize-std 4" + digits,
       "--normalize-mean and --normalize-std go together: give both or neither"},
      {"--model cnn --image-shape 1,8,8 --normalize-mean 4,5 --normalize-std 1" + digits,
       "--normalize-mean takes one value per channel of --image-shape (1, comma-separated), got \"4,5\""},
      {"--model cnn --image-shape 1,8,8 --normalize-mean 4, --normalize-std 1" + digits,
       "--normalize-mean takes one value per channel of --image-shape (1, comma-separated), got \"4,\""},
      {"--model cnn --image-shape 1,8,8 --normalize-mean nan --normalize-std 1" + digits,
       "--normalize-mean must be a finite decimal number, got \"nan\""},
      {"--model cnn --image-shape 1,8,8 --normalize-mean 4 --normalize-std 0" + digits,
       "--normalize-std must hold positive values, got \"0\""},
      {"--normalize-mean 4 --normalize-std 5" + digits, "--normalize-mean applies to --model cnn only"},
      {"--task language-model --normalize-mean 4 --data " TANDEM_SOURCE_DIR "/data/shakespeare.txt",
       "--normalize-mean does not apply to --task language-model"},
      {"--task language-model --flip --data " TANDEM_SOURCE_DIR "/data/shakespeare.txt",
       "--flip does not apply to --task language-model"},
      {"--task language-model --model cnn --data " TANDEM_SOURCE_DIR "/data/shakespeare.txt",
       "--model does not apply to --task language-model"},
  };
  for (const auto& [arguments, message] : cases) {
    ToolRun run = run_tool("--quiet " + arguments);
    EXPECT_EQ(run.status, 2) << arguments << "\n" << run.output;
    EXPECT_NE(run.output.find(message), std::string::npos) << arguments << "\n" << run.output;
  }
}

}  // namespace
}  // namespace tandem::trainers
