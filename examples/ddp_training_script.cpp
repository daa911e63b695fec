// The training script of README.md for one process per device group (docs/distributed.md): every process of a
// launch runs it on its own devices, as one comm::ProcessGroup, with DistributedDataParallel and a
// DistributedSampler; the result equals one process on all the devices. Started alone it is a group of one process.
//
//   build/bin/ddp_training_script                              # alone, on every GPU (else cpu:0, cpu:1)
//   mpirun -np 2 build/bin/ddp_training_script --devices cpu:0   # 2 processes x cpu:0 (as root: docs/distributed.md)
//   mpirun -np 2 build/bin/ddp_training_script                   # on 2 GPUs: each process takes one
#include <tandem/tandem.h>

#include <iostream>
#include <string>

#include "tandem/comm/process_group.h"
#include "tandem/parallel/distributed.h"

using namespace tandem;

struct Net : nn::Cloneable<Net> {
  Net() {
    register_module("fc1", fc1);
    register_module("fc2", fc2);
  }
  Tensor forward(const Tensor& x) override { return (*fc2)((*fc1)(x)); }
  std::shared_ptr<nn::Linear> fc1 = std::make_shared<nn::Linear>(10, 20);
  std::shared_ptr<nn::Linear> fc2 = std::make_shared<nn::Linear>(20, 1);
};

// 1000 rows of y = sum of the features + noise, the same in every process (the same seed).
trainers::TableDataset make_data() {
  trainers::TableDataset data{{"x0", "x1", "x2", "x3", "x4", "x5", "x6", "x7", "x8", "x9"}, "y", {}, {}};
  const std::vector<float> x = Tensor::randn({1000, 10}).to_vector();
  const std::vector<float> noise = Tensor::randn({1000}).to_vector();
  for (size_t r = 0; r < 1000; ++r) {
    double y = 0.1 * noise[r];
    for (size_t c = 0; c < 10; ++c) {
      data.features.push_back(x[r * 10 + c]);
      y += x[r * 10 + c];
    }
    data.targets.push_back(y);
  }
  return data;
}

int main(int argc, char** argv) try {
  if (argc != 1 && !(argc == 3 && std::string(argv[1]) == "--devices")) {
    std::cerr << "usage: ddp_training_script [--devices LIST] (this process's devices, default all)\n";
    return 2;
  }
  const comm::LaunchInfo launch = comm::LaunchInfo::from_environment();
  const std::vector<Device> devices = trainers::process_devices(argc == 3 ? argv[2] : "all", launch);
  const std::shared_ptr<comm::ProcessGroup> group = comm::ProcessGroup::from_environment(devices);
  try {
    manual_seed(0);  // the same data and initial model everywhere (DDP broadcasts rank 0's parameters anyway)
    const trainers::TableDataset data = make_data();
    auto net = std::make_shared<Net>();
    net->to(devices[0]);
    // Sum: each process's loss carries its share of the global batch, so uneven last batches stay exact.
    auto ddp = std::make_shared<parallel::DistributedDataParallel>(
        net, group, parallel::DistributedOptions{.reduction = comm::ReduceOp::Sum});
    optim::SGD sgd(ddp->parameters(), {.lr = 0.01, .momentum = 0.9});
    trainers::DataLoader loader(data, /*batch_size=*/64, /*shuffle=*/true, /*seed=*/0,
                                trainers::DistributedSampler(*group));  // global batches of 64 rows

    float last_loss = 0.0f;  // this process's part of the last batch's mean loss
    for (int epoch = 0; epoch < 10; ++epoch) {
      loader.begin_epoch();
      for (int64_t b = 0; b < loader.num_batches(); ++b) {
        const trainers::Batch batch = loader.batch(b);  // this process's rows (none in a batch too small to share)
        sgd.zero_grad();
        Tensor out = (*ddp)(batch.features);  // scattered over this process's devices, gathered on devices[0]
        Tensor loss =
            nn::mse_loss(out, batch.targets.to(devices[0]), nn::Reduction::Sum) / static_cast<float>(batch.global_rows);
        loss.backward();  // buckets are summed over every device of every process as they fill
        sgd.step();
        last_loss = loss.item();
      }
    }

    std::vector<Tensor> total = {Tensor::from_vector({last_loss}, {1}, devices[0])};
    for (size_t i = 1; i < devices.size(); ++i) total.push_back(Tensor::zeros({1}, devices[i]));
    group->all_reduce(total, comm::ReduceOp::Sum);  // the global batch's loss
    if (group->rank() == 0) {                       // rank 0 alone prints and writes
      std::cout << group->size() << " process(es) x " << to_string(devices) << ": last batch mse " << total[0].item()
                << "\n";
      save(*net, "net.safetensors");
    }
    return 0;
  } catch (const std::exception& e) {
    group->abort(std::string("ddp_training_script: ") + e.what());  // ends every process, status 1
  }
} catch (const std::exception& e) {
  std::cerr << "ddp_training_script: " << e.what() << "\n";
  return 1;
}
