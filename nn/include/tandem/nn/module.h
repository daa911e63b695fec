#pragma once
// nn::Module: the base of every layer. A module keeps an ordered registry of its parameters, buffers and submodules,
// from which parameters(), named_parameters() (PyTorch state_dict names such as "fc1.weight"), buffers(), to(),
// zero_grad(), clone() and save/load all work. User layers derive from nn::Cloneable<Self> (one line) to get clone() and with
// it parallel::replicate:
//
//   class Net : public nn::Cloneable<Net> {
//    public:
//     Net() { register_module("fc1", fc1); register_module("fc2", fc2); register_parameter("scale", scale); }
//     Tensor forward(const Tensor& x) override { return fc2->forward(relu(fc1->forward(x))) * scale; }
//     std::shared_ptr<nn::Linear> fc1 = std::make_shared<nn::Linear>(10, 20);
//     std::shared_ptr<nn::Linear> fc2 = std::make_shared<nn::Linear>(20, 1);
//     Tensor scale = Tensor::ones({1});
//   };
//
// Note [Member slots]: the registry does not keep raw pointers to the members it names. It keeps each member's
// byte offset from the Module subobject and, for submodule members, a type-erased get/set pair. A copy-constructed
// module of the same dynamic type has its members at the same offsets, so Cloneable<Self>::clone can copy-construct
// Self and then find and replace the copy's own members, with no per-layer code. The rules that follow:
//   * register only direct members of the module object (not locals, elements of a std::vector or other container,
//     or members of another object; for a variable number of children, use the owning form
//     register_module(name, std::move(ptr)), as Sequential does);
//   * no virtual inheritance on the way from Module to the registering class;
//   * a module copy-constructed by hand (`Linear b = a;`) shares a's parameter tensors (tensors are handles).
// The first rule is checked at registration, where the object's extent is known: register_parameter and
// register_module throw unless the member lies inside the object. Cloneable<Self> knows sizeof(Self), and its
// object_extent() finds the object's start with dynamic_cast<const void*>, which during a constructor sees the
// class being constructed as the whole object (no downcast of a half-built object, so sanitizers stay quiet):
//   * inside Self's constructor, and afterwards on a Self: [start of Self, + sizeof(Self)), exact;
//   * inside the constructor of a class between Cloneable<Self> and Self: [start of that class, + sizeof(Self)),
//     which holds that class's members (exact with single inheritance, the usual case);
//   * on an object of a class derived further from Self, whose size is unknown here: not checked (clone() refuses
//     such classes anyway: they must derive from Cloneable<Themselves>).
// Modules that derive from Module directly have no known size: their registrations are not checked (they cannot be
// cloned; derive them from Cloneable<Self> to have them checked).
//
// Note [Shared parameters]: a parameter is shared (tied) when two member slots hold one tensor (the same TensorImpl,
// Tensor::is_same), as nanoGPT ties its output layer to its token embedding. The registry keeps slots, not tensors,
// so a tie is one assignment, made after both members are registered (a constructor's last line, say):
//   lm_head->weight = transformer->wte->weight;   // both names now reach one tensor; its shapes must match the uses
// The same holds for buffers, and for a submodule registered in two places (one std::shared_ptr), which shares all
// its tensors. What follows from it, each rule in one place (Module's grouping of slots by tensor):
//   * parameters() and named_parameters() list each distinct tensor once, at its first slot in the usual order and
//     under that slot's name, as PyTorch's named_parameters() (remove_duplicate=True); buffers() and named_buffers()
//     likewise. So num_parameters() counts it once, zero_grad() clears it once, and an optimizer, a gradient bucket
//     and the DDP all-reduce over parameters() see it once. Its gradient is the sum of every use's: autograd
//     accumulates all of them into the one leaf.
//   * state_dict() lists every name, a shared tensor under each of its names, as PyTorch's state_dict() does;
//     state_tensors() groups the names by tensor. save() writes each distinct tensor once, under its first name
//     (safetensors allows no two entries over one storage: PyTorch's safetensors.torch.save_model drops the aliases
//     too), and load() takes a tensor from any of its names (tandem/nn/serialize.h).
//   * clone(), clone_with_parameters() and set_parameters() (whose lists follow parameters(): one tensor per
//     distinct parameter) replace tensors group by group, putting one copy, or the one given tensor, in every slot
//     of the group: copies keep their ties, so the replicas of parallel::replicate and parallel::ReplicatedModule
//     have one tensor in both slots, and the master's gradient sums both uses on every replica. clone() copies a
//     shared submodule once. to() moves each distinct tensor once.
//   * Freezing (set_requires_grad(false)) through either name freezes the one tensor.
//   * One tensor may not be a parameter in one slot and a buffer in another: the grouping throws Error naming both.
// A tie is identity, not equal values: assigning another tensor to one of the slots unties them.
//
// Note [Following the master's modes]: a module kept as copies (parallel::ReplicatedModule keeps replicas across
// steps) must run every copy in the master's training modes, including a submodule switched on its own
// (`net.fc1->eval()`). PyTorch's DataParallel copies the modes along with the replicas at each forward; tandem keeps
// its replicas, so it copies the flags instead, but only when some flag changed: every change of a flag anywhere
// bumps training_mode_generation(), and the keeper compares the value it last synchronized at (one atomic load
// per step) before comparing trees. It reads the counter before reading the master's flags, so a change made
// meanwhile is seen by the next check; its own writes to the copies bump the counter once more, which costs one
// more comparison of unchanged flags. Modules need no parent pointers or observer lists for this.

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <typeinfo>
#include <utility>
#include <vector>

