// The dialect's parser. It does not parse C statements: it finds the
// top-level items (directives, kernels, helper functions, other
// declarations), reads each kernel's signature and shared arrays, and
// enforces the dialect's rules about where builtins may appear. Everything
// inside statements is left to the backend compiler.
#include <algorithm>
#include <array>
#include <charconv>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "hal_dialect/program.hpp"

namespace hal::dialect {
namespace {

// Builtins that only make sense inside a kernel body.
constexpr std::array<std::string_view, 9> kKernelOnlyBuiltins = {
    "global_id",   "local_id", "group_id", "local_size",    "num_groups",
    "global_size", "barrier",  "shared",   "dynamic_shared"};

bool is_kernel_only(std::string_view name) {
  return std::find(kKernelOnlyBuiltins.begin(), kKernelOnlyBuiltins.end(), name) !=
         kKernelOnlyBuiltins.end();
}

// Names no kernel or helper function may take: the dialect's keywords and
// builtins (SPEC.md, "Kernel dialect", reserved), and the builtins of the
// backends' languages that a translation would collide with.
constexpr std::array<std::string_view, 90> kReservedNames = {
    // the dialect
    "kernel", "global", "local", "shared", "max_block", "global_id", "local_id", "group_id",
    "local_size", "num_groups", "global_size", "dynamic_shared", "barrier", "atomic_add",
    "atomic_sub", "atomic_min", "atomic_max", "atomic_xchg", "atomic_cas", "f16", "bf16",
    "load_f16", "store_f16", "load_bf16", "store_bf16", "sqrt", "exp", "exp2", "log", "log2", "pow",
    "sin", "cos", "tan", "tanh", "erf", "fabs", "floor", "ceil", "round", "fmin", "fmax", "fma",
    "fmod", "atan2", "rsqrt", "min", "max", "i32", "u32", "i64", "u64", "f32", "f64", "uint",
    // OpenCL C
    "get_global_id", "get_local_id", "get_group_id", "get_local_size", "get_num_groups",
    "get_global_size", "get_work_dim", "get_global_offset", "atomic_inc", "atomic_dec",
    "atomic_and", "atomic_or", "atomic_xor", "atomic_cmpxchg", "atomic_exchange", "mem_fence",
    "read_mem_fence", "write_mem_fence", "async_work_group_copy", "wait_group_events", "prefetch",
    "printf", "clamp", "mix", "select",
    // CUDA / HIP and the cpu backend's C++
    "__syncthreads", "atomicAdd", "atomicCAS", "atomicExch", "threadIdx", "blockIdx", "blockDim",
    "gridDim", "warpSize", "main"};

bool is_reserved_name(std::string_view name) {
  return std::find(kReservedNames.begin(), kReservedNames.end(), name) != kReservedNames.end();
}

// Sub-group (warp, wavefront, SIMD lane) operations of the backends: not in
// the dialect, whose sub-group size is a queried device property.
bool is_subgroup_operation(std::string_view name) {
  for (std::string_view prefix :
       {"sub_group_", "get_sub_group", "get_max_sub_group", "get_num_sub_groups",
        "get_enqueued_num_sub_groups", "intel_sub_group", "__shfl", "__ballot", "__activemask",
        "__any_sync", "__all_sync", "__match_", "__reduce_"}) {
    if (name.rfind(prefix, 0) == 0) return true;
  }
  return false;
}

// Type keywords that may stand before '(' in a file-scope declaration
// without making it a function declarator.
bool is_type_word(std::string_view word) {
  for (std::string_view type :
       {"void", "char", "short", "int", "long", "float", "double", "signed", "unsigned", "const",
        "static", "inline", "volatile", "restrict", "struct", "union", "enum", "extern"}) {
    if (word == type) return true;
  }
  return scalar_type_size(word) != 0;
}

struct ScalarArgType {
  std::string_view spelling;
  hal_arg_type_t type;
};
constexpr std::array<ScalarArgType, 10> kScalarArgTypes = {{{"int", HAL_ARG_I32},
                                                            {"i32", HAL_ARG_I32},
                                                            {"unsigned", HAL_ARG_U32},
                                                            {"unsigned int", HAL_ARG_U32},
                                                            {"uint", HAL_ARG_U32},
                                                            {"u32", HAL_ARG_U32},
                                                            {"i64", HAL_ARG_I64},
                                                            {"u64", HAL_ARG_U64},
                                                            {"float", HAL_ARG_F32},
                                                            {"f32", HAL_ARG_F32}}};

class Parser {
 public:
  Parser(Program& program, Diagnostic& error)
      : program_(program), tokens_(program.tokens), error_(error) {}

