// Modules and kernels of the cpu plugin (api/hal/kernel.h): ELF shared
// objects opened with dlopen, entry points called through libffi with the
// calling convention of api/hal/cpu_kernel.h.
#ifndef HAL_PLUGINS_CPU_MODULE_HPP_
#define HAL_PLUGINS_CPU_MODULE_HPP_

#include <ffi.h>

#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "hal_plugin.h"
#include "hal_plugin_sdk/entries.hpp"
#include "hal_plugin_sdk/kernel_signature.hpp"

namespace hal::cpu {

class Device;
class Module;
class Stream;

// One resolved entry point with its libffi call interface, prepared once.
class Kernel : public plugin::KernelInfo {
 public:
  Kernel(Module& module, std::string name, void* entry, std::vector<hal_arg_type_t> types);
  Kernel(const Kernel&) = delete;
  Kernel& operator=(const Kernel&) = delete;

  Module& module() const { return module_; }
  uint32_t arg_count() const { return static_cast<uint32_t>(arg_types().size()); }

  // Calls the entry for one block. |arg_values[0]| must point at the block
  // context pointer, the rest at the argument slots.
  void call(void** arg_values) const {
    ffi_call(const_cast<ffi_cif*>(&cif_), entry_, nullptr, arg_values);
  }
  // Kernels without arguments skip libffi (a bounds-checked one has its
  // hidden record argument).
  bool plain() const { return arg_types().empty() && !bounds_checked_; }
  // Translated bounds-checked: the entry takes the launch's
  // hal_bounds_record_t* after the arguments (bounds.hpp).
  bool bounds_checked() const { return bounds_checked_; }

  // Limits a dialect kernel exports (hal_kernel_max_threads_<name>,
  // hal_kernel_static_shared_<name>); the device limit and 0 otherwise.
  using KernelInfo::set_limits;
  void call_plain(const void* block_context) const {
    reinterpret_cast<void (*)(const void*)>(entry_)(block_context);
  }

  // launch (launch.cpp) enqueues a launch command on the stream.
  HAL_PLUGIN_KERNEL_METHODS;

 private:
  Module& module_;
  void (*entry_)();
  bool bounds_checked_;
  std::vector<ffi_type*> ffi_types_;  // the block context pointer, the arguments, the record
  ffi_cif cif_;
};

// Shared ownership: launches still enqueued keep the code mapped.
class Module : public std::enable_shared_from_this<Module> {
 public:
  // What the module's own dynamic symbol table defines: name -> is a function.
  using DefinedSymbols = std::unordered_map<std::string, bool>;

  // Takes ownership of |handle| (dlopen) and |memfd| (-1 when loaded from a path).
  // |bounds_checked|: a dialect module translated bounds-checked.
  Module(Device& device, void* handle, int memfd, std::string origin, DefinedSymbols symbols,
         bool bounds_checked = false);
  ~Module();
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  Device& device() const { return device_; }
  const std::string& origin() const { return origin_; }
  void* handle() const { return handle_; }
  // The address of |name| when the module itself defines it as a function
  // (|function|) or as data; nullptr otherwise. dlsym alone would also find
  // what the module's dependencies define (libc's abort) and imports.
  void* defined_symbol(const std::string& name, bool function) const;
  Kernel& add_kernel(std::string name, void* entry, std::vector<hal_arg_type_t> arg_types);
  bool bounds_checked() const { return bounds_checked_; }
  // load: a CPU shared object (a file or an image in memory), or HAL
  // dialect source compiled to one, checked before dlopen maps it; under
  // bounds checks (SPEC.md §14.1) dialect source is translated checked.
  // get_kernel: a function the module itself defines, bound to the signature
  // it exports, else to the caller's.
  HAL_PLUGIN_MODULE_METHODS;

 private:
  Device& device_;
  bool bounds_checked_;
  void* handle_;
  // An image loaded from memory stays open as /proc/self/fd/N while loaded:
  // glibc recognises loaded objects by name, so the descriptor number must
  // not be reused for another module until dlclose.
  int memfd_;
  std::string origin_;
  DefinedSymbols symbols_;
  std::mutex mutex_;
  std::vector<std::unique_ptr<Kernel>> kernels_;
};

}  // namespace hal::cpu

#endif  // HAL_PLUGINS_CPU_MODULE_HPP_
