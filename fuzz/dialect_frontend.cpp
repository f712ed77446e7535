// Fuzz target (c): the kernel-dialect front end (dialect/, hal_dialect).
//
// The input is dialect source text, as a plugin gets it from a module's
// HAL_MODULE_FORMAT_DIALECT bytes. It is parsed once (hal::dialect::parse)
// and, when it parses, emitted for every backend (C++, OpenCL C, CUDA, HIP);
// then translated for every backend (hal::dialect::translate: parse, emit and
// the kernel records), and each record's signature is written out. A
// diagnostic is a fine outcome; a crash, a hang or a sanitizer report is not.
// A translation that succeeds must name each of its kernels once in the
// records, and its diagnostics must carry a message.
#include <hal_dialect/dialect.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

namespace {

// Longer sources add nothing the mutator cannot reach with short ones, and
// keep the quadratic corners of the parser from reading as hangs.
constexpr size_t kMaxSourceBytes = 16 * 1024;

constexpr hal::dialect::Backend kBackends[] = {
    hal::dialect::Backend::kCpp,
    hal::dialect::Backend::kOpenCL,
    hal::dialect::Backend::kCuda,
    hal::dialect::Backend::kHip,
};

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > kMaxSourceBytes) return 0;
  const std::string_view source(reinterpret_cast<const char*>(data), size);

  hal::dialect::Program program;
  hal::dialect::Diagnostic error;
  if (hal::dialect::parse(source, program, error)) {
    for (const hal::dialect::Backend backend : kBackends) {
      (void)hal::dialect::emit(program, backend);
    }
  }

  for (const hal::dialect::Backend backend : kBackends) {
    hal::dialect::TranslatedModule module;
    hal::dialect::Diagnostic diagnostic;
    if (!hal::dialect::translate(source, backend, module, diagnostic)) {
      if (diagnostic.message.empty()) std::abort();  // a failure without a reason
      (void)diagnostic.to_string();
      continue;
    }
    for (const hal::dialect::KernelRecord& kernel : module.kernels) {
      (void)hal::dialect::signature_text(kernel.arg_types);
      if (module.find(kernel.entry) == nullptr) std::abort();  // a record it cannot find
    }
  }
  return 0;
}