  bool run() {
    if (!check_directives()) return false;
    size_t i = 0;
    while (i < tokens_.size()) {
      if (tokens_[i].kind == TokenKind::kDirectiveStart) {
        const size_t first = i;
        while (tokens_[i].kind != TokenKind::kDirectiveEnd) ++i;
        program_.items.push_back(Item{ItemKind::kDirective, {first, ++i}, 0, 0, {}});
        continue;
      }
      if (!parse_item(i)) return false;
    }
    if (program_.kernels.empty()) {
      return fail_at_line(0, 0,
                          "the source defines no kernel (mark one with 'kernel void name(...)')");
    }
    return check_function_pointers() && check_names() && check_recursion();
  }

 private:
  bool fail(size_t token, std::string message) {
    const Token& at = tokens_[std::min(token, tokens_.size() - 1)];
    return fail_at_line(at.line, at.column, std::move(message));
  }
  bool fail_at_line(uint32_t line, uint32_t column, std::string message) {
    error_ = Diagnostic{line, column, std::move(message)};
    return false;
  }

  // Only #define, #undef and #pragma: the front end must see the same
  // program as every backend compiler, so nothing may be conditional or
  // pulled in from files.
  bool check_directives() {
    for (size_t i = 0; i < tokens_.size(); ++i) {
      const Token& token = tokens_[i];
      if (token.kind == TokenKind::kIdentifier && token.text.rfind("hal_", 0) == 0) {
        return fail(i, "identifiers starting with 'hal_' are reserved ('" + token.text + "')");
      }
      if (token.kind != TokenKind::kDirectiveStart) continue;
      const Token& keyword = tokens_[i + 1];
      if (keyword.kind == TokenKind::kDirectiveEnd) continue;  // a lone '#'
      if (keyword.text != "define" && keyword.text != "undef" && keyword.text != "pragma") {
        return fail(i + 1, "#" + keyword.text +
                               " is not part of the dialect (only #define, #undef and #pragma)");
      }
      size_t end = i + 1;
      while (tokens_[end].kind != TokenKind::kDirectiveEnd) ++end;
      for (size_t j = i + 2; j < end; ++j) {
        if (is_identifier(tokens_[j], "barrier") || is_identifier(tokens_[j], "shared") ||
            is_identifier(tokens_[j], "dynamic_shared")) {
          return fail(j, "'" + tokens_[j].text + "' may not appear in a #define");
        }
      }
      // A name #defined again with another value (without an #undef between)
      // is ill-formed C, which backend compilers only warn about, and it
      // would silently change a constant shared with the host (ops/portable's
      // tile sizes): refused for every backend alike.
      if ((keyword.text == "define" || keyword.text == "undef") && i + 2 < end &&
          tokens_[i + 2].kind == TokenKind::kIdentifier) {
        const std::string& name = tokens_[i + 2].text;
        std::vector<std::string> replacement;
        for (size_t j = i + 3; j < end; ++j) replacement.push_back(tokens_[j].text);
        if (keyword.text == "undef") {
          definitions_.erase(name);
          program_.constants.erase(name);
        } else if (const auto [known, added] = definitions_.try_emplace(name, replacement);
                   !added && known->second != replacement) {
          return fail(i + 2,
                      "'" + name + "' is #defined again with another value (#undef it first)");
        }
      }
      // An object-like #define NAME value: a constant shared sizes may use.
      if (keyword.text == "define" && i + 2 < end &&
          tokens_[i + 2].kind == TokenKind::kIdentifier &&
          !(i + 3 < end && is_punct(tokens_[i + 3], "(") && !tokens_[i + 3].space_before)) {
        program_.constants[tokens_[i + 2].text] =
            std::vector<Token>(tokens_.begin() + static_cast<std::ptrdiff_t>(i + 3),
                               tokens_.begin() + static_cast<std::ptrdiff_t>(end));
      }
      i = end;
    }
    return true;
  }

