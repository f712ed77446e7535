#include "nvrtc.hpp"

#include <string>
#include <vector>

#include <dlfcn.h>

#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>

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
  // nvrtcGetCUBIN came with CUDA 11.1; without it the dialect is PTX only.
  resolve(library, "nvrtcGetCUBINSize", nvrtc->get_cubin_size_);
  resolve(library, "nvrtcGetCUBIN", nvrtc->get_cubin_);
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

std::string CompileTarget::describe() const {
  return cubin ? "sm_" + std::to_string(arch) + " cubin"
               : "compute_" + std::to_string(arch) + " PTX";
}

std::vector<std::string> Nvrtc::options(const CompileTarget& target, bool ptxas_verbose) const {
  // A real architecture (sm_XY) makes NVRTC run ptxas and keep a cubin; a
  // virtual one (compute_XY) stops at PTX ("No cubin is available if the value
  // specified to -arch is a virtual architecture": nvrtcGetCUBIN).
  std::vector<std::string> options = {std::string("--gpu-architecture=") +
                                          (target.cubin ? "sm_" : "compute_") +
                                          std::to_string(target.arch),
                                      "--std=c++17", "-default-device"};
  // ptxas runs only for a real architecture; -v prints each entry's
  // registers, stack frame and spill bytes to the program log.
  if (ptxas_verbose && target.cubin) options.push_back("--ptxas-options=-v");
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

CompileTarget Nvrtc::pick_target(int major, int minor) const {
  CompileTarget target;
  const int device = major * 10 + minor;
  const bool offered = std::find(archs_.begin(), archs_.end(), device) != archs_.end();
  if (offered && emits_cubin()) {
    target.arch = device;
    target.cubin = true;
    return target;
  }
  target.arch = pick_arch(major, minor);
  target.why_ptx = !emits_cubin() ? "NVRTC " + version() + " has no nvrtcGetCUBIN"
                                  : "NVRTC " + version() + " does not offer sm_" +
                                        std::to_string(device) + " (the device's architecture)";
  return target;
}

bool Nvrtc::compile(const std::string& source, const char* name, const CompileTarget& target,
                    std::string& image, std::string& log, bool ptxas_verbose) const {
  nvrtcProgram program = nullptr;
  nvrtcResult result = create_program_(&program, source.c_str(), name, 0, nullptr, nullptr);
  if (result != NVRTC_SUCCESS) {
    log = std::string("nvrtcCreateProgram: ") + get_error_string_(result);
    return false;
  }
  const std::vector<std::string> texts = options(target, ptxas_verbose);
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
    // ptxas -v's figures are a few lines per entry; keep them whole.
    const size_t limit = ptxas_verbose ? kMaxLogBytes * 16 : kMaxLogBytes;
    if (log.size() > limit) log = log.substr(0, limit) + "\n[... log cut]";
  }
  bool ok = result == NVRTC_SUCCESS;
  if (!ok) {
    log = std::string("nvrtcCompileProgram: ") + get_error_string_(result) + "\n" + log;
  } else if (target.cubin) {
    size_t size = 0;
    ok = get_cubin_size_(program, &size) == NVRTC_SUCCESS && size > 0;
    if (ok) {
      image.assign(size, '\0');
      ok = get_cubin_(program, image.data()) == NVRTC_SUCCESS;
    }
    if (!ok) log = "nvrtcGetCUBIN failed for sm_" + std::to_string(target.arch);
  } else {
    size_t size = 0;
    ok = get_ptx_size_(program, &size) == NVRTC_SUCCESS && size > 0;
    if (ok) {
      image.assign(size, '\0');
      ok = get_ptx_(program, image.data()) == NVRTC_SUCCESS;
      image.resize(size - 1);  // the size counts the NUL
    }
    if (!ok) log = "nvrtcGetPTX failed";
  }
  destroy_program_(&program);
  return ok;
}

namespace {

// The number just before |unit| in |line| ("12" from "Used 12 registers"
// for " registers"); -1 when |unit| is absent.
long number_before(std::string_view line, std::string_view unit) {
  const size_t at = line.find(unit);
  if (at == std::string_view::npos || at == 0) return -1;
  size_t start = at;
  while (start > 0 && line[start - 1] >= '0' && line[start - 1] <= '9') --start;
  if (start == at) return -1;
  return std::strtol(std::string(line.substr(start, at - start)).c_str(), nullptr, 10);
}

// The name between the first pair of quotes, or after |prefix| to the line's end.
std::string entry_name(std::string_view line, std::string_view prefix) {
  const size_t at = line.find(prefix);
  std::string_view rest = line.substr(at + prefix.size());
  if (!rest.empty() && rest.front() == '\'') {
    rest.remove_prefix(1);
    rest = rest.substr(0, rest.find('\''));
  }
  while (!rest.empty() && (rest.back() == ' ' || rest.back() == '\r')) rest.remove_suffix(1);
  return std::string(rest);
}

}  // namespace

std::vector<PtxasEntry> parse_ptxas_log(std::string_view log) {
  std::vector<PtxasEntry> entries;
  PtxasEntry* current = nullptr;
  const auto select = [&](const std::string& name) {
    for (PtxasEntry& entry : entries) {
      if (entry.entry == name) return &entry;
    }
    entries.push_back(PtxasEntry{name});
    return &entries.back();
  };
  for (size_t at = 0; at < log.size();) {
    size_t end = log.find('\n', at);
    if (end == std::string_view::npos) end = log.size();
    const std::string_view line = log.substr(at, end - at);
    at = end + 1;
    if (line.find("Compiling entry function ") != std::string_view::npos) {
      current = select(entry_name(line, "Compiling entry function "));
      current->is_kernel = true;
    } else if (line.find("Function properties for ") != std::string_view::npos) {
      current = select(entry_name(line, "Function properties for "));
    } else if (current != nullptr && line.find(" bytes stack frame") != std::string_view::npos) {
      current->stack_bytes = std::max(0L, number_before(line, " bytes stack frame"));
      current->spill_store_bytes = std::max(0L, number_before(line, " bytes spill stores"));
      current->spill_load_bytes = std::max(0L, number_before(line, " bytes spill loads"));
    } else if (current != nullptr && line.find("Used ") != std::string_view::npos) {
      current->registers = static_cast<int>(number_before(line, " registers"));
      current->shared_bytes = std::max(0L, number_before(line, " bytes smem"));
    }
  }
  return entries;
}

DialectStatus compile_dialect(const Nvrtc& nvrtc, std::string_view source,
                              const CompileTarget& target, CompiledDialect& out,
                              std::string& message) {
  dialect::Diagnostic diagnostic;
  if (!dialect::translate(source, dialect::Backend::kCuda, out.translated, diagnostic)) {
    message = "the HAL dialect source is invalid: " + diagnostic.to_string();
    return DialectStatus::kInvalidSource;
  }
  return compile_translated(nvrtc, out.translated, target, out.image, message)
             ? DialectStatus::kOk
             : DialectStatus::kCompilerRejected;
}

bool compile_translated(const Nvrtc& nvrtc, const dialect::TranslatedModule& translated,
                        const CompileTarget& target, std::string& image, std::string& message) {
  std::string log;
  if (!nvrtc.compile(translated.text, "hal_dialect.cu", target, image, log)) {
    message = "NVRTC " + nvrtc.version() + " rejected the translated HAL dialect (" +
              target.describe() + "):\n" + log;
    return false;
  }
  return true;
}

}  // namespace hal::cuda
