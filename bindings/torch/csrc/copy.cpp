#include "copy.hpp"

#include "allocator.hpp"
#include "index_status.hpp"
#include "plans.hpp"
#include "runtime.hpp"

#include <ATen/ops/empty.h>
#include <c10/core/CPUAllocator.h>
#include <c10/util/Exception.h>

namespace hal_torch {
namespace {

c10::DeviceIndex index_of_tensor(const at::Tensor& t) {
  return t.device().index();
}

// Same dtype, same sizes and strides, dense: the bytes are one span from data_ptr.
bool same_dense_layout(const at::Tensor& a, const at::Tensor& b) {
  return a.scalar_type() == b.scalar_type() && a.sizes() == b.sizes() &&
         a.strides() == b.strides() && a.is_non_overlapping_and_dense();
}

bool is_pinned(const at::Tensor& host) {
  return host.is_cpu() && is_pinned_host_pointer(host.const_data_ptr());
}

// The HAL dtype a plain copy may use: bool read as u8 (0 and 1 either way), which every
// cast implementation takes; a bool destination needs HAL's x != 0 conversion.
std::optional<hal_dtype_t> copy_dtype(at::ScalarType type, bool destination) {
  if (type == at::kBool) return destination ? HAL_DTYPE_BOOL : HAL_DTYPE_U8;
  return hal_dtype(type);
}

void synchronize(c10::DeviceIndex index) {
  check(hal_stream_synchronize(current_hal_stream(index)), "waiting for a hal copy");
}

at::Tensor empty_like_on(const at::Tensor& t, c10::Device device, at::ScalarType dtype) {
  return at::empty(t.sizes(), t.options().dtype(dtype).device(device));
}

}  // namespace

at::Tensor host_alias(const at::Tensor& t) {
  c10::Storage storage(
      c10::Storage::use_byte_size_t(), t.storage().nbytes(),
      c10::DataPtr(
          t.storage().mutable_data(), nullptr, [](void*) {}, c10::Device(c10::kCPU)),
      nullptr, /*resizable=*/false);
  at::Tensor host = at::empty({0}, t.options().device(c10::kCPU));
  host.set_(storage, t.storage_offset(), t.sizes(), t.strides());
  return host;
}

bool device_cast(const at::Tensor& src, const at::Tensor& dst) {
  const at::ScalarType from = src.scalar_type();
  const at::ScalarType to = dst.scalar_type();
  const bool bytes = from == at::kBool && to == at::kBool;  // a plain byte copy
  const std::optional<hal_dtype_t> in_dtype = copy_dtype(from, false);
  const std::optional<hal_dtype_t> out_dtype = bytes ? HAL_DTYPE_U8 : copy_dtype(to, true);
  if (!in_dtype || !out_dtype) return false;
  const at::Tensor in = src.expand(dst.sizes());
  std::optional<hal_tensor_desc_t> in_desc = describe(in);
  std::optional<hal_tensor_desc_t> out_desc = describe(dst);
  if (!in_desc.has_value() || !out_desc.has_value()) return false;  // rank > 8, negative strides
  in_desc->dtype = *in_dtype;
  out_desc->dtype = *out_dtype;
  auto desc = make_desc<hal_op_cast_desc_t>(HAL_OP_CAST);
  desc.in = *in_desc;
  desc.out = *out_desc;
  const c10::DeviceIndex device = index_of_tensor(dst);
  const PlanResult planned = plan_for(device, desc);
  if (!planned) return false;
  execute(device, *planned.plan, {operand(in), operand(dst)}, "copy_");
  return true;
}

void copy_device_to_device(const at::Tensor& src, const at::Tensor& dst) {
  if (dst.numel() == 0) return;
  const c10::DeviceIndex src_device = index_of_tensor(src);
  const c10::DeviceIndex dst_device = index_of_tensor(dst);
  if (src_device == dst_device) {
    if (src.is_same(dst)) return;
    hal_stream_t stream = current_hal_stream(dst_device);
    if (same_dense_layout(src, dst) && !memory_overlaps(src, dst)) {
      check(hal_memcpy_async(operand(dst), operand(src), dst.nbytes(), stream), "copy_ on hal");
      return;
    }
    if (memory_overlaps(src, dst)) {
      // HAL ops never write over their own inputs (except exactly): go through a copy.
      const at::Tensor staged = empty_like_on(src, src.device(), src.scalar_type());
      copy_device_to_device(src, staged);
      copy_device_to_device(staged, dst);
      return;
    }
    if (device_cast(src, dst)) return;
    // A conversion HAL has no cast for (to bool, complex): on the host.
    const at::Tensor host = copy_to_host(src);
    copy_host_to_device(host, dst);
    return;
  }
  // Another device: move src's bytes as they are, then convert on dst's device.
  at::Tensor packed = src;
  if (!src.is_contiguous()) {
    packed = empty_like_on(src, src.device(), src.scalar_type());
    copy_device_to_device(src, packed);
  }
  at::Tensor landed = same_dense_layout(packed, dst) && dst.is_contiguous()
                          ? dst
                          : empty_like_on(packed, dst.device(), packed.scalar_type());
  hal_event_t ready = nullptr;
  check(hal_event_create(device_handle(src_device), 0, &ready), "copying between hal devices");
  hal_stream_t src_stream = current_hal_stream(src_device);
  hal_stream_t dst_stream = current_hal_stream(dst_device);
  hal_result_t result = hal_event_record(ready, src_stream);
  if (result == HAL_SUCCESS) result = hal_stream_wait_event(dst_stream, ready);
  hal_event_destroy(ready);  // the wait keeps what it needs (SPEC §7)
  check(result, "ordering a copy between hal devices");
  result = hal_memcpy_async(operand(landed), operand(packed), packed.nbytes(), dst_stream);
  if (result == HAL_ERROR_DEVICE_MISMATCH) {
    // No peer access between the two: through the host.
    const at::Tensor host = copy_to_host(packed);
    copy_host_to_device(host, landed);
  } else {
    check(result, "copying between hal devices");
    // packed is read on dst's stream: not reused on its own stream before that.
    device_allocator().recordStream(packed.storage().data_ptr(),
                                    c10::Stream(current_stream(dst_device)));
  }
  if (!landed.is_same(dst)) copy_device_to_device(landed, dst);
}

void copy_host_to_device(const at::Tensor& src, const at::Tensor& dst, bool non_blocking) {
  if (dst.numel() == 0) return;
  if (src._is_zerotensor()) {  // autograd's storage-less zeros
    dst.zero_();
    return;
  }
  const c10::DeviceIndex device = index_of_tensor(dst);
  hal_stream_t stream = current_hal_stream(device);
  if (same_dense_layout(src, dst)) {
    check(hal_memcpy_async(operand(dst), operand(src), dst.nbytes(), stream),
          "copying to a hal device");
    if (non_blocking && is_pinned(src)) {
      record_host_use(src.const_data_ptr(), current_stream(device));
    } else {
      synchronize(device);  // pageable memory: the caller may free it on return
    }
    return;
  }
  if (device_state(device).host_accessible) {
    // The CPU converts and re-strides straight into the device memory.
    synchronize(device);
    host_alias(dst).copy_(src);
    return;
  }
  // Convert on the host into dst's dtype, dense; then one copy and a device re-stride.
  const at::Tensor staged = src.to(dst.scalar_type()).expand(dst.sizes()).contiguous();
  at::Tensor landed =
      dst.is_contiguous() ? dst : empty_like_on(staged, dst.device(), dst.scalar_type());
  check(hal_memcpy_async(operand(landed), operand(staged), staged.nbytes(), stream),
        "copying to a hal device");
  synchronize(device);
  if (!landed.is_same(dst)) copy_device_to_device(landed, dst);
}

void copy_device_to_host(const at::Tensor& src, const at::Tensor& dst, bool non_blocking) {
  if (dst.numel() == 0) return;
  const c10::DeviceIndex device = index_of_tensor(src);
  hal_stream_t stream = current_hal_stream(device);
  if (same_dense_layout(src, dst)) {
    check(hal_memcpy_async(operand(dst), operand(src), dst.nbytes(), stream),
          "copying from a hal device");
    if (non_blocking && is_pinned(dst)) {
      record_host_use(dst.const_data_ptr(), current_stream(device));
    } else {
      synchronize(device);
      check_index_status(device);
    }
    return;
  }
  if (device_state(device).host_accessible) {
    synchronize(device);
    check_index_status(device);
    dst.copy_(host_alias(src));
    return;
  }
  at::Tensor packed = src;
  if (!src.is_contiguous()) {
    packed = empty_like_on(src, src.device(), src.scalar_type());
    copy_device_to_device(src, packed);
  }
  const at::Tensor staged = at::empty(packed.sizes(), packed.options().device(c10::kCPU));
  check(hal_memcpy_async(operand(staged), operand(packed), packed.nbytes(), stream),
        "copying from a hal device");
  synchronize(device);
  dst.copy_(staged);
}

at::Tensor copy_to_host(const at::Tensor& src) {
  at::Tensor host = at::empty(src.sizes(), src.options().device(c10::kCPU));
  copy_device_to_host(src, host);
  return host;
}

}  // namespace hal_torch