  // One declaration or definition at file scope, ending at a ';' or at the
  // '}' of a function body.
  bool parse_item(size_t& i) {
    const size_t first = i;
    int depth = 0;
    for (; i < tokens_.size(); ++i) {
      const Token& token = tokens_[i];
      if (token.kind != TokenKind::kPunct) continue;
      if (token.text == "{" && depth == 0 && i > first && is_punct(tokens_[i - 1], ")")) {
        const size_t body_open = i;
        i = matching_close(body_open) + 1;
        return parse_function(first, body_open);
      }
      if (token.text == "(" || token.text == "[" || token.text == "{") ++depth;
      if (token.text == ")" || token.text == "]" || token.text == "}") {
        if (--depth < 0) return fail(i, "unbalanced '" + token.text + "'");
      }
      if (token.text == ";" && depth == 0) {
        for (size_t j = first; j < i; ++j) {
          if (tokens_[j].kind == TokenKind::kIdentifier &&
              (is_kernel_only(tokens_[j].text) || tokens_[j].text == "kernel")) {
            return fail(j, "'" + tokens_[j].text + "' may only be used inside a kernel body");
          }
        }
        if (!check_file_scope_declaration(first, i)) return false;
        program_.items.push_back(Item{ItemKind::kOther, {first, ++i}, 0, 0, {}});
        return true;
      }
    }
    return fail(first, "this declaration does not end (a missing ';' or '}')");
  }

  // A declaration at file scope, tokens [first, semicolon): a type (struct,
  // union, enum, typedef) or a function prototype. Anything else declares a
  // variable, and the dialect has no global variables.
  bool check_file_scope_declaration(size_t first, size_t semicolon) {
    if (is_identifier(tokens_[first], "typedef")) return true;
    size_t j = first;
    while (j < semicolon &&
           (is_identifier(tokens_[j], "static") || is_identifier(tokens_[j], "const") ||
            is_identifier(tokens_[j], "extern"))) {
      ++j;
    }
    if (j < semicolon &&
        (is_identifier(tokens_[j], "struct") || is_identifier(tokens_[j], "union") ||
         is_identifier(tokens_[j], "enum"))) {
      size_t k = j + 1;
      if (k < semicolon && tokens_[k].kind == TokenKind::kIdentifier) ++k;
      if (k == semicolon) return true;  // a forward declaration
      if (is_punct(tokens_[k], "{")) {
        const size_t close = matching_close(k);
        if (close + 1 == semicolon) return true;  // a type definition
        return global_variable(first, semicolon, close + 1);
      }
    }
    // A prototype: NAME '(' at depth 0, NAME not a type word, nothing assigned.
    for (size_t k = first + 1; k < semicolon; ++k) {
      if (is_punct(tokens_[k], "=")) break;
      if (is_punct(tokens_[k], "(")) {
        const Token& before = tokens_[k - 1];
        if (before.kind == TokenKind::kIdentifier && !is_type_word(before.text)) return true;
        break;
      }
    }
    return global_variable(first, semicolon, first);
  }

  // Reports the variable declared in [from, semicolon): its name is the last
  // identifier before '=', '[' or the end.
  bool global_variable(size_t first, size_t semicolon, size_t from) {
    size_t name = semicolon;
    for (size_t k = from; k < semicolon; ++k) {
      if (is_punct(tokens_[k], "=") || is_punct(tokens_[k], "[") || is_punct(tokens_[k], ","))
        break;
      if (tokens_[k].kind == TokenKind::kIdentifier) name = k;
    }
    const size_t at = name < semicolon ? name : first;
    const std::string what = name < semicolon ? "'" + tokens_[name].text + "' " : "";
    return fail(at, "global variable " + what +
                        "at file scope: the dialect has no global variables (pass a buffer as a "
                        "kernel parameter, or use #define for a constant)");
  }

