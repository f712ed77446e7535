// A parsed dialect source: its tokens, its top-level items and, for every
// kernel, the record the front end derives from the source itself (entry
// name, argument signature, block-size bound, static shared memory).
#ifndef HAL_DIALECT_PROGRAM_HPP_
#define HAL_DIALECT_PROGRAM_HPP_

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "hal/kernel.h"
#include "hal_dialect/token.hpp"

namespace hal::dialect {

// A token range [first, end).
struct Range {
  size_t first = 0;
  size_t end = 0;
};

struct Parameter {
  std::string name;
  hal_arg_type_t type = HAL_ARG_POINTER;
  Range tokens;
};

// A `shared T name[N]...;` declaration at the top of a kernel body.
struct SharedArray {
  std::string name;
  uint64_t bytes = 0;
  Range tokens;       // from `shared` to the `;`, inclusive
  size_t name_token;  // the array's name
};

struct Kernel {
  std::string name;
  std::vector<Parameter> parameters;
  uint32_t max_threads_per_block = 0;  // 0: the device's limit
  uint64_t static_shared_bytes = 0;
  bool uses_barrier = false;
  bool uses_dynamic_shared = false;
  std::vector<SharedArray> shared;
  size_t name_token = 0;
  Range parameter_tokens;  // between the parentheses
  Range body;              // from '{' to '}', inclusive
};

enum class ItemKind : uint8_t { kDirective, kKernel, kFunction, kOther };

// One top-level piece of the source.
struct Item {
  ItemKind kind;
  Range tokens;
  size_t kernel_index = 0;  // for kKernel
  size_t name_token = 0;    // for kFunction: where the declarator's name is
  Range prefix;             // for kFunction: specifiers before the name
};

struct Program {
  std::vector<Token> tokens;
  std::vector<Item> items;
  std::vector<Kernel> kernels;
  std::map<std::string, std::vector<Token>, std::less<>> constants;  // object-like #defines

  const Kernel* find_kernel(std::string_view name) const;
  bool any_barrier() const;
};

// Parses |source|. False, with |error|, when it breaks a rule of the dialect
// (SPEC.md, "Kernel dialect"); errors inside statements are left to the
// backend compiler, which reports them against the same line numbers.
bool parse(std::string_view source, Program& out_program, Diagnostic& error);

// The byte size of a scalar type name of the dialect ("float", "f16",
// "u32"...), 0 when it is not one.
uint32_t scalar_type_size(std::string_view name);

}  // namespace hal::dialect

#endif  // HAL_DIALECT_PROGRAM_HPP_
