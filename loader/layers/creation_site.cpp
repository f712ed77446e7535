#include "layers/creation_site.hpp"

#include "error.hpp"

#include <dlfcn.h>
#include <execinfo.h>

#include <cstdint>

namespace hal::loader::layers {

namespace {

constexpr int kMaxFrames = 32;
// capture_site, call_layered and the public entry: frames of libhal itself.
constexpr int kOwnFrames = 3;

}  // namespace

CreationSite capture_site(const void* caller, bool with_backtrace) {
  CreationSite site;
  site.caller = caller;
  if (with_backtrace) {
    void* frames[kMaxFrames];
    const int count = backtrace(frames, kMaxFrames);
    for (int i = count > kOwnFrames ? kOwnFrames : 0; i < count; ++i)
      site.stack.push_back(frames[i]);
  }
  return site;
}

std::string describe_address(const void* address) {
  if (address == nullptr) return "an unknown place";
  Dl_info info{};
  if (dladdr(address, &info) == 0 || info.dli_fname == nullptr) {
    return format("%p (no module)", address);
  }
  const auto at = reinterpret_cast<uintptr_t>(address);
  std::string text = format("%s+0x%zx", info.dli_fname,
                            static_cast<size_t>(at - reinterpret_cast<uintptr_t>(info.dli_fbase)));
  if (info.dli_sname != nullptr && info.dli_saddr != nullptr) {
    text += format(" (%s+0x%zx)", info.dli_sname,
                   static_cast<size_t>(at - reinterpret_cast<uintptr_t>(info.dli_saddr)));
  }
  return text;
}

std::string describe_site(const CreationSite& site, const char* indent) {
  std::string text = describe_address(site.caller);
  for (const void* frame : site.stack) {
    text += "\n";
    text += indent;
    text += "at ";
    text += describe_address(frame);
  }
  return text;
}

}  // namespace hal::loader::layers