  // '(' '*' ... ')' '(' anywhere: a function pointer declarator, type or call
  // through a pointer.
  bool check_function_pointers() {
    for (size_t i = 0; i + 2 < tokens_.size(); ++i) {
      if (!is_punct(tokens_[i], "(") || !is_punct(tokens_[i + 1], "*")) continue;
      const size_t close = matching_close(i);
      if (close + 1 < tokens_.size() && is_punct(tokens_[close + 1], "(")) {
        return fail(i, "function pointers are not in the dialect");
      }
    }
    return true;
  }

  // Kernels and helper functions may not take a reserved name, and nothing
  // may use a sub-group operation.
  bool check_names() {
    for (size_t i = 0; i < tokens_.size(); ++i) {
      if (tokens_[i].kind == TokenKind::kIdentifier && is_subgroup_operation(tokens_[i].text)) {
        return fail(i, "'" + tokens_[i].text +
                           "' is a sub-group operation, which the dialect does not have (the "
                           "sub-group size is a device property no kernel may assume)");
      }
    }
    for (const Item& item : program_.items) {
      if (item.kind != ItemKind::kKernel && item.kind != ItemKind::kFunction) continue;
      const Token& name = tokens_[item.name_token];
      if (is_reserved_name(name.text)) {
        return fail(item.name_token, "'" + name.text +
                                         "' is a builtin name of the dialect or of a backend and " +
                                         "cannot name a " +
                                         (item.kind == ItemKind::kKernel ? "kernel" : "function"));
      }
    }
    return true;
  }

  // No function or kernel may reach itself through calls: the dialect has no
  // recursion (GPU backends have no call stack for it).
  bool check_recursion() {
    struct Function {
      std::string_view name;
      Range body;
      std::vector<std::pair<size_t, size_t>> calls;  // (callee index, call token)
    };
    std::vector<Function> functions;
    std::map<std::string_view, size_t> index;
    for (const Item& item : program_.items) {
      if (item.kind != ItemKind::kKernel && item.kind != ItemKind::kFunction) continue;
      size_t body = item.name_token;
      while (body < item.tokens.end && !is_punct(tokens_[body], "{")) ++body;
      const std::string_view name = tokens_[item.name_token].text;
      if (index.count(name) != 0) continue;  // a redefinition is the backend's to report
      index.emplace(name, functions.size());
      functions.push_back(Function{name, Range{body, item.tokens.end}, {}});
    }
    for (Function& function : functions) {
      for (size_t i = function.body.first; i + 1 < function.body.end; ++i) {
        if (tokens_[i].kind != TokenKind::kIdentifier || !is_punct(tokens_[i + 1], "(")) continue;
        const auto callee = index.find(tokens_[i].text);
        if (callee != index.end()) function.calls.emplace_back(callee->second, i);
      }
    }
    // Depth-first search; a call to a function on the current path closes a cycle.
    enum class Mark : uint8_t { kNew, kOnPath, kDone };
    std::vector<Mark> marks(functions.size(), Mark::kNew);
    std::vector<size_t> path;
    std::function<bool(size_t)> visit = [&](size_t f) -> bool {
      marks[f] = Mark::kOnPath;
      path.push_back(f);
      for (const auto& [callee, token] : functions[f].calls) {
        if (marks[callee] == Mark::kOnPath) {
          // Appended piece by piece: GCC 12's -Wrestrict misfires on "'" + std::string.
          std::string message;
          if (callee == f) {
            message.append("'").append(functions[f].name);
            message.append("' calls itself: the dialect has no recursion");
            return fail(token, std::move(message));
          }
          message.append("recursion: ");
          const auto start = std::find(path.begin(), path.end(), callee);
          for (auto it = start; it != path.end(); ++it) {
            message.append("'").append(functions[*it].name).append("' calls ");
          }
          message.append("'").append(functions[callee].name);
          message.append("'; the dialect has no recursion");
          return fail(token, std::move(message));
        }
        if (marks[callee] == Mark::kNew && !visit(callee)) return false;
      }
      path.pop_back();
      marks[f] = Mark::kDone;
      return true;
    };
    for (size_t f = 0; f < functions.size(); ++f) {
      if (marks[f] == Mark::kNew && !visit(f)) return false;
    }
    return true;
  }

