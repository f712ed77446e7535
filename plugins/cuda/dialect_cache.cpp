#include "dialect_cache.hpp"

#include "image.hpp"

namespace hal::cuda {

std::string dialect_cache_key(const Nvrtc& nvrtc, const dialect::TranslatedModule& translated,
                              int arch) {
  const std::string target = "compute_" + std::to_string(arch);
  const std::vector<std::string> options = nvrtc.options(arch);
  std::vector<std::string_view> parts = {dialect::kTranslatorVersion, nvrtc.identity(), target};
  parts.insert(parts.end(), options.begin(), options.end());
  parts.push_back(translated.text);
  return hal::util::KernelCache::key_of(parts);
}

DialectStatus compile_dialect_cached(const Nvrtc& nvrtc, std::string_view source, int arch,
                                     const hal::util::CacheLogger& log, CompiledDialect& out,
                                     CacheOutcome& outcome, std::string& message) {
  dialect::Diagnostic diagnostic;
  if (!dialect::translate(source, dialect::Backend::kCuda, out.translated, diagnostic)) {
    message = "the HAL dialect source is invalid: " + diagnostic.to_string();
    return DialectStatus::kInvalidSource;
  }
  hal::util::CachedBuildRequest request;
  request.prefix = "cuda";
  request.object_suffix = ".ptx";
  request.key = dialect_cache_key(nvrtc, out.translated, arch);
  // NVRTC's PTX for compute_XX targets sm_XX.
  const std::string expected_target = "sm_" + std::to_string(arch);
  request.validate = [&](const std::vector<unsigned char>& image, std::string& why) {
    std::string target;
    if (!check_ptx_text(image.data(), image.size(), target, why)) {
      why = "not PTX: " + why;
      return false;
    }
    if (target != expected_target) {
      why = "PTX for " + target + ", not " + expected_target;
      return false;
    }
    return true;
  };
  const auto build = [&](std::vector<unsigned char>& image) {
    std::string ptx;
    if (!compile_translated(nvrtc, out.translated, arch, ptx, message)) return false;
    image.assign(ptx.begin(), ptx.end());
    return true;
  };
  hal::util::CachedBuild cached;
  if (!hal::util::build_cached(request, build, log, cached)) {
    return DialectStatus::kCompilerRejected;
  }
  out.ptx.assign(cached.image.begin(), cached.image.end());
  outcome.use = cached.use;
  outcome.origin = std::move(cached.origin);
  return DialectStatus::kOk;
}

}  // namespace hal::cuda
