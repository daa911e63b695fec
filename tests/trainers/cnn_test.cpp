// make_cnn's layers and errors; ImageTransforms' crops, flips and normalization against their definitions, keyed by
// (seed, epoch, example) so that a loader's batches are the same for any number of workers; and the digits CNN
// trained by the Trainer to test accuracy 0.97 or more, the same on one device and two.

#include <numeric>

#include "support/test_support.h"

namespace tandem::trainers {
namespace {

TEST(MakeCnn, TheBenchmarkLayersFromRowsOrImages) {
  manual_seed(5);
  const auto cnn = make_cnn({.image_shape = {1, 8, 8}, .classes = 10});
  EXPECT_EQ(describe_module(*cnn),
            "Sequential(0: Unflatten(dim=1, unflattened_size=(1, 8, 8)), 1: Conv2d(1, 32, kernel_size=(3, 3), "
            "stride=(1, 1), padding=(1, 1)), 2: ReLU(), 3: Conv2d(32, 64, kernel_size=(3, 3), stride=(1, 1), "
            "padding=(1, 1)), 4: ReLU(), 5: MaxPool2d(kernel_size=(2, 2), stride=(2, 2), padding=(0, 0), "
            "ceil_mode=false, dilation=(1, 1)), 6: Flatten(start_dim=1, end_dim=-1), 7: Linear(in_features=1024, "
            "out_features=128, bias=true), 8: ReLU(), 9: Linear(in_features=128, out_features=10, bias=true))");
  EXPECT_EQ(cnn->num_parameters(), 32 * 9 + 32 + 64 * 32 * 9 + 64 + 1024 * 128 + 128 + 128 * 10 + 10);
  const Tensor rows = Tensor::randn({3, 64});
  EXPECT_EQ((*cnn)(rows).shape(), (Shape{3, 10}));
  // Without flat_input: images [N, C, H, W], the same layers from "0" on, and the same function of the pixels.
  manual_seed(5);
  const auto images = make_cnn({.image_shape = {1, 8, 8}, .classes = 10, .flat_input = false});
  EXPECT_EQ(images->named_children().front().second->name(), "Conv2d");
  EXPECT_TRUE(allclose((*images)(rows.view({3, 1, 8, 8})), (*cnn)(rows), 1e-5, 1e-6));
  // Dropout before each Linear; odd sizes pool to the floor, as MaxPool2d.
  const auto odd =
      make_cnn({.image_shape = {3, 5, 7}, .classes = 4, .channels1 = 2, .channels2 = 3, .hidden = 6, .dropout = 0.25});
  EXPECT_NE(describe_module(*odd).find("7: Dropout(p=0.250000), 8: Linear(in_features=18, out_features=6"),
            std::string::npos)
      << describe_module(*odd);
  odd->eval();
  EXPECT_EQ((*odd)(Tensor::zeros({2, 105})).shape(), (Shape{2, 4}));
}

TEST(MakeCnn, Errors) {
  EXPECT_ERROR(make_cnn({.image_shape = {8, 8}, .classes = 10}),
               "make_cnn: image_shape is [8, 8] but expected {C, H, W}");
  EXPECT_ERROR(
      make_cnn({.image_shape = {1, 1, 8}, .classes = 10}),
      "make_cnn: image_shape [1, 1, 8] but expected at least 1 channel and 2 x 2 pixels (the pooling's window)");
  EXPECT_ERROR(make_cnn({.image_shape = {0, 8, 8}, .classes = 10}), "at least 1 channel");
  EXPECT_ERROR(make_cnn({.image_shape = {1, 8, 8}}), "make_cnn: classes is 0 but expected at least 1");
  EXPECT_ERROR(make_cnn({.image_shape = {1, 8, 8}, .classes = 2, .hidden = -1}),
               "make_cnn: hidden is -1 but expected at least 1");
  EXPECT_ERROR(make_cnn({.image_shape = {1, 8, 8}, .classes = 2, .dropout = 1.0}), "nn::Dropout");
  EXPECT_ERROR(make_cnn({.image_shape = {1, int64_t{1} << 40, int64_t{1} << 40}, .classes = 2}), "make_cnn");
  // A row of another size than C * H * W: the Unflatten says so.
  const auto cnn = make_cnn({.image_shape = {1, 8, 8}, .classes = 10});
  EXPECT_ERROR((*cnn)(Tensor::zeros({2, 65})), "nn::Unflatten: sizes [1, 8, 8] hold 64 elements but dim 1 has size 65");
}

// Rows of 2 channels of 3 x 4 pixels, value 100 * row + 10 * channel + 4 * y + x... distinct and positive.
Tensor numbered_images(int64_t rows) {
  std::vector<float> values;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < 2; ++c)
      for (int64_t p = 0; p < 12; ++p) values.push_back(static_cast<float>(100 * r + 20 * c + p + 1));
  return Tensor::from_vector(values, {rows, 24});
}

// Pixel (c, y, x) of row r of numbered_images, 0 outside the image.
float pixel(int64_t r, int64_t c, int64_t y, int64_t x) {
  if (y < 0 || y >= 3 || x < 0 || x >= 4) return 0.0f;
  return static_cast<float>(100 * r + 20 * c + 4 * y + x + 1);
}

TEST(ImageTransforms, EachCropIsAShiftWithZerosAndTheShiftsVary) {
  const ImageTransforms crop({.image_shape = {2, 3, 4}, .crop_padding = 1, .seed = 3});
  const int64_t rows = 40;
  std::vector<int64_t> indices(rows);
  std::iota(indices.begin(), indices.end(), 0);
  const std::vector<float> out = crop.apply(numbered_images(rows), indices, 0).to_vector();
  std::set<std::pair<int64_t, int64_t>> shifts;
  for (int64_t r = 0; r < rows; ++r) {
    // The one shift (dy, dx) in [-1, 1]^2 under which out(c, y, x) = in(c, y + dy, x + dx) for every pixel.
    int matches = 0;
    for (int64_t dy = -1; dy <= 1; ++dy) {
      for (int64_t dx = -1; dx <= 1; ++dx) {
        bool all = true;
        for (int64_t c = 0; c < 2; ++c)
          for (int64_t y = 0; y < 3; ++y)
            for (int64_t x = 0; x < 4; ++x)
              all = all && out[r * 24 + c * 12 + y * 4 + x] == pixel(r, c, y + dy, x + dx);
        if (all) {
          ++matches;
          shifts.insert({dy, dx});
        }
      }
    }
    EXPECT_EQ(matches, 1) << "row " << r;
  }
  EXPECT_EQ(shifts.size(), 9u);  // 40 draws reach every one of the 9 shifts
}

TEST(ImageTransforms, FlipsAndNormalizationFollowTheirDefinitions) {
  const ImageTransforms flip(
      {.image_shape = {2, 3, 4}, .horizontal_flip = true, .mean = {10.0, 20.0}, .std = {2.0, 4.0}, .seed = 9});
  const int64_t rows = 32;
  std::vector<int64_t> indices(rows);
  std::iota(indices.begin(), indices.end(), 100);
  const std::vector<float> out = flip.apply(numbered_images(rows), indices, 2).to_vector();
  int flipped = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const bool mirrored = out[r * 24] == (pixel(r, 0, 0, 3) - 10.0f) / 2.0f;
    flipped += mirrored;
    for (int64_t c = 0; c < 2; ++c)
      for (int64_t y = 0; y < 3; ++y)
        for (int64_t x = 0; x < 4; ++x) {
          const float source = pixel(r, c, y, mirrored ? 3 - x : x);
          const float expected = (source - (c == 0 ? 10.0f : 20.0f)) / (c == 0 ? 2.0f : 4.0f);
          EXPECT_FLOAT_EQ(out[r * 24 + c * 12 + y * 4 + x], expected);
        }
  }
  EXPECT_GT(flipped, 4);  // about half of 32
  EXPECT_LT(flipped, 28);
}