#include "tandem/core/device.h"
#include "tandem/core/error.h"
#include "tandem/core/precision.h"
#include "tandem/core/tensor.h"

namespace tandem::nn {

class Module;
template <class Derived>
class Cloneable;

namespace detail {
// The one tensor of `outputs`, which module.forward_all returned; throws Error naming `caller` and the module when
// there is not exactly one.
Tensor single_output(const Module& module, std::vector<Tensor>&& outputs, const char* caller);
}  // namespace detail

class Module {
 public:
  Module() = default;
  Module(const Module&) = default;             // copies the registry; parameter tensors are shared (see above)
  Module& operator=(const Module&) = delete;
  virtual ~Module() = default;

  // ---- forward ----
  // Note [Two forms of forward]: a module overrides one of two virtuals. Layers with one input and one output (the
  // usual case) override forward(input); modules with several inputs or outputs (losses, a layer that mixes two
  // tensors) override forward_all(inputs) instead. Each default calls the other form, so every module answers both:
  //   forward(input)        default: forward_all({input}), which must return exactly one tensor;
  //   forward_all(inputs)   default: {forward(inputs[0])} for exactly one input; any other count throws Error naming
  //                         the module and the count.
  // The names differ (not two overloads of forward) so that a class overriding one form does not hide the other.
  // A module that overrides neither throws Error when called (a thread-local guard stops the mutual recursion).
  //
  //   class Mix : public nn::Cloneable<Mix> {  // mix(a, b) = a W + b
  //    public:
  //     Mix() { register_parameter("weight", weight); }
  //     std::vector<Tensor> forward_all(const std::vector<Tensor>& inputs) override {
  //       check_input_count(inputs, 2);
  //       return {matmul(inputs[0], weight) + inputs[1]};
  //     }
  //     Tensor weight = Tensor::randn({4, 3});
  //   };
  //   Tensor y = mix(a, b);
  virtual Tensor forward(const Tensor& input);
  virtual std::vector<Tensor> forward_all(const std::vector<Tensor>& inputs);
  // Throws Error naming the module unless inputs.size() == expected (for overrides of forward_all).
  void check_input_count(const std::vector<Tensor>& inputs, size_t expected) const;

  // Calls: module(x) is forward(x). module(a, b, ...) is forward_all({a, b, ...}) and returns its one output;
  // Error when the module returns another number of outputs (call forward_all to get them all).
  Tensor operator()(const Tensor& input) { return forward(input); }
  template <class... More>
    requires(std::convertible_to<const More&, const Tensor&> && ...)
  Tensor operator()(const Tensor& first, const Tensor& second, const More&... more) {
    return detail::single_output(*this, forward_all({first, second, more...}), "nn::Module::operator()");
  }

