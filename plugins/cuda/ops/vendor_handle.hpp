// What cuBLASLt (cublaslt.hpp) and cuDNN (cudnn.hpp) share as the cuda plugin
// uses them: the library, opened by the first plan that needs it and
// remembered, failure included; and one handle of it per device, created on
// first use with the device's context bound.
//
// A |Library| class provides:
//   static std::shared_ptr<const Library> open(std::string& why);
//   using Handle, Status; static constexpr Status kSuccess;
//   static constexpr const char* kCreateName ("cublasLtCreate");
//   Status create_handle(Handle*) const; void destroy_handle(Handle) const;
//   std::string status_text(Status) const.
#ifndef HAL_PLUGINS_CUDA_OPS_VENDOR_HANDLE_HPP_
#define HAL_PLUGINS_CUDA_OPS_VENDOR_HANDLE_HPP_

#include <memory>
#include <mutex>
#include <string>

namespace hal::cuda {

class Device;

namespace ops {

// The plugin's |Library|: opened by the first get() and remembered, failure
// included (the reason is the same for every later plan). Thread-safe.
template <class Library>
class LibraryLoader {
 public:
  std::shared_ptr<const Library> get(std::string& why) {
    std::lock_guard lock(mutex_);
    if (!tried_) {
      tried_ = true;
      library_ = Library::open(why_);
    }
    if (!library_) why = why_;
    return library_;
  }

 private:
  std::mutex mutex_;
  bool tried_ = false;                      // guarded by mutex_
  std::shared_ptr<const Library> library_;  // guarded by mutex_
  std::string why_;                         // guarded by mutex_
};

// One device's handle of |Library| (vendor_handle.cpp instantiates it for
// each library).
template <class Library>
class DeviceHandle {
 public:
  using Handle = typename Library::Handle;
  using Status = typename Library::Status;

  explicit DeviceHandle(LibraryLoader<Library>& loader) : loader_(loader) {}
  ~DeviceHandle();  // the caller has bound the device's context
  DeviceHandle(const DeviceHandle&) = delete;
  DeviceHandle& operator=(const DeviceHandle&) = delete;

  // The library and the handle, made on first use with |device| bound. On
  // failure null, with |why| and the status (Library::kSuccess when the
  // library itself is missing).
  Handle handle(Device& device, std::shared_ptr<const Library>* out_library, std::string& why,
                Status* out_status);

 private:
  LibraryLoader<Library>& loader_;
  std::mutex mutex_;
  std::shared_ptr<const Library> library_;  // guarded by mutex_
  Handle handle_ = nullptr;                 // guarded by mutex_
};

}  // namespace ops
}  // namespace hal::cuda

#endif  // HAL_PLUGINS_CUDA_OPS_VENDOR_HANDLE_HPP_
