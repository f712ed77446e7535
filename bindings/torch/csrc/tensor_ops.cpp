// The ops every device must have natively (a view or a copy cannot fall
// back: storage cannot span devices): factories, views, resize, set_,
// copies, .item(), fill and zero.
#include "allocator.hpp"
#include "copy.hpp"
#include "index_status.hpp"
#include "fallback.hpp"
#include "metrics.hpp"
#include "plans.hpp"
#include "runtime.hpp"

#include <ATen/EmptyTensor.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/_local_scalar_dense_native.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/fill_ops.h>
#include <ATen/ops/resize_native.h>
#include <ATen/ops/set_native.h>
#include <ATen/ops/unfold_native.h>
#include <ATen/ops/view_native.h>
#include <c10/core/DeviceGuard.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

namespace hal_torch {
namespace {

constexpr c10::DispatchKeySet kHalKeys(c10::DispatchKey::PrivateUse1);

c10::Device hal_device_or_current(std::optional<c10::Device> device) {
  const c10::Device d = device.value_or(c10::Device(kHalDeviceType));
  TORCH_CHECK(d.type() == kHalDeviceType, "hal: a factory for ", d, " reached the hal kernel");
  return {kHalDeviceType, index_of(d)};
}

void check_factory_options(std::optional<c10::Layout> layout, std::optional<bool> pin_memory) {
  TORCH_CHECK_NOT_IMPLEMENTED(c10::layout_or_default(layout) == c10::Layout::Strided,
                              "hal tensors are strided (", c10::layout_or_default(layout),
                              " requested)");
  TORCH_CHECK(!c10::pinned_memory_or_default(pin_memory),
              "only CPU tensors can be pinned; hal tensors live in device memory");
}

// ---- factories ------------------------------------------------------------------------------

at::Tensor empty_memory_format(c10::IntArrayRef size, std::optional<c10::ScalarType> dtype,
                               std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                               std::optional<bool> pin_memory,
                               std::optional<c10::MemoryFormat> memory_format) {
  check_factory_options(layout, pin_memory);
  const c10::Device where = hal_device_or_current(device);
  const c10::DeviceGuard guard(where);
  return at::detail::empty_generic(size, &device_allocator(), kHalKeys,
                                   c10::dtype_or_default(dtype), memory_format);
}

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride,
                         std::optional<c10::ScalarType> dtype, std::optional<c10::Layout> layout,
                         std::optional<c10::Device> device, std::optional<bool> pin_memory) {
  check_factory_options(layout, pin_memory);
  const c10::Device where = hal_device_or_current(device);
  const c10::DeviceGuard guard(where);
  return at::detail::empty_strided_generic(size, stride, &device_allocator(), kHalKeys,
                                           c10::dtype_or_default(dtype));
}

// ---- views: metadata only -------------------------------------------------------------------

at::Tensor as_strided(const at::Tensor& self, c10::SymIntArrayRef size, c10::SymIntArrayRef stride,
                      std::optional<c10::SymInt> storage_offset) {
  std::optional<int64_t> offset;
  if (storage_offset.has_value()) offset = storage_offset->expect_int();
  return at::native::as_strided_tensorimpl(self, C10_AS_INTARRAYREF_SLOW(size),
                                           C10_AS_INTARRAYREF_SLOW(stride), offset);
}

at::Tensor view(const at::Tensor& self, c10::SymIntArrayRef size) {
  return at::native::view(self, C10_AS_INTARRAYREF_SLOW(size));
}

at::Tensor reshape_alias(const at::Tensor& self, c10::SymIntArrayRef size,
                         c10::SymIntArrayRef stride) {
  return at::native::_reshape_alias(self, C10_AS_INTARRAYREF_SLOW(size),
                                    C10_AS_INTARRAYREF_SLOW(stride));
}

at::Tensor unfold(const at::Tensor& self, int64_t dimension, int64_t size, int64_t step) {
  return at::native::unfold(self, dimension, size, step);
}

const at::Tensor& resize(const at::Tensor& self, c10::SymIntArrayRef size,
                         std::optional<c10::MemoryFormat> memory_format) {
  // Grows the storage through the hooks' resizePrivateUse1Bytes (a device copy).
  return at::native::resize_(self, C10_AS_INTARRAYREF_SLOW(size), memory_format);
}

// The storage must hold the view; a storage of another device is refused.
at::Tensor& set_storage_offset(at::Tensor& self, at::Storage source, c10::SymInt storage_offset,
                               c10::SymIntArrayRef size, c10::SymIntArrayRef stride) {
  const int64_t offset = storage_offset.expect_int();
  const c10::IntArrayRef sizes = C10_AS_INTARRAYREF_SLOW(size);
  const c10::IntArrayRef strides = C10_AS_INTARRAYREF_SLOW(stride);
  TORCH_CHECK(source.device().type() == kHalDeviceType, "hal: set_ with a storage of ",
              source.device());
  TORCH_CHECK(offset >= 0, "set_: storage offset must be >= 0, got ", offset);
  TORCH_CHECK(strides.empty() || strides.size() == sizes.size(), "set_: ", sizes.size(),
              " sizes but ", strides.size(), " strides");
  if (!self.storage().is_alias_of(source)) {
    self.unsafeGetTensorImpl()->set_storage_keep_dtype(std::move(source));
  }
  self.unsafeGetTensorImpl()->set_storage_offset(offset);
  c10::DimVector contiguous;
  if (strides.empty()) contiguous = c10::contiguous_strides(sizes);
  const c10::IntArrayRef used = strides.empty() ? c10::IntArrayRef(contiguous) : strides;
  self.unsafeGetTensorImpl()->set_sizes_and_strides(sizes, used, offset);
  const int64_t needed = static_cast<int64_t>(
      at::detail::computeStorageNbytes(sizes, used, self.itemsize(), static_cast<size_t>(offset)));
  if (static_cast<size_t>(needed) > self.storage().nbytes() && self.numel() > 0) {
    at::detail::getPrivateUse1Hooks().resizePrivateUse1Bytes(self.storage(),
                                                             static_cast<size_t>(needed));
  }
  return self;
}

at::Tensor& set_storage(at::Tensor& self, at::Storage source) {
  const int64_t elements = static_cast<int64_t>(source.nbytes() / self.itemsize());
  return set_storage_offset(self, std::move(source), 0,
                            c10::SymIntArrayRef({c10::SymInt(elements)}), {});
}

at::Tensor& set_tensor(at::Tensor& self, const at::Tensor& source) {
  if (self.is_same(source)) return self;
  return set_storage_offset(self, source.storage(), source.sym_storage_offset(), source.sym_sizes(),
                            source.sym_strides());
}

at::Tensor& set_empty(at::Tensor& self) {
  c10::Storage empty(c10::Storage::use_byte_size_t(), 0, &device_allocator(), true);
  return set_storage_offset(self, std::move(empty), 0, c10::SymIntArrayRef({c10::SymInt(0)}), {});
}

// ---- copies ---------------------------------------------------------------------------------

at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  static OpCounter& counter = op_counter("aten::_copy_from");
  ++counter.native;
  TORCH_CHECK(self.defined() && dst.defined(), "copy_: undefined tensor");
  const bool from_hal = self.device().type() == kHalDeviceType;
  const bool to_hal = dst.device().type() == kHalDeviceType;
  if (from_hal && to_hal) {
    copy_device_to_device(self, dst);
  } else if (to_hal) {
    TORCH_CHECK(self.is_cpu(), "hal: copy_ from ", self.device(), " to ", dst.device(),
                " (only cpu and hal tensors)");
    copy_host_to_device(self, dst, non_blocking);
  } else {
    TORCH_CHECK(dst.is_cpu(), "hal: copy_ from ", self.device(), " to ", dst.device(),
                " (only cpu and hal tensors)");
    copy_device_to_host(self, dst, non_blocking);
  }
  return dst;
}