TEST(ImageTransforms, KeyedBySeedEpochAndExampleOnly) {
  const ImageTransforms crop({.image_shape = {2, 3, 4}, .crop_padding = 2, .horizontal_flip = true, .seed = 1});
  const Tensor batch = numbered_images(6);
  const std::vector<int64_t> indices = {7, 3, 11, 0, 5, 9};
  const std::vector<float> whole = crop.apply(batch, indices, 4).to_vector();
  // Each example alone, in any batch, transforms alike.
  for (int64_t r = 0; r < 6; ++r) {
    const std::vector<float> alone = crop.apply(batch.narrow(0, r, 1).contiguous(), {indices[r]}, 4).to_vector();
    EXPECT_EQ(alone, std::vector<float>(whole.begin() + r * 24, whole.begin() + (r + 1) * 24)) << r;
  }
  // Another epoch or seed draws anew.
  EXPECT_NE(crop.apply(batch, indices, 5).to_vector(), whole);
  const ImageTransforms reseeded({.image_shape = {2, 3, 4}, .crop_padding = 2, .horizontal_flip = true, .seed = 2});
  EXPECT_NE(reseeded.apply(batch, indices, 4).to_vector(), whole);
  // Images [n, C, H, W] are taken as their rows are.
  EXPECT_EQ(crop.apply(batch.view({6, 2, 3, 4}), indices, 4).to_vector(), whole);
}

