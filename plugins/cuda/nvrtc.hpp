// NVRTC, opened at run time (libnvrtc.so.13), so the plugin loads on a machine
// with a driver but no toolkit: there it loads PTX and cubin, and the HAL
// dialect is not offered. The dialect compiler is here too, shared by the
// plugin and its tests (hal_cuda_core).
#ifndef HAL_PLUGINS_CUDA_NVRTC_HPP_
#define HAL_PLUGINS_CUDA_NVRTC_HPP_

#include <nvrtc.h>

#include <atomic>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "hal_dialect/dialect.hpp"

namespace hal::cuda {

class Nvrtc {
 public:
  // Opens HAL_CUDA_NVRTC_PATH or libnvrtc.so.13; null with |why| when absent.
  // The headers the dialect's prelude includes (cuda_fp16.h) are looked for
  // in HAL_CUDA_INCLUDE_PATH, then beside the library (../include), then in
  // the toolkit the plugin was built with.
  static std::unique_ptr<Nvrtc> open(std::string& why);
  Nvrtc(const Nvrtc&) = delete;
  Nvrtc& operator=(const Nvrtc&) = delete;

  // The toolkit include directory NVRTC is given, "" when none was found.
  std::string include_dir() const {
    return include_options_.empty() ? std::string() : include_options_.front().substr(2);
  }
  // "13.0".
  std::string version() const;
  // The version and the file the library was loaded from (size, mtime,
  // inode): a kernel cache key names the compiler this exactly.
  const std::string& identity() const { return identity_; }
  // The options compile_to_ptx gives NVRTC for compute_|arch|.
  std::vector<std::string> options(int arch) const;
  // How many programs compile_to_ptx has handed to NVRTC (a kernel cache hit
  // adds none). Thread-safe.
  size_t compile_count() const { return compile_count_.load(std::memory_order_relaxed); }
  // The virtual architecture to compile for on a device of compute
  // capability |major|.|minor|: the highest NVRTC supports that is not above
  // the device's (PTX runs on later devices). 0 when NVRTC supports none.
  int pick_arch(int major, int minor) const;
  // Compiles CUDA C++ |source| to PTX for compute_|arch|. False, with the
  // compiler's log (or the NVRTC error) in |log|, when it fails.
  bool compile_to_ptx(const std::string& source, const char* name, int arch, std::string& ptx,
                      std::string& log) const;

 private:
  Nvrtc() = default;
  void* library_ = nullptr;
  std::vector<int> archs_;
  // Where the translated source's #include <cuda_fp16.h> is found (-I).
  std::vector<std::string> include_options_;
  int major_ = 0, minor_ = 0;
  std::string identity_;
  mutable std::atomic<size_t> compile_count_{0};
  decltype(&::nvrtcGetErrorString) get_error_string_ = nullptr;
  decltype(&::nvrtcCreateProgram) create_program_ = nullptr;
  decltype(&::nvrtcDestroyProgram) destroy_program_ = nullptr;
  decltype(&::nvrtcCompileProgram) compile_program_ = nullptr;
  decltype(&::nvrtcGetProgramLogSize) get_log_size_ = nullptr;
  decltype(&::nvrtcGetProgramLog) get_log_ = nullptr;
  decltype(&::nvrtcGetPTXSize) get_ptx_size_ = nullptr;
  decltype(&::nvrtcGetPTX) get_ptx_ = nullptr;
};

// A HAL dialect module compiled for the cuda plugin: the translation (its
// kernel records give kernel_get the signatures) and the PTX.
struct CompiledDialect {
  dialect::TranslatedModule translated;
  std::string ptx;
};

enum class DialectStatus { kOk, kInvalidSource, kCompilerRejected };

// Translates |source| to CUDA C++ and compiles it to PTX for compute_|arch|.
// On failure |message| says why: the dialect's diagnostic, or NVRTC's log.
// Compiled each time; module_load goes through the kernel cache
// (dialect_cache.hpp).
DialectStatus compile_dialect(const Nvrtc& nvrtc, std::string_view source, int arch,
                              CompiledDialect& out, std::string& message);

// Compiles an already translated module's text to PTX for compute_|arch|.
// False with |message| (NVRTC's log, naming the version and the arch).
bool compile_translated(const Nvrtc& nvrtc, const dialect::TranslatedModule& translated, int arch,
                        std::string& ptx, std::string& message);

}  // namespace hal::cuda

#endif  // HAL_PLUGINS_CUDA_NVRTC_HPP_
