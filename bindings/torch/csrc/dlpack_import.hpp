// DLPack between hal tensors and other holders of HAL memory, with no copy.
//
// from_dlpack takes a capsule ("dltensor" or "dltensor_versioned") whose data
// lies in a live HAL allocation (a hal.Buffer, a hal tensor's own export) and
// returns a hal tensor on the allocation's device that keeps the producer
// alive. to_dlpack exports a hal tensor: as kDLCPU memory when the device's
// memory is host-accessible (what the hal package imports, after the stream
// is synchronised), else as torch's kDLExtDev.
#ifndef HAL_TORCH_DLPACK_IMPORT_HPP_
#define HAL_TORCH_DLPACK_IMPORT_HPP_

#include <ATen/core/Tensor.h>
#include <pybind11/pybind11.h>

namespace hal_torch {

at::Tensor from_dlpack(pybind11::object capsule);
pybind11::capsule to_dlpack(const at::Tensor& tensor);

}  // namespace hal_torch

#endif  // HAL_TORCH_DLPACK_IMPORT_HPP_
