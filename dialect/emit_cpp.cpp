// The C++ backend's kernel shape (the cpu plugin). A kernel becomes one
// exported function per block (hal/cpu_kernel.h) that runs the block's
// work-items:
//
//  - without barriers, as a loop over the work-items, x innermost, calling a
//    lambda that holds the body, which the compiler inlines and can
//    vectorise across work-items;
//  - with barriers, each work-item is a C++20 coroutine (a static function,
//    hal_items_<name>) and barrier() is a co_await. The block function
//    resumes every work-item in turn, so one pass over the work-items runs
//    one barrier interval; a barrier inside a loop or a branch is just
//    another suspension point. Locals live in the coroutine frames, as
//    PoCL's context arrays hold values across parallel regions.
//
// `shared` arrays move out of the body into the block function; work-items
// see them by reference.
#include "emitter.hpp"

namespace hal::dialect {

void Emitter::emit_cpp_kernel(const Kernel& kernel) {
  std::vector<Range> shared_ranges;
  for (const SharedArray& array : kernel.shared) shared_ranges.push_back(array.tokens);
  const bool with_params = !kernel.parameters.empty();

  if (kernel.uses_barrier) {
    // static hal_rt::ItemTask hal_items_K(Item, ctx, params..., T (&shared)[N]...) { body }
    line_break();
    raw("static hal_rt::ItemTask hal_items_" + kernel.name +
        "(const hal_rt::Item hal_item, const hal_cpu_block_context_t* hal_ctx" +
        (with_params ? "," : ""));
    put_range(kernel.parameter_tokens.first, kernel.parameter_tokens.end, {});
    for (const SharedArray& array : kernel.shared) {
      raw(",");
      put_range(array.tokens.first + 1, array.name_token, {});  // the element type
      raw("(&" + array.name + ")");
      put_range(array.name_token + 1, array.tokens.end - 1, {});  // the extents
    }
    raw(") { (void)hal_item; (void)hal_ctx;");
    coroutine_body_ = true;
    put_range(kernel.body.first + 1, kernel.body.end - 1, shared_ranges);
    coroutine_body_ = false;
    line_break();
    raw("co_return;\n}\n");
  }

  line_break();
  raw("extern \"C\" __attribute__((visibility(\"default\"))) void");
  put(tokens_[kernel.name_token], kernel.name);
  put(tokens_[kernel.name_token + 1], "(");
  raw(with_params ? "const hal_cpu_block_context_t* hal_ctx,"
                  : "const hal_cpu_block_context_t* hal_ctx");
  put_range(kernel.parameter_tokens.first, kernel.parameter_tokens.end, {});
  put(tokens_[kernel.parameter_tokens.end], ")");
  put(tokens_[kernel.body.first], "{");
  raw("const hal_rt::Block hal_block(hal_ctx);\n");
  for (const SharedArray& array : kernel.shared) {
    put_range(array.tokens.first, array.tokens.end, {});
  }
  line_break();
  if (kernel.uses_barrier) {
    std::string call = "auto hal_body = [&](const hal_rt::Item hal_item) { return hal_items_" +
                       kernel.name + "(hal_item, hal_ctx";
    for (const Parameter& parameter : kernel.parameters) call += ", " + parameter.name;
    for (const SharedArray& array : kernel.shared) call += ", " + array.name;
    raw(call + "); };\nhal_rt::run_items_with_barriers(hal_block, hal_body);\n");
  } else {
    raw("auto hal_body = [&](const hal_rt::Item hal_item) { (void)hal_item;");
    put_range(kernel.body.first + 1, kernel.body.end - 1, shared_ranges);
    line_break();
    raw("};\nhal_rt::run_items(hal_block, hal_body);\n");
  }
  put(tokens_[kernel.body.end - 1], "}");
  line_break();

  std::vector<hal_arg_type_t> types;
  for (const Parameter& parameter : kernel.parameters) types.push_back(parameter.type);
  raw("HAL_CPU_KERNEL_SIGNATURE(" + kernel.name + ", \"" + signature_text(types) + "\");\n");
  raw("extern \"C\" __attribute__((visibility(\"default\"))) const uint32_t "
      "hal_kernel_static_shared_" +
      kernel.name + " = " + std::to_string(kernel.static_shared_bytes) + "u;\n");
  raw("extern \"C\" __attribute__((visibility(\"default\"))) const uint32_t "
      "hal_kernel_max_threads_" +
      kernel.name + " = " + std::to_string(kernel.max_threads_per_block) + "u;\n");
}

}  // namespace hal::dialect
