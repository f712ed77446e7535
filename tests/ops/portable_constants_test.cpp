// The constants the portable kernels share with their C++ launchers (the
// matmul tile and features, math's compute modes and scalar slots, the
// attention kernels' largest head dims, the channel norm's chunk and flags,
// the convolution's modes, pooling's flags) come from one table (ops/CMakeLists.txt): each family's
// source defines each of them exactly once, with the table's value, and a
// .hal file that defines one again with another value is refused by the
// dialect. The kernels' copies of the C ABI's enum values (dtypes,
// activations, the unary, binary, reduce and scan kinds, ...), which the
// launchers pass through unchanged, are checked against api/hal here.
#include <catch2/catch.hpp>

#include "hal.h"
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

// A kernel's copy of a C ABI value: "#define <name> <value>" in |family|'s source.
struct AbiMirror {
  std::string_view family;
  std::string_view name;
  int64_t value;
};

const AbiMirror kAbiMirrors[] = {
    {"attention", "CAUSAL_TOP_LEFT", HAL_CAUSAL_TOP_LEFT},
    {"attention", "CAUSAL_BOTTOM_RIGHT", HAL_CAUSAL_BOTTOM_RIGHT},
    {"attention", "SPARSE_BLOCK_MASK", HAL_ATTENTION_BLOCK_MASK},
    {"attention", "SPARSE_BLOCK_INDICES", HAL_ATTENTION_BLOCK_INDICES},
    {"matmul", "DT_F32", HAL_DTYPE_F32},
    {"matmul", "DT_F16", HAL_DTYPE_F16},
    {"matmul", "DT_BF16", HAL_DTYPE_BF16},
    {"matmul", "DT_I32", HAL_DTYPE_I32},
    {"matmul", "DT_I64", HAL_DTYPE_I64},
    {"matmul", "ACT_NONE", HAL_ACTIVATION_NONE},
    {"matmul", "ACT_RELU", HAL_ACTIVATION_RELU},
    {"matmul", "ACT_GELU_TANH", HAL_ACTIVATION_GELU_TANH},
    {"matmul", "ACT_GELU_ERF", HAL_ACTIVATION_GELU_ERF},
    {"matmul", "ACT_SILU", HAL_ACTIVATION_SILU},
    {"lowp", "DT_F64", HAL_DTYPE_F64},
    {"lowp", "DT_I8", HAL_DTYPE_I8},
    {"lowp", "DT_U8", HAL_DTYPE_U8},
    {"lowp", "DT_F8_E4M3", HAL_DTYPE_F8_E4M3},
    {"lowp", "DT_F8_E5M2", HAL_DTYPE_F8_E5M2},
    {"lowp", "DT_BOOL", HAL_DTYPE_BOOL},
    {"elementwise", "RED_SUM", HAL_REDUCE_KIND_SUM},
    {"elementwise", "RED_MEAN", HAL_REDUCE_KIND_MEAN},
    {"elementwise", "RED_MAX", HAL_REDUCE_KIND_MAX},
    {"elementwise", "RED_MIN", HAL_REDUCE_KIND_MIN},
    {"elementwise", "RED_PROD", HAL_REDUCE_KIND_PROD},
    {"elementwise", "RED_ARGMAX", HAL_REDUCE_KIND_ARGMAX},
    {"elementwise", "RED_ARGMIN", HAL_REDUCE_KIND_ARGMIN},
    {"elementwise", "RED_NORM2", HAL_REDUCE_KIND_NORM2},
    {"indexing", "SCAN_SUM", HAL_SCAN_SUM},
    {"indexing", "SCAN_PROD", HAL_SCAN_PROD},
    {"lowp", "FQ_RECIPROCAL_SCALE", HAL_FAKE_QUANTIZE_RECIPROCAL_SCALE},
    {"lowp", "FQ_CLIP_ROUNDED", HAL_FAKE_QUANTIZE_CLIP_ROUNDED},
    {"math", "UM_EXP", HAL_UNARY_MATH_EXP},
    {"math", "UM_EXP2", HAL_UNARY_MATH_EXP2},
    {"math", "UM_EXPM1", HAL_UNARY_MATH_EXPM1},
    {"math", "UM_LOG", HAL_UNARY_MATH_LOG},
    {"math", "UM_LOG2", HAL_UNARY_MATH_LOG2},
    {"math", "UM_LOG10", HAL_UNARY_MATH_LOG10},
    {"math", "UM_LOG1P", HAL_UNARY_MATH_LOG1P},
    {"math", "UM_SQRT", HAL_UNARY_MATH_SQRT},
    {"math", "UM_RSQRT", HAL_UNARY_MATH_RSQRT},
    {"math", "UM_RECIPROCAL", HAL_UNARY_MATH_RECIPROCAL},
    {"math", "UM_SIN", HAL_UNARY_MATH_SIN},
    {"math", "UM_COS", HAL_UNARY_MATH_COS},
    {"math", "UM_TAN", HAL_UNARY_MATH_TAN},
    {"math", "UM_TANH", HAL_UNARY_MATH_TANH},
    {"math", "UM_ATAN", HAL_UNARY_MATH_ATAN},
    {"math", "UM_SIGMOID", HAL_UNARY_MATH_SIGMOID},
    {"math", "UM_ERF", HAL_UNARY_MATH_ERF},
    {"math", "UM_ERFINV", HAL_UNARY_MATH_ERFINV},
    {"math", "UM_ABS", HAL_UNARY_MATH_ABS},
    {"math", "UM_NEG", HAL_UNARY_MATH_NEG},
    {"math", "UM_SIGN", HAL_UNARY_MATH_SIGN},
    {"math", "UM_FLOOR", HAL_UNARY_MATH_FLOOR},
    {"math", "UM_CEIL", HAL_UNARY_MATH_CEIL},
    {"math", "UM_ROUND", HAL_UNARY_MATH_ROUND},
    {"math", "UM_TRUNC", HAL_UNARY_MATH_TRUNC},
    {"math", "UM_LOGICAL_NOT", HAL_UNARY_MATH_LOGICAL_NOT},
    {"math", "UM_ISNAN", HAL_UNARY_MATH_ISNAN},
    {"math", "UM_ISINF", HAL_UNARY_MATH_ISINF},
    {"math", "UM_ISFINITE", HAL_UNARY_MATH_ISFINITE},
    {"math", "UM_BITWISE_NOT", HAL_UNARY_MATH_BITWISE_NOT},
    {"math", "BIN_ADD", HAL_BINARY_ADD},
    {"math", "BIN_SUB", HAL_BINARY_SUB},
    {"math", "BIN_MUL", HAL_BINARY_MUL},
    {"math", "BIN_DIV", HAL_BINARY_DIV},
    {"math", "BIN_MAX", HAL_BINARY_MAX},
    {"math", "BIN_MIN", HAL_BINARY_MIN},
    {"math", "BIN_POW", HAL_BINARY_POW},
    {"math", "BIN_FMOD", HAL_BINARY_FMOD},
    {"math", "BIN_REMAINDER", HAL_BINARY_REMAINDER},
    {"math", "BIN_FLOOR_DIVIDE", HAL_BINARY_FLOOR_DIVIDE},
    {"math", "BIN_TRUNC_DIVIDE", HAL_BINARY_TRUNC_DIVIDE},
    {"math", "BIN_ATAN2", HAL_BINARY_ATAN2},
    {"math", "BIN_EQ", HAL_BINARY_EQ},
    {"math", "BIN_NE", HAL_BINARY_NE},
    {"math", "BIN_LT", HAL_BINARY_LT},
    {"math", "BIN_LE", HAL_BINARY_LE},
    {"math", "BIN_GT", HAL_BINARY_GT},
    {"math", "BIN_GE", HAL_BINARY_GE},
    {"math", "BIN_LOGICAL_AND", HAL_BINARY_LOGICAL_AND},
    {"math", "BIN_LOGICAL_OR", HAL_BINARY_LOGICAL_OR},
    {"math", "BIN_LOGICAL_XOR", HAL_BINARY_LOGICAL_XOR},
    {"math", "BIN_BITWISE_AND", HAL_BINARY_BITWISE_AND},
    {"math", "BIN_BITWISE_OR", HAL_BINARY_BITWISE_OR},
    {"math", "BIN_BITWISE_XOR", HAL_BINARY_BITWISE_XOR},
    {"pooling", "PL_MAX", HAL_POOLING_MAX},
    {"pooling", "PL_AVERAGE", HAL_POOLING_AVERAGE},
};

}  // namespace

TEST_CASE("the portable kernels' copies of the C ABI's enum values match api/hal", "[portable]") {
  for (const AbiMirror& mirror : kAbiMirrors) {
    INFO(mirror.family << ": " << mirror.name);
    const std::vector<std::string> values =
        definitions_of(portable_source(mirror.family), mirror.name);
    REQUIRE(values.size() == 1);
    CHECK(values[0].substr(0, values[0].find(' ')) == std::to_string(mirror.value));
  }
}

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
