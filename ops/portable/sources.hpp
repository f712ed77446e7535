// The portable ops' dialect sources (kernels/*.hal, each with common.hal in
// front), embedded in libhal at build time.
#pragma once

#include <span>
#include <string_view>

namespace hal::ops::portable {

// The source named |name| ("elementwise" for kernels/elementwise.hal); empty
// for an unknown name.
std::string_view portable_source(std::string_view name);

// Every family portable_source knows, in ops/CMakeLists.txt's order.
std::span<const std::string_view> portable_families();

}  // namespace hal::ops::portable
