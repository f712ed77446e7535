#include "module.hpp"

#include <dlfcn.h>
#include <fcntl.h>
#include <link.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "hal_plugin_sdk/kernel_signature.hpp"
#include "hal_plugin_sdk/signature.hpp"
#include "device.hpp"
#include "dialect_compiler.hpp"
#include "hal_util/elf_image.hpp"
#include "hal_util/secure_file.hpp"

namespace hal::cpu {
namespace {

ffi_type* ffi_type_of(hal_arg_type_t type) {
  switch (type) {
    case HAL_ARG_POINTER:
      return &ffi_type_pointer;
    case HAL_ARG_I32:
      return &ffi_type_sint32;
    case HAL_ARG_U32:
      return &ffi_type_uint32;
    case HAL_ARG_I64:
      return &ffi_type_sint64;
    case HAL_ARG_U64:
      return &ffi_type_uint64;
    case HAL_ARG_F32:
      return &ffi_type_float;
    case HAL_ARG_F64:
      return &ffi_type_double;
    default:
      return nullptr;
  }
}

// Images larger than this are refused before they are read.
constexpr size_t kMaxModuleBytes = size_t{1} << 30;
constexpr size_t kMaxSourceBytes = size_t{64} << 20;

// Writes |size| bytes to a fresh memfd; -1 with errno on failure.
int image_to_memfd(const void* data, size_t size) {
  const int fd = memfd_create("hal-cpu-module", MFD_CLOEXEC);
  if (fd < 0) return -1;
  const char* bytes = static_cast<const char*>(data);
  for (size_t written = 0; written < size;) {
    const ssize_t n = write(fd, bytes + written, size - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int saved = errno;
      close(fd);
      errno = saved;
      return -1;
    }
    written += static_cast<size_t>(n);
  }
  return fd;
}

// The dialect source of |desc|: its bytes up to the first NUL, or the file.
hal_result_t read_dialect_source(const hal_module_desc_t& desc, const plugin::ErrorReporter& report,
                                 std::string& out) {
  if (desc.data != nullptr) {
    const auto* text = static_cast<const char*>(desc.data);
    out.assign(text, strnlen(text, desc.size));
    return HAL_SUCCESS;
  }
  std::vector<unsigned char> bytes;
  int error = 0;
  std::string why;
  hal::util::ReadRule rule;
  rule.max_bytes = kMaxSourceBytes;
  if (!hal::util::read_regular_file(AT_FDCWD, desc.path, rule, bytes, error, why)) {
    return report.fail(error == ENOENT ? HAL_ERROR_NOT_FOUND : HAL_ERROR_INVALID_MODULE, error,
                       "module_load: cannot read '%s': %s", desc.path, why.c_str());
  }
  out.assign(bytes.begin(), bytes.end());
  return HAL_SUCCESS;
}

// The image's own defined symbols, after the checks that keep dlopen from
// touching bytes past its end; false with |why| when it fails them.
bool inspect_image(const void* data, size_t size, Module::DefinedSymbols& symbols,
                   std::string& why) {
  if (!hal::util::check_elf_image(data, size, why)) return false;
  for (hal::util::ElfDefinedSymbol& symbol : hal::util::elf_defined_symbols(data, size)) {
    symbols.emplace(std::move(symbol.name), symbol.function);
  }
  return true;
}

}  // namespace

Kernel::Kernel(Module& module, std::string name, void* entry, std::vector<hal_arg_type_t> types)
    : KernelInfo(std::move(name), std::move(types), 0, 0),
      module_(module),
      entry_(reinterpret_cast<void (*)()>(entry)),
      bounds_checked_(module.bounds_checked()) {
  ffi_types_.reserve(arg_types().size() + 2);
  ffi_types_.push_back(&ffi_type_pointer);
  for (hal_arg_type_t type : arg_types()) ffi_types_.push_back(ffi_type_of(type));
  if (bounds_checked_) ffi_types_.push_back(&ffi_type_pointer);
  if (ffi_prep_cif(&cif_, FFI_DEFAULT_ABI, static_cast<unsigned>(ffi_types_.size()), &ffi_type_void,
                   ffi_types_.data()) != FFI_OK) {
    throw std::runtime_error("ffi_prep_cif failed for kernel " + this->name());
  }
}

Module::Module(Device& device, void* handle, int memfd, std::string origin, DefinedSymbols symbols,
               bool bounds_checked)
    : device_(device),
      bounds_checked_(bounds_checked),
      handle_(handle),
      memfd_(memfd),
      origin_(std::move(origin)),
      symbols_(std::move(symbols)) {}

void* Module::defined_symbol(const std::string& name, bool function) const {
  const auto found = symbols_.find(name);
  if (found == symbols_.end() || found->second != function) return nullptr;
  void* address = dlsym(handle_, name.c_str());
  if (address == nullptr) return nullptr;
  // The address must lie in this module, not in an object interposed on it.
  link_map* own = nullptr;
  link_map* owner = nullptr;
  Dl_info info{};
  if (dlinfo(handle_, RTLD_DI_LINKMAP, &own) != 0 ||
      dladdr1(address, &info, reinterpret_cast<void**>(&owner), RTLD_DL_LINKMAP) == 0 ||
      owner != own) {
    return nullptr;
  }
  return address;
}

Module::~Module() {
  kernels_.clear();
  dlclose(handle_);
  if (memfd_ >= 0) close(memfd_);
}

Kernel& Module::add_kernel(std::string name, void* entry, std::vector<hal_arg_type_t> arg_types) {
  auto kernel = std::make_unique<Kernel>(*this, std::move(name), entry, std::move(arg_types));
  std::lock_guard lock(mutex_);
  kernels_.push_back(std::move(kernel));
  return *kernels_.back();
}

namespace {

// glibc's dlopen hands back an object already loaded under the same name
// without reading the file. A staged image is named by its memfd's number,
// which is ours while we hold it, yet an object loaded earlier under that
// number can still be mapped (its memfd closed behind its module's back, or
// an object dlclose did not unmap): dlopen would then give the new module the
// old module's code. The image moves to a number no loaded object is named
// after; |memfd| and |path| are updated.
hal_result_t name_freshly(int& memfd, std::string& path, const plugin::ErrorReporter& report) {
  std::vector<int> taken_numbers;
  hal_result_t result = HAL_SUCCESS;
  while (void* loaded = dlopen(path.c_str(), RTLD_LAZY | RTLD_NOLOAD)) {
    dlclose(loaded);
    const int moved = fcntl(memfd, F_DUPFD_CLOEXEC, memfd + 1);
    if (moved < 0) {
      const int error = errno;
      result = report.fail(error == EMFILE ? HAL_ERROR_OUT_OF_MEMORY : HAL_ERROR_INTERNAL, error,
                           "module_load: %s names an object still loaded, and the image cannot "
                           "move to another descriptor: %s",
                           path.c_str(), std::strerror(error));
      break;
    }
    taken_numbers.push_back(memfd);
    memfd = moved;
    path = "/proc/self/fd/" + std::to_string(memfd);
  }
  for (const int number : taken_numbers) close(number);
  return result;
}

}  // namespace

hal_result_t Module::load(Device& owner, const hal_module_desc_t& desc, Module*& out_module) {
  const plugin::ErrorReporter& report = owner.report();
  // The loader let through only the formats in the device's module_formats.
  int memfd = -1;
  std::string path;
  std::string origin;
  std::string why;
  bool bounds_checked = false;
  Module::DefinedSymbols symbols;
  // Every image is checked before dlopen maps it: a truncated object would
  // otherwise kill the process with SIGBUS inside dlopen.
  auto stage_in_memfd = [&](const void* data, size_t size) {
    memfd = image_to_memfd(data, size);
    if (memfd < 0) {
      const int error = errno;
      return report.fail(hal::util::is_disk_full(error) || error == ENOMEM ? HAL_ERROR_OUT_OF_MEMORY
                                                                           : HAL_ERROR_INTERNAL,
                         error, "module_load: cannot stage the %zu-byte image in a memfd: %s", size,
                         std::strerror(error));
    }
    path = "/proc/self/fd/" + std::to_string(memfd);
    return HAL_SUCCESS;
  };
  if (desc.format == HAL_MODULE_FORMAT_HAL_DIALECT) {
    // Compiled (or found in the cache and verified) to the bytes of a shared
    // object, loaded from a memfd: the file in the cache could change after
    // its hash was checked, the memfd cannot.
    std::string source;
    if (hal_result_t read = read_dialect_source(desc, report, source); read != HAL_SUCCESS) {
      return read;
    }
    CompiledDialect compiled;
    bounds_checked = owner.plugin().bounds_checks();
    if (hal_result_t result =
            compile_dialect(source, owner.plugin().cpu().model, bounds_checked, report, compiled);
        result != HAL_SUCCESS) {
      return result;
    }
    origin = std::move(compiled.origin);
    if (!inspect_image(compiled.image.data(), compiled.image.size(), symbols, why)) {
      return report.fail(HAL_ERROR_INTERNAL, 0, "module_load: %s is not loadable: %s",
                         origin.c_str(), why.c_str());
    }
    if (hal_result_t staged = stage_in_memfd(compiled.image.data(), compiled.image.size());
        staged != HAL_SUCCESS) {
      return staged;
    }
  } else if (desc.data != nullptr) {
    origin = "an in-memory image of " + std::to_string(desc.size) + " bytes";
    if (!inspect_image(desc.data, desc.size, symbols, why)) {
      return report.fail(HAL_ERROR_INVALID_MODULE, 0,
                         "module_load: %s is not a loadable CPU shared object: %s", origin.c_str(),
                         why.c_str());
    }
    if (hal_result_t staged = stage_in_memfd(desc.data, desc.size); staged != HAL_SUCCESS) {
      return staged;
    }
  } else {
    // The user's own file, loaded by its path (so $ORIGIN and "the same
    // path shares global data" hold), after the checks on its bytes. Only a
    // regular file: a FIFO or a device must not block or flood the read.
    path = desc.path;
    origin = "'" + path + "'";
    std::vector<unsigned char> bytes;
    int error = 0;
    hal::util::ReadRule rule;
    rule.max_bytes = kMaxModuleBytes;
    if (!hal::util::read_regular_file(AT_FDCWD, path, rule, bytes, error, why)) {
      return report.fail(error == ENOENT ? HAL_ERROR_NOT_FOUND : HAL_ERROR_INVALID_MODULE, error,
                         "module_load: cannot load %s: %s", origin.c_str(), why.c_str());
    }
    if (!inspect_image(bytes.data(), bytes.size(), symbols, why)) {
      return report.fail(HAL_ERROR_INVALID_MODULE, 0,
                         "module_load: %s is not a loadable CPU shared object: %s", origin.c_str(),
                         why.c_str());
    }
  }
  if (memfd >= 0) {
    if (hal_result_t named = name_freshly(memfd, path, report); named != HAL_SUCCESS) {
      close(memfd);
      return named;
    }
  }
  dlerror();  // clear any stale message
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* reason = dlerror();
    if (memfd >= 0) close(memfd);
    return report.fail(HAL_ERROR_INVALID_MODULE, 0,
                       "module_load: %s is not a loadable CPU shared object: %s", origin.c_str(),
                       reason != nullptr ? reason : "dlopen failed");
  }
  std::shared_ptr<Module> module;
  try {
    module = std::make_shared<Module>(owner, handle, memfd, std::move(origin), std::move(symbols),
                                      bounds_checked);
  } catch (...) {
    dlclose(handle);
    if (memfd >= 0) close(memfd);
    throw;
  }
  out_module = owner.add_module(std::move(module));
  return HAL_SUCCESS;
}

