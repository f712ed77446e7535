// aten tensors as hal_ops operands, and HAL operator plans cached per
// signature.
//
// A plan fixes shapes, strides, dtypes and options (SPEC §17.1), so a kernel
// asks plan_for(device, descriptor) every call: the descriptor's bytes are
// the key of a per-device LRU cache, the first call plans (a decline is
// cached too, with HAL's reason), later calls only look up. execute()
// enqueues on the device's current stream with a workspace from the caching
// allocator, freed in stream order.
#ifndef HAL_TORCH_PLANS_HPP_
#define HAL_TORCH_PLANS_HPP_

#include "runtime.hpp"

#include <ATen/core/Tensor.h>

#include <cstring>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <type_traits>

namespace hal_torch {

// ---- tensors --------------------------------------------------------------------------------

// HAL's dtype for |type|, nullopt when HAL has none (float64 is F64: only casts take it).
std::optional<hal_dtype_t> hal_dtype(at::ScalarType type);

inline bool is_hal_float(at::ScalarType type) {
  return type == at::kFloat || type == at::kHalf || type == at::kBFloat16;
}

// The layout of |t| (rank <= 8, a dtype HAL knows); nullopt otherwise.
std::optional<hal_tensor_desc_t> describe(const at::Tensor& t);
// The same with given sizes and strides (a view of t's memory in elements).
std::optional<hal_tensor_desc_t> describe(const at::Tensor& t, at::IntArrayRef sizes,
                                          at::IntArrayRef strides);
// As describe(t) for a tensor the caller made (must be describable).
hal_tensor_desc_t layout(const at::Tensor& t);
hal_tensor_desc_t layout(const at::Tensor& t, at::IntArrayRef sizes, at::IntArrayRef strides);

// The device pointer of |t|'s first element (nullptr for an empty tensor is fine).
inline void* operand(const at::Tensor& t) {
  return t.defined() && t.numel() > 0 ? const_cast<void*>(t.const_data_ptr()) : nullptr;
}

// True when the byte ranges t reaches and u reaches intersect.
bool memory_overlaps(const at::Tensor& t, const at::Tensor& u);
// True when |t| and |u| are the same view: pointer, dtype, sizes and strides.
bool same_view(const at::Tensor& t, const at::Tensor& u);

// ---- plans ----------------------------------------------------------------------------------

struct Plan {
  hal_op_plan_t handle = nullptr;
  uint32_t operand_count = 0;
  uint32_t scalar_count = 0;
  size_t workspace_bytes = 0;
  std::string implementation;
};

// A plan, or why HAL declined the descriptor.
struct PlanResult {
  const Plan* plan = nullptr;
  const std::string* decline = nullptr;
  explicit operator bool() const { return plan != nullptr; }
};

// |key| is the descriptor's bytes plus |extra| (array members the descriptor
// points to, e.g. AdamW's numels). The descriptor must be value-initialised
// (zero padding) so equal descriptors have equal bytes.
PlanResult plan_for(c10::DeviceIndex device, const hal_op_header_t& desc,
                    std::span<const std::byte> extra = {}, const hal_op_header_t* key = nullptr);

template <typename Desc>
PlanResult plan_for(c10::DeviceIndex device, const Desc& desc,
                    std::span<const std::byte> extra = {}) {
  static_assert(std::is_standard_layout_v<Desc> && std::is_trivially_copyable_v<Desc>);
  static_assert(offsetof(Desc, header) == 0);
  return plan_for(device, desc.header, extra);
}

// For a descriptor holding a pointer to arrays (AdamW's numels, cat's inputs): |key| is the
// same descriptor with that pointer zeroed, and the arrays' bytes go in |extra|.
template <typename Desc>
PlanResult plan_for_keyed(c10::DeviceIndex device, const Desc& desc, const Desc& key,
                          std::span<const std::byte> extra) {
  static_assert(std::is_standard_layout_v<Desc> && std::is_trivially_copyable_v<Desc>);
  return plan_for(device, desc.header, extra, &key.header);
}

// A descriptor of |Desc| with its header filled (kind, struct_size), zeroed otherwise.
template <typename Desc>
Desc make_desc(hal_op_kind_t kind) {
  Desc desc;
  std::memset(&desc, 0, sizeof desc);
  desc.header.struct_size = sizeof(Desc);
  desc.header.kind = kind;
  return desc;
}

// Enqueues |plan| on the current stream of |device|. |op| names the aten op
// for the error message.
void execute(c10::DeviceIndex device, const Plan& plan, std::span<void* const> operands,
             std::span<const hal_op_scalar_t> scalars, const char* op);
inline void execute(c10::DeviceIndex device, const Plan& plan,
                    std::initializer_list<void*> operands, const char* op,
                    std::initializer_list<hal_op_scalar_t> scalars = {}) {
  execute(device, plan, std::span<void* const>(operands.begin(), operands.size()),
          std::span<const hal_op_scalar_t>(scalars.begin(), scalars.size()), op);
}

// Drops every cached plan (tests; hal_torch.clear_plan_cache()).
void clear_plan_cache();
size_t plan_cache_size();

// ---- scalars on the device ------------------------------------------------------------------

// A 0-dim tensor of |dtype| on |device| holding |value|: constants are made
// once per (device, dtype, value), kept in a bounded table, and the first use
// waits for its copy, so every stream may read them at once.
at::Tensor device_constant(c10::DeviceIndex device, at::ScalarType dtype, double value);

}  // namespace hal_torch

#endif  // HAL_TORCH_PLANS_HPP_
