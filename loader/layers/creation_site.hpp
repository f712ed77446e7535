// Where an object was created: the application's return address into the
// public entry point, and with HAL_VALIDATION_BACKTRACE=1 the whole stack.
// Resolved to "module+0xoffset (symbol+0xoffset)" only when a report needs it,
// so capturing costs one store (or one backtrace()).
#pragma once

#include <string>
#include <vector>

namespace hal::loader::layers {

struct CreationSite {
  const void* caller = nullptr;  // __builtin_return_address(0) of the hal_* entry
  std::vector<void*> stack;      // empty unless HAL_VALIDATION_BACKTRACE=1
};

// Captures |caller| and, when |with_backtrace|, the current stack.
CreationSite capture_site(const void* caller, bool with_backtrace);

// "libfoo.so+0x1a2b (do_work+0x1f)" for |address|, via dladdr. A return
// address points after the call, so callers pass it unchanged: the offset
// names the instruction after the call, as debuggers print it.
std::string describe_address(const void* address);

// The site as one line, and the backtrace (if any) as further indented lines.
std::string describe_site(const CreationSite& site, const char* indent);

}  // namespace hal::loader::layers
