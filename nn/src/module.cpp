#include "tandem/nn/module.h"

#include <cxxabi.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <ostream>
#include <sstream>
#include <unordered_map>

#include "tandem/core/autograd.h"
#include "tandem/core/grad_mode.h"
#include "tandem/core/shape.h"

namespace tandem::nn {
namespace {

// "tandem::nn::Linear" -> "Linear"; namespaces inside template arguments are kept.
std::string unqualified(const std::string& name) {
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i < name.size(); ++i) {
    if (name[i] == '<') ++depth;
    if (name[i] == '>') --depth;
    if (depth == 0 && name.compare(i, 2, "::") == 0) start = i + 2;
  }
  return name.substr(start);
}

std::string demangle(const char* mangled) {
  int status = 0;
  char* demangled = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
  std::string result = status == 0 && demangled != nullptr ? demangled : mangled;
  std::free(demangled);
  return result;
}

// A detached copy of `tensor` (a parameter or a buffer) on `device` (a fresh one even when it is already there), a
// leaf that requires grad as the original does (frozen parameters stay frozen, buffers never require grad).
Tensor copy_leaf(const Tensor& tensor, std::optional<Device> device) {
  Tensor detached = tensor.detach();
  Tensor copy = !device || *device == tensor.device() ? detached.clone() : detached.to(*device);
  copy.set_requires_grad(tensor.requires_grad());
  return copy;
}

void print_tree(std::ostream& os, const Module& module, const std::string& indent) {
  os << module.name() << "(" << module.extra_repr();
  auto children = module.named_children();
  if (children.empty()) {
    os << ")";
    return;
  }
  os << "\n";
  for (const auto& [name, child] : children) {
    os << indent << "  (" << name << "): ";
    print_tree(os, *child, indent + "  ");
    os << "\n";
  }
  os << indent << ")";
}

}  // namespace

std::string Module::name() const { return unqualified(demangle(typeid(*this).name())); }

// ---- registration ---------------------------------------------------------------------------------------------

std::ptrdiff_t Module::member_offset(const void* member, size_t member_size, const char* what,
                                     const std::string& name, const char* caller) const {
  const char* address = static_cast<const char*>(member);
  if (const std::optional<ObjectExtent> extent = object_extent()) {
    // Compared as integers: pointers into different objects have no order in C++.
    const auto begin = reinterpret_cast<std::uintptr_t>(extent->begin);
    const auto at = reinterpret_cast<std::uintptr_t>(address);
    TANDEM_CHECK(at >= begin && at - begin <= extent->size && member_size <= extent->size - (at - begin), caller,
                 ": ", what, " '", name, "' of ", this->name(), " is not a member of the ", this->name(),
                 " object; register only direct members (see Note [Member slots])");
  }
  return address - reinterpret_cast<const char*>(this);
}

Tensor& Module::parameter_at(const ParameterSlot& slot) const {
  auto* base = const_cast<char*>(reinterpret_cast<const char*>(this));
  return *reinterpret_cast<Tensor*>(base + slot.offset);
}

std::shared_ptr<Module> Module::module_at(const ModuleSlot& slot) const {
  if (!slot.get) return slot.owned;
  std::shared_ptr<Module> module = slot.get(reinterpret_cast<const char*>(this) + slot.offset);
  TANDEM_CHECK(module != nullptr, "nn::Module: submodule '", slot.name, "' of ", name(), " is null");
  return module;
}

void Module::replace_module(ModuleSlot& slot, std::shared_ptr<Module> module) {
  if (!slot.get) {
    slot.owned = std::move(module);
    return;
  }
  std::string replacement = module->name();
  TANDEM_CHECK(slot.set(reinterpret_cast<char*>(this) + slot.offset, std::move(module)), "nn::Module: a ",
               replacement, " does not fit the member slot of submodule '", slot.name, "' of ", name());
}

void Module::check_new_name(const std::string& name, const char* caller) const {
  TANDEM_CHECK(!name.empty(), caller, ": empty name in ", this->name());
  TANDEM_CHECK(name.find('.') == std::string::npos, caller, ": name '", name, "' in ", this->name(),
               " contains '.', which separates the parts of parameter names");
  for (const auto& slot : parameter_slots_)
    TANDEM_CHECK(slot.name != name, caller, ": ", this->name(), " already has a parameter named '", name, "'");
  for (const auto& slot : buffer_slots_)
    TANDEM_CHECK(slot.name != name, caller, ": ", this->name(), " already has a buffer named '", name, "'");
  for (const auto& slot : module_slots_)
    TANDEM_CHECK(slot.name != name, caller, ": ", this->name(), " already has a submodule named '", name, "'");
}

