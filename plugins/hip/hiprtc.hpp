// hiprtc, the HIP runtime compiler: in ROCm 5.x it lives inside
// libamdhip64.so.5 (no separate library), so it is resolved from the runtime
// the plugin opened; from ROCm 6 on it is libhiprtc.so.<major>, searched like
// the runtime (library_search.hpp). HAL_HIP_HIPRTC_PATH names another library
// (tests pair the stand-in runtime with the real compiler). It compiles for a named
// GPU architecture without a GPU. The dialect compiler is here too, shared
// by the plugin and its tests (hal_hip_core).
#ifndef HAL_PLUGINS_HIP_HIPRTC_HPP_
#define HAL_PLUGINS_HIP_HIPRTC_HPP_

#include <hip/hiprtc.h>

#include <atomic>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "hal_dialect/dialect.hpp"
#include "hal_plugin_sdk/vendor_library.hpp"

namespace hal::hip {

class Hiprtc {
 public:
  // Resolves hiprtc from HAL_HIP_HIPRTC_PATH when set, else from
  // |runtime_library| (a dlopen handle) when it has the entry points, else
  // from the first of libhiprtc.so.7, libhiprtc.so.6, libamdhip64.so.5 found.
  // Null with |why| when the entry points are absent.
  static std::unique_ptr<Hiprtc> open(void* runtime_library, std::string& why);
  Hiprtc(const Hiprtc&) = delete;
  Hiprtc& operator=(const Hiprtc&) = delete;

  // Compiles HIP C++ |source| to a code object for |arch| (a gcnArchName
  // such as "gfx90a:sramecc+:xnack-"). False, with the compiler's log (or
  // the hiprtc error) in |log|, when it fails or |arch| is not a GPU
  // architecture name.
  bool compile(const std::string& source, const char* name, const std::string& arch,
               std::string& code, std::string& log) const;

  // The options compile gives hiprtc for |arch|.
  std::vector<std::string> options(const std::string& arch) const;
  // hiprtcVersion's answer and the file hiprtc was taken from (size, mtime,
  // inode): a kernel cache key names the compiler this exactly.
  const std::string& identity() const { return identity_; }
  // How many programs compile has handed to hiprtc (a kernel cache hit adds
  // none). Thread-safe.
  size_t compile_count() const { return compile_count_.load(std::memory_order_relaxed); }

 private:
  // All eight entry points from |library|; false when one is missing.
  bool resolve_entry_points(void* library);
  Hiprtc() = default;
  // The library HAL_HIP_HIPRTC_PATH (or the default) names, when hiprtc is
  // not taken from the runtime the plugin opened.
  hal::plugin::VendorLibrary library_;
  std::string identity_;
  mutable std::atomic<size_t> compile_count_{0};
  decltype(&::hiprtcGetErrorString) get_error_string_ = nullptr;
  decltype(&::hiprtcCreateProgram) create_program_ = nullptr;
  decltype(&::hiprtcDestroyProgram) destroy_program_ = nullptr;
  decltype(&::hiprtcCompileProgram) compile_program_ = nullptr;
  decltype(&::hiprtcGetProgramLogSize) get_log_size_ = nullptr;
  decltype(&::hiprtcGetProgramLog) get_log_ = nullptr;
  decltype(&::hiprtcGetCodeSize) get_code_size_ = nullptr;
  decltype(&::hiprtcGetCode) get_code_ = nullptr;
};

// True when |arch| reads as an AMD GPU target: "gfx" and hex digits, then
// target features (":sramecc+", ":xnack-"). What the device reports is
// checked before it becomes a compiler option, since hiprtc's option parser
// crashes on some malformed option strings (HIP 5.2).
bool valid_arch_name(std::string_view arch);

// The architecture without its target features: "gfx90a".
std::string base_arch(std::string_view arch);

// A HAL dialect module compiled for the hip plugin: the translation (its
// kernel records give kernel_get the signatures) and the code object.
struct CompiledDialect {
  dialect::TranslatedModule translated;
  std::string code;
};

enum class DialectStatus { kOk, kInvalidSource, kCompilerRejected };

// Translates |source| to HIP C++ and compiles it for |arch|. On failure
// |message| says why: the dialect's diagnostic, or hiprtc's log. Compiled
// each time; module_load goes through the kernel cache (dialect_cache.hpp).
DialectStatus compile_dialect(const Hiprtc& hiprtc, std::string_view source,
                              const std::string& arch, CompiledDialect& out, std::string& message);

// Compiles an already translated module's text for |arch|. False with
// |message| (hiprtc's log, naming the arch).
bool compile_translated(const Hiprtc& hiprtc, const dialect::TranslatedModule& translated,
                        const std::string& arch, std::string& code, std::string& message);

}  // namespace hal::hip

#endif  // HAL_PLUGINS_HIP_HIPRTC_HPP_
