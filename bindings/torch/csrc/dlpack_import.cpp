#include "dlpack_import.hpp"

#include "runtime.hpp"

#include <ATen/DLConvertor.h>
#include <ATen/dlpack.h>
#include <ATen/ops/from_blob.h>
#include <c10/util/Exception.h>

#include <functional>
#include <vector>

namespace hal_torch {
namespace {

namespace py = pybind11;

// Runs a producer's DLPack deleter, which may touch Python objects.
void release_with_gil(const std::function<void()>& release) {
  if (!Py_IsInitialized()) return;  // interpreter gone: leave the producer's memory alone
  const PyGILState_STATE state = PyGILState_Ensure();
  release();
  PyGILState_Release(state);
}

c10::DeviceIndex torch_index_of(hal_device_t device) {
  for (int i = 0; i < device_count(); ++i) {
    if (device_state(static_cast<c10::DeviceIndex>(i)).handle == device) {
      return static_cast<c10::DeviceIndex>(i);
    }
  }
  C10_THROW_ERROR(ValueError,
                  "hal_torch.from_dlpack: the memory belongs to a HAL device torch "
                  "cannot address");
}

}  // namespace

at::Tensor from_dlpack(py::object object) {
  PyObject* capsule = object.ptr();
  const bool versioned = PyCapsule_IsValid(capsule, "dltensor_versioned") != 0;
  if (!versioned && PyCapsule_IsValid(capsule, "dltensor") == 0) {
    throw py::type_error(
        "hal_torch.from_dlpack takes an unused DLPack capsule or an object with __dlpack__");
  }
  DLTensor* dl = nullptr;
  std::function<void()> release;
  if (versioned) {
    auto* managed =
        static_cast<DLManagedTensorVersioned*>(PyCapsule_GetPointer(capsule, "dltensor_versioned"));
    dl = &managed->dl_tensor;
    release = [managed] {
      if (managed->deleter) managed->deleter(managed);
    };
  } else {
    auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule, "dltensor"));
    dl = &managed->dl_tensor;
    release = [managed] {
      if (managed->deleter) managed->deleter(managed);
    };
  }
  TORCH_CHECK_VALUE(dl->ndim >= 0, "hal_torch.from_dlpack: negative ndim");
  const at::ScalarType dtype = at::toScalarType(dl->dtype);
  std::vector<int64_t> sizes(dl->shape, dl->shape + dl->ndim);
  std::vector<int64_t> strides;
  if (dl->strides != nullptr) {
    strides.assign(dl->strides, dl->strides + dl->ndim);
  } else {
    const auto contiguous = c10::contiguous_strides(sizes);
    strides.assign(contiguous.begin(), contiguous.end());
  }
  char* data = static_cast<char*>(dl->data) + dl->byte_offset;

  int64_t numel = 1;
  int64_t last = 0;  // offset of the last element, in elements
  for (int64_t d = 0; d < dl->ndim; ++d) {
    TORCH_CHECK_VALUE(sizes[d] >= 0 && strides[d] >= 0,
                      "hal_torch.from_dlpack: negative sizes or strides are not supported");
    numel *= sizes[d];
    if (sizes[d] > 0) last += (sizes[d] - 1) * strides[d];
  }
  c10::DeviceIndex index = current_device();
  if (numel > 0) {
    hal_memory_info_t info{};
    info.struct_size = sizeof info;
    const hal_result_t found = hal_mem_get_info(data, &info);
    if (found != HAL_SUCCESS) {
      C10_THROW_ERROR(ValueError,
                      "hal_torch.from_dlpack: the data is not inside a HAL allocation (for host "
                      "memory use torch.from_dlpack, which makes a CPU tensor)");
    }
    const auto end = data + (last + 1) * static_cast<int64_t>(c10::elementSize(dtype));
    TORCH_CHECK_VALUE(end <= static_cast<char*>(info.base) + info.size,
                      "hal_torch.from_dlpack: the tensor runs past its ", info.size,
                      "-byte HAL allocation");
    index = torch_index_of(info.device);
  }
  at::Tensor out = at::for_blob(data, sizes)
                       .strides(strides)
                       .deleter([release](void*) { release_with_gil(release); })
                       .options(at::TensorOptions().dtype(dtype).device(kHalDeviceType, index))
                       .make_tensor();
  PyCapsule_SetName(capsule, versioned ? "used_dltensor_versioned" : "used_dltensor");
  return out;
}

py::capsule to_dlpack(const at::Tensor& tensor) {
  TORCH_CHECK_VALUE(tensor.device().type() == kHalDeviceType,
                    "hal_torch.to_dlpack takes a hal tensor, got one on ", tensor.device());
  const c10::DeviceIndex index = tensor.device().index();
  const bool host_accessible = device_state(index).host_accessible;
  {
    py::gil_scoped_release unlocked;
    check(hal_stream_synchronize(current_hal_stream(index)), "hal_torch.to_dlpack");
  }
  DLManagedTensor* managed = at::toDLPack(tensor);
  if (host_accessible) managed->dl_tensor.device = DLDevice{kDLCPU, 0};
  return py::capsule(managed, "dltensor", [](PyObject* capsule) {
    if (PyCapsule_IsValid(capsule, "dltensor") == 0) return;  // consumed
    auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule, "dltensor"));
    if (m->deleter) m->deleter(m);
  });
}

}  // namespace hal_torch