void Module::register_parameter(const std::string& name, Tensor& parameter) {
  check_new_name(name, "nn::Module::register_parameter");
  TANDEM_CHECK(parameter.defined(), "nn::Module::register_parameter: parameter '", name, "' of ", this->name(),
               " is undefined");
  TANDEM_CHECK(parameter.is_leaf(), "nn::Module::register_parameter: parameter '", name, "' of ", this->name(),
               " is the result of an operation, but parameters must be leaf tensors (detach() it)");
  const std::ptrdiff_t offset =
      member_offset(&parameter, sizeof(parameter), "parameter", name, "nn::Module::register_parameter");
  parameter.set_requires_grad(true);
  parameter_slots_.push_back({name, offset});
}

void Module::register_buffer(const std::string& name, Tensor& buffer) {
  check_new_name(name, "nn::Module::register_buffer");
  TANDEM_CHECK(buffer.defined(), "nn::Module::register_buffer: buffer '", name, "' of ", this->name(),
               " is undefined");
  TANDEM_CHECK(!buffer.requires_grad(), "nn::Module::register_buffer: buffer '", name, "' of ", this->name(),
               " requires grad, but buffers are not trained (register it as a parameter, or detach() it)");
  const std::ptrdiff_t offset = member_offset(&buffer, sizeof(buffer), "buffer", name, "nn::Module::register_buffer");
  buffer_slots_.push_back({name, offset});
}

void Module::register_module(const std::string& name, std::shared_ptr<Module>&& module) {
  check_new_name(name, "nn::Module::register_module");
  TANDEM_CHECK(module != nullptr, "nn::Module::register_module: submodule '", name, "' of ", this->name(),
               " is null");
  ModuleSlot slot;
  slot.name = name;
  slot.owned = std::move(module);
  module_slots_.push_back(std::move(slot));
}

void Module::add_module_slot(ModuleSlot slot) { module_slots_.push_back(std::move(slot)); }

std::shared_ptr<Module> Module::child(size_t index) const {
  TANDEM_CHECK(index < module_slots_.size(), "nn::Module::child: index ", index, " is out of range for ", name(),
               " with ", module_slots_.size(), " children");
  return module_at(module_slots_[index]);
}

// ---- queries --------------------------------------------------------------------------------------------------

// Every parameter or buffer member of this module and its descendants: for each module in pre-order, its own
// parameters, then its own buffers, then its children's.
void Module::collect_members(const std::string& prefix, TensorKinds kinds, std::vector<Member>& out) const {
  if (kinds.parameters)
    for (const auto& slot : parameter_slots_) out.push_back({prefix + slot.name, &parameter_at(slot), true});
  if (kinds.buffers)
    for (const auto& slot : buffer_slots_) out.push_back({prefix + slot.name, &parameter_at(slot), false});
  for (const auto& slot : module_slots_) module_at(slot)->collect_members(prefix + slot.name + ".", kinds, out);
}

std::vector<std::vector<Module::Member>> Module::shared_members(TensorKinds kinds, const char* caller) const {
  std::vector<Member> members;
  collect_members("", kinds, members);
  std::vector<std::vector<Member>> groups;
  std::unordered_map<const TensorImpl*, size_t> group_of;
  for (Member& member : members) {
    const auto [found, fresh] = group_of.try_emplace(member.tensor->impl(), groups.size());
    if (fresh) {
      groups.emplace_back();
    } else {
      const Member& first = groups[found->second].front();
      TANDEM_CHECK(first.parameter == member.parameter, caller, ": '", first.name, "' is a ",
                   first.parameter ? "parameter" : "buffer", " of ", name(), " and '", member.name, "' a ",
                   member.parameter ? "parameter" : "buffer",
                   ", but they are one tensor; a tensor is either trained or not (Note [Shared parameters])");
    }
    groups[found->second].push_back(std::move(member));
  }
  return groups;
}

namespace {

// Each group's first member by name, as named_parameters() and named_buffers() list them.
template <class Groups>
std::vector<std::pair<std::string, Tensor>> first_names(const Groups& groups) {
  std::vector<std::pair<std::string, Tensor>> out;
  out.reserve(groups.size());
  for (const auto& group : groups) out.emplace_back(group.front().name, *group.front().tensor);
  return out;
}

}  // namespace

std::vector<std::pair<std::string, Tensor>> Module::named_parameters() const {
  return first_names(shared_members({.parameters = true, .buffers = false}, "nn::Module::named_parameters"));
}

std::vector<std::pair<std::string, Tensor>> Module::named_buffers() const {
  return first_names(shared_members({.parameters = false, .buffers = true}, "nn::Module::named_buffers"));
}

