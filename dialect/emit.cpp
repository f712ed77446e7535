// Emission: the dialect's tokens rewritten into each backend's spelling, with
// #line directives so the backend compiler's diagnostics name the user's
// lines. GPU-like backends (OpenCL, CUDA, HIP) keep the kernel's shape; the
// C++ backend wraps the body in a per-work-item function (emit_cpp_kernel).
#include <algorithm>
#include <array>

#include "emitter.hpp"
#include "hal_dialect/dialect.hpp"

namespace hal::dialect {
namespace {

struct Rename {
  std::string_view dialect;
  std::string_view target;
};

// Names every backend spells the same way: prelude typedefs and functions.
constexpr std::array<Rename, 22> kCommonRenames = {{
    {"i32", "hal_i32"},
    {"u32", "hal_u32"},
    {"uint", "hal_u32"},
    {"i64", "hal_i64"},
    {"u64", "hal_u64"},
    {"f32", "hal_f32"},
    {"f64", "hal_f64"},
    {"f16", "hal_f16"},
    {"bf16", "hal_bf16"},
    {"atomic_add", "hal_atomic_add"},
    {"atomic_sub", "hal_atomic_sub"},
    {"atomic_min", "hal_atomic_min"},
    {"atomic_max", "hal_atomic_max"},
    {"atomic_xchg", "hal_atomic_xchg"},
    {"atomic_cas", "hal_atomic_cas"},
    {"load_f16", "hal_load_f16"},
    {"store_f16", "hal_store_f16"},
    {"load_bf16", "hal_load_bf16"},
    {"store_bf16", "hal_store_bf16"},
    {"min", "hal_min"},
    {"max", "hal_max"},
    {"rsqrt", "hal_rsqrt"},
}};

constexpr std::array<std::string_view, 6> kIdFunctions = {
    "global_id", "local_id", "group_id", "local_size", "num_groups", "global_size"};

}  // namespace

std::string_view backend_name(Backend backend) {
  switch (backend) {
    case Backend::kCpp:
      return "C++";
    case Backend::kOpenCL:
      return "OpenCL C";
    case Backend::kCuda:
      return "CUDA C++";
    case Backend::kHip:
      return "HIP C++";
  }
  return "?";
}

std::string signature_text(const std::vector<hal_arg_type_t>& types) {
  static constexpr std::array<std::string_view, 7> kNames = {"ptr", "i32", "u32", "i64",
                                                             "u64", "f32", "f64"};
  std::string text;
  for (size_t i = 0; i < types.size(); ++i) {
    if (i != 0) text += ',';
    text += kNames.at(static_cast<size_t>(types[i]));
  }
  return text;
}

const KernelRecord* TranslatedModule::find(std::string_view entry) const {
  for (const KernelRecord& kernel : kernels) {
    if (kernel.entry == entry) return &kernel;
  }
  return nullptr;
}

// ---- Emitter ---------------------------------------------------------------

Emitter::Emitter(const Program& program, Backend backend, const TranslateOptions& options)
    : program_(program),
      tokens_(program.tokens),
      backend_(backend),
      bounds_checked_(options.bounds_checked && backend == Backend::kCpp) {}

void Emitter::raw(std::string_view text) {
  if (text.empty()) return;
  if (!at_line_start_ && !out_.empty() && out_.back() != '\n' && out_.back() != ' ') out_ += ' ';
  out_ += text;
  at_line_start_ = text.back() == '\n';
  synced_ = false;  // the next source token re-anchors with #line
}

void Emitter::line_break() {
  if (!at_line_start_) out_ += '\n';
  at_line_start_ = true;
  synced_ = false;
}

void Emitter::put(const Token& token, std::string_view spelling) {
  if (token.kind == TokenKind::kDirectiveEnd) {
    out_ += '\n';
    ++line_;
    at_line_start_ = true;
    in_directive_ = false;
    return;
  }
  if (token.kind == TokenKind::kDirectiveStart) {
    sync(token);
    if (!at_line_start_) {
      out_ += '\n';
      ++line_;
    }
    out_ += '#';
    at_line_start_ = false;
    in_directive_ = true;
    return;
  }
  if (!in_directive_) sync(token);
  if (bounds_checked_ && !in_directive_) {
    // `global T*` becomes hal_rt::checked<T>: the address space opens the
    // template, the declarator's `*` closes it (a pointer's `restrict` goes:
    // it does not apply to a class).
    if (token.kind == TokenKind::kIdentifier && token.text == "global") {
      spelling = "hal_rt::checked<";
      open_checked_ = true;
    } else if (open_checked_ && token.kind == TokenKind::kPunct && token.text == "*") {
      spelling = ">";
      open_checked_ = false;
    } else if (token.kind == TokenKind::kIdentifier && token.text == "restrict") {
      return;
    } else if (open_checked_ && token.kind == TokenKind::kPunct &&
               (token.text == ";" || token.text == "{" || token.text == "}")) {
      open_checked_ = false;  // a `global` without its `*` (not a pointer): left as it was
    }
  }
  if (spelling.empty()) return;
  if (!at_line_start_) {
    const char last = out_.back();
    const bool glue = (std::isalnum(static_cast<unsigned char>(last)) != 0 || last == '_') &&
                      (std::isalnum(static_cast<unsigned char>(spelling.front())) != 0 ||
                       spelling.front() == '_');
    if (token.space_before || glue) out_ += ' ';
  }
  out_ += spelling;
  at_line_start_ = false;
}

void Emitter::sync(const Token& token) {
  if (synced_ && token.line >= line_ && token.line <= line_ + 8) {
    while (line_ < token.line) {
      out_ += '\n';
      ++line_;
      at_line_start_ = true;
    }
    return;
  }
  if (!at_line_start_) out_ += '\n';
  out_ += "#line " + std::to_string(token.line) + " \"hal-dialect\"\n";
  line_ = token.line;
  synced_ = true;
  at_line_start_ = true;
}

std::string Emitter::spelling(const Token& token) const {
  if (token.kind != TokenKind::kIdentifier) return token.text;
  const std::string_view name = token.text;
  for (const Rename& rename : kCommonRenames) {
    if (rename.dialect == name) return std::string(rename.target);
  }
  if (std::find(kIdFunctions.begin(), kIdFunctions.end(), name) != kIdFunctions.end()) {
    return backend_ == Backend::kCpp ? "hal_item" + copy_suffix_ + "." + token.text
                                     : "hal_" + token.text;
  }
  const bool opencl = backend_ == Backend::kOpenCL;
  if (name == "global") return opencl ? "__global" : "";
  if (name == "local") return opencl ? "__local" : "";
  if (name == "restrict") return opencl ? "restrict" : "__restrict__";
  if (name == "shared") {
    return opencl ? "__local" : backend_ == Backend::kCpp ? "alignas(64)" : "__shared__";
  }
  if (name == "return" && coroutine_body_) return "co_return";
  return token.text;
}

size_t Emitter::put_range(size_t first, size_t end, const std::vector<Range>& skip) {
  for (size_t i = first; i < end; ++i) {
    const auto skipped = std::find_if(skip.begin(), skip.end(),
                                      [&](const Range& range) { return range.first == i; });
    if (skipped != skip.end()) {
      i = skipped->end - 1;
      continue;
    }
    const Token& token = tokens_[i];
    if (token.kind == TokenKind::kIdentifier && token.text == "barrier" && i + 2 < end) {
      put(token, barrier_spelling());
      i += 2;
      continue;
    }
    if (token.kind == TokenKind::kIdentifier && token.text == "dynamic_shared" && i + 1 < end) {
      size_t close = i + 1;
      for (int depth = 0; close < end; ++close) {
        if (is_punct(tokens_[close], "(")) ++depth;
        if (is_punct(tokens_[close], ")") && --depth == 0) break;
      }
      put(token, backend_ == Backend::kOpenCL ? "((__local" : "((");
      for (size_t j = i + 2; j < close; ++j) put(tokens_[j], spelling(tokens_[j]));
      put(tokens_[close], backend_ == Backend::kCpp      ? "*)hal_ctx->shared_memory)"
                          : backend_ == Backend::kOpenCL ? "*)hal_dynamic_shared)"
                                                         : "*)hal_dynamic_shared)");
      i = close;
      continue;
    }
    if (bounds_checked_ && is_punct(token, "&") && i + 2 < end) {
      // &NAME[INDEX] is NAME + (INDEX): for a checked pointer a checked pointer
      // (the element's address would leave the checks), for an array the same.
      if (const size_t close = element_address_end(i, end); close != 0) {
        put(token, "(");
        put_range(i + 1, i + 2, skip);
        put(tokens_[i + 2], "+(");
        put_range(i + 3, close, skip);
        put(tokens_[close], "))");
        i = close;
        continue;
      }
    }
    if (renamed_ != nullptr && token.kind == TokenKind::kIdentifier && i > 0 &&
        !is_punct(tokens_[i - 1], ".") && !is_punct(tokens_[i - 1], "->") &&
        std::binary_search(renamed_->begin(), renamed_->end(), token.text)) {
      put(token, token.text + copy_suffix_);
      continue;
    }
    put(token, spelling(token));
  }
  return end;
}

size_t Emitter::element_address_end(size_t i, size_t end) const {
  // Unary: not after an operand (a name other than a keyword, a literal, ')' or ']').
  if (i > 0) {
    const Token& before = tokens_[i - 1];
    const bool keyword =
        before.text == "return" || before.text == "case" || before.text == "sizeof";
    if ((before.kind == TokenKind::kIdentifier && !keyword) || before.kind == TokenKind::kNumber ||
        before.kind == TokenKind::kString || is_punct(before, ")") || is_punct(before, "]")) {
      return 0;
    }
  }
  if (tokens_[i + 1].kind != TokenKind::kIdentifier || !is_punct(tokens_[i + 2], "[")) return 0;
  int depth = 0;
  for (size_t j = i + 2; j < end; ++j) {
    if (is_punct(tokens_[j], "[")) ++depth;
    if (is_punct(tokens_[j], "]") && --depth == 0) {
      // One subscript only: &a[i][j] and &a[i].x are left as they are.
      const bool more =
          j + 1 < end && (is_punct(tokens_[j + 1], "[") || is_punct(tokens_[j + 1], ".") ||
                          is_punct(tokens_[j + 1], "->"));
      return more ? 0 : j;
    }
  }
  return 0;
}

std::string_view Emitter::barrier_spelling() const {
  switch (backend_) {
    case Backend::kCpp:
      return "co_await hal_rt::Barrier{}";
    case Backend::kOpenCL:
      return "barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE)";
    default:
      return "__syncthreads()";
  }
}

void Emitter::emit_function(const Item& item) {
  line_break();
  switch (backend_) {
    case Backend::kCpp:
      raw("static inline");
      break;
    case Backend::kCuda:
    case Backend::kHip:
      raw("static __device__ inline");
      break;
    case Backend::kOpenCL:
      break;
  }
  for (size_t i = item.prefix.first; i < item.prefix.end; ++i) {
    const Token& token = tokens_[i];
    if (token.kind == TokenKind::kIdentifier && (token.text == "static" || token.text == "inline"))
      continue;
    put(token, spelling(token));
  }
  put_range(item.prefix.end, item.tokens.end, {});
}

void Emitter::emit_gpu_kernel(const Kernel& kernel) {
  line_break();
  const bool opencl = backend_ == Backend::kOpenCL;
  if (opencl) {
    raw("__kernel void");
  } else {
    raw("extern \"C\" __global__ void");
    if (kernel.max_threads_per_block != 0) {
      raw("__launch_bounds__(" + std::to_string(kernel.max_threads_per_block) + ")");
    }
  }
  put(tokens_[kernel.name_token], kernel.name);
  put(tokens_[kernel.name_token + 1], "(");
  put_range(kernel.parameter_tokens.first, kernel.parameter_tokens.end, {});
  if (opencl && kernel.uses_dynamic_shared) {
    raw(kernel.parameters.empty() ? "__local uchar* hal_dynamic_shared"
                                  : ", __local uchar* hal_dynamic_shared");
  }
  put(tokens_[kernel.parameter_tokens.end], ")");
  put(tokens_[kernel.body.first], "{");
  if (!opencl && kernel.uses_dynamic_shared) {
    raw("extern __shared__ __align__(16) unsigned char hal_dynamic_shared[];\n");
  }
  put_range(kernel.body.first + 1, kernel.body.end, {});
}

std::string Emitter::finish() {
  for (const Item& item : program_.items) {
    switch (item.kind) {
      case ItemKind::kDirective:
      case ItemKind::kOther:
        put_range(item.tokens.first, item.tokens.end, {});
        break;
      case ItemKind::kFunction:
        emit_function(item);
        break;
      case ItemKind::kKernel:
        if (backend_ == Backend::kCpp) {
          emit_cpp_kernel(program_.kernels[item.kernel_index]);
        } else {
          emit_gpu_kernel(program_.kernels[item.kernel_index]);
        }
        break;
    }
  }
  line_break();
  return std::move(out_);
}

// ---- entry points ------------------------------------------------------------

std::string emit(const Program& program, Backend backend, const TranslateOptions& options) {
  std::string text;
  switch (backend) {
    case Backend::kCpp:
      text = std::string(cpp_prelude());
      if (options.bounds_checked) text += cpp_bounds_prelude();
      for (const Kernel& kernel : program.kernels) {
        std::string note;
        if (cpu_shape(program, kernel, note) == CpuShape::kCoroutines) {
          text += cpp_coroutine_prelude();
          break;
        }
      }
      break;
    case Backend::kOpenCL:
      text = std::string(opencl_prelude());
      break;
    case Backend::kCuda:
    case Backend::kHip:
      text = gpu_prelude(backend);
      break;
  }
  Emitter emitter(program, backend, options);
  text += "// ---- translated from the HAL kernel dialect ----\n";
  text += emitter.finish();
  return text;
}

bool translate(std::string_view source, Backend backend, TranslatedModule& out, Diagnostic& error,
               const TranslateOptions& options) {
  Program program;
  if (!parse(source, program, error)) return false;
  out = TranslatedModule{};
  out.backend = backend;
  out.text = emit(program, backend, options);
  for (const Kernel& kernel : program.kernels) {
    KernelRecord record;
    record.entry = kernel.name;
    for (const Parameter& parameter : kernel.parameters) record.arg_types.push_back(parameter.type);
    record.max_threads_per_block = kernel.max_threads_per_block;
    record.static_shared_bytes =
        static_cast<uint32_t>(std::min<uint64_t>(kernel.static_shared_bytes, UINT32_MAX));
    record.dynamic_shared = kernel.uses_dynamic_shared;
    record.barriers = kernel.uses_barrier;
    record.bounds_checked = options.bounds_checked && backend == Backend::kCpp;
    if (backend == Backend::kCpp)
      record.cpu_shape = cpu_shape(program, kernel, record.cpu_shape_note);
    out.kernels.push_back(std::move(record));
  }
  return true;
}

}  // namespace hal::dialect