  size_t matching_close(size_t open) const {
    const std::string& open_text = tokens_[open].text;
    const std::string_view close_text = open_text == "(" ? ")" : open_text == "[" ? "]" : "}";
    int depth = 0;
    for (size_t i = open; i < tokens_.size(); ++i) {
      if (is_punct(tokens_[i], open_text)) ++depth;
      if (is_punct(tokens_[i], close_text) && --depth == 0) return i;
    }
    return tokens_.size();
  }

  size_t matching_open(size_t close) const {
    int depth = 0;
    for (size_t i = close + 1; i-- > 0;) {
      if (is_punct(tokens_[i], ")")) ++depth;
      if (is_punct(tokens_[i], "(") && --depth == 0) return i;
    }
    return tokens_.size();
  }

  bool parse_function(size_t first, size_t body_open) {
    const size_t body_close = matching_close(body_open);
    if (body_close >= tokens_.size()) return fail(body_open, "this function body does not end");
    const size_t params_open = matching_open(body_open - 1);
    if (params_open >= tokens_.size() || params_open == first ||
        tokens_[params_open - 1].kind != TokenKind::kIdentifier) {
      return fail(body_open, "expected a function definition");
    }
    const size_t name_token = params_open - 1;
    const Range item_range{first, body_close + 1};
    bool is_kernel = false;
    for (size_t j = first; j < name_token; ++j) is_kernel |= is_identifier(tokens_[j], "kernel");
    if (!is_kernel) {
      for (size_t j = first; j < body_close; ++j) {
        if (tokens_[j].kind == TokenKind::kIdentifier && is_kernel_only(tokens_[j].text)) {
          return fail(j, "'" + tokens_[j].text +
                             "' may only be used in a kernel body, not in "
                             "the helper function '" +
                             tokens_[name_token].text + "'");
        }
      }
      program_.items.push_back(
          Item{ItemKind::kFunction, item_range, 0, name_token, Range{first, name_token}});
      return true;
    }
    Kernel kernel;
    kernel.name = tokens_[name_token].text;
    kernel.name_token = name_token;
    kernel.parameter_tokens = Range{params_open + 1, body_open - 1};
    kernel.body = Range{body_open, body_close + 1};
    if (program_.find_kernel(kernel.name) != nullptr) {
      return fail(name_token, "kernel '" + kernel.name + "' is defined twice");
    }
    if (!parse_kernel_prefix(first, name_token, kernel) || !parse_parameters(kernel) ||
        !scan_kernel_body(kernel)) {
      return false;
    }
    program_.items.push_back(
        Item{ItemKind::kKernel, item_range, program_.kernels.size(), name_token, {}});
    program_.kernels.push_back(std::move(kernel));
    return true;
  }

  // `kernel [max_block(N)] void`, in any order.
  bool parse_kernel_prefix(size_t first, size_t name_token, Kernel& kernel) {
    bool returns_void = false;
    for (size_t j = first; j < name_token; ++j) {
      const Token& token = tokens_[j];
      if (is_identifier(token, "kernel")) continue;
      if (is_identifier(token, "void")) {
        returns_void = true;
        continue;
      }
      if (is_identifier(token, "max_block") && j + 1 < name_token &&
          is_punct(tokens_[j + 1], "(")) {
        const size_t close = matching_close(j + 1);
        int64_t value = 0;
        if (close >= name_token) return fail(j + 1, "max_block( has no matching ')'");
        if (!evaluate(j + 2, close, value)) return false;
        if (value < 1 || value > 65536) {
          return fail(j, "max_block(" + std::to_string(value) + ") is outside 1..65536");
        }
        kernel.max_threads_per_block = static_cast<uint32_t>(value);
        j = close;
        continue;
      }
      if (token.kind == TokenKind::kIdentifier) {
        return fail(j, "kernel '" + kernel.name + "' must return void, not '" + token.text + "'");
      }
      return fail(j, "unexpected '" + token.text + "' before kernel '" + kernel.name +
                         "' (expected 'kernel', 'max_block(N)' and 'void')");
    }
    if (!returns_void) return fail(name_token, "kernel '" + kernel.name + "' must return void");
    return true;
  }