// _copy_from of a conjugate or negative view (complex conj(), _neg_view): aten's
// math-bit fallback would resolve the bit with a clone, whose copy comes back here
// with the bit still set, forever. The physical values move to the host, where the
// CPU resolves the bit, then to dst.
at::Tensor copy_from_resolving_bits(const at::Tensor& self, const at::Tensor& dst,
                                    bool non_blocking) {
  TORCH_CHECK_NOT_IMPLEMENTED(!dst.is_conj() && !dst.is_neg(),
                              "hal: copying into a conjugate or negative view");
  at::Tensor physical = self;
  if (physical.is_conj()) physical = physical.conj();  // a view with the bit cleared
  if (physical.is_neg()) physical = physical._neg_view();
  at::Tensor host = physical.is_cpu() ? physical.clone() : copy_to_host(physical);
  if (self.is_conj()) host = host.conj();
  if (self.is_neg()) host = host._neg_view();
  host = host.resolve_conj().resolve_neg();
  if (dst.is_cpu()) {
    dst.copy_(host);
    return dst;
  }
  return copy_from(host, dst, non_blocking);
}

at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  if (dst.sizes() != self.sizes()) dst.resize_(self.sizes());
  return copy_from(self, dst, false);
}

c10::Scalar local_scalar_dense(const at::Tensor& self) {
  static OpCounter& counter = op_counter("aten::_local_scalar_dense");
  ++counter.native;
  TORCH_CHECK(self.numel() == 1, "a Tensor with ", self.numel(),
              " elements cannot be converted to Scalar");
  at::Tensor host = at::empty({}, self.options().device(c10::kCPU));
  copy_device_to_host(self.reshape({}), host);
  check_index_status(self.device().index());
  return at::native::_local_scalar_dense_cpu(host);
}

// ---- fill -----------------------------------------------------------------------------------

