// A vendor runtime opened at run time (libcuda.so.1, libamdhip64.so.5,
// libze_loader.so.1): plugins never link their vendor's runtime, so that they
// load, with 0 devices and the reason, where it is absent.
//
// The rule for unloading, written once: a library of which nothing ran yet
// (refused for a missing entry point, or before its initialisation) is closed
// again; once its initialisation is called the library is pinned for the
// process, because vendor runtimes start threads and are not built to be
// unloaded or initialised a second time. The plugin itself may still be
// unloaded and loaded again (hal_shutdown, hal_init).
#ifndef HAL_PLUGIN_SDK_VENDOR_LIBRARY_HPP_
#define HAL_PLUGIN_SDK_VENDOR_LIBRARY_HPP_

#include <dlfcn.h>

#include <string>
#include <utility>

namespace hal::plugin {

class VendorLibrary {
 public:
  VendorLibrary() = default;
  VendorLibrary(const VendorLibrary&) = delete;
  VendorLibrary& operator=(const VendorLibrary&) = delete;
  VendorLibrary(VendorLibrary&& other) noexcept { *this = std::move(other); }
  VendorLibrary& operator=(VendorLibrary&& other) noexcept {
    if (this != &other) {
      close();
      handle_ = std::exchange(other.handle_, nullptr);
      path_ = std::move(other.path_);
    }
    return *this;
  }
  ~VendorLibrary() { close(); }

  // Opens |path| (RTLD_NOW | RTLD_LOCAL); on failure |why| is
  // "<path> not found: <dlerror>".
  bool open(const std::string& path, std::string& why) {
    close();
    path_ = path;
    handle_ = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle_ == nullptr) {
      const char* error = dlerror();
      why = path + " not found: " + (error != nullptr ? error : "dlopen failed");
      return false;
    }
    return true;
  }

  void* symbol(const char* name) const {
    return handle_ != nullptr ? dlsym(handle_, name) : nullptr;
  }

  // Called just before the runtime's own initialisation (cuInit, zeInit, the
  // first HIP call): from then on the library stays mapped for the process.
  void pin() {
    if (handle_ != nullptr) dlopen(path_.c_str(), RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
  }

  void* handle() const { return handle_; }
  const std::string& path() const { return path_; }

 private:
  // Drops this reference: an unpinned library is unmapped, a pinned one stays.
  void close() {
    if (handle_ != nullptr) dlclose(std::exchange(handle_, nullptr));
  }

  void* handle_ = nullptr;
  std::string path_;
};

}  // namespace hal::plugin

#endif  // HAL_PLUGIN_SDK_VENDOR_LIBRARY_HPP_