  bool parse_parameters(Kernel& kernel) {
    const Range range = kernel.parameter_tokens;
    if (range.first == range.end ||
        (range.end == range.first + 1 && is_identifier(tokens_[range.first], "void"))) {
      return true;
    }
    size_t start = range.first;
    int depth = 0;
    for (size_t i = range.first; i <= range.end; ++i) {
      if (i < range.end && (is_punct(tokens_[i], "(") || is_punct(tokens_[i], "["))) ++depth;
      if (i < range.end && (is_punct(tokens_[i], ")") || is_punct(tokens_[i], "]"))) --depth;
      if (i == range.end || (depth == 0 && is_punct(tokens_[i], ","))) {
        if (!parse_parameter(kernel, Range{start, i})) return false;
        start = i + 1;
      }
    }
    if (kernel.parameters.size() > HAL_MAX_KERNEL_ARGS) {
      return fail(range.first, "kernel '" + kernel.name + "' has more than " +
                                   std::to_string(HAL_MAX_KERNEL_ARGS) + " parameters");
    }
    return true;
  }

  bool parse_parameter(Kernel& kernel, Range range) {
    if (range.first == range.end || tokens_[range.end - 1].kind != TokenKind::kIdentifier) {
      return fail(range.first, "kernel '" + kernel.name + "': expected a parameter name");
    }
    Parameter parameter;
    parameter.name = tokens_[range.end - 1].text;
    parameter.tokens = range;
    bool pointer = false, global = false, local = false;
    std::string type;
    for (size_t i = range.first; i + 1 < range.end; ++i) {
      const Token& token = tokens_[i];
      if (is_punct(token, "*")) {
        pointer = true;
      } else if (is_identifier(token, "global")) {
        global = true;
      } else if (is_identifier(token, "local")) {
        local = true;
      } else if (token.kind == TokenKind::kPunct) {
        return fail(i, "kernel '" + kernel.name + "': parameter '" + parameter.name +
                           "' is not a pointer or a scalar");
      } else if (!is_identifier(token, "const") && !is_identifier(token, "restrict")) {
        type += (type.empty() ? "" : " ") + token.text;
      }
    }
    const std::string where = "kernel '" + kernel.name + "': parameter '" + parameter.name + "'";
    if (pointer) {
      if (local) {
        return fail(range.first, where +
                                     " points to group-shared memory; use dynamic_shared(T) "
                                     "in the body instead");
      }
      if (!global) {
        return fail(range.first, where + " must point to global memory ('global " + type + "*')");
      }
      parameter.type = HAL_ARG_POINTER;
    } else {
      const auto match = std::find_if(kScalarArgTypes.begin(), kScalarArgTypes.end(),
                                      [&](const ScalarArgType& s) { return s.spelling == type; });
      if (type == "double" || type == "f64") {
        parameter.type = HAL_ARG_F64;
      } else if (match != kScalarArgTypes.end()) {
        parameter.type = match->type;
      } else {
        return fail(range.first, where + " has type '" + type +
                                     "', which a kernel cannot take (global pointers, int/i32, "
                                     "unsigned/u32, i64, u64, float/f32, double/f64)");
      }
    }
    kernel.parameters.push_back(std::move(parameter));
    return true;
  }

  bool scan_kernel_body(Kernel& kernel) {
    int depth = 0;
    for (size_t i = kernel.body.first; i + 1 < kernel.body.end; ++i) {
      const Token& token = tokens_[i];
      if (token.kind == TokenKind::kPunct) {
        if (token.text == "{") ++depth;
        if (token.text == "}") --depth;
        continue;
      }
      if (token.kind != TokenKind::kIdentifier) continue;
      if (token.text == "kernel") return fail(i, "'kernel' inside a kernel body");
      if (token.text == "barrier") {
        if (!(is_punct(tokens_[i + 1], "(") && is_punct(tokens_[i + 2], ")"))) {
          return fail(i, "barrier takes no arguments: 'barrier()'");
        }
        kernel.uses_barrier = true;
      } else if (token.text == "dynamic_shared") {
        if (!is_punct(tokens_[i + 1], "(") || matching_close(i + 1) >= kernel.body.end) {
          return fail(i, "dynamic_shared takes a type: 'dynamic_shared(float)'");
        }
        kernel.uses_dynamic_shared = true;
      } else if (token.text == "shared") {
        if (depth != 1 || !(is_punct(tokens_[i - 1], "{") || is_punct(tokens_[i - 1], ";") ||
                            is_punct(tokens_[i - 1], "}"))) {
          return fail(i, "shared arrays are declared at the outermost level of a kernel body");
        }
        if (!parse_shared(kernel, i)) return false;
      }
    }
    return true;
  }

