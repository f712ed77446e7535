#include "dialect_cache.hpp"

#include "image.hpp"

namespace hal::hip {

std::string dialect_cache_key(const Hiprtc& hiprtc, const dialect::TranslatedModule& translated,
                              const std::string& arch) {
  const std::vector<std::string> options = hiprtc.options(arch);
  std::vector<std::string_view> parts = {dialect::kTranslatorVersion, hiprtc.identity(), arch};
  parts.insert(parts.end(), options.begin(), options.end());
  parts.push_back(translated.text);
  return hal::util::KernelCache::key_of(parts);
}

DialectStatus compile_dialect_cached(const Hiprtc& hiprtc, std::string_view source,
                                     const std::string& arch, const hal::util::CacheLogger& log,
                                     CompiledDialect& out, CacheOutcome& outcome,
                                     std::string& message) {
  dialect::Diagnostic diagnostic;
  if (!dialect::translate(source, dialect::Backend::kHip, out.translated, diagnostic)) {
    message = "the HAL dialect source is invalid: " + diagnostic.to_string();
    return DialectStatus::kInvalidSource;
  }
  hal::util::CachedBuildRequest request;
  request.prefix = "hip";
  request.object_suffix = ".hsaco";
  request.key = dialect_cache_key(hiprtc, out.translated, arch);
  // The key names the architecture, but a file under that name may hold a
  // code object for another one (planted, or copied between machines): its
  // own header must say it is for |arch|.
  request.validate = [&arch](const std::vector<unsigned char>& image, std::string& why) {
    if (!check_code_object(image.data(), image.size(), why)) {
      why = "not a code object: " + why;
      return false;
    }
    return code_object_is_for(image.data(), image.size(), arch, why);
  };
  const auto build = [&](std::vector<unsigned char>& image) {
    std::string code;
    if (!compile_translated(hiprtc, out.translated, arch, code, message)) return false;
    image.assign(code.begin(), code.end());
    return true;
  };
  hal::util::CachedBuild cached;
  if (!hal::util::build_cached(request, build, log, cached)) {
    return DialectStatus::kCompilerRejected;
  }
  out.code.assign(cached.image.begin(), cached.image.end());
  outcome.use = cached.use;
  outcome.origin = std::move(cached.origin);
  return DialectStatus::kOk;
}

}  // namespace hal::hip
