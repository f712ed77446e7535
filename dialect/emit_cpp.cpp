// The C++ backend's kernel shape (the cpu plugin). A kernel becomes one
// exported function per block (hal/cpu_kernel.h) that runs the block's
// work-items:
//
//  - without barriers, as a loop over the work-items, x innermost, calling a
//    lambda that holds the body, which the compiler inlines and can
//    vectorise across work-items;
//  - with barriers the region splitter accepts (regions.cpp), as parallel
//    regions: the code between two barriers is one such loop, a top-level
//    loop with uniform header and barriers in its body stays an ordinary
//    loop around its regions, and values that live from one region into a
//    later one are either recomputed there (pure functions of the ids) or
//    kept in per-work-item arrays (PoCL's context arrays);
//  - with other barriers, each work-item is a C++20 coroutine (a static
//    function, hal_items_<name>) and barrier() is a co_await. The block
//    function resumes every work-item in turn, so one pass over the
//    work-items runs one barrier interval; a barrier inside a loop or a
//    branch is just another suspension point. Locals live in the coroutine
//    frames.
//
// `shared` arrays move out of the body into the block function; work-items
// see them by reference.
#include <algorithm>

#include "emitter.hpp"

namespace hal::dialect {

std::string_view cpu_shape_name(CpuShape shape) {
  switch (shape) {
    case CpuShape::kItemLoop:
      return "item loop";
    case CpuShape::kRegions:
      return "parallel regions";
    case CpuShape::kCoroutines:
      return "coroutines";
  }
  return "?";
}

namespace {

std::string describe(const RegionPlan& plan) {
  size_t regions = 0;
  for (const Region& region : plan.regions) regions += region.statements.empty() ? 0 : 1;
  std::string text = std::to_string(regions) + " regions, " + std::to_string(plan.loops.size()) +
                     " uniform loops, per-item values:";
  size_t listed = 0;
  for (const RegionVariable& variable : plan.variables) {
    if (variable.storage != Storage::kPerItem) continue;
    text += (listed++ == 0 ? " " : ", ") + variable.name;
  }
  if (listed == 0) text += " none";
  // "; 2 interleaved 8/4 work-items at a time": the copies of each.
  size_t interleaved = 0;
  std::string copies;
  for (const Region& region : plan.regions) {
    if (region.interleaved < 0) continue;
    // Appended piece by piece: GCC 12 at -O3 warns (-Wrestrict, a false
    // positive) on a literal + std::to_string temporary.
    if (interleaved++ != 0) copies += '/';
    copies += std::to_string(region.copies);
  }
  if (interleaved != 0) {
    text += "; " + std::to_string(interleaved) + " interleaved " + copies + " work-items at a time";
  }
  return text;
}

}  // namespace

CpuShape cpu_shape(const Program& program, const Kernel& kernel, std::string& note) {
  note.clear();
  if (!kernel.uses_barrier) return CpuShape::kItemLoop;
  RegionPlan plan;
  if (!plan_regions(program, kernel, plan, note)) return CpuShape::kCoroutines;
  note = describe(plan);
  return CpuShape::kRegions;
}

void Emitter::emit_cpp_kernel(const Kernel& kernel) {
  if (kernel.uses_barrier) {
    RegionPlan plan;
    std::string why;
    if (plan_regions(program_, kernel, plan, why)) {
      line_break();
      raw("// hal: kernel '" + kernel.name + "' runs as parallel regions (" + describe(plan) +
          ")\n");
      emit_cpp_regions(kernel, plan);
      return;
    }
    line_break();
    raw("// hal: kernel '" + kernel.name + "' runs its work-items as coroutines: " + why + "\n");
  }
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

  // Parameters the body writes: each work-item of the loop gets its own copy
  // (the block function's parameter is renamed), as each coroutine does.
  std::vector<const Parameter*> copied;
  if (!kernel.uses_barrier) {
    for (const Parameter& parameter : kernel.parameters) {
      if (parameter_written(program_, kernel, parameter.name)) copied.push_back(&parameter);
    }
  }
  line_break();
  raw("extern \"C\" __attribute__((visibility(\"default\"))) void");
  put(tokens_[kernel.name_token], kernel.name);
  put(tokens_[kernel.name_token + 1], "(");
  // The name the body's copy of each parameter starts from.
  std::vector<std::string> names;
  for (const Parameter& parameter : kernel.parameters) {
    const bool renamed = std::find(copied.begin(), copied.end(), &parameter) != copied.end();
    // Appended piece by piece: GCC 12 at -O3 warns (-Wrestrict, a false
    // positive) on a literal + std::string temporary.
    std::string name = renamed ? "hal_arg_" : "";
    name += parameter.name;
    names.push_back(std::move(name));
  }
  if (bounds_checked_) {
    raw("const hal_cpu_block_context_t* hal_ctx");
    emit_checked_entry_parameters(kernel, names);
  } else {
    raw(with_params ? "const hal_cpu_block_context_t* hal_ctx,"
                    : "const hal_cpu_block_context_t* hal_ctx");
    for (size_t i = kernel.parameter_tokens.first; i < kernel.parameter_tokens.end; ++i) {
      const auto renamed = std::find_if(copied.begin(), copied.end(),
                                        [&](const Parameter* p) { return p->tokens.end - 1 == i; });
      put(tokens_[i],
          renamed != copied.end() ? "hal_arg_" + tokens_[i].text : spelling(tokens_[i]));
    }
  }
  put(tokens_[kernel.parameter_tokens.end], ")");
  put(tokens_[kernel.body.first], "{");
  raw("const hal_rt::Block hal_block(hal_ctx);\n");
  if (bounds_checked_) emit_checked_pointers(kernel, names);
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
    for (const Parameter* parameter : copied) {
      raw("std::remove_reference_t<decltype(hal_arg_" + parameter->name + ")> " + parameter->name +
          " = hal_arg_" + parameter->name + ";");
    }
    put_range(kernel.body.first + 1, kernel.body.end - 1, shared_ranges);
    line_break();
    raw("};\nhal_rt::run_items(hal_block, hal_body);\n");
  }
  put(tokens_[kernel.body.end - 1], "}");
  line_break();

