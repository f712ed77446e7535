// The constants the portable kernels share with their C++ launchers (the
// matmul tile) come from one table (ops/CMakeLists.txt): each family's source
// defines each of them exactly once, with the table's value, and a .hal file
// that defines one again with another value is refused by the dialect.
#include <catch2/catch.hpp>

#include "hal_dialect/dialect.hpp"
#include "portable_constants.hpp"
#include "sources.hpp"

#include <string>
#include <string_view>
#include <vector>

using namespace hal::ops::portable;

namespace {

// The values |source| gives "#define <name> <value>", in order.
std::vector<std::string> definitions_of(std::string_view source, std::string_view name) {
  std::vector<std::string> values;
  const std::string directive = "#define " + std::string(name) + " ";
  for (size_t at = source.find(directive); at != std::string_view::npos;
       at = source.find(directive, at + 1)) {
    const size_t begin = at + directive.size();
    values.emplace_back(source.substr(begin, source.find('\n', begin) - begin));
  }
  return values;
}

}  // namespace

TEST_CASE("each portable source defines each shared constant once, with the table's value",
          "[portable]") {
  REQUIRE(std::size(kPortableConstants) >= 2);
  CHECK(constants::MM_TM > 0);
  CHECK(constants::MM_TN > 0);
  for (const std::string_view family : portable_families()) {
    const std::string_view source = portable_source(family);
    REQUIRE_FALSE(source.empty());
    for (const PortableConstant& constant : kPortableConstants) {
      INFO(family << ": " << constant.name);
      const std::vector<std::string> values = definitions_of(source, constant.name);
      REQUIRE(values.size() == 1);
      CHECK(values[0] == std::to_string(constant.value));
    }
    // The dialect front end accepts it (a second definition with another
    // value would be refused here, and at load).
    hal::dialect::TranslatedModule module;
    hal::dialect::Diagnostic error;
    INFO(family << ": " << error.to_string());
    CHECK(hal::dialect::translate(source, hal::dialect::Backend::kOpenCL, module, error));
  }
}

TEST_CASE("a family source that redefines a shared constant is refused by the dialect",
          "[portable]") {
  std::string source(portable_source("matmul"));
  const PortableConstant& tile_rows = kPortableConstants[0];
  source +=
      "\n#define " + std::string(tile_rows.name) + " " + std::to_string(tile_rows.value * 2) + "\n";
  hal::dialect::TranslatedModule module;
  hal::dialect::Diagnostic error;
  CHECK_FALSE(hal::dialect::translate(source, hal::dialect::Backend::kOpenCL, module, error));
  CHECK_THAT(error.to_string(), Catch::Contains(std::string(tile_rows.name) +
                                                "' is #defined again with another value"));
}
