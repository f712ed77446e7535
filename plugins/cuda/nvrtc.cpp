#include "nvrtc.hpp"

#include <string>
#include <vector>

#include <dlfcn.h>

#include <sys/stat.h>

#include <algorithm>

#include "library_search.hpp"
#include "hal_util/env.hpp"
#include "hal_util/library_identity.hpp"

namespace hal::cuda {
namespace {

constexpr char kDefaultNvrtc[] = "libnvrtc.so.13";
constexpr size_t kMaxLogBytes = 6000;

template <class Fn>
bool resolve(void* library, const char* name, Fn& out) {
  out = reinterpret_cast<Fn>(dlsym(library, name));
  return out != nullptr;
}

bool has_fp16_header(const std::string& dir) {
  struct stat info {};
  return !dir.empty() && stat((dir + "/cuda_fp16.h").c_str(), &info) == 0;
}

// The first directory with the toolkit's headers.
std::string find_include_dir(void* symbol_in_nvrtc) {
  if (const char* configured = hal::util::env_nonempty("HAL_CUDA_INCLUDE_PATH")) {
    if (has_fp16_header(configured)) return configured;
  }
  Dl_info info{};
  if (dladdr(symbol_in_nvrtc, &info) != 0 && info.dli_fname != nullptr) {
    std::string dir = info.dli_fname;
    dir = dir.substr(0, dir.find_last_of('/') + 1) + "../include";
    if (has_fp16_header(dir)) return dir;
  }
#ifdef HAL_CUDA_TOOLKIT_INCLUDE_DIR
  if (has_fp16_header(HAL_CUDA_TOOLKIT_INCLUDE_DIR)) return HAL_CUDA_TOOLKIT_INCLUDE_DIR;
#endif
  return {};
}

}  // namespace

std::unique_ptr<Nvrtc> Nvrtc::open(std::string& why) {
  const std::vector<std::string> candidates =
      library_candidates("HAL_CUDA_NVRTC_PATH", {kDefaultNvrtc, "libnvrtc.so.12"});
  void* library = nullptr;
  std::string path, first_error;
  for (const std::string& candidate : candidates) {
    library = dlopen(candidate.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (library != nullptr) {
      path = candidate;
      break;
    }
    const char* error = dlerror();
    if (first_error.empty()) {
      first_error = candidate + " not found: " + (error != nullptr ? error : "dlopen failed");
    }
  }
  if (library == nullptr) {
    why = hal::util::env_nonempty("HAL_CUDA_NVRTC_PATH") != nullptr ? first_error
                                                                    : searched_places(first_error);
    return nullptr;
  }
  std::unique_ptr<Nvrtc> nvrtc(new Nvrtc());
  nvrtc->library_ = library;
  decltype(&::nvrtcVersion) version = nullptr;
  decltype(&::nvrtcGetNumSupportedArchs) arch_count = nullptr;
  decltype(&::nvrtcGetSupportedArchs) archs = nullptr;
  const bool complete = resolve(library, "nvrtcVersion", version) &&
                        resolve(library, "nvrtcGetNumSupportedArchs", arch_count) &&
                        resolve(library, "nvrtcGetSupportedArchs", archs) &&
                        resolve(library, "nvrtcGetErrorString", nvrtc->get_error_string_) &&
                        resolve(library, "nvrtcCreateProgram", nvrtc->create_program_) &&
                        resolve(library, "nvrtcDestroyProgram", nvrtc->destroy_program_) &&
                        resolve(library, "nvrtcCompileProgram", nvrtc->compile_program_) &&
                        resolve(library, "nvrtcGetProgramLogSize", nvrtc->get_log_size_) &&
                        resolve(library, "nvrtcGetProgramLog", nvrtc->get_log_) &&
                        resolve(library, "nvrtcGetPTXSize", nvrtc->get_ptx_size_) &&
                        resolve(library, "nvrtcGetPTX", nvrtc->get_ptx_);
  if (!complete) {
    why = path + " lacks an NVRTC entry point";
    return nullptr;
  }
  version(&nvrtc->major_, &nvrtc->minor_);
  nvrtc->identity_ = "NVRTC " + nvrtc->version() + " " +
                     hal::util::library_identity(reinterpret_cast<void*>(nvrtc->compile_program_));
  const std::string include_dir =
      find_include_dir(reinterpret_cast<void*>(nvrtc->compile_program_));
  if (!include_dir.empty()) nvrtc->include_options_.push_back("-I" + include_dir);
  int count = 0;
  if (arch_count(&count) == NVRTC_SUCCESS && count > 0) {
    nvrtc->archs_.resize(static_cast<size_t>(count));
    archs(nvrtc->archs_.data());
  }
  return nvrtc;
}

std::string Nvrtc::version() const {
  return std::to_string(major_) + "." + std::to_string(minor_);
}

std::vector<std::string> Nvrtc::options(int arch) const {
  std::vector<std::string> options = {"--gpu-architecture=compute_" + std::to_string(arch),
                                      "--std=c++17", "-default-device"};
  options.insert(options.end(), include_options_.begin(), include_options_.end());
  return options;
}

int Nvrtc::pick_arch(int major, int minor) const {
  const int device = major * 10 + minor;
  int best = 0;
  for (int arch : archs_) {
    if (arch <= device) best = std::max(best, arch);
  }
  return best;
}

bool Nvrtc::compile_to_ptx(const std::string& source, const char* name, int arch, std::string& ptx,
                           std::string& log) const {
  nvrtcProgram program = nullptr;
  nvrtcResult result = create_program_(&program, source.c_str(), name, 0, nullptr, nullptr);
  if (result != NVRTC_SUCCESS) {
    log = std::string("nvrtcCreateProgram: ") + get_error_string_(result);
    return false;
  }
  const std::vector<std::string> texts = options(arch);
  std::vector<const char*> pointers;
  for (const std::string& option : texts) pointers.push_back(option.c_str());
  compile_count_.fetch_add(1, std::memory_order_relaxed);
  result = compile_program_(program, static_cast<int>(pointers.size()), pointers.data());
  size_t log_size = 0;
  log.clear();
  if (get_log_size_(program, &log_size) == NVRTC_SUCCESS && log_size > 1) {
    log.resize(log_size);
    get_log_(program, log.data());
    log.resize(log_size - 1);
    if (log.size() > kMaxLogBytes) log = log.substr(0, kMaxLogBytes) + "\n[... log cut]";
  }
  bool ok = result == NVRTC_SUCCESS;
  if (!ok) {
    log = std::string("nvrtcCompileProgram: ") + get_error_string_(result) + "\n" + log;
  } else {
    size_t size = 0;
    ok = get_ptx_size_(program, &size) == NVRTC_SUCCESS && size > 0;
    if (ok) {
      ptx.assign(size, '\0');
      ok = get_ptx_(program, ptx.data()) == NVRTC_SUCCESS;
      ptx.resize(size - 1);  // the size counts the NUL
    }
    if (!ok) log = "nvrtcGetPTX failed";
  }
  destroy_program_(&program);
  return ok;
}

DialectStatus compile_dialect(const Nvrtc& nvrtc, std::string_view source, int arch,
                              CompiledDialect& out, std::string& message) {
  dialect::Diagnostic diagnostic;
  if (!dialect::translate(source, dialect::Backend::kCuda, out.translated, diagnostic)) {
    message = "the HAL dialect source is invalid: " + diagnostic.to_string();
    return DialectStatus::kInvalidSource;
  }
  return compile_translated(nvrtc, out.translated, arch, out.ptx, message)
             ? DialectStatus::kOk
             : DialectStatus::kCompilerRejected;
}

bool compile_translated(const Nvrtc& nvrtc, const dialect::TranslatedModule& translated, int arch,
                        std::string& ptx, std::string& message) {
  std::string log;
  if (!nvrtc.compile_to_ptx(translated.text, "hal_dialect.cu", arch, ptx, log)) {
    message = "NVRTC " + nvrtc.version() + " rejected the translated HAL dialect (compute_" +
              std::to_string(arch) + "):\n" + log;
    return false;
  }
  return true;
}

}  // namespace hal::cuda