  // The class name without namespaces ("Linear"), used in messages and printing. Defaults to the dynamic type.
  virtual std::string name() const;
  // Extra text printed inside the parentheses by operator<< ("in_features=10, out_features=20, bias=true").
  virtual std::string extra_repr() const { return {}; }

  // ---- registry ----
  // Own parameters first, then each child's (recursively), each in registration order (as PyTorch); a parameter
  // shared by several slots once, under its first name (Note [Shared parameters]).
  std::vector<Tensor> parameters() const;
  std::vector<std::pair<std::string, Tensor>> named_parameters() const;  // "fc1.weight", "0.bias", ...
  std::vector<std::shared_ptr<Module>> children() const;                 // direct submodules, registration order
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> named_children() const;
  int64_t num_parameters() const;  // total number of elements of parameters() (a shared parameter counts once)
  // Buffers: state that is not trained (BatchNorm's running statistics), in the same order and naming as parameters.
  // As in PyTorch they are saved and loaded with the parameters, moved by to() and copied by clone(), but they are
  // not parameters (an optimizer never sees them) and never require grad.
  std::vector<Tensor> buffers() const;
  std::vector<std::pair<std::string, Tensor>> named_buffers() const;  // "bn.running_mean", ...
  // Every tensor of the module's state, as PyTorch's state_dict(): for each module in pre-order, its own parameters,
  // then its own buffers, then its children's; a shared tensor under each of its names.
  std::vector<std::pair<std::string, Tensor>> state_dict() const;
  // state_dict() grouped by tensor (Note [Shared parameters]): each distinct tensor once, in the order of its first
  // name, with all its names in state_dict() order; names.front() is the name named_parameters() or named_buffers()
  // gives it. What save() writes (each tensor under names.front()) and what load() matches (any of the names).
  // Errors: a tensor that is a parameter under one name and a buffer under another.
  struct StateTensor {
    std::vector<std::string> names;
    Tensor tensor;
  };
  std::vector<StateTensor> state_tensors() const;

  // ---- state ----
  // Moves every parameter and buffer to `device` in place, as PyTorch's module.to(): each tensor keeps its identity
  // and takes a copy of its data on `device` (Tensor::set_data), so optimizers, hooks and handles taken before the
  // move stay valid and see the new device and values. requires_grad is kept; a .grad is moved along (as a new
  // tensor). Tensors already on `device` are left untouched. All or nothing: every copy is made before the first
  // tensor changes. Optimizer state (momentum buffers) is not moved, as in PyTorch.
  // Errors: a device that does not exist; a parameter to move that is not a leaf (a replica's, see
  // parallel::replicate).
  void to(Device device);
  // The device of the first parameter; throws Error for a module without parameters.
  Device device() const;
  // set_to_none (the default, as PyTorch): every .grad becomes undefined, so the next backward allocates fresh
  // gradients. set_to_none = false: existing gradients are zeroed in place (their storage is kept).
  void zero_grad(bool set_to_none = true);
  // ---- training mode ----
  // A flag per module that layers consult in forward (Dropout, BatchNorm1d). train() and eval() set it
  // on this module and every descendant; replicas kept by parallel::ReplicatedModule follow the master's flags.
  void train(bool training = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }
  // The flags of this module and its descendants in pre-order (itself, then each child's subtree in registration
  // order), and setting them back, e.g. on a clone or after a temporary change (nn::TrainingModeGuard).
  // Errors (set_training_modes): a count other than training_modes().size(); nothing is changed then.
  std::vector<bool> training_modes() const;
  void set_training_modes(const std::vector<bool>& modes);
  // A process-wide counter that changes whenever some module's flag changes (train(), eval(), set_training_modes()
  // that change anything): code keeping copies of a module reads it to skip comparing flags when nothing changed
  // (Note [Following the master's modes]).
  static uint64_t training_mode_generation();

  // ---- precision ----
  // How the layers of this module multiply matrices (Note [Precision modes] in tandem/core/precision.h): sets the
  // precision of this module and of every descendant; nn::Linear runs its product in it, and a custom layer may pass
  // precision() to linear(). std::nullopt (the default of every module) follows default_precision() (the thread's
  // AutocastGuard scope, else the process-wide switch); a precision set here wins over both. Parameters, gradients and optimizer state stay float32.
  // Copies (clone(), and with it parallel::replicate and the replicas of parallel::ReplicatedModule) take the
  // precision the module has when they are made: set it before replicating.
  void set_precision(std::optional<Precision> precision);
  std::optional<Precision> precision() const { return precision_; }