  // shared T name[N][M]...;
  bool parse_shared(Kernel& kernel, size_t& i) {
    SharedArray array;
    const size_t first = i;
    size_t j = i + 1;
    std::string type;
    while (j < kernel.body.end && tokens_[j].kind == TokenKind::kIdentifier &&
           !(j + 1 < kernel.body.end && is_punct(tokens_[j + 1], "["))) {
      type += (type.empty() ? "" : " ") + tokens_[j].text;
      ++j;
    }
    if (j >= kernel.body.end || tokens_[j].kind != TokenKind::kIdentifier) {
      return fail(first, "expected 'shared TYPE NAME[SIZE];'");
    }
    array.name = tokens_[j].text;
    array.name_token = j;
    const uint32_t element = scalar_type_size(type);
    if (element == 0) {
      return fail(first, "shared array '" + array.name + "' has type '" + type +
                             "'; shared arrays hold scalar types (int, float, f16, ...)");
    }
    uint64_t count = 1;
    ++j;
    while (j < kernel.body.end && is_punct(tokens_[j], "[")) {
      const size_t close = matching_close(j);
      int64_t extent = 0;
      if (close >= kernel.body.end) {
        return fail(j, "shared array '" + array.name + "': '[' has no matching ']'");
      }
      if (!evaluate(j + 1, close, extent)) return false;
      if (extent <= 0 || extent > (int64_t{1} << 30)) {
        return fail(j, "shared array '" + array.name + "' has extent " + std::to_string(extent));
      }
      count *= static_cast<uint64_t>(extent);
      j = close + 1;
    }
    if (j >= kernel.body.end || !is_punct(tokens_[j], ";")) {
      return fail(first, "expected 'shared TYPE NAME[SIZE];' (no initialiser, constant sizes)");
    }
    array.bytes = count * element;
    array.tokens = Range{first, j + 1};
    kernel.static_shared_bytes += array.bytes;
    kernel.shared.push_back(std::move(array));
    i = j;
    return true;
  }

  // Integer constant expressions over literals and object-like #defines.
  bool evaluate(size_t first, size_t end, int64_t& value) {
    std::vector<Token> expression(tokens_.begin() + static_cast<std::ptrdiff_t>(first),
                                  tokens_.begin() + static_cast<std::ptrdiff_t>(end));
    size_t position = 0;
    if (!expand(expression, 0) || !evaluate_sum(expression, position, value, first)) return false;
    if (position != expression.size()) return fail(first, "expected an integer constant");
    return true;
  }

  bool expand(std::vector<Token>& expression, int depth) {
    if (depth > 16) return fail_at_line(0, 0, "#define constants nest too deeply");
    for (size_t i = 0; i < expression.size(); ++i) {
      if (expression[i].kind != TokenKind::kIdentifier) continue;
      const auto found = program_.constants.find(expression[i].text);
      if (found == program_.constants.end()) {
        return fail_at_line(expression[i].line, expression[i].column,
                            "'" + expression[i].text + "' is not an integer constant");
      }
      std::vector<Token> replacement = found->second;
      if (!expand(replacement, depth + 1)) return false;
      replacement.insert(replacement.begin(), Token{TokenKind::kPunct, "(", 0, 0, false});
      replacement.push_back(Token{TokenKind::kPunct, ")", 0, 0, false});
      expression.erase(expression.begin() + static_cast<std::ptrdiff_t>(i));
      expression.insert(expression.begin() + static_cast<std::ptrdiff_t>(i), replacement.begin(),
                        replacement.end());
      i += replacement.size() - 1;
    }
    return true;
  }

  bool evaluate_sum(const std::vector<Token>& e, size_t& p, int64_t& value, size_t at) {
    if (!evaluate_product(e, p, value, at)) return false;
    while (p < e.size() && (is_punct(e[p], "+") || is_punct(e[p], "-"))) {
      const bool plus = e[p++].text == "+";
      int64_t rhs = 0;
      if (!evaluate_product(e, p, rhs, at)) return false;
      value = plus ? value + rhs : value - rhs;
    }
    return true;
  }

