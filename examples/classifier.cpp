// classifier: a handwritten-digit classifier trained data-parallel on every device, written with the public API.
//
// The digits data (data/digits.csv: 8x8 images, pixel counts 0..16, classes 0..9; data/README.md) is split as
// tandem-train splits it: the last 20% of the rows are the test set. The pixel counts are scaled to [0, 1]. The
// model is an MLP whose hidden blocks are Linear -> LayerNorm -> GELU -> Dropout, trained with AdamW under a cosine
// learning-rate schedule (one step per epoch) on the cross-entropy of its logits. A parallel::ReplicatedModule keeps
// one replica per device; each batch is split over them, every replica runs forward and backward on its share, the
// gradients are summed, and a ReplicatedAdamW steps every replica alike. Prints the loss of each epoch, then the
// accuracy, and exits 1 when the test accuracy is below --min-accuracy. The defaults reach a test accuracy of 0.94
// to 0.95 on cpu:0,cpu:1 in a few seconds (each device draws its own dropout masks, so other device counts land
// elsewhere in that range).
//
//   classifier [--devices cuda:0,cuda:1 | cpu:0,cpu:1,cpu:2 | all] [--data data/digits.csv] [--epochs 40]
//              [--batch 64] [--hidden 256,128] [--dropout 0.1] [--lr 0.002] [--weight-decay 0.5] [--seed 0]
//              [--min-accuracy 0]

#include <tandem/tandem.h>

#include <chrono>
#include <sstream>

#include "example_cli.h"

