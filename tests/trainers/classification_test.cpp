// Classification: class labels from a target column, metrics of a classifier, and the Trainer fitting a classifier.

#include <cmath>
#include <numeric>
#include <random>

#include "support/test_support.h"

namespace tandem::trainers {
namespace {

TableDataset labelled(const std::vector<double>& targets) {
  TableDataset data{{"x"}, "label", std::vector<double>(targets.size(), 0.0), targets};
  return data;
}

// Three well separated Gaussian blobs in two features, labelled 10, 20 and 30, rows interleaved.
TableDataset blobs(int64_t rows_per_class, uint64_t seed) {
  std::mt19937_64 random(seed);
  std::normal_distribution<double> noise(0.0, 0.3);
  const double centres[3][2] = {{0.0, 3.0}, {3.0, -2.0}, {-3.0, -2.0}};
  TableDataset data{{"a", "b"}, "kind", {}, {}};
  for (int64_t r = 0; r < rows_per_class; ++r) {
    for (int c = 0; c < 3; ++c) {
      data.features.push_back(centres[c][0] + noise(random));
      data.features.push_back(centres[c][1] + noise(random));
      data.targets.push_back(10.0 * (c + 1));
    }
  }
  return data;
}

TEST(ClassLabels, SortedDistinctLabelsAndTheirIndices) {
  const ClassLabels classes = ClassLabels::of(labelled({7, -2, 7, 3, -2}));
  EXPECT_EQ(classes.labels(), (std::vector<int64_t>{-2, 3, 7}));
  EXPECT_EQ(classes.str(), "-2,3,7");
  EXPECT_EQ(classes.index_of(3.0), 1);
  const TableDataset encoded = classes.encode(labelled({7, -2, 3}));
  EXPECT_EQ(encoded.targets, (std::vector<double>{2, 0, 1}));
}

TEST(ClassLabels, RefusesNonIntegersTooManyClassesAndUnknownLabels) {
  EXPECT_ERROR(ClassLabels::of(labelled({1, 2, 2.5})),
               "target \"label\" is 2.5 in row 3 but a class label must be "
               "an integer");
  EXPECT_ERROR(ClassLabels::of(labelled({1, NAN})), "is nan in row 2");
  EXPECT_ERROR(ClassLabels::of(labelled({1, 1e300})), "in row 2 but a class label must be an integer below 2^53");
  // 2^53 + 1 in a CSV file reads as 2^53: refused rather than taken for a neighbouring label.
  EXPECT_ERROR(ClassLabels::of(labelled({1, std::stod("9007199254740993")})),
               "is 9007199254740992 in row 2 but a class label must be an integer below 2^53 in magnitude");
  EXPECT_EQ(ClassLabels::of(labelled({1, 9007199254740991.0})).size(), 2);
  EXPECT_ERROR(ClassLabels::of(labelled({0, 1, 2, 3}), 3), "more than 3 distinct values (row 4 holds another one, 3)");
  std::vector<double> many(kMaxClasses + 1);
  std::iota(many.begin(), many.end(), 0.0);
  EXPECT_ERROR(ClassLabels::of(labelled(many)), "more than 10000 distinct values (row 10001");
  EXPECT_ERROR(ClassLabels::of(labelled({4, 4})), "has 1 distinct value in 2 rows but a classification needs at least");
  EXPECT_ERROR(ClassLabels({3, 1}), "labels 3 then 1");
  EXPECT_ERROR(ClassLabels::of(labelled({0, 1})).encode(labelled({0, 5})),
               "target \"label\" is 5 in row 2 but expected one of the 2 class labels (0,1)");
}

TEST(ClassificationMetrics, AccuracyCrossEntropyAndConfusion) {
  // Three rows, two classes: row 1 right (class 0), row 2 wrong (class 1 scored as 0), row 3 right, a tie -> first.
  const std::vector<float> scores = {2.0f, 0.0f, 1.0f, -1.0f, 0.5f, 0.5f};
  const ClassificationMetrics m = classification_metrics(scores, {0, 1, 0}, 2);
  EXPECT_DOUBLE_EQ(m.accuracy, 2.0 / 3.0);
  const double expected = (std::log(1 + std::exp(-2.0)) + (std::log(1 + std::exp(-2.0)) + 2.0) + std::log(2.0)) / 3;
  EXPECT_NEAR(m.cross_entropy, expected, 1e-12);
  EXPECT_EQ(m.confusion, (std::vector<std::vector<int64_t>>{{2, 0}, {1, 0}}));
  EXPECT_EQ(m.rows, 3);
  EXPECT_ERROR(classification_metrics(scores, {0, 2, 0}, 2), "row 2 has class 2 but expected one in [0, 2)");
  EXPECT_ERROR(classification_metrics(scores, {0, 1}, 2), "6 scores for 2 rows of 2 classes");
}

// Above kMaxConfusionClasses classes the matrix is not kept (it would be 8 bytes times the classes squared per
// evaluation); accuracy and cross-entropy are computed as for fewer classes.
TEST(ClassificationMetrics, NoConfusionMatrixAboveItsBound) {
  for (const int64_t classes : {kMaxConfusionClasses, kMaxConfusionClasses + 1}) {
    SCOPED_TRACE(classes);
    std::vector<float> scores(static_cast<size_t>(2 * classes), 0.0f);
    scores[3] = 1.0f;                                 // row 0 predicts class 3
    scores[static_cast<size_t>(classes) + 5] = 1.0f;  // row 1 predicts class 5
    const ClassificationMetrics m = classification_metrics(scores, {3, 4}, classes);
    EXPECT_DOUBLE_EQ(m.accuracy, 0.5);
    const double one_hot = std::log(static_cast<double>(classes - 1) + std::exp(1.0));  // logsumexp of a row
    EXPECT_NEAR(m.cross_entropy, (one_hot - 1.0 + one_hot) / 2.0, 1e-9);
    if (classes <= kMaxConfusionClasses) {
      ASSERT_EQ(m.confusion.size(), static_cast<size_t>(classes));
      EXPECT_EQ(m.confusion[3][3], 1);
      EXPECT_EQ(m.confusion[4][5], 1);
    } else {
      EXPECT_TRUE(m.confusion.empty());
    }
  }
}

TEST(ClassCrossEntropy, MatchesTheHostMetricAndChecksShapesAndDtypes) {
  const std::vector<float> scores = {2.0f, 0.0f, -1.0f, 1.0f, -1.0f, 3.0f};
  const Tensor loss = class_cross_entropy(Tensor::from_vector(scores, {2, 3}),
                                         Tensor::from_vector(std::vector<int64_t>{2, 0}, {2, 1}));
  EXPECT_NEAR(loss.item(), classification_metrics(scores, {2, 0}, 3).cross_entropy, 1e-6);
  EXPECT_ERROR(class_cross_entropy(Tensor::zeros({2, 3}), Tensor::zeros({3, 1}, DType::Int64)),
               "scores of shape [2, 3] and classes of shape [3, 1] but expected [n, classes] and [n, 1]");
  EXPECT_ERROR(class_cross_entropy(Tensor::zeros({2, 3}), Tensor::from_vector({2.0f, 0.0f}, {2, 1})),
               "nn::cross_entropy: target is float32 but expected int64 class indices (convert with "
               ".to(DType::Int64))");
}

TrainerOptions classifier_options(std::vector<Device> devices, const TableDataset& data) {
  TrainerOptions options;
  options.devices = std::move(devices);
  options.epochs = 10;
  options.batch_size = 16;
  options.task = Task::Classification;
  options.classes = ClassLabels::of(data);
  options.lr_schedule = parse_lr_schedule("cosine", options.epochs);
  return options;
}

TEST(ClassifierTrainer, SeparatesBlobsPerfectlyWithConfusionMatricesThatSumToTheRows) {
  const Split split = train_test_split(blobs(40, 1), 0.25);
  manual_seed(0);
  Trainer trainer(make_mlp(2, {16}, 3, Activation::ReLU), classifier_options({Device::cpu(0)}, split.train));
  EXPECT_EQ(trainer.options().loss.name, "cross_entropy");
  EXPECT_FALSE(trainer.options().standardize_target);
  const FitResult result = trainer.fit(split.train, split.test);
  ASSERT_TRUE(result.train_classes && result.test_classes);
  EXPECT_EQ(result.train_classes->accuracy, 1.0);
  EXPECT_EQ(result.test_classes->accuracy, 1.0);
  for (const ClassificationMetrics* m : {&*result.train_classes, &*result.test_classes}) {
    int64_t total = 0;
    for (const auto& row : m->confusion) total += std::accumulate(row.begin(), row.end(), int64_t{0});
    EXPECT_EQ(total, m->rows);
  }
  EXPECT_EQ(result.test_classes->rows, 30);
  EXPECT_EQ(trainer.predict(split.test.slice(0, 3)), (std::vector<double>{10, 20, 30}));
  EXPECT_EQ(trainer.setup().at("classes"), "10,20,30");
  EXPECT_EQ(trainer.setup().at("task"), "classification");
  EXPECT_EQ(trainer.setup().at("lr_schedule"), "cosine (t_max 10)");
  EXPECT_ERROR(trainer.evaluate(split.test), "the task is classification; use evaluate_classes");
}

TEST(ClassifierTrainer, TwoDevicesGiveTheOneDeviceResult) {
  const Split split = train_test_split(blobs(40, 2), 0.25);
  std::vector<ClassificationMetrics> results;
  for (const auto& devices : {std::vector<Device>{Device::cpu(0)}, {Device::cpu(0), Device::cpu(1)}}) {
    manual_seed(0);
    Trainer trainer(make_mlp(2, {16}, 3, Activation::ReLU), classifier_options(devices, split.train));
    results.push_back(*trainer.fit(split.train, split.test).test_classes);
  }
  EXPECT_NEAR(results[0].cross_entropy, results[1].cross_entropy, 1e-5);
  EXPECT_EQ(results[0].confusion, results[1].confusion);
}

TEST(ClassifierTrainer, RefusesMismatchedOptionsAndUnknownTestLabels) {
  const TableDataset data = blobs(4, 3);
  TrainerOptions options;
  options.task = Task::Classification;
  EXPECT_ERROR(Trainer(make_mlp(2, {4}, 3, Activation::ReLU), options),
               "task is classification but options.classes "
               "is empty");
  TrainerOptions regression;
  regression.classes = ClassLabels::of(data);
  EXPECT_ERROR(Trainer(make_mlp(2, 4), regression), "options.classes holds 3 labels but task is regression");
  manual_seed(0);
  Trainer trainer(make_mlp(2, {4}, 3, Activation::ReLU), classifier_options({Device::cpu(0)}, data));
  TableDataset test = data.slice(0, 2);
  test.targets[1] = 40;
  EXPECT_ERROR(trainer.fit(data, test), "target \"kind\" is 40 in row 2 but expected one of the 3 class labels");
  manual_seed(0);
  Trainer wrong_width(make_mlp(2, {4}, 2, Activation::ReLU), classifier_options({Device::cpu(0)}, data));
  EXPECT_ERROR(wrong_width.fit(data), "is 2 but expected a class index in [0, 2)");
}

}  // namespace
}  // namespace tandem::trainers
