// The halconform backend of the dialect kernel checks: the test's device with
// kernels.hal (embedded in halconform at build time) loaded from memory, and
// INFO messages kept per thread for the failure sentence.
#include <string_view>

#include "kernel_harness.hpp"

namespace hal_test {

// Generated from kernels.hal by conformance/CMakeLists.txt.
extern const std::string_view kDialectKernelsSource;

namespace {

thread_local std::vector<std::string> info_messages;

}  // namespace

std::string info_text() {
  std::string text;
  for (const std::string& message : info_messages) {
    if (!text.empty()) text += "; ";
    text += message;
  }
  return text.empty() ? "the check failed" : text;
}

ScopedInfo::ScopedInfo(std::string message) {
  info_messages.push_back(std::move(message));
}
ScopedInfo::~ScopedInfo() {
  info_messages.pop_back();
}

void with_device(halconform::TestContext& ctx, void (*body)(TestDevice&)) {
  struct Owner {
    TestDevice device;
    ~Owner() {
      if (device.stream != nullptr) hal_stream_destroy(device.stream);
      if (device.module != nullptr) hal_module_unload(device.module);
    }
  } owner;
  TestDevice& device = owner.device;
  device.device = ctx.device();
  device.label = std::string(ctx.properties().plugin) + ": " + ctx.properties().name;
  hal_module_desc_t desc{};
  desc.struct_size = sizeof(desc);
  desc.format = HAL_MODULE_FORMAT_HAL_DIALECT;
  desc.data = kDialectKernelsSource.data();
  desc.size = kDialectKernelsSource.size();
  HC_OK(hal_module_load(device.device, &desc, &device.module));
  HC_OK(hal_stream_create(device.device, 0, &device.stream));
  body(device);
}

}  // namespace hal_test
