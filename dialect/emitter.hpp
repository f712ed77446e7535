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
  Emitter(const Program& program, Backend backend);
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
  // Tokens [first, end), rewritten, leaving out the ranges in |skip|.
  size_t put_range(size_t first, size_t end, const std::vector<Range>& skip);

  void emit_function(const Item& item);
  void emit_gpu_kernel(const Kernel& kernel);
  void emit_cpp_kernel(const Kernel& kernel);  // emit_cpp.cpp
  void emit_cpp_regions(const Kernel& kernel, const RegionPlan& plan);
  void emit_region(const Kernel& kernel, const RegionPlan& plan, const Region& region);
  void emit_declarator(const RegionPlan& plan, const RegionVariable& variable);
  void emit_cpp_symbols(const Kernel& kernel);

  const Program& program_;
  const std::vector<Token>& tokens_;
  Backend backend_;
  std::string out_;
  uint32_t line_ = 0;  // the source line the output is on, while synced_
  bool synced_ = false;
  bool at_line_start_ = true;
  bool in_directive_ = false;
  bool coroutine_body_ = false;  // `return` is `co_return`
};

}  // namespace hal::dialect

#endif  // HAL_DIALECT_EMITTER_HPP_
