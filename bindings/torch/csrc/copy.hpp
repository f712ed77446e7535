// Copies between the host and hal devices and between hal devices, any
// dtypes and strides, on the current HAL streams (torch's _copy_from).
//
// Same dtype and dense with one layout: one hal_memcpy_async. Otherwise the
// device side is converted or re-strided by HAL_OP_CAST and the host side
// by the CPU. A copy from or to pageable host memory returns when its host
// side is no longer needed; with pinned memory and non_blocking it is
// asynchronous (the pinned block is kept until the copy completes).
#ifndef HAL_TORCH_COPY_HPP_
#define HAL_TORCH_COPY_HPP_

#include <ATen/core/Tensor.h>

namespace hal_torch {

// dst (hal) = src (cpu), src broadcast to dst's sizes.
void copy_host_to_device(const at::Tensor& src, const at::Tensor& dst, bool non_blocking = false);
// dst (cpu) = src (hal).
void copy_device_to_host(const at::Tensor& src, const at::Tensor& dst, bool non_blocking = false);
// dst (hal) = src (hal), on the same device or another.
void copy_device_to_device(const at::Tensor& src, const at::Tensor& dst);

// A contiguous CPU copy of |src| (hal); waits for it.
at::Tensor copy_to_host(const at::Tensor& src);

// A CPU tensor viewing |t|'s device memory (host-accessible devices only; the
// caller has synchronised the stream that last wrote it).
at::Tensor host_alias(const at::Tensor& t);

// Strided copy on one device with HAL_OP_CAST (dtype conversion included):
// false when HAL cannot describe or plan it (then nothing was enqueued).
bool device_cast(const at::Tensor& src, const at::Tensor& dst);

}  // namespace hal_torch

#endif  // HAL_TORCH_COPY_HPP_
