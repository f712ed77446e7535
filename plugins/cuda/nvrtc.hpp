// NVRTC, opened at run time (libnvrtc.so.13), so the plugin loads on a machine
// with a driver but no toolkit: there it loads PTX and cubin, and the HAL
// dialect is not offered. The dialect compiler is here too, shared by the
// plugin and its tests (hal_cuda_core).
#ifndef HAL_PLUGINS_CUDA_NVRTC_HPP_
#define HAL_PLUGINS_CUDA_NVRTC_HPP_

#include <nvrtc.h>

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
// Compiled each time (no on-disk cache yet).
DialectStatus compile_dialect(const Nvrtc& nvrtc, std::string_view source, int arch,
                              CompiledDialect& out, std::string& message);

}  // namespace hal::cuda

#endif  // HAL_PLUGINS_CUDA_NVRTC_HPP_
