#pragma once
// A net with a shared (tied) weight, for the tests of Note [Shared parameters] in every layer:
//   x [N, features] -> encoder -> tanh -> decoder -> tanh -> head -> [N, outputs]
// where decoder.weight is encoder.weight (one [features, features] matrix used twice). Built with tied = false it
// is the same net with two weights, for references.

#include <tandem/tandem.h>

#include <cstdint>
#include <memory>

namespace tandem::testing {

class TiedNet : public nn::Cloneable<TiedNet> {
 public:
  explicit TiedNet(int64_t features = 10, int64_t outputs = 1, bool tied = true)
      : encoder(std::make_shared<nn::Linear>(features, features)),
        decoder(std::make_shared<nn::Linear>(features, features)),
        head(std::make_shared<nn::Linear>(features, outputs)) {
    register_module("encoder", encoder);
    register_module("decoder", decoder);
    register_module("head", head);
    if (tied) decoder->weight = encoder->weight;
  }
  Tensor forward(const Tensor& x) override { return head->forward(tanh(decoder->forward(tanh(encoder->forward(x))))); }

  std::shared_ptr<nn::Linear> encoder;
  std::shared_ptr<nn::Linear> decoder;
  std::shared_ptr<nn::Linear> head;
};

// A tied net initialized from `seed` on `device` (the values are drawn on the host: the same on every device).
inline std::shared_ptr<TiedNet> make_tied_net(Device device = Device::cpu(0), uint64_t seed = 0,
                                              int64_t features = 10) {
  manual_seed(seed);
  auto net = std::make_shared<TiedNet>(features);
  net->to(device);
  return net;
}

// The untied twin of `tied`: its own tensors, with encoder.weight and decoder.weight both equal to the shared one.
inline std::shared_ptr<TiedNet> untied_copy(const TiedNet& tied) {
  auto untied = std::make_shared<TiedNet>(tied.encoder->weight.size(1), tied.head->weight.size(0), /*tied=*/false);
  untied->to(tied.encoder->weight.device());
  NoGradGuard no_grad;
  untied->encoder->weight.copy_(tied.encoder->weight);
  untied->decoder->weight.copy_(tied.encoder->weight);
  untied->encoder->bias.copy_(tied.encoder->bias);
  untied->decoder->bias.copy_(tied.decoder->bias);
  untied->head->weight.copy_(tied.head->weight);
  untied->head->bias.copy_(tied.head->bias);
  return untied;
}

}  // namespace tandem::testing