std::vector<std::pair<std::string, Tensor>> Module::state_dict() const {
  std::vector<Member> members;
  collect_members("", {.parameters = true, .buffers = true}, members);
  std::vector<std::pair<std::string, Tensor>> out;
  out.reserve(members.size());
  for (Member& member : members) out.emplace_back(std::move(member.name), *member.tensor);
  return out;
}

std::vector<Module::StateTensor> Module::state_tensors() const {
  std::vector<StateTensor> out;
  for (std::vector<Member>& group :
       shared_members({.parameters = true, .buffers = true}, "nn::Module::state_tensors")) {
    StateTensor& entry = out.emplace_back();
    entry.tensor = *group.front().tensor;
    for (Member& member : group) entry.names.push_back(std::move(member.name));
  }
  return out;
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& named : named_parameters()) out.push_back(std::move(named.second));
  return out;
}

std::vector<Tensor> Module::buffers() const {
  std::vector<Tensor> out;
  for (auto& named : named_buffers()) out.push_back(std::move(named.second));
  return out;
}

std::vector<std::pair<std::string, std::shared_ptr<Module>>> Module::named_children() const {
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> out;
  for (const auto& slot : module_slots_) out.emplace_back(slot.name, module_at(slot));
  return out;
}

std::vector<std::shared_ptr<Module>> Module::children() const {
  std::vector<std::shared_ptr<Module>> out;
  for (const auto& slot : module_slots_) out.push_back(module_at(slot));
  return out;
}

int64_t Module::num_parameters() const {
  int64_t total = 0;
  for (const auto& parameter : parameters()) total += parameter.numel();
  return total;
}

Device Module::device() const {
  std::vector<Tensor> all = parameters();
  TANDEM_CHECK(!all.empty(), "nn::Module::device: ", name(), " has no parameters");
  return all.front().device();
}

// ---- state ----------------------------------------------------------------------------------------------------

void Module::to(Device device) {
  NoGradGuard no_grad;
  struct Move {
    Tensor parameter;
    Tensor data;  // on `device`
    Tensor grad;  // on `device`, or undefined
  };
  std::vector<Move> moves;
  for (const auto& [names, parameter] : state_tensors()) {  // a shared tensor once (Note [Shared parameters])
    if (parameter.device() == device) continue;
    TANDEM_CHECK(parameter.is_leaf(), "nn::Module::to: parameter '", names.front(), "' of ", this->name(),
                 " is the result of ", parameter.grad_fn()->name(), " but only leaf parameters can be moved");
    const Tensor grad = parameter.grad();
    moves.push_back({parameter, parameter.detach().to(device), grad.defined() ? grad.to(device) : Tensor()});
  }
  for (const Move& move : moves) {
    move.parameter.set_grad(Tensor());
    move.parameter.set_data(move.data);
    move.parameter.set_grad(move.grad);
  }
}

void Module::zero_grad(bool set_to_none) { autograd::zero_grad(parameters(), set_to_none); }

void Module::set_precision(std::optional<Precision> precision) {
  precision_ = precision;
  for (const auto& slot : module_slots_) module_at(slot)->set_precision(precision);
}

namespace {
std::atomic<uint64_t> training_mode_changes{0};  // see Module::training_mode_generation
}  // namespace

void Module::train(bool training) { set_training_modes(std::vector<bool>(training_modes().size(), training)); }

void Module::collect_training_modes(std::vector<bool>& out) const {
  out.push_back(training_);
  for (const auto& slot : module_slots_) module_at(slot)->collect_training_modes(out);
}

std::vector<bool> Module::training_modes() const {
  std::vector<bool> modes;
  collect_training_modes(modes);
  return modes;
}

bool Module::apply_training_modes(const std::vector<bool>& modes, size_t& next) {
  bool changed = training_ != modes[next];
  training_ = modes[next++];
  for (const auto& slot : module_slots_) changed = module_at(slot)->apply_training_modes(modes, next) || changed;
  return changed;
}

void Module::set_training_modes(const std::vector<bool>& modes) {
  const size_t count = training_modes().size();
  TANDEM_CHECK(modes.size() == count, "nn::Module::set_training_modes: got ", modes.size(), " modes but ", name(),
               " has ", count, " modules (itself and its descendants)");
  size_t next = 0;
  // Release: a reader that sees the new count sees the flags written before it.
  if (apply_training_modes(modes, next)) training_mode_changes.fetch_add(1, std::memory_order_release);
}

uint64_t Module::training_mode_generation() { return training_mode_changes.load(std::memory_order_acquire); }

// ---- copies ---------------------------------------------------------------------------------------------------

std::shared_ptr<Module> Module::shallow_copy(const char* caller) const {
  TANDEM_FAIL(caller, ": ", name(), " does not derive from nn::Cloneable<", name(),
              ">; derive it from nn::Cloneable<", name(), "> instead of nn::Module to make it clonable");
}

