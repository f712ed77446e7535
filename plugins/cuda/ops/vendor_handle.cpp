#include "vendor_handle.hpp"

#include "../device.hpp"

namespace hal::cuda::ops {

template <class Library>
DeviceHandle<Library>::~DeviceHandle() {
  std::lock_guard lock(mutex_);
  if (handle_ != nullptr) library_->destroy_handle(handle_);
}

template <class Library>
typename DeviceHandle<Library>::Handle DeviceHandle<Library>::handle(
    Device& device, std::shared_ptr<const Library>* out_library, std::string& why,
    Status* out_status) {
  std::lock_guard lock(mutex_);
  *out_status = Library::kSuccess;
  if (handle_ != nullptr) {
    *out_library = library_;
    return handle_;
  }
  std::shared_ptr<const Library> library = loader_.get(why);
  if (!library) return nullptr;
  const ContextScope bound = device.bind();
  if (!bound.ok()) {
    why = "cuCtxSetCurrent failed: " + cu_error_text(&device.api(), bound.result());
    return nullptr;
  }
  Handle created = nullptr;
  if (const Status status = library->create_handle(&created); status != Library::kSuccess) {
    *out_status = status;
    why = std::string(Library::kCreateName) + " failed: " + library->status_text(status);
    return nullptr;
  }
  library_ = std::move(library);
  handle_ = created;
  *out_library = library_;
  return handle_;
}

template class DeviceHandle<CublasLt>;
#if HAL_CUDA_HAVE_CUDNN
template class DeviceHandle<Cudnn>;
#endif

}  // namespace hal::cuda::ops
