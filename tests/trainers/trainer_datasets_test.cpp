// Trainer::fit over any Dataset against the same fit over a table: tensors holding a table's values (float-exact) train
// to bitwise the same parameters and metrics, for a regression with standardization and a classifier without, for
// any number of loader workers, through a data set that only implements get(), and across a resume.

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "support/test_support.h"

namespace tandem::trainers {
namespace {

// `rows` rows of 4 integer features; the target is an integer combination of them (regression), or a label 0, 10 or
// 20 picked by them (classification). Every value is exact in float32, so the table and its tensors hold the same.
TableDataset integer_table(int64_t rows, bool labels) {
  TableDataset table{{"a", "b", "c", "d"}, "y", {}, {}};
  for (int64_t r = 0; r < rows; ++r) {
    const double a = static_cast<double>(r % 7), b = static_cast<double>((r * 3) % 11);
    const double c = static_cast<double>((r * 5) % 13), d = static_cast<double>(r % 4);
    table.features.insert(table.features.end(), {a, b, c, d});
    table.targets.push_back(labels ? 10.0 * static_cast<double>((static_cast<int64_t>(a + b) + r % 2) % 3)
                                   : 3.0 * a - 2.0 * b + c + 0.5 * d);
  }
  return table;
}

// The table's values as tensors: features float32 [rows, 4] and targets float32 [rows] or, for labels, int64 [rows].
TensorDataset as_tensors(const TableDataset& table, bool labels) {
  const std::vector<float> features(table.features.begin(), table.features.end());
  Tensor targets =
      labels ? Tensor::from_vector(std::vector<int64_t>(table.targets.begin(), table.targets.end()), {table.rows()})
             : Tensor::from_vector(std::vector<float>(table.targets.begin(), table.targets.end()), {table.rows()});
  return TensorDataset({Tensor::from_vector(features, {table.rows(), 4}), targets});
}

// A data set that only gets examples one at a time (the default get_batch: collate of get).
class OneAtATime : public Dataset {
 public:
  explicit OneAtATime(const TensorDataset& data) : data_(data) {}
  int64_t size() const override { return data_.size(); }
  Example get(int64_t index) const override { return data_.get(index); }

