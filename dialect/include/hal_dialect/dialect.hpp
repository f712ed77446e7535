// The HAL kernel dialect's front end (SPEC.md, "Kernel dialect"): one
// translation, shared by every plugin, from a dialect source to each
// backend's language, plus the record of every kernel in it.
#ifndef HAL_DIALECT_DIALECT_HPP_
#define HAL_DIALECT_DIALECT_HPP_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "hal/kernel.h"
#include "hal_dialect/program.hpp"
#include "hal_dialect/token.hpp"

namespace hal::dialect {

enum class Backend : uint8_t {
  kCpp,     // C++20 for the cpu plugin's system compiler (hal/cpu_kernel.h convention)
  kOpenCL,  // OpenCL C 1.2
  kCuda,    // CUDA C++ for NVRTC
  kHip,     // HIP C++ for hiprtc
};

std::string_view backend_name(Backend backend);

// How the C++ backend runs a kernel's work-items (SPEC.md, "Work-items and
// barriers on the cpu plugin").
enum class CpuShape : uint8_t {
  kItemLoop,    // no barrier: one loop over the work-items
  kRegions,     // barriers split the body into parallel regions, each a loop over the work-items
  kCoroutines,  // barriers the splitter does not handle: one coroutine per work-item
};
std::string_view cpu_shape_name(CpuShape shape);  // "item loop", "parallel regions", "coroutines"

// What a plugin needs to know about one compiled kernel. With the module's
// binary and format (TranslatedModule) it is the kernel record of SPEC.md.
struct KernelRecord {
  std::string entry;                      // the entry point's name in the binary
  std::vector<hal_arg_type_t> arg_types;  // the signature, from the source
  uint32_t max_threads_per_block = 0;     // max_block(N), 0: the device's limit
  uint32_t static_shared_bytes = 0;       // `shared` arrays
  bool dynamic_shared = false;            // uses dynamic_shared(T): OpenCL gets a hidden
                                          // trailing __local argument
  bool barriers = false;
  // Translated bounds-checked (TranslateOptions): the entry takes a hidden last
  // argument, the launch's hal_bounds_record_t* (hal_dialect/bounds_check.h).
  bool bounds_checked = false;
  CpuShape cpu_shape = CpuShape::kItemLoop;  // the C++ backend's shape for it
  std::string cpu_shape_note;                // kRegions: the split; kCoroutines: why not split
};

struct TranslatedModule {
  Backend backend = Backend::kCpp;
  std::string text;  // the backend-language source, with #line back to the dialect source
  std::vector<KernelRecord> kernels;

  const KernelRecord* find(std::string_view entry) const;
};

// The front end's version, part of the cuda and hip plugins' kernel cache
// keys (SPEC.md §8). The translated text is in the key too; this is raised
// when a change makes the same text mean something else to a plugin (its
// kernel records, or how the plugin builds what it compiles).
inline constexpr std::string_view kTranslatorVersion = "hal-dialect 1";

struct TranslateOptions {
  // kCpp only (SPEC.md §14.1): every access through a `global` pointer is
  // checked against the allocation of the kernel argument it came from
  // (hal_rt::checked<T> for `global T*`); each kernel takes the launch's
  // hal_bounds_record_t* as a hidden last argument (KernelRecord::bounds_checked).
  bool bounds_checked = false;
};

// Parses and translates |source|. False, with |error|, when the source
// breaks a rule of the dialect.
bool translate(std::string_view source, Backend backend, TranslatedModule& out, Diagnostic& error,
               const TranslateOptions& options = {});

// The translation of an already parsed program.
std::string emit(const Program& program, Backend backend, const TranslateOptions& options = {});

// The C++ backend's shape for |kernel|, with a sentence for the log (the
// regions and per-item values, or why the kernel stays on coroutines).
CpuShape cpu_shape(const Program& program, const Kernel& kernel, std::string& note);

// "ptr,u32,f32" (hal/cpu_kernel.h).
std::string signature_text(const std::vector<hal_arg_type_t>& types);

// The preludes each translation starts with (prelude_*.cpp).
std::string_view cpp_prelude();
std::string_view cpp_coroutine_prelude();
std::string_view cpp_bounds_prelude();  // bounds_check.h and hal_rt::checked
std::string_view opencl_prelude();
std::string gpu_prelude(Backend backend);  // kCuda or kHip

}  // namespace hal::dialect

#endif  // HAL_DIALECT_DIALECT_HPP_
