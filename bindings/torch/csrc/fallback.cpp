#include "fallback.hpp"

#include "copy.hpp"
#include "generator.hpp"
#include "metrics.hpp"
#include "runtime.hpp"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>
#include <ATen/ops/zeros.h>
#include <c10/core/CPUAllocator.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace hal_torch {
namespace {

FallbackMode mode_from_environment() {
  const char* value = std::getenv("HAL_TORCH_FALLBACK");
  if (value == nullptr || *value == '\0') return FallbackMode::kWarn;
  const std::string_view v(value);
  if (v == "warn") return FallbackMode::kWarn;
  if (v == "silent") return FallbackMode::kSilent;
  if (v == "error") return FallbackMode::kError;
  TORCH_WARN("HAL_TORCH_FALLBACK=", v, " is not one of warn, silent, error: using warn");
  return FallbackMode::kWarn;
}

std::atomic<FallbackMode>& mode() {
  static std::atomic<FallbackMode> instance{mode_from_environment()};
  return instance;
}

thread_local std::string t_reason;

std::string op_name(const c10::OperatorHandle& op) {
  const c10::OperatorName& name = op.schema().operator_name();
  return name.overload_name.empty() ? name.name : name.name + "." + name.overload_name;
}

// Each op's counter, found once per OperatorHandle.
OpCounter& counter_for(const c10::OperatorHandle& op, const std::string& name) {
  static std::mutex mutex;
  static auto* const by_op = new std::unordered_map<const void*, OpCounter*>;
  const void* key = &op.schema();
  std::lock_guard<std::mutex> lock(mutex);
  auto found = by_op->find(key);
  if (found != by_op->end()) return *found->second;
  OpCounter& counter = op_counter(name);
  by_op->emplace(key, &counter);
  return counter;
}

void warn_once(const std::string& name, const std::string& reason) {
  static std::mutex mutex;
  static auto* const warned = new std::set<std::string>;
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (!warned->insert(name).second) return;
  }
  TORCH_WARN("hal: ", name, " ran on the CPU through the fallback (",
             reason.empty() ? "no hal kernel" : reason,
             "); HAL_TORCH_FALLBACK=silent hides this, =error forbids it; "
             "hal_torch.metrics() counts every such call");
}

bool is_generator_argument(const c10::Argument& argument) {
  const c10::TypePtr& type = argument.type();
  if (type->kind() == c10::TypeKind::GeneratorType) return true;
  if (const auto optional = type->cast<c10::OptionalType>()) {
    return optional->getElementType()->kind() == c10::TypeKind::GeneratorType;
  }
  return false;
}

