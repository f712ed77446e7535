// The emitter shared by the backends (internal to hal_dialect).
#ifndef HAL_DIALECT_EMITTER_HPP_
#define HAL_DIALECT_EMITTER_HPP_

#include <string>
#include <string_view>
#include <vector>

#include "hal_dialect/dialect.hpp"
#include "regions.hpp"

namespace hal::dialect {

class Emitter {
 public:
  Emitter(const Program& program, Backend backend, const TranslateOptions& options = {});
  // The translation of every item, without the prelude.
  std::string finish();

 private:
  // Generated text: breaks the line mapping until the next source token.
  void raw(std::string_view text);
  void line_break();
  // A source token under |spelling|, keeping its line and spacing.
  void put(const Token& token, std::string_view spelling);
  void sync(const Token& token);
  std::string spelling(const Token& token) const;
  std::string_view barrier_spelling() const;
  // Bounds-checked C++: the index of the `]` closing a unary &NAME[INDEX] at
  // token |i| (one subscript), else 0.
  size_t element_address_end(size_t i, size_t end) const;
  // Tokens [first, end), rewritten, leaving out the ranges in |skip|.
  size_t put_range(size_t first, size_t end, const std::vector<Range>& skip);

  void emit_function(const Item& item);
  void emit_gpu_kernel(const Kernel& kernel);
  void emit_cpp_kernel(const Kernel& kernel);  // emit_cpp.cpp
  void emit_cpp_regions(const Kernel& kernel, const RegionPlan& plan);
  void emit_region(const Kernel& kernel, const RegionPlan& plan, const Region& region);
  // One work-item's part of a region, under copy_suffix_: its bindings, then
  // statements [first, end) of the region; |written_back| collects the
  // values its end stores.
  void emit_region_bindings(const RegionPlan& plan, const Region& region,
                            std::vector<size_t>& written_back);
  void emit_region_statements(const RegionPlan& plan, const Region& region,
                              const std::vector<Range>& shared_ranges, size_t first, size_t end,
                              std::vector<size_t>& written_back);
  void emit_write_back(const RegionPlan& plan, const std::vector<size_t>& written_back);
  // |name| as the current copy of an interleaved region spells it.
  std::string copy_name(std::string_view name) const;
  void emit_declarator(const RegionPlan& plan, const RegionVariable& variable);
  void emit_cpp_symbols(const Kernel& kernel);
  // Bounds-checked C++ (TranslateOptions::bounds_checked): the entry's
  // parameters, pointers raw as hal_raw_<name>, then the hidden record; and the
  // checked pointers the body uses, made from them (named |names[i]|).
  bool checked_parameter(const Parameter& parameter) const;
  std::string pointee_text(const Parameter& parameter) const;
  void emit_checked_entry_parameters(const Kernel& kernel, const std::vector<std::string>& names);
  void emit_checked_pointers(const Kernel& kernel, const std::vector<std::string>& names);

  const Program& program_;
  const std::vector<Token>& tokens_;
  Backend backend_;
  bool bounds_checked_ = false;  // kCpp: `global T*` is spelled hal_rt::checked<T>
  bool open_checked_ = false;    // a `global` was spelled "hal_rt::checked<": its `*` closes it
  std::string out_;
  uint32_t line_ = 0;  // the source line the output is on, while synced_
  bool synced_ = false;
  bool at_line_start_ = true;
  bool in_directive_ = false;
  bool coroutine_body_ = false;  // `return` is `co_return`
  // While emitting one copy of an interleaved region: the names that copy
  // has its own instance of (sorted), and its suffix ("_0", ...); the work-item
  // is hal_item<suffix>. Null and empty otherwise.
  const std::vector<std::string>* renamed_ = nullptr;
  std::string copy_suffix_;
};

}  // namespace hal::dialect

#endif  // HAL_DIALECT_EMITTER_HPP_
