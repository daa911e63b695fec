// Registration checks at once that a registered member lies inside the module object (Note [Member slots]), so
// that anything else throws where it is registered instead of breaking clone() (and with it replicate) later.
#include "support/test_support.h"

namespace tandem {
namespace {

// Each registers something that is not a member of the object under construction.
class RegistersLocal : public nn::Cloneable<RegistersLocal> {
 public:
  RegistersLocal() {
    Tensor local = Tensor::ones({2});
    register_parameter("local", local);
  }
  Tensor forward(const Tensor& x) override { return x; }
};

class RegistersVectorElement : public nn::Cloneable<RegistersVectorElement> {
 public:
  RegistersVectorElement() : weights(1, Tensor::ones({2})) { register_parameter("w0", weights[0]); }
  Tensor forward(const Tensor& x) override { return x * weights[0]; }
  std::vector<Tensor> weights;
};

class RegistersMemberOfAnotherObject : public nn::Cloneable<RegistersMemberOfAnotherObject> {
 public:
  RegistersMemberOfAnotherObject() { register_parameter("inner_weight", inner->weight); }
  Tensor forward(const Tensor& x) override { return inner->forward(x); }
  std::shared_ptr<nn::Linear> inner = std::make_shared<nn::Linear>(2, 2);
};

class RegistersLocalModule : public nn::Cloneable<RegistersLocalModule> {
 public:
  RegistersLocalModule() {
    auto local = std::make_shared<nn::Linear>(2, 2);
    register_module("local", local);
  }
  Tensor forward(const Tensor& x) override { return x; }
};

TEST(RegistrationTest, AnythingButAMemberThrowsWhereItIsRegistered) {
  EXPECT_ERROR(RegistersLocal(),
               "nn::Module::register_parameter: parameter 'local' of RegistersLocal is not a "
               "member of the RegistersLocal object; register only direct members");
  EXPECT_ERROR(RegistersVectorElement(),
               "nn::Module::register_parameter: parameter 'w0' of RegistersVectorElement "
               "is not a member of the RegistersVectorElement object");
  EXPECT_ERROR(std::make_shared<RegistersMemberOfAnotherObject>(),
               "nn::Module::register_parameter: parameter 'inner_weight' of RegistersMemberOfAnotherObject is not a "
               "member of the RegistersMemberOfAnotherObject object");
  EXPECT_ERROR(RegistersLocalModule(),
               "nn::Module::register_module: submodule 'local' of RegistersLocalModule is "
               "not a member of the RegistersLocalModule object");
}

// A base between Cloneable<Self> and Self registering its own members (checked against the object being built).
template <class Self>
class WithScale : public nn::Cloneable<Self> {
 public:
  WithScale() { this->register_parameter("scale", scale); }
  Tensor scale = Tensor::full({1}, 2.0f);
};

class ScaledIdentity : public WithScale<ScaledIdentity> {
 public:
  ScaledIdentity() { register_parameter("shift", shift); }
  Tensor forward(const Tensor& x) override { return x * scale + shift; }
  Tensor shift = Tensor::ones({1});
};

// The last member of a class with a base between Cloneable<Self> and Self lies at the far end of the object.
class LastMember : public WithScale<LastMember> {
 public:
  LastMember() { register_module("fc", fc); }
  Tensor forward(const Tensor& x) override { return fc->forward(x); }
  char padding[40] = {};
  std::shared_ptr<nn::Linear> fc = std::make_shared<nn::Linear>(1, 1);
};

TEST(RegistrationTest, MembersOfEveryClassOfTheObjectAreAccepted) {
  ScaledIdentity module;
  std::shared_ptr<nn::Module> copy = module.clone(Device::cpu(1));
  const auto named = copy->named_parameters();
  ASSERT_EQ(named.size(), 2u);
  EXPECT_EQ(named[0].first, "scale");
  EXPECT_EQ(named[1].first, "shift");
  testing::expect_values(copy->forward(Tensor::from_vector({3}, {1}, Device::cpu(1))), {7}, {1});
  LastMember last;
  EXPECT_EQ(last.clone()->named_parameters().size(), 3u);  // scale, fc.weight, fc.bias
  EXPECT_NO_THROW(std::make_shared<nn::Sequential>(nn::Sequential{std::make_shared<nn::Linear>(2, 2)})->clone());
}

// A class derived from a Cloneable layer without opting in: registration is not checked (its size is unknown to
// Cloneable<Linear>), and clone() refuses it as before.
class LinearWithOffset : public nn::Linear {
 public:
  LinearWithOffset() : nn::Linear(2, 2) { register_parameter("offset", offset); }
  Tensor forward(const Tensor& x) override { return nn::Linear::forward(x) + offset; }
  Tensor offset = Tensor::zeros({2});
};

TEST(RegistrationTest, ClassesDerivedFromACloneableLayerStillRegister) {
  LinearWithOffset module;
  EXPECT_EQ(module.parameters().size(), 3u);
  EXPECT_TRUE(module.parameters()[2].is_same(module.offset));
  EXPECT_ERROR(module.clone(), "LinearWithOffset inherits clone() from nn::Cloneable<Linear>");
}

}  // namespace
}  // namespace tandem