TEST(ImageTransforms, Errors) {
  EXPECT_ERROR(ImageTransforms({.image_shape = {3, 4}}),
               "ImageTransforms: image_shape is [3, 4] but expected {C, H, W}");
  EXPECT_ERROR(ImageTransforms({.image_shape = {1, 4, 4}, .crop_padding = 5}),
               "ImageTransforms: crop_padding is 5 but expected 0 to 4");
  EXPECT_ERROR(ImageTransforms({.image_shape = {2, 4, 4}, .mean = {0.5}, .std = {0.5}}),
               "mean has 1 values and std 1 but expected both empty or both 2 (one per channel)");
  EXPECT_ERROR(ImageTransforms({.image_shape = {1, 4, 4}, .mean = {0.5}, .std = {0.0}}),
               "channel 0 has mean 0.5 and std 0 but expected finite values and a positive std");
  const ImageTransforms crop({.image_shape = {1, 4, 4}, .crop_padding = 1});
  EXPECT_ERROR(crop.apply(Tensor::zeros({2, 15}), {0, 1}, 0),
               "ImageTransforms: a batch of shape [2, 15] but expected 16 values per example");
  EXPECT_ERROR(crop.apply(Tensor::zeros({2, 16}), {0}, 0), "ImageTransforms: a batch of 2 examples but 1 indices");
  EXPECT_ERROR(crop.apply(Tensor::zeros({2, 16}, DType::Int64), {0, 1}, 0), "expected a float32 batch");
}

// A loader's transformed batches: the same for any number of workers, the epoch counted by begin_epoch and set by
// set_epoch (as a resumed fit does).
TEST(ImageTransforms, LoaderBatchesAreTheSameForAnyWorkersAndEpochsRepeat) {
  const TensorDataset data({numbered_images(37), Tensor::zeros({37})});
  const auto crop = std::make_shared<ImageTransforms>(
      ImageTransformOptions{.image_shape = {2, 3, 4}, .crop_padding = 1, .horizontal_flip = true, .seed = 4});
  const auto epochs_of = [&](int workers, int64_t first_epoch, int epochs) {
    DataLoader loader(data, {.batch_size = 5, .shuffle = true, .seed = 2, .num_workers = workers, .transform = crop});
    std::vector<std::vector<float>> batches;
    EXPECT_EQ(loader.epoch(), -1);
    if (first_epoch > 0) loader.set_epoch(first_epoch);
    for (int e = 0; e < epochs; ++e) {
      loader.begin_epoch();
      EXPECT_EQ(loader.epoch(), first_epoch + e);
      for (int64_t b = 0; b < loader.num_batches(); ++b) batches.push_back(loader.batch(b).features.to_vector());
    }
    return batches;
  };
  const auto expected = epochs_of(0, 0, 2);
  EXPECT_EQ(epochs_of(3, 0, 2), expected);
  // Batch b of epoch 1 holds the examples of that epoch's order, transformed with epoch 1.
  DataLoader probe(data, {.batch_size = 5, .shuffle = true, .seed = 2});
  probe.begin_epoch();
  probe.begin_epoch();
  const std::vector<int64_t> rows(probe.order().begin(), probe.order().begin() + 5);
  EXPECT_EQ(expected[8], crop->apply(data.get_batch(rows).data, rows, 1).to_vector());
  EXPECT_ERROR(probe.set_epoch(-1), "DataLoader::set_epoch: epoch is -1 but expected at least 0");
}

