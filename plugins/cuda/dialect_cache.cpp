#include "dialect_cache.hpp"

#include "image.hpp"

namespace hal::cuda {

std::string dialect_cache_key(const Nvrtc& nvrtc, const dialect::TranslatedModule& translated,
                              const CompileTarget& target) {
  const std::string described = target.describe();
  const std::vector<std::string> options = nvrtc.options(target);
  std::vector<std::string_view> parts = {dialect::kTranslatorVersion, nvrtc.identity(), described};
  parts.insert(parts.end(), options.begin(), options.end());
  parts.push_back(translated.text);
  return hal::util::KernelCache::key_of(parts);
}

DialectStatus compile_dialect_cached(const Nvrtc& nvrtc, std::string_view source,
                                     const CompileTarget& target, const hal::util::CacheLogger& log,
                                     CompiledDialect& out, CacheOutcome& outcome,
                                     std::string& message) {
  dialect::Diagnostic diagnostic;
  if (!dialect::translate(source, dialect::Backend::kCuda, out.translated, diagnostic)) {
    message = "the HAL dialect source is invalid: " + diagnostic.to_string();
    return DialectStatus::kInvalidSource;
  }
  hal::util::CachedBuildRequest request;
  request.prefix = "cuda";
  request.object_suffix = target.cubin ? ".cubin" : ".ptx";
  request.key = dialect_cache_key(nvrtc, out.translated, target);
  // NVRTC's PTX for compute_XX targets sm_XX; its cubin for sm_XX says XX.
  const std::string expected_target = "sm_" + std::to_string(target.arch);
  request.validate = [&](const std::vector<unsigned char>& image, std::string& why) {
    if (target.cubin) {
      if (!check_binary_image(image.data(), image.size(), why)) {
        why = "not a cubin: " + why;
        return false;
      }
      if (const int arch = cubin_arch(image.data(), image.size()); arch != target.arch) {
        why = "a cubin for sm_" + std::to_string(arch) + ", not " + expected_target;
        return false;
      }
      return true;
    }
    std::string ptx_target;
    if (!check_ptx_text(image.data(), image.size(), ptx_target, why)) {
      why = "not PTX: " + why;
      return false;
    }
    if (ptx_target != expected_target) {
      why = "PTX for " + ptx_target + ", not " + expected_target;
      return false;
    }
    return true;
  };
  const auto build = [&](std::vector<unsigned char>& image) {
    std::string compiled;
    if (!compile_translated(nvrtc, out.translated, target, compiled, message)) return false;
    image.assign(compiled.begin(), compiled.end());
    return true;
  };
  hal::util::CachedBuild cached;
  if (!hal::util::build_cached(request, build, log, cached)) {
    return DialectStatus::kCompilerRejected;
  }
  out.image.assign(cached.image.begin(), cached.image.end());
  outcome.use = cached.use;
  outcome.origin = std::move(cached.origin);
  return DialectStatus::kOk;
}

}  // namespace hal::cuda