at::Tensor& fill_scalar(at::Tensor& self, const c10::Scalar& value) {
  static OpCounter& counter = op_counter("aten::fill_.Scalar");
  if (self.numel() == 0) return self;
  at::assert_no_internal_overlap(self);
  const c10::DeviceIndex device = self.device().index();
  const bool zero = value.isIntegral(true) ? value.toLong() == 0
                    : value.isFloatingPoint()
                        ? value.toDouble() == 0.0 && !std::signbit(value.toDouble())
                        : false;
  if (zero && self.is_non_overlapping_and_dense()) {
    ++counter.native;
    check(hal_memset_async(operand(self), 0, self.nbytes(), current_hal_stream(device)),
          "fill_ on hal");
    return self;
  }
  if (!value.isComplex() && hal_dtype(self.scalar_type()).has_value()) {
    // HAL_OP_FILL with step 0; then a cast from a device constant where FILL is missing.
    if (const std::optional<hal_tensor_desc_t> out = describe(self)) {
      auto desc = make_desc<hal_op_fill_desc_t>(HAL_OP_FILL);
      desc.out = *out;
      if (const PlanResult planned = plan_for(device, desc)) {
        hal_op_scalar_t start{};
        if (value.isFloatingPoint()) {
          start.f64 = value.toDouble();
          start.i64 = static_cast<int64_t>(start.f64);
        } else {
          start.i64 = value.isBoolean() ? static_cast<int64_t>(value.toBool()) : value.toLong();
          start.f64 = static_cast<double>(start.i64);
        }
        execute(device, *planned.plan, {operand(self)}, "fill_", {start, hal_op_scalar_t{}});
        ++counter.native;
        return self;
      }
    }
    const double v = value.isBoolean() ? static_cast<double>(value.toBool()) : value.toDouble();
    // Integers past 2^53 do not survive a double: those go through the CPU.
    const bool exact = !value.isIntegral(false) || std::abs(value.toLong()) <= (int64_t{1} << 53);
    if (exact) {
      const at::Tensor constant = device_constant(device, self.scalar_type(), v);
      if (device_cast(constant, self)) {
        ++counter.native;
        return self;
      }
    }
  }
  HAL_FALLBACK(at::_ops::fill__Scalar, "HAL has no fill for this dtype or layout", self, value);
  return self;
}

at::Tensor& fill_tensor(at::Tensor& self, const at::Tensor& value) {
  TORCH_CHECK(value.dim() == 0, "fill_ only supports 0-dimension value tensor but got tensor with ",
              value.dim(), " dimensions.");
  if (value.device().type() != kHalDeviceType) return fill_scalar(self, value.item());
  static OpCounter& counter = op_counter("aten::fill_.Tensor");
  if (self.numel() == 0) return self;
  if (value.device() == self.device() && device_cast(value, self)) {
    ++counter.native;
    return self;
  }
  return fill_scalar(self, value.item());
}

at::Tensor& zero(at::Tensor& self) {
  return fill_scalar(self, 0);
}

// Whether `param.data = x` may swap x's storage in place: for dense strided tensors of the
// CPU and hal, yes. c10 answers no for any PrivateUse1 pair, and then nn.Module.to("hal")
// replaces each parameter by a new one: tied weights (GPT's embedding and output layer)
// silently come apart.
bool has_compatible_shallow_copy_type(const at::Tensor& self, const at::Tensor& from) {
  const auto dense = [](const at::Tensor& t) {
    return t.layout() == c10::kStrided && (t.is_cpu() || t.device().type() == kHalDeviceType);
  };
  return dense(self) && dense(from);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", TORCH_FN(empty_memory_format));
  m.impl("empty_strided", TORCH_FN(empty_strided));
  m.impl("as_strided", TORCH_FN(as_strided));
  m.impl("view", TORCH_FN(view));
  m.impl("_reshape_alias", TORCH_FN(reshape_alias));
  m.impl("unfold", TORCH_FN(unfold));
  m.impl("resize_", TORCH_FN(resize));
  m.impl("set_.source_Storage", TORCH_FN(set_storage));
  m.impl("set_.source_Storage_storage_offset", TORCH_FN(set_storage_offset));
  m.impl("set_.source_Tensor", TORCH_FN(set_tensor));
  m.impl("set_", TORCH_FN(set_empty));
  m.impl("_copy_from", TORCH_FN(copy_from));
  m.impl("_copy_from_and_resize", TORCH_FN(copy_from_and_resize));
  m.impl("_local_scalar_dense", TORCH_FN(local_scalar_dense));
  m.impl("fill_.Scalar", TORCH_FN(fill_scalar));
  m.impl("fill_.Tensor", TORCH_FN(fill_tensor));
  m.impl("zero_", TORCH_FN(zero));
  m.impl("_has_compatible_shallow_copy_type", TORCH_FN(has_compatible_shallow_copy_type));
}

// Only reached when a hal tensor is involved: CPU-only copies never call _copy_from.
TORCH_LIBRARY_IMPL(aten, Conjugate, m) {
  m.impl("_copy_from", TORCH_FN(copy_from_resolving_bits));
}
TORCH_LIBRARY_IMPL(aten, Negative, m) {
  m.impl("_copy_from", TORCH_FN(copy_from_resolving_bits));
}

}  // namespace hal_torch