// tandem-train's --model cnn defaults as TrainerOptions: raw pixels, random crops padded by one pixel, AdamW with a
// cosine schedule over `epochs`.
TrainerOptions cnn_options(std::vector<Device> devices, const TableDataset& train, int64_t epochs, int workers) {
  TrainerOptions options;
  options.devices = std::move(devices);
  options.epochs = epochs;
  options.task = Task::Classification;
  options.classes = ClassLabels::of(train);
  options.standardize_features = false;
  options.num_workers = workers;
  const optim::AdamWOptions adamw{.lr = 1e-3, .weight_decay = 0.01};
  options.optimizer = CustomOptimizer{"adamw", [adamw](std::vector<Tensor> parameters) {
                                        return std::make_unique<optim::AdamW>(std::move(parameters), adamw);
                                      }};
  options.lr_schedule = parse_lr_schedule("cosine", epochs);
  options.transform =
      std::make_shared<ImageTransforms>(ImageTransformOptions{.image_shape = {1, 8, 8}, .crop_padding = 1});
  return options;
}

// The digits' rows as a TensorDataset of [N, 1, 8, 8] images and [N] labels.
TensorDataset images_of(const TableDataset& rows) {
  const std::vector<float> pixels(rows.features.begin(), rows.features.end());
  const std::vector<float> labels(rows.targets.begin(), rows.targets.end());
  return TensorDataset({Tensor::from_vector(pixels, {rows.rows(), 1, 8, 8}), Tensor::from_vector(labels, {rows.rows()})});
}

Split digits_split() { return train_test_split(make_dataset(read_csv(TANDEM_SOURCE_DIR "/data/digits.csv")), 0.2); }

// The benchmark: the digits CNN on the standard split (data/README.md) on two devices, ahead of the MLP (0.936) and
// the RBF SVM (0.958).
TEST(CnnTrainer, DigitsReachTestAccuracy097OnTwoDevices) {
  const Split split = digits_split();
  manual_seed(0);
  Trainer trainer(make_cnn({.image_shape = {1, 8, 8}, .classes = 10}),
                  cnn_options({Device::cpu(0), Device::cpu(1)}, split.train, 12, 2));
  const ClassificationMetrics test = *trainer.fit(split.train, split.test).test_classes;
  EXPECT_EQ(test.rows, 359);
  EXPECT_GE(test.accuracy, 0.97);
}

// The crops are keyed by example: one device without workers and two devices with them train alike.
TEST(CnnTrainer, OneDeviceWithoutWorkersAgreesWithTwoDevicesWithWorkers) {
  const Split split = digits_split();
  const TableDataset train = split.train.slice(0, 512);
  std::vector<ClassificationMetrics> results;
  for (const auto& devices : {std::vector<Device>{Device::cpu(0), Device::cpu(1)}, {Device::cpu(0)}}) {
    manual_seed(0);
    Trainer trainer(make_cnn({.image_shape = {1, 8, 8}, .classes = 10}),
                    cnn_options(devices, train, 2, devices.size() == 2 ? 3 : 0));
    results.push_back(*trainer.fit(train, split.test).test_classes);
  }
  EXPECT_EQ(results[0].confusion, results[1].confusion);
  EXPECT_NEAR(results[0].cross_entropy, results[1].cross_entropy, 1e-5);
}

// A resumed fit draws the crops of the epochs it runs (DataLoader::set_epoch), not those of the first ones: 1 epoch,
// a checkpoint, and a second epoch from it end as 2 epochs without a break.
TEST(CnnTrainer, AResumedFitDrawsTheCropsOfItsEpochs) {
  const Split split = digits_split();
  const TableDataset train = split.train.slice(0, 256);
  const auto make = [&](int64_t epochs, uint64_t init_seed) {
    manual_seed(init_seed);
    TrainerOptions options = cnn_options({Device::cpu(0)}, train, epochs, 0);
    options.lr_schedule.reset();  // its length is the epochs, which the two runs differ in
    options.resume_may_change = {"epochs"};
    return Trainer(make_cnn({.image_shape = {1, 8, 8}, .classes = 10}), options);
  };
  Trainer uninterrupted = make(2, 0);
  const ClassificationMetrics expected = *uninterrupted.fit(train, split.test).test_classes;
  const std::string path = testing::scratch_path("cnn_resume.safetensors");
  Trainer first = make(1, 0);
  first.add_callback(std::make_shared<CheckpointSaver>(path));
  first.fit(train, split.test);
  Trainer resumed = make(2, 123);
  resumed.load_checkpoint(path);
  const ClassificationMetrics actual = *resumed.fit(train, split.test).test_classes;
  EXPECT_EQ(actual.confusion, expected.confusion);
  EXPECT_DOUBLE_EQ(actual.cross_entropy, expected.cross_entropy);
  std::remove(path.c_str());
}