  // ---- copies ----
  // Deep copy: same structure, every parameter copied to `device` (default: where it is) as a new leaf with the
  // original's requires_grad (true unless it was frozen), every buffer copied there too. Shared tensors and
  // submodules are copied once and stay shared in the copy (Note [Shared parameters]). Modules that do not derive
  // from Cloneable<Self> throw.
  virtual std::shared_ptr<Module> clone(std::optional<Device> device = std::nullopt) const;
  // Structural copy whose parameters (in parameters() order) are exactly `parameters`: no data is copied and the
  // tensors are used as given (for parallel::replicate, whose broadcast outputs carry gradient edges back to the
  // master). The count and every shape must match. The copy's buffers are the original's tensors (shared, not
  // copied); give it others with set_buffers.
  std::shared_ptr<Module> clone_with_parameters(const std::vector<Tensor>& parameters) const;
  // Replaces the parameter tensors (in parameters() order) by `parameters`, as given; count and shapes must match.
  // A shared parameter takes its one tensor in every slot that held it.
  void set_parameters(const std::vector<Tensor>& parameters);
  // Replaces the buffer tensors (in buffers() order) by `buffers`, as given, a shared one in every slot; count,
  // shapes and dtypes must match and none may require grad.
  void set_buffers(const std::vector<Tensor>& buffers);

 protected:
  // Registers the member tensor `parameter` under `name` and sets requires_grad on it. It must be a defined leaf
  // and a direct member of this module (see Note [Member slots]; checked here for modules derived from Cloneable).
  void register_parameter(const std::string& name, Tensor& parameter);
  // Registers the member tensor `buffer` under `name` as a buffer (see buffers()). It must be defined, not require
  // grad, and be a direct member, as a parameter. Names are shared with parameters and submodules: no two alike.
  void register_buffer(const std::string& name, Tensor& buffer);
  // Registers the member `module` (a std::shared_ptr<M> with M derived from Module, not null) under `name`; as for
  // parameters, it must be a direct member.
  template <class M>
  void register_module(const std::string& name, std::shared_ptr<M>& module);
  // Registers a child owned by the registry itself (containers such as Sequential); reach it through children().
  void register_module(const std::string& name, std::shared_ptr<Module>&& module);

  // Direct children by registration index (no copies of the whole list), for containers.
  size_t child_count() const { return module_slots_.size(); }
  std::shared_ptr<Module> child(size_t index) const;

  // The bytes of the object this module is, where known (Note [Member slots]); members must lie inside them.
  struct ObjectExtent {
    const char* begin;
    size_t size;
  };
  virtual std::optional<ObjectExtent> object_extent() const { return std::nullopt; }
  // Throws unless `actual` is `expected` (a Cloneable<X> reached from a class derived from X).
  void check_clone_type(const std::type_info& actual, const std::type_info& expected, const char* caller) const;

 private:
  template <class Derived>
  friend class Cloneable;

  struct ParameterSlot {  // a parameter's or a buffer's
    std::string name;
    std::ptrdiff_t offset;  // of the Tensor member from this Module subobject
  };
  struct ModuleSlot {
    std::string name;
    std::ptrdiff_t offset = 0;  // of the std::shared_ptr<M> member (member slots only)
    std::shared_ptr<Module> (*get)(const void* member) = nullptr;  // null: an owned child, kept in `owned`
    bool (*set)(void* member, std::shared_ptr<Module> module) = nullptr;  // false when the type does not fit
    std::shared_ptr<Module> owned;
  };

  // Copy-constructs the dynamic type (Cloneable overrides it); throws Error naming `caller` here.
  virtual std::shared_ptr<Module> shallow_copy(const char* caller) const;

