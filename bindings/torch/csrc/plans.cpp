#include "plans.hpp"

#include "metrics.hpp"

#include <ATen/ops/empty.h>
#include <ATen/ops/scalar_tensor.h>
#include <c10/util/Exception.h>

#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <unordered_map>
#include <utility>
#include <vector>

namespace hal_torch {

// ---- tensors --------------------------------------------------------------------------------

std::optional<hal_dtype_t> hal_dtype(at::ScalarType type) {
  switch (type) {
    case at::kFloat:
      return HAL_DTYPE_F32;
    case at::kHalf:
      return HAL_DTYPE_F16;
    case at::kBFloat16:
      return HAL_DTYPE_BF16;
    case at::kDouble:
      return HAL_DTYPE_F64;
    case at::kInt:
      return HAL_DTYPE_I32;
    case at::kLong:
      return HAL_DTYPE_I64;
    case at::kChar:
      return HAL_DTYPE_I8;
    case at::kByte:
      return HAL_DTYPE_U8;
    case at::kBool:
      return HAL_DTYPE_BOOL;
    default:
      return std::nullopt;
  }
}

std::optional<hal_tensor_desc_t> describe(const at::Tensor& t, at::IntArrayRef sizes,
                                          at::IntArrayRef strides) {
  const std::optional<hal_dtype_t> dtype = hal_dtype(t.scalar_type());
  if (!dtype || sizes.size() > HAL_TENSOR_MAX_RANK || sizes.size() != strides.size()) {
    return std::nullopt;
  }
  hal_tensor_desc_t desc{};
  desc.dtype = *dtype;
  desc.rank = static_cast<uint32_t>(sizes.size());
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (strides[d] < 0) return std::nullopt;  // HAL strides are >= 0
    desc.shape[d] = sizes[d];
    desc.strides[d] = strides[d];
  }
  return desc;
}

std::optional<hal_tensor_desc_t> describe(const at::Tensor& t) {
  return describe(t, t.sizes(), t.strides());
}

hal_tensor_desc_t layout(const at::Tensor& t, at::IntArrayRef sizes, at::IntArrayRef strides) {
  const std::optional<hal_tensor_desc_t> desc = describe(t, sizes, strides);
  TORCH_INTERNAL_ASSERT(desc.has_value(), "hal: no HAL layout for a ", t.scalar_type(),
                        " tensor of sizes ", sizes, " and strides ", strides);
  return *desc;
}

hal_tensor_desc_t layout(const at::Tensor& t) {
  return layout(t, t.sizes(), t.strides());
}

namespace {
// [first byte, one past the last byte] that |t| reaches; empty for numel 0.
std::pair<uintptr_t, uintptr_t> byte_range(const at::Tensor& t) {
  if (!t.defined() || t.numel() == 0) return {0, 0};
  const auto base = reinterpret_cast<uintptr_t>(t.const_data_ptr());
  int64_t last = 0;
  for (int64_t d = 0; d < t.dim(); ++d) last += (t.size(d) - 1) * t.stride(d);
  return {base, base + static_cast<uintptr_t>((last + 1) * static_cast<int64_t>(t.itemsize()))};
}
}  // namespace

bool memory_overlaps(const at::Tensor& t, const at::Tensor& u) {
  const auto [a0, a1] = byte_range(t);
  const auto [b0, b1] = byte_range(u);
  return a0 < a1 && b0 < b1 && a0 < b1 && b0 < a1;
}

bool same_view(const at::Tensor& t, const at::Tensor& u) {
  return t.const_data_ptr() == u.const_data_ptr() && t.scalar_type() == u.scalar_type() &&
         t.sizes() == u.sizes() && t.strides() == u.strides();
}

// ---- plans ----------------------------------------------------------------------------------

namespace {

constexpr size_t kPlansPerDevice = 4096;

struct Entry {
  std::string key;
  std::unique_ptr<Plan> plan;  // null when declined
  std::string decline;
};

class PlanCache {
 public:
  PlanResult find_or_plan(c10::DeviceIndex device, const hal_op_header_t& desc,
                          std::span<const std::byte> extra, const hal_op_header_t& key_desc) {
    std::string key(reinterpret_cast<const char*>(&key_desc), key_desc.struct_size);
    key.append(reinterpret_cast<const char*>(extra.data()), extra.size());
    std::lock_guard<std::mutex> lock(mutex_);
    auto found = index_.find(key);
    if (found != index_.end()) {
      lru_.splice(lru_.begin(), lru_, found->second);  // most recent first
      ++g_plan_cache_hits;
      return result(*found->second);
    }
    Entry entry;
    entry.key = key;
    hal_op_plan_t handle = nullptr;
    const hal_result_t created = hal_op_plan_create(device_handle(device), &desc, 0, &handle);
    if (created == HAL_SUCCESS) {
      hal_op_plan_info_t info{};
      info.struct_size = sizeof info;
      check(hal_op_plan_get_info(handle, &info), "describing a hal op plan");
      entry.plan = std::make_unique<Plan>();
      entry.plan->handle = handle;
      entry.plan->operand_count = info.operand_count;
      entry.plan->scalar_count = info.scalar_count;
      entry.plan->workspace_bytes = info.workspace_bytes;
      entry.plan->implementation = info.implementation;
      ++g_plans_created;
    } else if (created == HAL_ERROR_UNSUPPORTED || created == HAL_ERROR_INVALID_ARGUMENT) {
      entry.decline = hal_error_message(created, "HAL declined the plan");
    } else {
      raise_hal_error(created, "planning a hal op");
    }
    lru_.push_front(std::move(entry));
    index_.emplace(lru_.front().key, lru_.begin());
    if (lru_.size() > kPlansPerDevice) {
      Entry& oldest = lru_.back();
      if (oldest.plan) hal_op_plan_destroy(oldest.plan->handle);  // enqueued runs complete
      index_.erase(oldest.key);
      lru_.pop_back();
    }
    return result(lru_.front());
  }