uint64_t mix(uint64_t seed, uint64_t offset) {
  // splitmix64 of (seed, offset): distinct CPU generator seeds per reservation.
  uint64_t z = seed + 0x9E3779B97F4A7C15ull * (offset + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// One fallback call: how its device tensors reached the host.
class Call {
 public:
  explicit Call(OpCounter& counter) : counter_(counter) {}

  // The op's device: the first hal tensor's, else a hal Device argument's.
  void note_device(const c10::Device& device) {
    if (!target_ && device.type() == kHalDeviceType) {
      target_ = c10::Device(kHalDeviceType, index_of(device));
    }
  }
  const std::optional<c10::Device>& target() const { return target_; }

  at::Tensor to_host(const at::Tensor& t) {
    if (!t.defined() || t.device().type() != kHalDeviceType) return t;
    const c10::DeviceIndex index = t.device().index();
    synchronize(index);
    at::Tensor host;
    if (device_state(index).host_accessible) {
      host = alias(t);
      counter_.bytes_aliased += static_cast<int64_t>(t.nbytes());
    } else {
      host = copy_to_host(t);
      counter_.bytes_to_host += static_cast<int64_t>(t.nbytes());
    }
    converted_.push_back({t, host, host.storage().unsafeGetStorageImpl(), host.storage().data()});
    return host;
  }

  // After the CPU kernel: the mutated argument |host| (from to_host) back into its device tensor.
  void write_back(const at::Tensor& host) {
    const Converted* c = find(host);
    if (c == nullptr) return;
    const at::Tensor& device = c->device;
    const bool same_memory = host.storage().unsafeGetStorageImpl() == c->host_storage &&
                             host.storage().data() == c->host_data;
    if (same_memory && device_state(device.device().index()).host_accessible) {
      // Written in place; only the metadata may have changed (a resize that shrank).
      if (host.sizes() != device.sizes() || host.strides() != device.strides() ||
          host.storage_offset() != device.storage_offset()) {
        device.unsafeGetTensorImpl()->set_sizes_and_strides(host.sizes(), host.strides(),
                                                            host.storage_offset());
      }
      return;
    }
    if (host.sizes() != device.sizes()) device.resize_(host.sizes());
    copy_host_to_device(host, device);
    counter_.bytes_to_device += static_cast<int64_t>(host.nbytes());
  }

  // A result of the CPU kernel as a tensor of the op's device.
  at::Tensor to_device(const at::Tensor& host) {
    if (!host.defined() || !host.device().is_cpu() || !target_) return host;
    if (host.layout() != c10::kStrided) {
      // Sparse and other layouts: hal tensors are strided; torch says what it cannot do.
      return host.to(*target_);
    }
    if (host._is_zerotensor()) return at::zeros(host.sizes(), host.options().device(*target_));
    if (const Converted* c = find(host)) return c->device;  // an in-place op's self
    // A view of an aliased input: the same view of the device memory.
    for (const Converted& c : converted_) {
      if (host.storage().unsafeGetStorageImpl() == c.host_storage &&
          host.storage().data() == c.host_data &&
          device_state(c.device.device().index()).host_accessible) {
        at::Tensor view = at::detail::make_tensor<c10::TensorImpl>(
            c10::Storage(c.device.storage()), c.device.key_set(), host.dtype());
        view.unsafeGetTensorImpl()->set_sizes_and_strides(host.sizes(), host.strides(),
                                                          host.storage_offset());
        return view;
      }
    }
    const c10::DeviceIndex index = target_->index();
    synchronize(index);
    const c10::DeviceIndex previous = current_device();
    set_current_device(index);
    at::Tensor device =
        host.is_non_overlapping_and_dense()
            ? at::empty_strided(host.sizes(), host.strides(), host.options().device(*target_))
            : at::empty(host.sizes(), host.options().device(*target_));
    set_current_device_unchecked(previous);
    copy_host_to_device(host, device);
    counter_.bytes_to_device += static_cast<int64_t>(host.nbytes());
    return device;
  }

 private:
  struct Converted {
    at::Tensor device;
    at::Tensor host;
    c10::StorageImpl* host_storage;
    const void* host_data;
  };

  const Converted* find(const at::Tensor& host) const {
    for (const Converted& c : converted_) {
      if (c.host.unsafeGetTensorImpl() == host.unsafeGetTensorImpl()) return &c;
    }
    return nullptr;
  }

  void synchronize(c10::DeviceIndex index) {
    if (!synchronized_.insert(index).second) return;
    check(hal_stream_synchronize(current_hal_stream(index)), "the CPU fallback waiting for hal");
  }

  // A CPU tensor over the device memory itself: one host storage per device
  // storage, so arguments that share memory still share it on the host.
  at::Tensor alias(const at::Tensor& t) {
    c10::StorageImpl* impl = t.storage().unsafeGetStorageImpl();
    auto found = host_storages_.find(impl);
    if (found == host_storages_.end()) {
      void* data = t.storage().mutable_data();
      const size_t bytes = t.storage().nbytes();
      if (data != nullptr && bytes > 0) check_hal_memory(data, bytes);
      c10::Storage host_storage(c10::Storage::use_byte_size_t(), bytes,
                                c10::DataPtr(data, nullptr, &no_delete, c10::Device(c10::kCPU)),
                                c10::GetCPUAllocator(), /*resizable=*/true);
      found = host_storages_.emplace(impl, std::move(host_storage)).first;
    }
    at::Tensor host = at::empty({0}, t.options().device(c10::kCPU));
    host.set_(found->second, t.storage_offset(), t.sizes(), t.strides());
    return host;
  }

  static void no_delete(void* /*unused*/) {}

  // Host reads of memory that is not a live HAL allocation would be reads of
  // anything: a freed block or a foreign pointer wrapped as a hal tensor.
  static void check_hal_memory(const void* data, size_t bytes) {
    hal_memory_info_t info{};
    info.struct_size = sizeof info;
    const hal_result_t result = hal_mem_get_info(data, &info);
    if (result != HAL_SUCCESS) {
      raise_hal_error(result, "the CPU fallback reading a hal tensor (freed or foreign memory?)");
    }
    const auto* begin = static_cast<const char*>(data);
    const auto* base = static_cast<const char*>(info.base);
    TORCH_CHECK_VALUE(begin + bytes <= base + info.size, "hal: a tensor's storage of ", bytes,
                      " bytes runs past its ", info.size, "-byte HAL allocation");
  }

  OpCounter& counter_;
  std::optional<c10::Device> target_;
  std::set<c10::DeviceIndex> synchronized_;
  std::map<c10::StorageImpl*, c10::Storage> host_storages_;
  std::vector<Converted> converted_;
};

bool is_write(const c10::Argument& argument) {
  return argument.alias_info() != nullptr && argument.alias_info()->isWrite();
}

}  // namespace

FallbackMode fallback_mode() {
  return mode().load();
}
void set_fallback_mode(FallbackMode m) {
  mode().store(m);
}
void set_fallback_reason(std::string reason) {
  t_reason = std::move(reason);
}

void fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const auto started = std::chrono::steady_clock::now();
  const std::string name = op_name(op);
  std::string reason = std::exchange(t_reason, std::string());
  OpCounter& counter = counter_for(op, name);
  switch (fallback_mode()) {
    case FallbackMode::kError:
      TORCH_CHECK_NOT_IMPLEMENTED(false, "hal: ", name, " has no hal kernel",
                                  reason.empty() ? "" : " (" + reason + ")",
                                  " and HAL_TORCH_FALLBACK=error forbids running it on the CPU");
    case FallbackMode::kWarn:
      warn_once(name, reason);
      break;
    case FallbackMode::kSilent:
      break;
  }
  ++counter.fallback;

  const c10::FunctionSchema& schema = op.schema();
  const size_t argument_count = schema.arguments().size();
  const size_t first = stack->size() - argument_count;
  Call call(counter);

  // Pass 1: the op's device.
  for (size_t i = 0; i < argument_count; ++i) {
    const c10::IValue& value = (*stack)[first + i];
    if (value.isTensor()) {
      if (value.toTensor().defined()) call.note_device(value.toTensor().device());
    } else if (value.isTensorList()) {
      for (const at::Tensor& t : value.toTensorList().vec()) call.note_device(t.device());
    } else if (value.isOptionalTensorList()) {
      for (const auto& t : value.toOptionalTensorList().vec()) {
        if (t.has_value() && t->defined()) call.note_device(t->device());
      }
    } else if (value.isDevice()) {
      call.note_device(value.toDevice());
    }
  }

  // Pass 2: device tensors, devices and generators for the CPU kernel.
  for (size_t i = 0; i < argument_count; ++i) {
    c10::IValue& value = (*stack)[first + i];
    const c10::Argument& argument = schema.arguments()[i];
    if (value.isTensor()) {
      value = call.to_host(value.toTensor());
    } else if (value.isTensorList()) {
      c10::List<at::Tensor> list = value.toTensorList();
      std::vector<at::Tensor> host;
      for (const at::Tensor& t : list.vec()) host.push_back(call.to_host(t));
      value = c10::List<at::Tensor>(host);
    } else if (value.isOptionalTensorList()) {
      std::vector<std::optional<at::Tensor>> host;
      for (const auto& t : value.toOptionalTensorList().vec()) {
        host.push_back(t.has_value() ? std::optional<at::Tensor>(call.to_host(*t)) : std::nullopt);
      }
      value = c10::List<std::optional<at::Tensor>>(host);
    } else if (value.isDevice() && value.toDevice().type() == kHalDeviceType) {
      value = c10::Device(c10::kCPU);
    } else if (is_generator_argument(argument) && call.target()) {
      std::optional<at::Generator> given;
      if (value.isGenerator()) given = value.toGenerator();
      if (!given || given->device().type() == kHalDeviceType) {
        HalGenerator* generator = generator_or_default(given, call.target()->index());
        std::lock_guard<std::mutex> lock(generator->mutex_);
        const auto [seed, offset] = generator->reserve(4);
        value = at::make_generator<at::CPUGeneratorImpl>(mix(seed, offset));
      }
    }
  }

  // Keep the host arguments: the kernel pops them from the stack.
  const std::vector<c10::IValue> host_arguments(stack->begin() + static_cast<ptrdiff_t>(first),
                                                stack->end());
  op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), stack);

  for (size_t i = 0; i < argument_count; ++i) {
    if (!is_write(schema.arguments()[i])) continue;
    const c10::IValue& value = host_arguments[i];
    if (value.isTensor()) {
      call.write_back(value.toTensor());
    } else if (value.isTensorList()) {
      for (const at::Tensor& t : value.toTensorList().vec()) call.write_back(t);
    }
  }

  const size_t return_count = schema.returns().size();
  const size_t returns_first = stack->size() - return_count;
  for (size_t i = 0; i < return_count; ++i) {
    c10::IValue& value = (*stack)[returns_first + i];
    if (value.isTensor()) {
      value = call.to_device(value.toTensor());
    } else if (value.isTensorList()) {
      std::vector<at::Tensor> device;
      for (const at::Tensor& t : value.toTensorList().vec()) device.push_back(call.to_device(t));
      value = c10::List<at::Tensor>(device);
    }
  }
  counter.fallback_ns += std::chrono::duration_cast<std::chrono::nanoseconds>(
                             std::chrono::steady_clock::now() - started)
                             .count();
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&fallback>());
}

}  // namespace hal_torch