namespace {

using tandem::Device;
using tandem::Tensor;
namespace nn = tandem::nn;
namespace optim = tandem::optim;
namespace parallel = tandem::parallel;
namespace trainers = tandem::trainers;

struct Options {
  std::string data = TANDEM_DATA_DIR "/digits.csv";
  int epochs = 40;
  int64_t batch = 64;
  std::vector<int64_t> hidden = {256, 128};
  double dropout = 0.1;
  double lr = 2e-3;
  double weight_decay = 0.5;
  uint64_t seed = 0;
  double min_accuracy = 0.0;
};

// Linear(inputs, h0) -> LayerNorm(h0) -> GELU -> Dropout -> ... -> Linear(h_last, classes): the logits.
std::shared_ptr<nn::Sequential> make_classifier(int64_t inputs, const std::vector<int64_t>& hidden, int64_t classes,
                                                double dropout) {
  auto model = std::make_shared<nn::Sequential>();
  int64_t width = inputs;
  for (int64_t h : hidden) {
    model->push_back(std::make_shared<nn::Linear>(width, h));
    model->push_back(std::make_shared<nn::LayerNorm>(tandem::Shape{h}));
    model->push_back(std::make_shared<nn::GELU>());
    model->push_back(std::make_shared<nn::Dropout>(dropout));
    width = h;
  }
  model->push_back(std::make_shared<nn::Linear>(width, classes));
  return model;
}

// The data set's features as a float32 [rows, features] tensor on `device`.
Tensor features_of(const trainers::TableDataset& data, Device device) {
  const std::vector<float> values(data.features.begin(), data.features.end());
  return Tensor::from_vector(values, {data.rows(), data.num_features()}, device);
}
// The class indices of a data set whose targets ClassLabels::encode replaced.
std::vector<int64_t> classes_of(const trainers::TableDataset& encoded) {
  return std::vector<int64_t>(encoded.targets.begin(), encoded.targets.end());
}

// Pixel counts 0..16 scaled to [0, 1].
trainers::TableDataset scaled_pixels(trainers::TableDataset data) {
  for (double& value : data.features) value /= 16.0;
  return data;
}

// Accuracy of the master replica in eval mode (Dropout off) over a whole data set.
double accuracy(parallel::ReplicatedModule& model, const trainers::TableDataset& data, int64_t classes) {
  const std::shared_ptr<nn::Module>& master = model.module();
  master->eval();
  tandem::NoGradGuard no_grad;
  const Tensor logits = (*master)(features_of(data, model.devices()[0]));
  master->train();
  return trainers::classification_metrics(logits.to_vector(), classes_of(data), classes).accuracy;
}

void train(const std::vector<Device>& devices, const Options& options) {
  const auto start = std::chrono::steady_clock::now();
  const trainers::TableDataset data = trainers::make_dataset(trainers::read_csv(options.data), "label");
  const trainers::Split split = trainers::train_test_split(data, 0.2);
  const trainers::ClassLabels labels = trainers::ClassLabels::of(split.train);
  const trainers::TableDataset train_rows = labels.encode(scaled_pixels(split.train));
  const trainers::TableDataset test_rows = labels.encode(scaled_pixels(split.test));

  tandem::manual_seed(options.seed);
  auto net = make_classifier(data.num_features(), options.hidden, labels.size(), options.dropout);
  net->to(devices[0]);
  parallel::ReplicatedModule model(net, devices);
  parallel::ReplicatedAdamW adamw(model, {.lr = options.lr, .weight_decay = options.weight_decay});
  // The schedule drives replica 0's optimizer; every other replica takes the same lr (set_lr).
  optim::CosineAnnealingLR cosine(adamw.optimizer(0), options.epochs);
  std::cout << "data: " << options.data << ", train " << train_rows.rows() << " rows, test " << test_rows.rows()
            << " rows, " << labels.size() << " classes\nmodel: " << *net << "\non " << tandem::to_string(devices)
            << ": AdamW lr " << options.lr << ", weight decay " << options.weight_decay << ", cosine over "
            << options.epochs << " epochs, batch " << options.batch << "\n";

  trainers::DataLoader loader(train_rows, options.batch, /*shuffle=*/true, options.seed);
  for (int epoch = 1; epoch <= options.epochs; ++epoch) {
    adamw.set_lr(cosine.last_lr()[0]);
    loader.begin_epoch();
    double loss_sum = 0.0;  // sum over the rows of each row's loss
    for (int64_t b = 0; b < loader.num_batches(); ++b) {
      const trainers::Batch batch = loader.batch(b);
      const int64_t rows = batch.features.size(0);
      const std::vector<Tensor> inputs = tandem::comm::scatter(batch.features, devices);
      const std::vector<Tensor> targets = tandem::comm::scatter(batch.targets.view({rows}), devices);
      adamw.zero_grad();
      // Each replica's mean loss weighted by its share of the rows: their sum is the batch's mean loss, and the
      // summed gradients are those of one device on the whole batch.
      const std::vector<Tensor> losses = model.forward_backward(inputs, [&](size_t i, const Tensor& logits) {
        const float share = static_cast<float>(inputs[i].size(0)) / static_cast<float>(rows);
        return nn::cross_entropy(logits, targets[i].to(tandem::DType::Int64)) * share;
      });
      for (const Tensor& loss : losses) loss_sum += static_cast<double>(loss.item()) * static_cast<double>(rows);
      adamw.step();
    }
    cosine.step();
    std::printf("epoch %3d/%d  lr %.5f  train loss %.4f\n", epoch, options.epochs, adamw.optimizer(0).lr(0),
                loss_sum / static_cast<double>(train_rows.rows()));
  }

  const double test_accuracy = accuracy(model, test_rows, labels.size());
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("train accuracy %.4f  test accuracy %.4f  (%lld test rows, %.1f s)\n",
              accuracy(model, train_rows, labels.size()), test_accuracy, static_cast<long long>(test_rows.rows()),
              seconds);
  TANDEM_CHECK(test_accuracy >= options.min_accuracy, "--min-accuracy: test accuracy ", test_accuracy,
               " but expected at least ", options.min_accuracy);
}

// "256,128": hidden widths, each at least 1.
std::vector<int64_t> parse_widths(const std::string& text) {
  std::vector<int64_t> widths;
  std::stringstream list(text);
  for (std::string width; std::getline(list, width, ',');) {
    size_t used = 0;
    const int64_t value = std::stoll(width, &used);
    if (used != width.size() || value < 1 || value > (int64_t{1} << 20)) throw std::invalid_argument(width);
    widths.push_back(value);
  }
  if (widths.empty() || text.back() == ',') throw std::invalid_argument(text);
  return widths;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app(
      "Digits classifier: an MLP with LayerNorm and Dropout, AdamW with a cosine schedule, data-parallel "
      "on every device (ReplicatedModule + ReplicatedAdamW), cross-entropy loss.",
      "classifier");
  Options options;
  std::string hidden = "256,128";
  app.add_option("--data", options.data, "The digits CSV (columns p0..p63, label)")->capture_default_str();
  app.add_option("--epochs", options.epochs, "Epochs")->capture_default_str()->check(CLI::Range(1, 100000));
  app.add_option("--batch", options.batch, "Rows per step (split over the devices)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
  app.add_option("--hidden", hidden, "Hidden widths, comma-separated")
      ->capture_default_str()
      ->check(
          [](const std::string& text) {
            try {
              parse_widths(text);
              return std::string();
            } catch (const std::exception&) {
              return "expected comma-separated widths in [1, 1048576] such as 256,128, got \"" + text + "\"";
            }
          },
          "WIDTHS");
  app.add_option("--dropout", options.dropout, "Dropout rate after each hidden block")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 0.99));
  app.add_option("--lr", options.lr, "Peak learning rate of AdamW")
      ->capture_default_str()
      ->check(CLI::Range(1e-6, 1.0));
  app.add_option("--weight-decay", options.weight_decay, "AdamW's decoupled weight decay")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 10.0));
  app.add_option("--seed", options.seed, "Seed of the initialization, the dropout masks and the shuffling")
      ->capture_default_str();
  app.add_option("--min-accuracy", options.min_accuracy, "Exit with status 1 when the test accuracy is below this")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  return tandem::examples::run_example(app, argc, argv, [&](const std::vector<Device>& devices) {
    options.hidden = parse_widths(hidden);
    train(devices, options);
  });
}