  // The offset of `member` (of `member_size` bytes) from this Module subobject; throws unless it lies inside the
  // object (where its extent is known) naming `what` ("parameter", "submodule") `name` and `caller`.
  std::ptrdiff_t member_offset(const void* member, size_t member_size, const char* what, const std::string& name,
                               const char* caller) const;
  Tensor& parameter_at(const ParameterSlot& slot) const;
  std::shared_ptr<Module> module_at(const ModuleSlot& slot) const;
  void replace_module(ModuleSlot& slot, std::shared_ptr<Module> module);
  void check_new_name(const std::string& name, const char* caller) const;
  void add_module_slot(ModuleSlot slot);
  // Which registered tensors a walk over the tree collects.
  struct TensorKinds {
    bool parameters;
    bool buffers;
  };
  // A registered tensor member reached by a walk: its full name and the member itself.
  struct Member {
    std::string name;
    Tensor* tensor;
    bool parameter;  // false: a buffer
  };
  void collect_members(const std::string& prefix, TensorKinds kinds, std::vector<Member>& out) const;
  // The members of `kinds` grouped by the tensor they hold (Note [Shared parameters]): one group per distinct tensor,
  // in the order of first appearance, each in walk order. Throws Error naming `caller` for a tensor that is a
  // parameter in one member and a buffer in another.
  std::vector<std::vector<Member>> shared_members(TensorKinds kinds, const char* caller) const;
  void collect_training_modes(std::vector<bool>& out) const;
  bool apply_training_modes(const std::vector<bool>& modes, size_t& next);  // returns whether a flag changed
  struct CopiedModules;  // the copies made so far by one structural_copy, by original
  std::shared_ptr<Module> structural_copy(const char* caller, CopiedModules& copies) const;

  std::vector<ParameterSlot> parameter_slots_;
  std::vector<ParameterSlot> buffer_slots_;
  std::vector<ModuleSlot> module_slots_;
  bool training_ = true;
  std::optional<Precision> precision_;
};

// Prints the module tree like PyTorch:
//   Sequential(
//     (0): Linear(in_features=10, out_features=20, bias=true)
//     (1): Tanh()
//   )
std::ostream& operator<<(std::ostream& os, const Module& module);

// Derive user layers from Cloneable<Self> (instead of Module) to make them clonable: clone() copy-constructs Self
// and then deep-copies every registered parameter and submodule of the copy (see Note [Member slots]). Self must be
// copy-constructible; members that are not registered are copied as they are.
template <class Derived>
class Cloneable : public Module {
 private:
  std::shared_ptr<Module> shallow_copy(const char* caller) const override {
    static_assert(std::is_copy_constructible_v<Derived>,
                  "nn::Cloneable<Derived>: Derived must be copy-constructible to be cloned");
    static_assert(std::is_base_of_v<Cloneable<Derived>, Derived>,
                  "nn::Cloneable<Derived>: Derived must derive from nn::Cloneable<Derived>");
    const auto& self = static_cast<const Derived&>(*this);
    check_clone_type(typeid(self), typeid(Derived), caller);
    return std::make_shared<Derived>(self);
  }

  std::optional<ObjectExtent> object_extent() const override {
    if (typeid(*this) != typeid(Derived) && dynamic_cast<const Derived*>(this) != nullptr) return std::nullopt;
    return ObjectExtent{static_cast<const char*>(dynamic_cast<const void*>(this)), sizeof(Derived)};
  }
};

// ---- template definitions -------------------------------------------------------------------------------------

template <class M>
void Module::register_module(const std::string& name, std::shared_ptr<M>& module) {
  static_assert(std::is_base_of_v<Module, M>, "nn::Module::register_module: M must derive from nn::Module");
  check_new_name(name, "nn::Module::register_module");
  TANDEM_CHECK(module != nullptr, "nn::Module::register_module: submodule '", name, "' of ", this->name(),
               " is null");
  ModuleSlot slot;
  slot.name = name;
  slot.offset = member_offset(&module, sizeof(module), "submodule", name, "nn::Module::register_module");
  slot.get = [](const void* member) -> std::shared_ptr<Module> {
    return *static_cast<const std::shared_ptr<M>*>(member);
  };
  slot.set = [](void* member, std::shared_ptr<Module> value) -> bool {
    std::shared_ptr<M> typed = std::dynamic_pointer_cast<M>(std::move(value));
    if (!typed) return false;
    *static_cast<std::shared_ptr<M>*>(member) = std::move(typed);
    return true;
  };
  add_module_slot(std::move(slot));
}

}  // namespace tandem::nn