  emit_cpp_symbols(kernel);
}

bool Emitter::checked_parameter(const Parameter& parameter) const {
  if (parameter.type != HAL_ARG_POINTER) return false;
  for (size_t i = parameter.tokens.first; i < parameter.tokens.end; ++i) {
    if (tokens_[i].kind == TokenKind::kIdentifier && tokens_[i].text == "global") return true;
  }
  return false;
}

// "const float" of `global const float* restrict name`.
std::string Emitter::pointee_text(const Parameter& parameter) const {
  std::string text;
  for (size_t i = parameter.tokens.first; i + 1 < parameter.tokens.end; ++i) {
    const Token& token = tokens_[i];
    if (token.kind == TokenKind::kPunct && token.text == "*") break;
    if (token.kind == TokenKind::kIdentifier && token.text == "global") continue;
    if (!text.empty()) text += ' ';
    text += spelling(token);
  }
  return text;
}

void Emitter::emit_checked_entry_parameters(const Kernel& kernel,
                                            const std::vector<std::string>& names) {
  for (size_t p = 0; p < kernel.parameters.size(); ++p) {
    const Parameter& parameter = kernel.parameters[p];
    if (checked_parameter(parameter)) {
      std::string text = ", ";
      text += pointee_text(parameter);
      text += "* hal_raw_";
      text += parameter.name;
      raw(text);
      continue;
    }
    raw(",");
    for (size_t i = parameter.tokens.first; i < parameter.tokens.end; ++i) {
      put(tokens_[i], i + 1 == parameter.tokens.end ? names[p] : spelling(tokens_[i]));
    }
  }
  raw(", hal_bounds_record_t* hal_bounds");
}

void Emitter::emit_checked_pointers(const Kernel& kernel, const std::vector<std::string>& names) {
  for (size_t p = 0; p < kernel.parameters.size(); ++p) {
    const Parameter& parameter = kernel.parameters[p];
    if (!checked_parameter(parameter)) continue;
    std::string text = "hal_rt::checked<";
    text += pointee_text(parameter);
    text += "> ";
    text += names[p];
    text += "(hal_raw_";
    text += parameter.name;
    text += ", hal_bounds, ";
    text += std::to_string(p);
    text += "u);\n";
    raw(text);
  }
}

