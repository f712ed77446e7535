#include "layers/layers.hpp"

#include "layers/tracing.hpp"
#include "layers/validation.hpp"
#include "registry.hpp"

#include "hal_util/env.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace hal::loader::layers {

namespace detail {
std::atomic<uint32_t> active_layers{0};
}

namespace {

#ifdef HAL_VALIDATION_DEFAULT_ON
constexpr bool kValidationDefault = true;  // Debug builds
#else
constexpr bool kValidationDefault = false;
#endif

using hal::util::env_flag;

}  // namespace

void start(const Registry& registry) noexcept {
  uint32_t layers = 0;
  if (env_flag("HAL_VALIDATION", kValidationDefault)) {
    layers |= kValidation;
    validation::set_backtrace(env_flag("HAL_VALIDATION_BACKTRACE", false));
    LiveObjects& live = validation::objects();
    live.clear();
    try {
      for (const auto& device : registry.devices) {
        live.add_handle(device.get(), HandleKind::kDevice, device.get(), nullptr, {});
      }
    } catch (...) {
      std::fprintf(stderr, "hal: validation: out of memory at hal_init; validation stays off\n");
      layers &= ~kValidation;
    }
  }
  const char* trace_path = hal::util::env("HAL_TRACE");
  const bool summary = env_flag("HAL_TRACE_SUMMARY", false);
  if ((trace_path != nullptr && trace_path[0] != '\0') || summary) {
    tracing::open(trace_path, summary);
    layers |= kTracing;
  }
  detail::active_layers.store(layers, std::memory_order_release);
}

void stop_before_teardown(const Registry&) noexcept {
  const uint32_t layers = detail::active_layers.exchange(0, std::memory_order_acq_rel);
  if ((layers & kValidation) == 0) return;
  try {
    const std::string report = validation::objects().leak_report();
    if (!report.empty()) std::fprintf(stderr, "hal: validation: %s\n", report.c_str());
  } catch (...) {
    std::fprintf(stderr, "hal: validation: out of memory writing the leak report\n");
  }
  validation::objects().clear();
}

void stop_after_teardown() noexcept {
  tracing::close();
}

}  // namespace hal::loader::layers