  bool evaluate_product(const std::vector<Token>& e, size_t& p, int64_t& value, size_t at) {
    if (!evaluate_unary(e, p, value, at)) return false;
    while (p < e.size() && (is_punct(e[p], "*") || is_punct(e[p], "/") || is_punct(e[p], "%"))) {
      const char op = e[p++].text[0];
      int64_t rhs = 0;
      if (!evaluate_unary(e, p, rhs, at)) return false;
      if (op != '*' && rhs == 0) return fail(at, "division by zero in a constant");
      value = op == '*' ? value * rhs : op == '/' ? value / rhs : value % rhs;
      if (value > (int64_t{1} << 40) || value < -(int64_t{1} << 40)) {
        return fail(at, "constant too large");
      }
    }
    return true;
  }

  bool evaluate_unary(const std::vector<Token>& e, size_t& p, int64_t& value, size_t at) {
    if (p >= e.size()) return fail(at, "expected an integer constant");
    if (is_punct(e[p], "-")) {
      ++p;
      if (!evaluate_unary(e, p, value, at)) return false;
      value = -value;
      return true;
    }
    if (is_punct(e[p], "(")) {
      ++p;
      if (!evaluate_sum(e, p, value, at)) return false;
      if (p >= e.size() || !is_punct(e[p], ")")) return fail(at, "expected ')' in a constant");
      ++p;
      return true;
    }
    if (e[p].kind != TokenKind::kNumber) return fail(at, "expected an integer constant");
    std::string_view digits = e[p].text;
    while (!digits.empty() && (digits.back() == 'u' || digits.back() == 'U' ||
                               digits.back() == 'l' || digits.back() == 'L')) {
      digits.remove_suffix(1);
    }
    int base = 10;
    if (digits.size() > 2 && digits[0] == '0' && (digits[1] == 'x' || digits[1] == 'X')) {
      base = 16;
      digits.remove_prefix(2);
    }
    const auto [end, status] =
        std::from_chars(digits.data(), digits.data() + digits.size(), value, base);
    if (status != std::errc() || end != digits.data() + digits.size()) {
      return fail(at, "'" + e[p].text + "' is not an integer constant");
    }
    ++p;
    return true;
  }

  Program& program_;
  const std::vector<Token>& tokens_;
  Diagnostic& error_;
  // Every #defined name and its replacement's tokens, for the redefinition rule.
  std::map<std::string, std::vector<std::string>> definitions_;
};

}  // namespace

const Kernel* Program::find_kernel(std::string_view name) const {
  for (const Kernel& kernel : kernels) {
    if (kernel.name == name) return &kernel;
  }
  return nullptr;
}

bool Program::any_barrier() const {
  return std::any_of(kernels.begin(), kernels.end(),
                     [](const Kernel& kernel) { return kernel.uses_barrier; });
}

uint32_t scalar_type_size(std::string_view name) {
  static constexpr std::array<std::pair<std::string_view, uint32_t>, 21> kSizes = {{
      {"char", 1},
      {"unsigned char", 1},
      {"short", 2},
      {"unsigned short", 2},
      {"f16", 2},
      {"bf16", 2},
      {"int", 4},
      {"unsigned", 4},
      {"unsigned int", 4},
      {"uint", 4},
      {"i32", 4},
      {"u32", 4},
      {"float", 4},
      {"f32", 4},
      {"i64", 8},
      {"u64", 8},
      {"double", 8},
      {"f64", 8},
      {"const int", 4},
      {"const float", 4},
      {"const unsigned", 4},
  }};
  for (const auto& [spelling, size] : kSizes) {
    if (spelling == name) return size;
  }
  return 0;
}

bool parse(std::string_view source, Program& out_program, Diagnostic& error) {
  out_program = Program{};
  if (!lex(source, out_program.tokens, error)) return false;
  if (out_program.tokens.empty()) {
    error = Diagnostic{0, 0, "the source is empty"};
    return false;
  }
  Parser parser(out_program, error);
  return parser.run();
}

}  // namespace hal::dialect