void Emitter::emit_cpp_symbols(const Kernel& kernel) {
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

// The block function of a split kernel:
//
//   void K(ctx, params) {
//     Block; Item (work-item 0, for uniform headers); shared arrays;
//     typedef T hal_T_v; ... one per per-item variable
//     ItemStorage; hal_s_v = one array per per-item variable;
//     run_region(block, [&](Item) { bind, repeat, statements });   region
//     for (uniform header) { run_region(...); run_region(...); }  split loop
//   }
void Emitter::emit_cpp_regions(const Kernel& kernel, const RegionPlan& plan) {
  line_break();
  raw("extern \"C\" __attribute__((visibility(\"default\"))) void");
  put(tokens_[kernel.name_token], kernel.name);
  put(tokens_[kernel.name_token + 1], "(");
  std::vector<std::string> names;
  for (const Parameter& parameter : kernel.parameters) names.push_back(parameter.name);
  if (bounds_checked_) {
    raw("const hal_cpu_block_context_t* hal_ctx");
    emit_checked_entry_parameters(kernel, names);
  } else {
    raw(kernel.parameters.empty() ? "const hal_cpu_block_context_t* hal_ctx"
                                  : "const hal_cpu_block_context_t* hal_ctx,");
    put_range(kernel.parameter_tokens.first, kernel.parameter_tokens.end, {});
  }
  put(tokens_[kernel.parameter_tokens.end], ")");
  put(tokens_[kernel.body.first], "{");
  raw("const hal_rt::Block hal_block(hal_ctx);\n"
      "const hal_rt::Item hal_item{&hal_block, {0, 0, 0}}; (void)hal_item;\n");
  if (bounds_checked_) emit_checked_pointers(kernel, names);
  for (const SharedArray& array : kernel.shared)
    put_range(array.tokens.first, array.tokens.end, {});

  // Per-item storage: a type per variable, then one allocation.
  std::string types;
  for (const RegionVariable& variable : plan.variables) {
    if (variable.storage != Storage::kPerItem) continue;
    const RegionDeclaration& declaration = plan.declarations[variable.declaration];
    line_break();
    raw("typedef");
    put_range(declaration.specifiers.first, declaration.specifiers.end, {});
    for (size_t i = variable.declarator.first; i < variable.declarator.end; ++i) {
      put(tokens_[i], i == variable.name_token ? "hal_T_" + variable.name : spelling(tokens_[i]));
    }
    raw(";\n");
    types += (types.empty() ? "" : ", ") + ("hal_T_" + variable.name);
  }
  if (!types.empty()) {
    line_break();
    raw("const size_t hal_items = static_cast<size_t>(hal_block.items());\n"
        "hal_rt::ItemStorage hal_storage(hal_rt::ItemStorage::bytes<" +
        types + ">(hal_items));\n");
    for (const RegionVariable& variable : plan.variables) {
      if (variable.storage != Storage::kPerItem) continue;
      raw("auto* const hal_s_" + variable.name + " = hal_storage.take<hal_T_" + variable.name +
          ">(hal_items);\n");
    }
  }

  for (const RegionPlan::Step& step : plan.steps) {
    if (!step.loop) {
      emit_region(kernel, plan, plan.regions[step.index]);
      continue;
    }
    const SplitLoop& loop = plan.loops[step.index];
    line_break();
    for (size_t i = loop.header.first; i < loop.header.end; ++i) {
      const Token& token = tokens_[i];
      const bool member = is_punct(tokens_[i - 1], ".") || is_punct(tokens_[i - 1], "->");
      const auto read =
          std::find_if(loop.header_reads.begin(), loop.header_reads.end(),
                       [&](size_t v) { return plan.variables[v].name == token.text; });
      if (token.kind == TokenKind::kIdentifier && !member && read != loop.header_reads.end()) {
        put(token, "hal_s_" + token.text + "[0]");  // uniform: work-item 0's value is everyone's
      } else {
        put(token, spelling(token));
      }
    }
    raw("{\n");
    for (size_t region : loop.regions) emit_region(kernel, plan, plan.regions[region]);
    line_break();
    raw("}\n");
  }
  put(tokens_[kernel.body.end - 1], "}");
  line_break();
  emit_cpp_symbols(kernel);
}

void Emitter::emit_region(const Kernel& kernel, const RegionPlan& plan, const Region& region) {
  if (region.statements.empty()) return;
  std::vector<Range> shared_ranges;
  for (const SharedArray& array : kernel.shared) shared_ranges.push_back(array.tokens);
  // Each value written back is a store the vectoriser must prove misses the
  // other work-items' loads; past one, GCC gives up on the loop (more overlap
  // checks than it emits), so such a region declares its work-items
  // independent, which they are (SPEC.md, "Work-items and barriers").
  const size_t written_back_count =
      static_cast<size_t>(std::count_if(region.bound.begin(), region.bound.end(),
                                        [&](size_t v) { return plan.variables[v].by_value(); }));
  size_t declared_by_value = 0;
  for (const Range& statement : region.statements) {
    const RegionDeclaration* declaration = plan.declaration_at(statement.first);
    if (declaration == nullptr) continue;
    declared_by_value += static_cast<size_t>(
        std::count_if(declaration->variables.begin(), declaration->variables.end(),
                      [&](size_t v) { return plan.variables[v].by_value(); }));
  }
  const bool independent = written_back_count + declared_by_value > 1;
  // One work-item at a time: the whole region for one hal_item.
  const auto emit_one = [&] {
    raw("[&](const hal_rt::Item hal_item) {\n");
    std::vector<size_t> written_back;
    emit_region_bindings(plan, region, written_back);
    emit_region_statements(plan, region, shared_ranges, 0, region.statements.size(), written_back);
    emit_write_back(plan, written_back);
    raw("}");
  };
  line_break();
  if (region.interleaved < 0) {
    raw(std::string(independent ? "hal_rt::run_region<true>" : "hal_rt::run_region") +
        "(hal_block, ");
    emit_one();
    raw(");\n");
    return;
  }
  // region.copies work-items at once (Region::interleaved): each copy's code
  // before the loop, the loop once with every copy's body in each
  // iteration, each copy's code after it. The work-items of a region are
  // independent, so any order of their statements is one they may run in;
  // each work-item's own statements keep their order.
  const size_t loop = static_cast<size_t>(region.interleaved);
  const Range body = region.interleaved_body;
  std::vector<std::vector<size_t>> written_back(static_cast<size_t>(region.copies));
  const auto for_each_copy = [&](const auto& emit) {
    renamed_ = &region.renamed;
    for (int j = 0; j < region.copies; ++j) {
      copy_suffix_ = '_';
      copy_suffix_ += std::to_string(j);
      emit(written_back[static_cast<size_t>(j)]);
    }
    renamed_ = nullptr;
    copy_suffix_.clear();
  };
  std::string parameters;
  for (int j = 0; j < region.copies; ++j) {
    parameters += (j == 0 ? "const hal_rt::Item hal_item_" : ", const hal_rt::Item hal_item_") +
                  std::to_string(j);
  }
  raw("hal_rt::run_region_interleaved<" + std::to_string(region.copies) + ">(hal_block, [&](" +
      parameters + ") HAL_RT_ALWAYS_INLINE {\n");
  for_each_copy([&](std::vector<size_t>& written) {
    emit_region_bindings(plan, region, written);
    emit_region_statements(plan, region, shared_ranges, 0, loop, written);
  });
  put_range(region.statements[loop].first, body.first, {});  // the shared, uniform header
  raw("{\n");
  for_each_copy([&](std::vector<size_t>&) {
    raw("{");
    put_range(body.first, body.end, shared_ranges);
    line_break();
    raw("}\n");
  });
  raw("}\n");
  for_each_copy([&](std::vector<size_t>& written) {
    emit_region_statements(plan, region, shared_ranges, loop + 1, region.statements.size(),
                           written);
    emit_write_back(plan, written);
  });
  raw("}, ");
  emit_one();
  raw(");\n");
}

std::string Emitter::copy_name(std::string_view name) const {
  return std::string(name) + copy_suffix_;
}

void Emitter::emit_region_bindings(const RegionPlan& plan, const Region& region,
                                   std::vector<size_t>& written_back) {
  const std::string lin = copy_name("hal_lin");
  line_break();
  raw("const int " + lin + " = " + copy_name("hal_item") + ".linear(); (void)" + lin + ";\n");
  for (size_t v : region.bound) {
    const std::string& name = plan.variables[v].name;
    if (plan.variables[v].by_value()) {
      raw("hal_T_" + name + " " + copy_name(name) + " = hal_s_" + name + "[" + lin + "];\n");
      written_back.push_back(v);
    } else {
      raw("auto& " + copy_name(name) + " = hal_s_" + name + "[" + lin + "];\n");
    }
  }
  for (size_t v : region.repeated) {
    const RegionVariable& variable = plan.variables[v];
    const RegionDeclaration& declaration = plan.declarations[variable.declaration];
    put_range(declaration.specifiers.first, declaration.specifiers.end, {});
    emit_declarator(plan, variable);
  }
}

void Emitter::emit_region_statements(const RegionPlan& plan, const Region& region,
                                     const std::vector<Range>& shared_ranges, size_t first,
                                     size_t end, std::vector<size_t>& written_back) {
  const std::string lin = copy_name("hal_lin");
  for (size_t s = first; s < end; ++s) {
    const Range& statement = region.statements[s];
    const RegionDeclaration* declaration = plan.declaration_at(statement.first);
    const bool rewrite =
        declaration != nullptr &&
        std::any_of(declaration->variables.begin(), declaration->variables.end(),
                    [&](size_t v) { return plan.variables[v].storage == Storage::kPerItem; });
    if (!rewrite) {
      put_range(statement.first, statement.end, shared_ranges);
      continue;
    }
    for (size_t v : declaration->variables) {
      const RegionVariable& variable = plan.variables[v];
      if (variable.storage != Storage::kPerItem || variable.by_value()) {
        // By value, the declaration stays what it was; the value goes to
        // its slot at the region's end.
        put_range(declaration->specifiers.first, declaration->specifiers.end, {});
        emit_declarator(plan, variable);
        if (variable.by_value()) written_back.push_back(v);
        continue;
      }
      // The declaration becomes a reference to the work-item's slot, and
      // its initialiser an assignment.
      const std::string name = copy_name(variable.name);
      line_break();
      raw("auto& " + name + " = hal_s_" + variable.name + "[" + lin + "];");
      if (variable.init.first == variable.init.end) continue;
      const bool plain = !variable.array && !is_punct(tokens_[variable.init.first], "{");
      if (plain) {
        put(tokens_[variable.name_token], name);
        put(tokens_[variable.init.first - 1], "=");
        put_range(variable.init.first, variable.init.end, {});
        raw(";");
      } else {
        raw("{ const hal_T_" + variable.name + " hal_init =");
        put_range(variable.init.first, variable.init.end, {});
        raw("; std::memcpy(&" + name + ", &hal_init, sizeof(hal_init)); }");
      }
    }
  }
}

// Only the kernel body's last region may return early, and no region after
// it reads a per-item value, so a return that skips this loses nothing.
void Emitter::emit_write_back(const RegionPlan& plan, const std::vector<size_t>& written_back) {
  line_break();
  const std::string lin = copy_name("hal_lin");
  for (size_t v : written_back) {
    const std::string& name = plan.variables[v].name;
    raw("hal_s_" + name + "[" + lin + "] = " + copy_name(name) + ";\n");
  }
}

// DECLARATOR [= INIT]; after the specifiers.
void Emitter::emit_declarator(const RegionPlan& plan, const RegionVariable& variable) {
  (void)plan;
  put_range(variable.declarator.first, variable.declarator.end, {});
  if (variable.init.first != variable.init.end) {
    put(tokens_[variable.init.first - 1], "=");
    put_range(variable.init.first, variable.init.end, {});
  }
  raw(";");
}

}  // namespace hal::dialect