 private:
  const TensorDataset& data_;
};

TrainerOptions regression_options() {
  TrainerOptions options;
  options.devices = {Device::cpu(0), Device::cpu(1)};
  options.epochs = 3;
  options.batch_size = 16;
  return options;
}

TrainerOptions classifier_options() {
  TrainerOptions options = regression_options();
  options.task = Task::Classification;
  options.classes = ClassLabels({0, 10, 20});
  options.sgd.lr = 0.05;
  return options;
}

// A net of one hidden ReLU layer of 8 with `outputs` outputs (one per class for a classifier).
std::shared_ptr<nn::Sequential> net(int64_t outputs) { return make_mlp(4, {8}, outputs, Activation::ReLU); }

struct Fitted {
  FitResult result;
  std::vector<std::vector<float>> parameters;
};

template <class... Data>
Fitted fit_with(TrainerOptions options, int64_t outputs, const Data&... data) {
  manual_seed(5);
  Trainer trainer(net(outputs), std::move(options));
  Fitted fitted{trainer.fit(data...), {}};
  for (const Tensor& parameter : trainer.model()->parameters()) fitted.parameters.push_back(parameter.to_vector());
  return fitted;
}

TEST(TrainerOnDatasets, ARegressionOnTensorsEqualsTheTableBitForBit) {
  const TableDataset train = integer_table(90, false), test = integer_table(30, false);
  const TensorDataset train_tensors = as_tensors(train, false), test_tensors = as_tensors(test, false);
  TrainerOptions standardized = regression_options();
  standardized.standardize_features = true;  // off by default for a Dataset, on for a table
  const Fitted table = fit_with(standardized, 1, train, test);
  const Fitted tensors =
      fit_with(standardized, 1, static_cast<const Dataset&>(train_tensors), static_cast<const Dataset&>(test_tensors));
  EXPECT_EQ(tensors.parameters, table.parameters);
  ASSERT_TRUE(tensors.result.test.has_value());
  EXPECT_EQ(tensors.result.test->mse, table.result.test->mse);
  EXPECT_EQ(tensors.result.train.mse, table.result.train.mse);
  EXPECT_EQ(tensors.result.test->rows, 30);
  EXPECT_EQ(tensors.result.steps, 3 * 6);  // 90 rows in batches of 16

  // Left at its default, a Dataset's features are not standardized: another fit.
  const Fitted raw = fit_with(regression_options(), 1, static_cast<const Dataset&>(train_tensors));
  EXPECT_NE(raw.parameters, table.parameters);
}

TEST(TrainerOnDatasets, AClassifierOnTensorsEqualsTheTableForAnyNumberOfWorkers) {
  const TableDataset train = integer_table(100, true), test = integer_table(40, true);
  const TensorDataset train_tensors = as_tensors(train, true), test_tensors = as_tensors(test, true);
  TrainerOptions unstandardized = classifier_options();
  unstandardized.standardize_features = false;
  const Fitted table = fit_with(unstandardized, 3, train, test);
  for (const int workers : {0, 3}) {
    TrainerOptions options = classifier_options();
    options.num_workers = workers;
    const Fitted tensors =
        fit_with(options, 3, static_cast<const Dataset&>(train_tensors), static_cast<const Dataset&>(test_tensors));
    EXPECT_EQ(tensors.parameters, table.parameters) << workers << " workers";
    ASSERT_TRUE(tensors.result.test_classes.has_value());
    EXPECT_EQ(tensors.result.test_classes->accuracy, table.result.test_classes->accuracy);
    EXPECT_EQ(tensors.result.test_classes->cross_entropy, table.result.test_classes->cross_entropy);
    EXPECT_EQ(tensors.result.test_classes->confusion, table.result.test_classes->confusion);
    EXPECT_EQ(tensors.result.train_classes->rows, 100);
  }
  // A data set that only implements get() trains the same.
  const OneAtATime one_at_a_time(train_tensors);
  EXPECT_EQ(fit_with(classifier_options(), 3, static_cast<const Dataset&>(one_at_a_time)).parameters,
            fit_with(classifier_options(), 3, static_cast<const Dataset&>(train_tensors)).parameters);
}

TEST(TrainerOnDatasets, AResumedFitOverADatasetContinuesExactly) {
  const TensorDataset train = as_tensors(integer_table(60, false), false);
  const Dataset& data = train;
  const Fitted whole = fit_with(regression_options(), 1, data);
  const std::string checkpoint = tandem::testing::scratch_path("dataset_resume.ckpt");
  {
    TrainerOptions first = regression_options();
    first.epochs = 1;
    manual_seed(5);
    Trainer trainer(net(1), first);
    trainer.fit(data);
    trainer.save_checkpoint(checkpoint);
  }
  manual_seed(99);  // the checkpoint restores the generator
  TrainerOptions more = regression_options();
  more.resume_may_change = {"epochs"};
  Trainer resumed(net(1), more);
  resumed.load_checkpoint(checkpoint);
  const FitResult result = resumed.fit(data);
  std::vector<std::vector<float>> parameters;
  for (const Tensor& parameter : resumed.model()->parameters()) parameters.push_back(parameter.to_vector());
  EXPECT_EQ(parameters, whole.parameters);
  EXPECT_EQ(result.train.mse, whole.result.train.mse);

  // Other data than the checkpoint's is refused.
  const TensorDataset other = as_tensors(integer_table(61, false), false);
  Trainer again(net(1), more);
  again.load_checkpoint(checkpoint);
  EXPECT_ERROR(again.fit(static_cast<const Dataset&>(other)),
               "Trainer::fit: the training data differs from the data "
               "of the checkpoint");
  std::filesystem::remove(checkpoint);
}

TEST(TrainerOnDatasets, TargetsTheTaskCannotTakeAreErrors) {
  const TensorDataset pairs({Tensor::zeros({8, 4}), Tensor::zeros({8, 2})});
  Trainer regression(net(1), regression_options());
  EXPECT_ERROR(regression.fit(static_cast<const Dataset&>(pairs)),
               "Standardizer::fit: the examples from 0 have data of 4 elements and targets of 2");
  TrainerOptions unstandardized = regression_options();
  unstandardized.standardize_target = false;
  Trainer raw(net(1), unstandardized);
  EXPECT_ERROR(raw.fit(static_cast<const Dataset&>(pairs)),
               "Trainer::fit: example 0's target has shape [2] but the Trainer's tasks take one value per example");
  const TensorDataset unknown({Tensor::zeros({8, 4}), Tensor::full({8}, 5.0f)});
  Trainer classifier(net(3), classifier_options());
  EXPECT_ERROR(classifier.fit(static_cast<const Dataset&>(unknown)),
               "ClassLabels::index_of: 5 is not one of the 3 class labels");
}

}  // namespace
}  // namespace tandem::trainers
