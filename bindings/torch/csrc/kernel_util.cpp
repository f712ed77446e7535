#include "kernel_util.hpp"

#include <ATen/ops/empty.h>

namespace hal_torch {

std::optional<hal_tensor_desc_t> iter_desc(const at::TensorIteratorBase& iter, int arg) {
  const std::optional<hal_dtype_t> dtype = hal_dtype(iter.dtype(arg));
  const int ndim = iter.ndim();
  if (!dtype || ndim > HAL_TENSOR_MAX_RANK) return std::nullopt;
  const c10::IntArrayRef shape = iter.shape();
  const c10::IntArrayRef strides = iter.strides(arg);
  const int64_t size = iter.element_size(arg);
  hal_tensor_desc_t desc{};
  desc.dtype = *dtype;
  desc.rank = static_cast<uint32_t>(ndim);
  for (int d = 0; d < ndim; ++d) {
    const int from = ndim - 1 - d;  // TensorIterator keeps the fastest dimension first
    if (strides[from] < 0 || strides[from] % size != 0) return std::nullopt;
    desc.shape[d] = shape[from];
    desc.strides[d] = strides[from] / size;
  }
  return desc;
}

hal_op_scalar_t scalar_value(const c10::Scalar& value) {
  hal_op_scalar_t s{};
  if (value.isFloatingPoint()) {
    s.f64 = value.toDouble();
    s.i64 = static_cast<int64_t>(s.f64);
  } else if (value.isBoolean()) {
    s.i64 = value.toBool() ? 1 : 0;
    s.f64 = static_cast<double>(s.i64);
  } else {
    s.i64 = value.toLong();
    s.f64 = static_cast<double>(s.i64);
  }
  s.u64 = static_cast<uint64_t>(s.i64);
  return s;
}

bool output_conflicts(const at::Tensor& out, std::initializer_list<const at::Tensor*> inputs) {
  for (const at::Tensor* input : inputs) {
    if (input == nullptr || !input->defined()) continue;
    if (input->device() != out.device()) continue;
    if (memory_overlaps(out, *input) && !same_view(out, *input)) return true;
  }
  return false;
}

at::Tensor empty_like_contiguous(const at::Tensor& t) {
  return at::empty(t.sizes(), t.options());
}

}  // namespace hal_torch