void Module::check_clone_type(const std::type_info& actual, const std::type_info& expected,
                              const char* caller) const {
  TANDEM_CHECK(actual == expected, caller, ": ", name(), " inherits clone() from nn::Cloneable<",
               unqualified(demangle(expected.name())), ">, which would copy only that base; derive ", name(),
               " from nn::Cloneable<", name(), "> itself");
}

struct Module::CopiedModules {
  std::unordered_map<const Module*, std::shared_ptr<Module>> by_original;
};

// A copy of the whole tree whose modules are new objects (a submodule registered in several places copied once) and
// whose parameter members still share the originals.
std::shared_ptr<Module> Module::structural_copy(const char* caller, CopiedModules& copies) const {
  std::shared_ptr<Module> copy = shallow_copy(caller);
  for (auto& slot : copy->module_slots_) {
    const std::shared_ptr<Module> original = copy->module_at(slot);
    const auto found = copies.by_original.find(original.get());
    std::shared_ptr<Module> child =
        found != copies.by_original.end() ? found->second : original->structural_copy(caller, copies);
    copies.by_original.emplace(original.get(), child);
    copy->replace_module(slot, std::move(child));
  }
  return copy;
}

std::shared_ptr<Module> Module::clone(std::optional<Device> device) const {
  NoGradGuard no_grad;
  CopiedModules copies;
  std::shared_ptr<Module> copy = structural_copy("nn::Module::clone", copies);
  // The copy's members still hold the original tensors, so its groups are the original's ties.
  for (const std::vector<Member>& group :
       copy->shared_members({.parameters = true, .buffers = true}, "nn::Module::clone")) {
    const Tensor tensor = copy_leaf(*group.front().tensor, device);
    for (const Member& member : group) *member.tensor = tensor;
  }
  return copy;
}

void Module::set_parameters(const std::vector<Tensor>& parameters) {
  const std::vector<std::vector<Member>> groups =
      shared_members({.parameters = true, .buffers = false}, "nn::Module::set_parameters");
  TANDEM_CHECK(parameters.size() == groups.size(), "nn::Module::set_parameters: ", name(), " has ", groups.size(),
               " parameters but ", parameters.size(), " tensors were given");
  for (size_t i = 0; i < groups.size(); ++i) {
    const Member& parameter = groups[i].front();
    TANDEM_CHECK(parameters[i].defined(), "nn::Module::set_parameters: the tensor for '", parameter.name,
                 "' is undefined");
    TANDEM_CHECK(parameters[i].shape() == parameter.tensor->shape(), "nn::Module::set_parameters: '", parameter.name,
                 "' has shape ", to_string(parameter.tensor->shape()), " but the tensor given for it has shape ",
                 to_string(parameters[i].shape()));
  }
  for (size_t i = 0; i < groups.size(); ++i)
    for (const Member& member : groups[i]) *member.tensor = parameters[i];
}

void Module::set_buffers(const std::vector<Tensor>& buffers) {
  const std::vector<std::vector<Member>> groups =
      shared_members({.parameters = false, .buffers = true}, "nn::Module::set_buffers");
  TANDEM_CHECK(buffers.size() == groups.size(), "nn::Module::set_buffers: ", name(), " has ", groups.size(),
               " buffers but ", buffers.size(), " tensors were given");
  for (size_t i = 0; i < groups.size(); ++i) {
    const std::string& buffer_name = groups[i].front().name;
    const Tensor& buffer = *groups[i].front().tensor;
    TANDEM_CHECK(buffers[i].defined(), "nn::Module::set_buffers: the tensor for '", buffer_name, "' is undefined");
    TANDEM_CHECK(buffers[i].shape() == buffer.shape() && buffers[i].dtype() == buffer.dtype(),
                 "nn::Module::set_buffers: '", buffer_name, "' is ", buffer.dtype(), " of shape ",
                 to_string(buffer.shape()), " but the tensor given for it is ", buffers[i].dtype(), " of shape ",
                 to_string(buffers[i].shape()));
    TANDEM_CHECK(!buffers[i].requires_grad(), "nn::Module::set_buffers: the tensor for '", buffer_name,
                 "' requires grad, but buffers are not trained");
  }
  for (size_t i = 0; i < groups.size(); ++i)
    for (const Member& member : groups[i]) *member.tensor = buffers[i];
}

std::shared_ptr<Module> Module::clone_with_parameters(const std::vector<Tensor>& parameters) const {
  CopiedModules copies;
  std::shared_ptr<Module> copy = structural_copy("nn::Module::clone_with_parameters", copies);
  copy->set_parameters(parameters);
  return copy;
}

std::ostream& operator<<(std::ostream& os, const Module& module) {
  print_tree(os, module, "");
  return os;
}

}  // namespace tandem::nn
