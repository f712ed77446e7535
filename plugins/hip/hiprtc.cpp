#include "hiprtc.hpp"

#include <dlfcn.h>

#include <vector>

#include "hal_util/env.hpp"
#include "hal_util/library_identity.hpp"
#include "library_search.hpp"

namespace hal::hip {
namespace {

constexpr size_t kMaxLogBytes = 6000;

template <class Fn>
bool resolve(void* library, const char* name, Fn& out) {
  out = reinterpret_cast<Fn>(dlsym(library, name));
  return out != nullptr;
}

bool is_hex(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
}

}  // namespace

bool valid_arch_name(std::string_view arch) {
  if (arch.size() < 4 || arch.size() > 64 || arch.substr(0, 3) != "gfx") return false;
  size_t at = 3;
  while (at < arch.size() && is_hex(arch[at])) ++at;
  if (at == 3) return false;
  // Features: ":name+" or ":name-", name in [a-z0-9].
  while (at < arch.size()) {
    if (arch[at++] != ':') return false;
    const size_t start = at;
    while (at < arch.size() && ((arch[at] >= 'a' && arch[at] <= 'z') || is_hex(arch[at]))) ++at;
    if (at == start || at == arch.size() || (arch[at] != '+' && arch[at] != '-')) return false;
    ++at;
  }
  return true;
}

std::string base_arch(std::string_view arch) {
  return std::string(arch.substr(0, arch.find(':')));
}

bool Hiprtc::resolve_entry_points(void* library) {
  return resolve(library, "hiprtcGetErrorString", get_error_string_) &&
         resolve(library, "hiprtcCreateProgram", create_program_) &&
         resolve(library, "hiprtcDestroyProgram", destroy_program_) &&
         resolve(library, "hiprtcCompileProgram", compile_program_) &&
         resolve(library, "hiprtcGetProgramLogSize", get_log_size_) &&
         resolve(library, "hiprtcGetProgramLog", get_log_) &&
         resolve(library, "hiprtcGetCodeSize", get_code_size_) &&
         resolve(library, "hiprtcGetCode", get_code_);
}

std::unique_ptr<Hiprtc> Hiprtc::open(void* runtime_library, std::string& why) {
  const char* configured = hal::util::env_nonempty("HAL_HIP_HIPRTC_PATH");
  std::unique_ptr<Hiprtc> hiprtc(new Hiprtc());
  void* library = runtime_library;
  std::string path = "the HIP runtime";
  // ROCm 5 keeps hiprtc inside libamdhip64; from ROCm 6 on it is a library
  // of its own, libhiprtc.so.<major> (searched like the runtime). A library
  // of its own is closed again with |hiprtc| when it is refused.
  if (configured == nullptr && library != nullptr && hiprtc->resolve_entry_points(library)) {
    // found in the runtime
  } else {
    std::string first_error;
    library = nullptr;
    for (const std::string& candidate : rocm_library_candidates(
             "HAL_HIP_HIPRTC_PATH", {"libhiprtc.so.7", "libhiprtc.so.6", "libamdhip64.so.5"})) {
      std::string error;
      if (hiprtc->library_.open(candidate, error)) {
        library = hiprtc->library_.handle();
        path = candidate;
        break;
      }
      if (first_error.empty()) first_error = error;
    }
    if (library == nullptr) {
      why = configured != nullptr ? first_error
                                  : "the HIP runtime has no hiprtc entry points (ROCm 6+ keeps "
                                    "them in libhiprtc) and " +
                                        rocm_searched_places(first_error);
      return nullptr;
    }
    if (!hiprtc->resolve_entry_points(library)) {
      why = path + " has no hiprtc entry points";
      return nullptr;
    }
  }
  // hiprtcVersion is optional: the library file names the compiler anyway.
  // Appended piece by piece: GCC 12 warns (-Wrestrict) on "text" + std::string&&.
  decltype(&::hiprtcVersion) version = nullptr;
  int major = 0, minor = 0;
  std::string& identity = hiprtc->identity_;
  identity = "hiprtc ";
  if (resolve(library, "hiprtcVersion", version) && version(&major, &minor) == HIPRTC_SUCCESS) {
    identity.append(std::to_string(major)).append(".").append(std::to_string(minor));
  } else {
    identity.append("(no version)");
  }
  identity.append(" ").append(
      hal::util::library_identity(reinterpret_cast<void*>(hiprtc->compile_program_)));
  // Accepted: kept for the process, as the runtime is (it is the same
  // library, and compiling starts its threads).
  hiprtc->library_.pin();
  return hiprtc;
}

std::vector<std::string> Hiprtc::options(const std::string& arch) const {
  // --offload-arch: HIP 5.2's hiprtc crashes on --gpu-architecture= (measured).
  return {"--offload-arch=" + arch, "-std=c++17", "-O3"};
}

bool Hiprtc::compile(const std::string& source, const char* name, const std::string& arch,
                     std::string& code, std::string& log) const {
  if (!valid_arch_name(arch)) {
    log = "'" + arch + "' is not an AMD GPU architecture name (gfx<hex>[:feature+|-]...)";
    return false;
  }
  hiprtcProgram program = nullptr;
  hiprtcResult result = create_program_(&program, source.c_str(), name, 0, nullptr, nullptr);
  if (result != HIPRTC_SUCCESS) {
    log = std::string("hiprtcCreateProgram: ") + get_error_string_(result);
    return false;
  }
  const std::vector<std::string> texts = options(arch);
  std::vector<const char*> pointers;
  for (const std::string& option : texts) pointers.push_back(option.c_str());
  compile_count_.fetch_add(1, std::memory_order_relaxed);
  result = compile_program_(program, static_cast<int>(pointers.size()), pointers.data());
  size_t log_size = 0;
  log.clear();
  if (get_log_size_(program, &log_size) == HIPRTC_SUCCESS && log_size > 1) {
    log.resize(log_size);
    get_log_(program, log.data());
    log.resize(log_size - 1);
    if (log.size() > kMaxLogBytes) log = log.substr(0, kMaxLogBytes) + "\n[... log cut]";
  }
  bool ok = result == HIPRTC_SUCCESS;
  if (!ok) {
    log = std::string("hiprtcCompileProgram: ") + get_error_string_(result) + "\n" + log;
  } else {
    size_t size = 0;
    ok = get_code_size_(program, &size) == HIPRTC_SUCCESS && size > 0;
    if (ok) {
      code.assign(size, '\0');
      ok = get_code_(program, code.data()) == HIPRTC_SUCCESS;
    }
    if (!ok) log = "hiprtcGetCode failed";
  }
  destroy_program_(&program);
  return ok;
}

DialectStatus compile_dialect(const Hiprtc& hiprtc, std::string_view source,
                              const std::string& arch, CompiledDialect& out, std::string& message) {
  dialect::Diagnostic diagnostic;
  if (!dialect::translate(source, dialect::Backend::kHip, out.translated, diagnostic)) {
    message = "the HAL dialect source is invalid: " + diagnostic.to_string();
    return DialectStatus::kInvalidSource;
  }
  return compile_translated(hiprtc, out.translated, arch, out.code, message)
             ? DialectStatus::kOk
             : DialectStatus::kCompilerRejected;
}

bool compile_translated(const Hiprtc& hiprtc, const dialect::TranslatedModule& translated,
                        const std::string& arch, std::string& code, std::string& message) {
  std::string log;
  if (!hiprtc.compile(translated.text, "hal_dialect.hip", arch, code, log)) {
    message = "hiprtc rejected the translated HAL dialect (" + arch + "):\n" + log;
    return false;
  }
  return true;
}

}  // namespace hal::hip