  void clear() {
    std::lock_guard<std::mutex> lock(mutex_);
    for (Entry& entry : lru_) {
      if (entry.plan) hal_op_plan_destroy(entry.plan->handle);
    }
    lru_.clear();
    index_.clear();
  }

  size_t size() {
    std::lock_guard<std::mutex> lock(mutex_);
    return lru_.size();
  }

 private:
  static PlanResult result(const Entry& entry) {
    PlanResult r;
    r.plan = entry.plan.get();
    r.decline = entry.plan ? nullptr : &entry.decline;
    return r;
  }

  std::mutex mutex_;
  std::list<Entry> lru_;
  std::unordered_map<std::string, std::list<Entry>::iterator> index_;
};

std::vector<std::unique_ptr<PlanCache>>& caches() {
  static auto* const instance = [] {
    auto* v = new std::vector<std::unique_ptr<PlanCache>>;
    for (int i = 0; i < device_count(); ++i) v->push_back(std::make_unique<PlanCache>());
    return v;
  }();
  return *instance;
}

}  // namespace

PlanResult plan_for(c10::DeviceIndex device, const hal_op_header_t& desc,
                    std::span<const std::byte> extra, const hal_op_header_t* key) {
  check_device_index(device);
  return caches()[static_cast<size_t>(device)]->find_or_plan(device, desc, extra,
                                                             key != nullptr ? *key : desc);
}

void execute(c10::DeviceIndex device, const Plan& plan, std::span<void* const> operands,
             std::span<const hal_op_scalar_t> scalars, const char* op) {
  TORCH_INTERNAL_ASSERT(
      operands.size() == plan.operand_count && scalars.size() == plan.scalar_count, "hal: ", op,
      " gave ", operands.size(), " operands and ", scalars.size(), " scalars to a plan taking ",
      plan.operand_count, " and ", plan.scalar_count);
  hal_op_exec_args_t args{};
  args.struct_size = sizeof args;
  args.operand_count = static_cast<uint32_t>(operands.size());
  args.scalar_count = static_cast<uint32_t>(scalars.size());
  args.operands = operands.data();
  args.scalars = scalars.data();
  at::Tensor workspace;
  if (plan.workspace_bytes > 0) {
    workspace = at::empty({static_cast<int64_t>(plan.workspace_bytes)},
                          at::TensorOptions().dtype(at::kByte).device(kHalDeviceType, device));
    args.workspace = workspace.data_ptr();
    args.workspace_bytes = plan.workspace_bytes;
  }
  const hal_result_t result = hal_op_execute(plan.handle, &args, current_hal_stream(device));
  if (result != HAL_SUCCESS) raise_hal_error(result, std::string("hal ") + op);
  // |workspace| is freed here, in stream order: the next user on this stream runs after the op.
}

void clear_plan_cache() {
  for (auto& cache : caches()) cache->clear();
}

size_t plan_cache_size() {
  size_t total = 0;
  for (auto& cache : caches()) total += cache->size();
  return total;
}

// ---- scalars on the device ------------------------------------------------------------------

namespace {

constexpr size_t kMaxConstants = 4096;

struct ConstantTable {
  std::mutex mutex;
  std::map<std::tuple<c10::DeviceIndex, at::ScalarType, uint64_t>, at::Tensor> values;
};

ConstantTable& constants() {
  static auto* const instance = new ConstantTable;
  return *instance;
}

}  // namespace

at::Tensor device_constant(c10::DeviceIndex device, at::ScalarType dtype, double value) {
  uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof bits);
  ConstantTable& table = constants();
  std::lock_guard<std::mutex> lock(table.mutex);
  const auto key = std::make_tuple(device, dtype, bits);
  if (auto found = table.values.find(key); found != table.values.end()) return found->second;
  if (table.values.size() >= kMaxConstants) {
    // Full: wait until no stream can still read one, then start over.
    for (int i = 0; i < device_count(); ++i) {
      hal_device_synchronize(device_handle(static_cast<c10::DeviceIndex>(i)));
    }
    table.values.clear();
  }
  const at::Tensor host = at::scalar_tensor(value, at::TensorOptions().dtype(dtype));
  at::Tensor constant =
      at::empty({}, at::TensorOptions().dtype(dtype).device(kHalDeviceType, device));
  hal_stream_t stream = current_hal_stream(device);
  check(hal_memcpy_async(constant.data_ptr(), host.const_data_ptr(), host.nbytes(), stream),
        "copying a constant to the device");
  check(hal_stream_synchronize(stream), "copying a constant to the device");
  table.values.emplace(key, constant);
  return constant;
}

}  // namespace hal_torch