// Images in a TensorDataset [N, 1, 8, 8] train a CNN on images (flat_input false) exactly as the table's rows train
// the CNN that views them as images.
TEST(CnnTrainer, ATensorDatasetOfImagesTrainsAsTheTablesRows) {
  const Split split = digits_split();
  const TableDataset train = split.train.slice(0, 256);
  std::vector<ClassificationMetrics> results;
  for (const bool flat : {true, false}) {
    manual_seed(0);
    Trainer trainer(make_cnn({.image_shape = {1, 8, 8}, .classes = 10, .flat_input = flat}),
                    cnn_options({Device::cpu(0)}, train, 2, 0));
    results.push_back(flat ? *trainer.fit(train, split.test).test_classes
                           : *trainer.fit(images_of(train), images_of(split.test)).test_classes);
  }
  EXPECT_EQ(results[0].confusion, results[1].confusion);
  EXPECT_DOUBLE_EQ(results[0].cross_entropy, results[1].cross_entropy);
}

// TrainerOptions::eval_transform: a fit that normalizes the raw pixels per channel in training (transform) and in
// its evaluations (eval_transform) is exactly the fit on pixels normalized beforehand, for rows of a table and images
// of a TensorDataset alike; without eval_transform the evaluations see raw pixels, and the test loss differs.
TEST(CnnTrainer, EvalTransformNormalizesTheEvaluationsAsTrainingIs) {
  const Split split = digits_split();
  const TableDataset train = split.train.slice(0, 96);
  const TableDataset test = split.test.slice(0, 64);
  const auto normalizer = std::make_shared<ImageTransforms>(
      ImageTransformOptions{.image_shape = {1, 8, 8}, .mean = {4.0}, .std = {5.0}});
  const auto normalized = [&](const TableDataset& rows) {  // through the same transform: the same floats
    const std::vector<float> pixels(rows.features.begin(), rows.features.end());
    std::vector<int64_t> indices(static_cast<size_t>(rows.rows()));
    std::iota(indices.begin(), indices.end(), 0);
    const std::vector<float> out =
        normalizer->apply(Tensor::from_vector(pixels, {rows.rows(), 64}), indices, 0).to_vector();
    TableDataset copy = rows;
    copy.features.assign(out.begin(), out.end());
    return copy;
  };
  const auto fit = [&](const Dataset& train_set, const Dataset& test_set, bool transform, bool eval_transform) {
    manual_seed(0);
    TrainerOptions options = cnn_options({Device::cpu(0)}, train, 1, 0);
    options.transform = transform ? normalizer : nullptr;
    options.eval_transform = eval_transform ? normalizer : nullptr;
    const bool flat = dynamic_cast<const TableDataset*>(&train_set) != nullptr;
    Trainer trainer(make_cnn({.image_shape = {1, 8, 8}, .classes = 10, .flat_input = flat}), options);
    return *trainer.fit(train_set, test_set).test_classes;
  };
  const ClassificationMetrics expected = fit(normalized(train), normalized(test), false, false);
  const ClassificationMetrics rows = fit(train, test, true, true);
  EXPECT_EQ(rows.confusion, expected.confusion);
  EXPECT_DOUBLE_EQ(rows.cross_entropy, expected.cross_entropy);
  const ClassificationMetrics images = fit(images_of(train), images_of(test), true, true);
  EXPECT_EQ(images.confusion, expected.confusion);
  EXPECT_DOUBLE_EQ(images.cross_entropy, expected.cross_entropy);
  const ClassificationMetrics raw_evaluations = fit(train, test, true, false);
  EXPECT_NE(raw_evaluations.cross_entropy, expected.cross_entropy);
}

}  // namespace
}  // namespace tandem::trainers
