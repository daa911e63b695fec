#include <cmath>

#include "support/test_support.h"

namespace tandem::trainers {
namespace {

const char* kSmall =
    "x1,y,x2\n"
    "1,10,5\n"
    "2,20,5\n"
    "3,30,5\n"
    "4,40,5\n"
    "6,60,5\n";

TEST(TableDataset, TargetByNameOrLastColumn) {
  CsvTable table = parse_csv(kSmall);
  TableDataset by_name = make_dataset(table, "y");
  EXPECT_EQ(by_name.feature_names, (std::vector<std::string>{"x1", "x2"}));
  EXPECT_EQ(by_name.target_name, "y");
  EXPECT_EQ(by_name.targets, (std::vector<double>{10, 20, 30, 40, 60}));
  EXPECT_EQ(by_name.features, (std::vector<double>{1, 5, 2, 5, 3, 5, 4, 5, 6, 5}));

  TableDataset last = make_dataset(table);
  EXPECT_EQ(last.target_name, "x2");
  EXPECT_EQ(last.feature_names, (std::vector<std::string>{"x1", "y"}));
  EXPECT_EQ(last.feature(4, 1), 60.0);
}

TEST(TableDataset, UnknownTargetAndSingleColumnAreErrors) {
  EXPECT_ERROR(make_dataset(parse_csv(kSmall), "z"),
               "make_dataset: target column \"z\" is not in the table (columns: x1, y, x2)");
  EXPECT_ERROR(make_dataset(parse_csv("a\n1\n")), "the table has 1 columns but expected at least two");
}

TEST(TableDataset, FeatureColumnsByNameInTheGivenOrder) {
  const CsvTable table = parse_csv(kSmall);
  const TableDataset chosen = make_dataset(table, "y", {"x2"});
  EXPECT_EQ(chosen.feature_names, (std::vector<std::string>{"x2"}));
  EXPECT_EQ(chosen.features, (std::vector<double>{5, 5, 5, 5, 5}));
  const TableDataset swapped = make_dataset(table, "y", {"x2", "x1"});
  EXPECT_EQ(swapped.feature(0, 0), 5.0);
  EXPECT_EQ(swapped.feature(0, 1), 1.0);
  EXPECT_ERROR(make_dataset(table, "y", {"x3"}),
               "make_dataset: feature column \"x3\" is not in the table (columns: x1, y, x2)");
  EXPECT_ERROR(make_dataset(table, "y", {"y"}), "feature column \"y\" is the target");
  EXPECT_ERROR(make_dataset(table, "y", {"x1", "x1"}), "feature column \"x1\" is named twice");
}

TEST(Split, LastFractionIsTheTestSet) {
  TableDataset data = make_dataset(parse_csv(kSmall), "y");
  Split split = train_test_split(data, 0.4);
  EXPECT_EQ(split.train.targets, (std::vector<double>{10, 20, 30}));
  EXPECT_EQ(split.test.targets, (std::vector<double>{40, 60}));
  EXPECT_EQ(split.test.features, (std::vector<double>{4, 5, 6, 5}));
  EXPECT_EQ(split.test.feature_names, data.feature_names);

  Split none = train_test_split(data, 0.0);
  EXPECT_EQ(none.train.rows(), 5);
  EXPECT_EQ(none.test.rows(), 0);
}

TEST(Split, DiabetesSplitsAs354And88) {
  TableDataset data = make_dataset(parse_csv(datasets::diabetes_csv()), "target");
  Split split = train_test_split(data, 0.2);
  EXPECT_EQ(split.train.rows(), 354);
  EXPECT_EQ(split.test.rows(), 88);
  EXPECT_EQ(split.test.targets.front(), data.targets[354]);
  EXPECT_EQ(split.test.targets.back(), 57.0);  // last row of the file
}

TEST(Split, BadFractionsAreErrors) {
  TableDataset data = make_dataset(parse_csv(kSmall));
  EXPECT_ERROR(train_test_split(data, 1.0), "train_test_split: test_fraction is 1 but expected a value in [0, 1)");
  EXPECT_ERROR(train_test_split(data, -0.1), "test_fraction is -0.1");
  EXPECT_ERROR(train_test_split(data, 0.95), "test_fraction 0.95 of 5 rows leaves no training rows");
}

TEST(Standardizer, UsesTrainingStatisticsForEverySet) {
  TableDataset data = make_dataset(parse_csv(kSmall), "y");
  Split split = train_test_split(data, 0.4);  // train x1 = 1, 2, 3; y = 10, 20, 30
  Standardizer s = Standardizer::fit(split.train);
  const double x_scale = std::sqrt(2.0 / 3.0);  // population standard deviation of 1, 2, 3
  const double y_scale = 10.0 * x_scale;
  EXPECT_DOUBLE_EQ(s.feature_mean[0], 2.0);
  EXPECT_DOUBLE_EQ(s.feature_scale[0], x_scale);
  EXPECT_DOUBLE_EQ(s.feature_mean[1], 5.0);
  EXPECT_DOUBLE_EQ(s.feature_scale[1], 1.0);  // a constant column keeps scale 1
  EXPECT_DOUBLE_EQ(s.target_mean, 20.0);
  EXPECT_DOUBLE_EQ(s.target_scale, y_scale);

  TableDataset train = s.apply(split.train);
  EXPECT_DOUBLE_EQ(train.feature(0, 0), -1.0 / x_scale);
  EXPECT_DOUBLE_EQ(train.feature(2, 0), 1.0 / x_scale);
  EXPECT_DOUBLE_EQ(train.feature(1, 1), 0.0);
  EXPECT_DOUBLE_EQ(train.targets[2], 10.0 / y_scale);

  TableDataset test = s.apply(split.test);  // x1 = 4, 6; y = 40, 60, with the training statistics
  EXPECT_DOUBLE_EQ(test.feature(0, 0), 2.0 / x_scale);
  EXPECT_DOUBLE_EQ(test.feature(1, 0), 4.0 / x_scale);
  EXPECT_DOUBLE_EQ(test.targets[1], 40.0 / y_scale);
  EXPECT_DOUBLE_EQ(s.target_to_original(test.targets[1]), 60.0);
}

TEST(Standardizer, TargetCanStayInItsUnits) {
  TableDataset data = make_dataset(parse_csv(kSmall), "y");
  Standardizer s = Standardizer::fit(data, /*standardize_target=*/false);
  EXPECT_EQ(s.target_mean, 0.0);
  EXPECT_EQ(s.target_scale, 1.0);
  EXPECT_EQ(s.apply(data).targets, data.targets);
}

TEST(Standardizer, FeatureCountMustMatch) {
  Standardizer s = Standardizer::fit(make_dataset(parse_csv(kSmall), "y"));
  EXPECT_ERROR(s.apply(make_dataset(parse_csv("a,b\n1,2\n"))),
               "Standardizer::apply: the data set has 1 features but the statistics are for 2");
}

TEST(Metrics, MseAndR2AgainstHandValues) {
  // targets 1, 2, 3, 4 (mean 2.5, SST 5); errors 0.5, -0.5, 0, 1 -> SSE 1.5
  RegressionMetrics m = regression_metrics({1.5, 1.5, 3.0, 5.0}, {1, 2, 3, 4});
  EXPECT_DOUBLE_EQ(m.mse, 1.5 / 4.0);
  EXPECT_DOUBLE_EQ(m.r2, 1.0 - 1.5 / 5.0);
  EXPECT_EQ(m.rows, 4);
  EXPECT_DOUBLE_EQ(regression_metrics({2, 2}, {2, 2}).r2, 1.0);
  EXPECT_DOUBLE_EQ(regression_metrics({1, 2}, {2, 2}).r2, 0.0);
  EXPECT_ERROR(regression_metrics({1}, {1, 2}), "regression_metrics: 1 predictions but 2 targets");
}

}  // namespace
}  // namespace tandem::trainers
