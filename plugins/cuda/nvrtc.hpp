// NVRTC, opened at run time (libnvrtc.so.13), so the plugin loads on a machine
// with a driver but no toolkit: there it loads PTX and cubin, and the HAL
// dialect is not offered. The dialect compiler is here too, shared by the
// plugin and its tests (hal_cuda_core).
//
// The dialect is compiled to a cubin for the device's own architecture
// (--gpu-architecture=sm_XY, nvrtcGetCUBIN) whenever NVRTC can: "NVRTC can
// generate cubins directly ... by specifying the actual architecture" (NVRTC
// user guide, "Basic Usage"), and a cubin does not depend on the driver's PTX
// JIT, which refuses PTX of a newer ISA than the driver's own ("PTX produced
// for a CUDA version newer than the driver cannot be loaded": CUDA
// compatibility guide, "PTX compatibility"). Only when NVRTC cannot emit the
// device's architecture is PTX for the best virtual architecture below it
// produced, and the reason logged.
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

// The architecture a compile is for and the form of its output.
struct CompileTarget {
  int arch = 0;         // 90 for sm_90 / compute_90; 0: nothing to compile for
  bool cubin = false;   // a cubin for sm_<arch>, else PTX for compute_<arch>
  std::string why_ptx;  // when PTX: why not a cubin (for the log)
  // "sm_90 cubin" or "compute_90 PTX".
  std::string describe() const;
};

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
  // What compile gives NVRTC for |target|: --gpu-architecture=sm_XY for a
  // cubin, compute_XY for PTX; with |ptxas_verbose| also --ptxas-options=-v
  // (ptxas's register, stack and spill figures in the program log).
  std::vector<std::string> options(const CompileTarget& target, bool ptxas_verbose = false) const;
  // How many programs compile has handed to NVRTC (a kernel cache hit adds
  // none). Thread-safe.
  size_t compile_count() const { return compile_count_.load(std::memory_order_relaxed); }
  // The virtual architecture to compile for on a device of compute
  // capability |major|.|minor|: the highest NVRTC supports that is not above
  // the device's (PTX runs on later devices). 0 when NVRTC supports none.
  int pick_arch(int major, int minor) const;
  // What to compile for on a device of compute capability |major|.|minor|:
  // a cubin for sm_<major><minor> when NVRTC offers that architecture and
  // nvrtcGetCUBIN, else PTX for pick_arch's, with the reason (arch 0 when
  // NVRTC offers nothing at or below the device).
  CompileTarget pick_target(int major, int minor) const;
  // True when this NVRTC can hand out cubins (nvrtcGetCUBIN, CUDA 11.1+).
  bool emits_cubin() const { return get_cubin_ != nullptr && get_cubin_size_ != nullptr; }
  // Compiles CUDA C++ |source| for |target|: the cubin or the PTX text to
  // |image|. False, with the compiler's log (or the NVRTC error) in |log|,
  // when it fails; on success |log| holds the program log (ptxas -v's
  // figures with |ptxas_verbose|).
  bool compile(const std::string& source, const char* name, const CompileTarget& target,
               std::string& image, std::string& log, bool ptxas_verbose = false) const;

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
  decltype(&::nvrtcGetCUBINSize) get_cubin_size_ = nullptr;  // optional
  decltype(&::nvrtcGetCUBIN) get_cubin_ = nullptr;           // optional
};

// One entry's figures from ptxas -v (NVRTC's program log with
// --ptxas-options=-v): "Used 40 registers, used 1 barriers, 256 bytes smem"
// and "0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads".
struct PtxasEntry {
  std::string entry;
  // A kernel ("Compiling entry function"), or a device function ptxas kept
  // out of line and reports on its own ("Function properties for" only:
  // libdevice's slow paths, such as sin/cos's argument reduction).
  bool is_kernel = false;
  int registers = -1;  // -1: no "Used N registers" line was seen
  long stack_bytes = 0, spill_store_bytes = 0, spill_load_bytes = 0, shared_bytes = 0;
};

// The entries of a ptxas -v log, in the order ptxas compiled them.
std::vector<PtxasEntry> parse_ptxas_log(std::string_view log);

// A HAL dialect module compiled for the cuda plugin: the translation (its
// kernel records give kernel_get the signatures) and the cubin or PTX.
struct CompiledDialect {
  dialect::TranslatedModule translated;
  std::string image;  // a cubin when the target is, else PTX text
};

enum class DialectStatus { kOk, kInvalidSource, kCompilerRejected };

// Translates |source| to CUDA C++ and compiles it for |target|.
// On failure |message| says why: the dialect's diagnostic, or NVRTC's log.
// Compiled each time; module_load goes through the kernel cache
// (dialect_cache.hpp).
DialectStatus compile_dialect(const Nvrtc& nvrtc, std::string_view source,
                              const CompileTarget& target, CompiledDialect& out,
                              std::string& message);

// Compiles an already translated module's text for |target|. False with
// |message| (NVRTC's log, naming the version and the target).
bool compile_translated(const Nvrtc& nvrtc, const dialect::TranslatedModule& translated,
                        const CompileTarget& target, std::string& image, std::string& message);

}  // namespace hal::cuda

#endif  // HAL_PLUGINS_CUDA_NVRTC_HPP_