hal_result_t Module::get_kernel(const hal_kernel_desc_t& desc, Kernel*& out_kernel) {
  const plugin::ErrorReporter& report = device_.report();
  const std::string name = desc.name;
  // Only a function the module itself defines is a kernel: not data, not an
  // import, not what a dependency defines (dlsym would find libc's abort).
  void* entry = defined_symbol(name, true);
  if (entry == nullptr) {
    return report.fail(HAL_ERROR_NOT_FOUND, 0,
                       "kernel_get: %s has no entry point '%s' (a kernel is a function the "
                       "module itself defines and exports)",
                       origin().c_str(), name.c_str());
  }
  // The module's own signature, when it exports one.
  const std::string signature_symbol = "hal_kernel_signature_" + name;
  const auto* exported = static_cast<const char*>(defined_symbol(signature_symbol, false));
  std::vector<hal_arg_type_t> exported_types;
  if (exported != nullptr) {
    // SPEC.md §8: a string off the grammar counts as no module signature,
    // HAL_ERROR_ARGUMENT_MISMATCH naming it. It is read no further than
    // the longest signature the grammar admits, and its NUL.
    const size_t length = strnlen(exported, hal::util::kMaxSignatureChars + 1);
    std::string why;
    if (length > hal::util::kMaxSignatureChars) {
      why = "it is longer than any signature (" + std::to_string(hal::util::kMaxSignatureChars) +
            " characters)";
    }
    if (!why.empty() ||
        !plugin::parse_signature(std::string_view(exported, length), exported_types, why)) {
      return report.fail(HAL_ERROR_ARGUMENT_MISMATCH, 0,
                         "kernel_get: %s in %s is not a signature, so kernel '%s' has none: %s",
                         signature_symbol.c_str(), origin().c_str(), name.c_str(), why.c_str());
    }
  }
  // Bound to the module's own signature when it exports one: the loader
  // compares a declared signature with the one reported in out_info.
  std::vector<hal_arg_type_t> types;
  if (exported != nullptr) {
    types = std::move(exported_types);
  } else if (desc.arg_types != nullptr) {
    types.assign(desc.arg_types, desc.arg_types + desc.arg_count);
  } else {
    return report.fail(HAL_ERROR_ARGUMENT_MISMATCH, 0,
                       "kernel_get: '%s' has no signature: declare arg_types or export %s "
                       "with HAL_CPU_KERNEL_SIGNATURE",
                       name.c_str(), signature_symbol.c_str());
  }
  Kernel& kernel = add_kernel(name, entry, std::move(types));
  const auto* static_shared =
      static_cast<const uint32_t*>(defined_symbol("hal_kernel_static_shared_" + name, false));
  const auto* max_threads =
      static_cast<const uint32_t*>(defined_symbol("hal_kernel_max_threads_" + name, false));
  kernel.set_limits(
      max_threads != nullptr && *max_threads != 0 ? *max_threads : kMaxThreadsPerBlock,
      static_shared != nullptr ? *static_shared : 0);
  out_kernel = &kernel;
  return HAL_SUCCESS;
}

}  // namespace hal::cpu
