// Region splitting for the C++ backend: which kernels with barriers become
// work-item loops over barrier-free regions, and where each of their local
// variables lives. The analysis is syntactic and conservative: whatever it
// cannot prove leaves the kernel on the coroutine path, which runs any
// kernel the dialect allows.
//
// Shape accepted: every barrier() is a statement at the top level of the
// kernel body, or at the top level of the body of a top-level `for`/`while`
// whose header only reads values uniform across the block (literals,
// parameters the kernel never writes, group ids and sizes, object-like
// #define constants, the loop's own variables, and locals that are only ever
// assigned such values by statements every work-item runs). `return` may
// only appear after the last barrier of the kernel body.
#include "regions.hpp"

#include <algorithm>
#include <array>
#include <functional>
#include <map>
#include <set>

namespace hal::dialect {
namespace {

constexpr std::array<std::string_view, 11> kAssignments = {
    "=", "+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=", "<<=", ">>="};
bool is_assignment(const Token& token) {
  return token.kind == TokenKind::kPunct &&
         std::find(kAssignments.begin(), kAssignments.end(), token.text) != kAssignments.end();
}

// Builtins whose value is the same for every work-item of a block.
bool is_uniform_builtin(std::string_view name) {
  return name == "local_size" || name == "num_groups" || name == "group_id" ||
         name == "global_size" || name == "dynamic_shared";
}
bool is_item_builtin(std::string_view name) {
  return name == "local_id" || name == "global_id";
}
// Pure functions of their arguments.
bool is_math_function(std::string_view name) {
  static constexpr std::array<std::string_view, 28> kMath = {
      "sqrt",  "exp",  "exp2", "log",      "log2",      "pow",    "sin",
      "cos",   "tan",  "tanh", "erf",      "fabs",      "floor",  "ceil",
      "round", "fmin", "fmax", "fma",      "fmod",      "atan2",  "rsqrt",
      "min",   "max",  "abs",  "load_f16", "load_bf16", "sizeof", "INFINITY"};
  return std::find(kMath.begin(), kMath.end(), name) != kMath.end();
}
bool names_a_type(std::string_view name) {
  static constexpr std::array<std::string_view, 19> kTypes = {
      "void", "char", "short", "int", "long", "float", "double", "signed", "unsigned", "const",
      "i32",  "u32",  "uint",  "i64", "u64",  "f32",   "f64",    "f16",    "bf16"};
  return std::find(kTypes.begin(), kTypes.end(), name) != kTypes.end();
}
bool is_keyword_statement(std::string_view name) {
  return name == "return" || name == "break" || name == "continue" || name == "goto" ||
         name == "case" || name == "default" || name == "else" || name == "sizeof" ||
         name == "typedef" || name == "static" || name == "extern";
}

struct Macro {
  bool function_like = false;
  bool redefined = false;
  Range body;
};

enum class Purity : uint8_t {
  kUniform,  // the same value for every work-item of the block
  kItem,     // a pure function of the work-item's ids (and uniform values)
};

class Planner {
 public:
  Planner(const Program& program, const Kernel& kernel, RegionPlan& plan, std::string& why)
      : program_(program), tokens_(program.tokens), kernel_(kernel), plan_(plan), why_(why) {}

  bool run() {
    collect_macros();
    const size_t open = kernel_.body.first + 1, close = kernel_.body.end - 1;
    for (size_t i = open; i < close; ++i) {
      if (tokens_[i].kind == TokenKind::kDirectiveStart) {
        return reject("a preprocessor line inside the kernel body");
      }
      if (is_identifier(tokens_[i], "goto")) return reject("'goto' in the kernel body");
    }
    // The kernel body: regions, barriers and split loops.
    int current = new_region(-1);
    std::vector<Range> statements;
    if (!split_statements(open, close, statements)) return false;
    for (const Range& statement : statements) {
      const Token& first = tokens_[statement.first];
      if (is_barrier_statement(statement)) {
        current = new_region(-1);
        continue;
      }
      if (is_identifier(first, "shared")) continue;  // moved to the block function
      if (!contains_barrier(statement)) {
        plan_.regions[current].statements.push_back(statement);
        continue;
      }
      if (!is_identifier(first, "for") && !is_identifier(first, "while")) {
        return reject("a barrier inside '" + first.text + "' (line " + std::to_string(first.line) +
                      "), not at the top level of the body or of a "
                      "top-level loop");
      }
      if (!plan_loop(statement)) return false;
      current = new_region(-1);
    }
    if (plan_.regions.size() > kMaxRegions) return reject("more regions than the splitter takes");
    // Parameters are the block function's own, shared by its work-items: one
    // the body writes would need a copy per work-item.
    for (const Parameter& parameter : kernel_.parameters) {
      if (!parameter_is_constant(parameter.name)) {
        return reject("the parameter '" + parameter.name + "' is written in the body");
      }
    }
    if (!find_declarations()) return false;
    if (plan_.variables.size() > kMaxVariables) {
      return reject("more top-level variables than the splitter takes");
    }
    if (!(check_names() && check_macros() && check_returns() && check_loops() &&
          place_variables() && check_headers() && bind_regions())) {
      return false;
    }
    plan_interleaving();
    // A spent budget made some check answer "no": the plan may be poorer than
    // it could be, never wrong, but say so rather than guess.
    return budget_ > 0 || reject("the kernel is too large for the region analysis");
  }

 private:
  // The analysis is quadratic in places (and macros nest): past these sizes
  // a kernel keeps its coroutines rather than the compile waiting on it.
  static constexpr size_t kMaxRegions = 128;
  static constexpr size_t kMaxVariables = 128;

  // One token looked at by pure() or macro_is_safe(); false once the budget
  // for the kernel is spent (nested macros fan out).
  bool spend() const {
    if (budget_ == 0) return false;
    --budget_;
    return true;
  }

  bool reject(std::string reason) {
    why_ = std::move(reason);
    return false;
  }

  // ---- statements ----------------------------------------------------------

  // The token that closes the bracket opened at |open|.
  size_t matching(size_t open, size_t end) const {
    int depth = 0;
    for (size_t i = open; i < end; ++i) {
      const Token& token = tokens_[i];
      if (token.kind != TokenKind::kPunct) continue;
      if (token.text == "(" || token.text == "[" || token.text == "{") ++depth;
      if (token.text == ")" || token.text == "]" || token.text == "}") {
        if (--depth == 0) return i;
      }
    }
    return end;
  }

  // One past the statement that starts at |i|; |end| when it does not end.
  size_t statement_end(size_t i, size_t end) const {
    if (i >= end) return end;
    const Token& token = tokens_[i];
    if (is_punct(token, "{")) {
      const size_t close = matching(i, end);
      return close < end ? close + 1 : end;
    }
    if (is_identifier(token, "if") || is_identifier(token, "for") ||
        is_identifier(token, "while") || is_identifier(token, "switch")) {
      if (i + 1 >= end || !is_punct(tokens_[i + 1], "(")) return end;
      const size_t close = matching(i + 1, end);
      if (close >= end) return end;
      size_t after = statement_end(close + 1, end);
      if (is_identifier(token, "if") && after < end && is_identifier(tokens_[after], "else")) {
        after = statement_end(after + 1, end);
      }
      return after;
    }
    if (is_identifier(token, "do")) {
      const size_t body_end = statement_end(i + 1, end);
      if (body_end + 1 >= end || !is_identifier(tokens_[body_end], "while") ||
          !is_punct(tokens_[body_end + 1], "(")) {
        return end;
      }
      const size_t close = matching(body_end + 1, end);
      return close + 1 < end && is_punct(tokens_[close + 1], ";") ? close + 2 : end;
    }
    int depth = 0;
    for (size_t j = i; j < end; ++j) {
      const Token& t = tokens_[j];
      if (t.kind != TokenKind::kPunct) continue;
      if (t.text == "(" || t.text == "[" || t.text == "{") ++depth;
      if (t.text == ")" || t.text == "]" || t.text == "}") --depth;
      if (depth < 0) return end;
      if (depth == 0 && t.text == ";") return j + 1;
    }
    return end;
  }

  bool split_statements(size_t first, size_t end, std::vector<Range>& out) {
    for (size_t i = first; i < end;) {
      const size_t next = statement_end(i, end + 1);
      if (next > end) {
        return reject("a statement the region splitter cannot delimit (line " +
                      std::to_string(tokens_[i].line) + ")");
      }
      out.push_back(Range{i, next});
      i = next;
    }
    return true;
  }

  bool is_barrier_statement(Range statement) const {
    return statement.end - statement.first == 4 &&
           is_identifier(tokens_[statement.first], "barrier");
  }
  bool contains_barrier(Range range) const {
    for (size_t i = range.first; i < range.end; ++i) {
      if (is_identifier(tokens_[i], "barrier")) return true;
    }
    return false;
  }

  bool contains(Range range, std::string_view punct) const {
    for (size_t i = range.first; i < range.end; ++i) {
      if (is_punct(tokens_[i], punct)) return true;
    }
    return false;
  }

  int new_region(int loop) {
    Region region;
    region.loop = loop;
    plan_.regions.push_back(region);
    const size_t index = plan_.regions.size() - 1;
    if (loop < 0) {
      plan_.steps.push_back(RegionPlan::Step{false, index});
    } else {
      plan_.loops[static_cast<size_t>(loop)].regions.push_back(index);
    }
    return static_cast<int>(index);
  }

  // `for (init; cond; step) body` or `while (cond) body` with barriers.
  bool plan_loop(Range statement) {
    const size_t open = statement.first + 1;
    const size_t close = matching(open, statement.end);
    SplitLoop loop;
    loop.header = Range{statement.first, close + 1};
    for (size_t i = loop.header.first; i < loop.header.end; ++i) {
      if (is_identifier(tokens_[i], "barrier") || is_identifier(tokens_[i], "dynamic_shared")) {
        return reject("'" + tokens_[i].text + "' in the header of the loop at line " +
                      std::to_string(tokens_[statement.first].line));
      }
    }
    plan_.loops.push_back(loop);
    const int index = static_cast<int>(plan_.loops.size() - 1);
    plan_.steps.push_back(RegionPlan::Step{true, static_cast<size_t>(index)});
    Range body{close + 1, statement.end};
    std::vector<Range> statements;
    if (is_punct(tokens_[body.first], "{")) {
      if (!split_statements(body.first + 1, body.end - 1, statements)) return false;
    } else {
      statements.push_back(body);
    }
    int current = new_region(index);
    for (const Range& inner : statements) {
      if (is_barrier_statement(inner)) {
        current = new_region(index);
        continue;
      }
      if (contains_barrier(inner)) {
        return reject("a barrier nested inside a statement of the loop at line " +
                      std::to_string(tokens_[statement.first].line));
      }
      plan_.regions[static_cast<size_t>(current)].statements.push_back(inner);
    }
    return true;
  }

  // ---- declarations ---------------------------------------------------------

  // A statement that starts like a declaration: two names, or a name and '*'.
  bool looks_like_declaration(Range s) const {
    if (s.end - s.first < 3) return false;
    const Token& a = tokens_[s.first];
    const Token& b = tokens_[s.first + 1];
    if (a.kind != TokenKind::kIdentifier || is_keyword_statement(a.text)) return false;
    if (is_identifier(a, "if") || is_identifier(a, "for") || is_identifier(a, "while") ||
        is_identifier(a, "do") || is_identifier(a, "switch")) {
      return false;
    }
    return b.kind == TokenKind::kIdentifier || is_punct(b, "*");
  }

  bool find_declarations() {
    for (size_t r = 0; r < plan_.regions.size(); ++r) {
      for (const Range& statement : plan_.regions[r].statements) {
        if (is_identifier(tokens_[statement.first], "typedef") ||
            is_identifier(tokens_[statement.first], "static") ||
            is_identifier(tokens_[statement.first], "extern")) {
          return reject("a '" + tokens_[statement.first].text +
                        "' declaration at the top level of a region");
        }
        if ((is_identifier(tokens_[statement.first], "struct") ||
             is_identifier(tokens_[statement.first], "union") ||
             is_identifier(tokens_[statement.first], "enum")) &&
            contains(statement, "{")) {
          return reject("a type defined at the top level of a region (line " +
                        std::to_string(tokens_[statement.first].line) + ")");
        }
        if (!looks_like_declaration(statement)) continue;
        if (!parse_declaration(statement, static_cast<int>(r))) return false;
      }
    }
    return true;
  }

  bool parse_declaration(Range s, int region) {
    const size_t last = s.end - 1;  // the ';'
    // Specifiers: identifiers up to the first declarator. The name of the
    // first declarator is the last identifier of the leading run when no '*'
    // follows the run.
    size_t run_end = s.first;
    while (run_end < last && tokens_[run_end].kind == TokenKind::kIdentifier) ++run_end;
    size_t declarator_first = 0;
    if (is_punct(tokens_[run_end], "*")) {
      declarator_first = run_end;
    } else {
      declarator_first = run_end - 1;
    }
    if (declarator_first <= s.first) return reject_declaration(s);
    for (size_t i = s.first; i < declarator_first; ++i) {
      if (is_identifier(tokens_[i], "struct") || is_identifier(tokens_[i], "union") ||
          is_identifier(tokens_[i], "enum")) {
        if (is_punct(tokens_[i + 2], "{") || is_punct(tokens_[i + 1], "{")) {
          return reject("a type defined at the top level of a region (line " +
                        std::to_string(tokens_[i].line) + ")");
        }
      }
    }
    RegionDeclaration declaration;
    declaration.statement = s;
    declaration.specifiers = Range{s.first, declarator_first};
    const size_t declaration_index = plan_.declarations.size();
    size_t i = declarator_first;
    while (i < last) {
      RegionVariable variable;
      variable.declaration = declaration_index;
      variable.region = region;
      variable.loop = plan_.regions[static_cast<size_t>(region)].loop;
      const size_t first = i;
      while (i < last &&
             (is_punct(tokens_[i], "*") || is_identifier(tokens_[i], "const") ||
              is_identifier(tokens_[i], "restrict") || is_identifier(tokens_[i], "volatile"))) {
        variable.pointer |= is_punct(tokens_[i], "*");
        ++i;
      }
      if (i >= last || tokens_[i].kind != TokenKind::kIdentifier) return reject_declaration(s);
      variable.name = tokens_[i].text;
      variable.name_token = i;
      ++i;
      while (i < last && is_punct(tokens_[i], "[")) {
        const size_t close = matching(i, last);
        if (close >= last || close == i + 1) return reject_declaration(s);  // `[]` too
        variable.array = true;
        i = close + 1;
      }
      variable.declarator = Range{first, i};
      if (i < last && is_punct(tokens_[i], "=")) {
        const size_t init_first = ++i;
        int depth = 0;
        for (; i < last; ++i) {
          const Token& t = tokens_[i];
          if (t.kind != TokenKind::kPunct) continue;
          if (t.text == "(" || t.text == "[" || t.text == "{") ++depth;
          if (t.text == ")" || t.text == "]" || t.text == "}") --depth;
          if (depth == 0 && t.text == ",") break;
        }
        variable.init = Range{init_first, i};
        if (variable.init.first == variable.init.end) return reject_declaration(s);
      }
      if (i < last && !is_punct(tokens_[i], ",")) return reject_declaration(s);
      if (i < last) ++i;
      declaration.variables.push_back(plan_.variables.size());
      plan_.variables.push_back(std::move(variable));
    }
    if (declaration.variables.empty()) return reject_declaration(s);
    plan_.declarations.push_back(std::move(declaration));
    return true;
  }

  bool reject_declaration(Range s) {
    return reject("a declaration the region splitter does not read (line " +
                  std::to_string(tokens_[s.first].line) + ")");
  }

  // Names declared at the top level of regions must be unique, and distinct
  // from the parameters, the shared arrays and the split loops' variables:
  // the analysis goes by name.
  bool check_names() {
    std::set<std::string> names;
    for (const Parameter& parameter : kernel_.parameters) names.insert(parameter.name);
    for (const SharedArray& array : kernel_.shared) names.insert(array.name);
    auto add = [&](const std::string& name) {
      if (!names.insert(name).second) {
        return reject("the name '" + name + "' is declared twice at the top level of regions");
      }
      return true;
    };
    for (SplitLoop& loop : plan_.loops) {
      if (!is_identifier(tokens_[loop.header.first], "for")) continue;
      const size_t open = loop.header.first + 1;
      const size_t semicolon = statement_end(open + 1, loop.header.end);
      if (semicolon >= loop.header.end) return reject("a for header without ';'");
      loop_init_[&loop - plan_.loops.data()] = Range{open + 1, semicolon};
      Range init{open + 1, semicolon - 1};
      if (init.first == init.end) continue;
      if (!looks_like_declaration(Range{init.first, semicolon})) {
        return reject("a split loop whose for-init is not a declaration (line " +
                      std::to_string(tokens_[loop.header.first].line) + ")");
      }
      // The for-init's declarators, read like a region declaration.
      const size_t before = plan_.variables.size();
      const size_t declarations_before = plan_.declarations.size();
      if (!parse_declaration(Range{init.first, semicolon}, 0)) return false;
      for (size_t v = before; v < plan_.variables.size(); ++v) {
        if (plan_.variables[v].array) return reject("an array declared in a loop header");
        loop.induction.push_back(plan_.variables[v].name);
        induction_init_.push_back(plan_.variables[v]);
        induction_init_.back().loop = static_cast<int>(&loop - plan_.loops.data());
      }
      plan_.variables.resize(before);
      plan_.declarations.resize(declarations_before);
    }
    // Loops may reuse their variables' names (two `for (int s = ...)`), but
    // not the names of parameters, shared arrays or region variables.
    std::set<std::string> loop_names;
    for (const SplitLoop& loop : plan_.loops)
      loop_names.insert(loop.induction.begin(), loop.induction.end());
    for (const std::string& name : loop_names) {
      if (!add(name)) return false;
    }
    for (const RegionVariable& variable : plan_.variables) {
      if (!add(variable.name)) return false;
    }
    return true;
  }

  // Whether token |i| lies in the header of a split loop that declares |name|.
  bool in_header_declaring(size_t i, const std::string& name) const {
    for (const SplitLoop& loop : plan_.loops) {
      if (i >= loop.header.first && i < loop.header.end &&
          std::find(loop.induction.begin(), loop.induction.end(), name) != loop.induction.end()) {
        return true;
      }
    }
    return false;
  }

  const RegionVariable* find_variable(std::string_view name) const {
    for (const RegionVariable& variable : plan_.variables) {
      if (variable.name == name) return &variable;
    }
    return nullptr;
  }
  const Parameter* find_parameter(std::string_view name) const {
    for (const Parameter& parameter : kernel_.parameters) {
      if (parameter.name == name) return &parameter;
    }
    return nullptr;
  }

  // ---- macros -----------------------------------------------------------------

  void collect_macros() {
    for (size_t i = 0; i + 2 < tokens_.size(); ++i) {
      if (tokens_[i].kind != TokenKind::kDirectiveStart) continue;
      if (!is_identifier(tokens_[i + 1], "define") && !is_identifier(tokens_[i + 1], "undef")) {
        continue;
      }
      const Token& name = tokens_[i + 2];
      if (name.kind != TokenKind::kIdentifier) continue;
      size_t end = i + 3;
      while (end < tokens_.size() && tokens_[end].kind != TokenKind::kDirectiveEnd) ++end;
      Macro macro;
      size_t body = i + 3;
      if (body < end && is_punct(tokens_[body], "(") && !tokens_[body].space_before) {
        macro.function_like = true;
        body = matching(body, end) + 1;
      }
      macro.body = Range{std::min(body, end), end};
      const auto [found, inserted] = macros_.emplace(name.text, macro);
      if (!inserted) found->second.redefined = true;
    }
  }

  const Macro* find_macro(std::string_view name) const {
    const auto found = macros_.find(std::string(name));
    return found == macros_.end() ? nullptr : &found->second;
  }

  // A macro the analysis can see through: no hidden control flow, no hidden
  // writes, no hidden use of the kernel's top-level variables.
  bool macro_is_safe(const std::string& name, int depth) const {
    const Macro* macro = find_macro(name);
    if (macro == nullptr) return true;
    if (macro->redefined || depth > 8) return false;
    for (size_t i = macro->body.first; i < macro->body.end; ++i) {
      if (!spend()) return false;
      const Token& token = tokens_[i];
      if (token.kind == TokenKind::kPunct) {
        if (is_assignment(token) || token.text == "++" || token.text == "--" || token.text == "{" ||
            token.text == "}" || token.text == ";" || token.text == "#" || token.text == "##") {
          return false;
        }
        continue;
      }
      if (token.kind != TokenKind::kIdentifier) continue;
      if (is_keyword_statement(token.text) && token.text != "sizeof") return false;
      if (token.text == "barrier" || find_variable(token.text) != nullptr) return false;
      if (token.text != name && !macro_is_safe(token.text, depth + 1)) return false;
    }
    return true;
  }

  bool check_macros() {
    for (size_t i = kernel_.body.first; i < kernel_.body.end; ++i) {
      if (tokens_[i].kind != TokenKind::kIdentifier) continue;
      if (find_macro(tokens_[i].text) != nullptr && !macro_is_safe(tokens_[i].text, 0)) {
        return reject("the macro '" + tokens_[i].text +
                      "' hides control flow, a write or a variable the regions need");
      }
    }
    return true;
  }

  // ---- control flow -----------------------------------------------------------

  // `break` or `continue` that would leave the region rather than a loop or
  // switch inside it (a `continue` inside a switch still leaves it).
  bool has_free_jump(Range range, bool break_bound = false) const {
    for (size_t i = range.first; i < range.end; ++i) {
      const Token& token = tokens_[i];
      if (is_identifier(token, "for") || is_identifier(token, "while") ||
          is_identifier(token, "do")) {
        i = statement_end(i, range.end) - 1;
        continue;
      }
      if (is_identifier(token, "switch")) {
        const size_t end = statement_end(i, range.end);
        if (has_free_jump(Range{i + 1, end}, true)) return true;
        i = end - 1;
        continue;
      }
      if (is_identifier(token, "continue") || (!break_bound && is_identifier(token, "break"))) {
        return true;
      }
    }
    return false;
  }

  bool check_returns() {
    // Only the regions after the kernel body's last barrier may return: any
    // other return would skip a barrier the rest of the block reaches.
    size_t last = plan_.regions.size();
    if (!plan_.steps.empty() && !plan_.steps.back().loop) last = plan_.steps.back().index;
    for (size_t r = 0; r < plan_.regions.size(); ++r) {
      Region& region = plan_.regions[r];
      for (const Range& statement : region.statements) {
        for (size_t i = statement.first; i < statement.end; ++i) {
          if (is_identifier(tokens_[i], "return")) region.returns = true;
        }
        if (region.loop >= 0 && has_free_jump(statement)) {
          return reject("'break' or 'continue' of a loop with barriers (line " +
                        std::to_string(tokens_[statement.first].line) + ")");
        }
      }
      if (region.returns && r != last) {
        return reject("'return' before a barrier");
      }
    }
    return true;
  }

  // ---- writes and purity -----------------------------------------------------

  // Whether the identifier at |i| may be written there (or have its address
  // taken). |indexing_writes|: `name[...]` counts as a write (arrays).
  bool written_at(size_t i, bool indexing_writes) const {
    const Token& previous = tokens_[i - 1];
    const Token& next = tokens_[i + 1];
    if (is_punct(previous, "&") || is_punct(previous, "++") || is_punct(previous, "--")) {
      return true;
    }
    if (is_assignment(next) || is_punct(next, "++") || is_punct(next, "--") ||
        is_punct(next, ".") || is_punct(next, "->")) {
      return true;
    }
    return indexing_writes && is_punct(next, "[");
  }
  bool is_member(size_t i) const {
    return is_punct(tokens_[i - 1], ".") || is_punct(tokens_[i - 1], "->");
  }

  // Every occurrence of |name| in the kernel body that may write it.
  std::vector<size_t> writes_of(const std::string& name, bool indexing_writes) const {
    std::vector<size_t> writes;
    for (size_t i = kernel_.body.first + 1; i + 1 < kernel_.body.end; ++i) {
      if (!is_identifier(tokens_[i], name) || is_member(i)) continue;
      if (written_at(i, indexing_writes)) writes.push_back(i);
    }
    return writes;
  }

  bool parameter_is_constant(const std::string& name) const {
    return !parameter_written(program_, kernel_, name);
  }

  // Whether tokens [first, end) are an expression of |purity| without side
  // effects or memory reads. |names|: which local names it may read.
  // |steps|: assignments and ++/-- pass (a for step; its targets are
  // checked apart).
  bool pure(size_t first, size_t end, Purity purity,
            const std::function<bool(const std::string&)>& names, bool steps = false,
            int depth = 0) const {
    if (depth > 8) return false;
    for (size_t i = first; i < end; ++i) {
      if (!spend()) return false;
      const Token& token = tokens_[i];
      const bool operand_before =
          i > first && (tokens_[i - 1].kind != TokenKind::kPunct || is_punct(tokens_[i - 1], ")"));
      switch (token.kind) {
        case TokenKind::kNumber:
          continue;
        case TokenKind::kString:
        case TokenKind::kDirectiveStart:
        case TokenKind::kDirectiveEnd:
          return false;
        case TokenKind::kPunct: {
          static constexpr std::array<std::string_view, 21> kAllowed = {
              "(",  ")",  "+",  "-",  "*", "/", "%", "<", ">",  "<=", ">=",
              "==", "!=", "&&", "||", "!", "~", "?", ":", "<<", ">>"};
          if (token.text == "^" || token.text == "|" || token.text == ",") continue;
          if (steps && (is_assignment(token) || token.text == "++" || token.text == "--")) continue;
          if ((token.text == "*" || token.text == "&") && !operand_before) return false;
          if (token.text == "&") continue;
          if (std::find(kAllowed.begin(), kAllowed.end(), token.text) == kAllowed.end()) {
            return false;
          }
          continue;
        }
        case TokenKind::kIdentifier:
          break;
      }
      const std::string& name = token.text;
      const bool call = i + 1 < end && is_punct(tokens_[i + 1], "(");
      if (is_uniform_builtin(name) || is_math_function(name)) continue;
      if (is_item_builtin(name)) {
        if (purity == Purity::kUniform) return false;
        continue;
      }
      if (names_a_type(name)) continue;
      if (const Macro* macro = find_macro(name); macro != nullptr) {
        if (macro->function_like || macro->redefined ||
            !pure(macro->body.first, macro->body.end, purity, names, false, depth + 1)) {
          return false;
        }
        continue;
      }
      if (call) return false;  // a helper function: it may read memory
      if (find_parameter(name) != nullptr) {
        if (!parameter_is_constant(name)) return false;
        continue;
      }
      if (!names(name)) return false;
    }
    return true;
  }

  // ---- placement ---------------------------------------------------------------

  // The regions after |variable|'s own where its name is in scope.
  bool in_scope(const RegionVariable& variable, size_t region) const {
    if (static_cast<int>(region) <= variable.region) return false;
    if (variable.loop < 0) return true;
    return plan_.regions[region].loop == variable.loop;
  }

  bool mentions(Range range, const std::string& name) const {
    for (size_t i = range.first; i < range.end; ++i) {
      if (is_identifier(tokens_[i], name) && !is_member(i)) return true;
    }
    return false;
  }
  bool region_mentions(size_t region, const std::string& name) const {
    for (const Range& statement : plan_.regions[region].statements) {
      if (mentions(statement, name)) return true;
    }
    return false;
  }

  // Whether a loop variable of the loop |loop| may be read by a value
  // declared in that loop's body.
  bool is_induction_of(int loop, const std::string& name) const {
    if (loop < 0) return false;
    const SplitLoop& split = plan_.loops[static_cast<size_t>(loop)];
    return std::find(split.induction.begin(), split.induction.end(), name) != split.induction.end();
  }

  bool check_loops() {
    for (const SplitLoop& loop : plan_.loops) {
      for (const std::string& name : loop.induction) {
        // Written only by the headers that declare it: a write in a body
        // would run once per work-item.
        for (size_t w : writes_of(name, true)) {
          if (!in_header_declaring(w, name)) {
            return reject("the loop variable '" + name + "' is written in a loop body");
          }
        }
      }
    }
    return true;
  }

  bool place_variables() {
    // Rematerialisable: initialised with a pure per-item expression of values
    // that cannot change while the variable lives, and never written again.
    std::vector<bool> remat(plan_.variables.size(), false);
    for (size_t v = 0; v < plan_.variables.size(); ++v) {
      const RegionVariable& variable = plan_.variables[v];
      remat[v] =
          !variable.array && variable.init.first != variable.init.end &&
          !is_punct(tokens_[variable.init.first], "{") &&
          writes_of(variable.name, !variable.pointer).size() == 1 &&
          pure(variable.init.first, variable.init.end, Purity::kItem, [&](const std::string& name) {
            if (is_induction_of(variable.loop, name)) return true;
            for (size_t u = 0; u < v; ++u) {
              if (plan_.variables[u].name == name) return bool(remat[u]);
            }
            return false;
          });
    }
    for (size_t v = 0; v < plan_.variables.size(); ++v) {
      RegionVariable& variable = plan_.variables[v];
      bool used_later = false, header_use = false;
      for (size_t r = 0; r < plan_.regions.size(); ++r) {
        if (in_scope(variable, r) && region_mentions(r, variable.name)) used_later = true;
      }
      for (const SplitLoop& loop : plan_.loops) {
        header_use |= mentions(loop.header, variable.name) && header_sees(loop, variable);
      }
      // A pointer to it may outlive its region: its address is taken, or an
      // array decays. It needs storage that lives for the whole block.
      bool escapes = false;
      for (size_t i = kernel_.body.first + 1; i + 1 < kernel_.body.end; ++i) {
        if (!is_identifier(tokens_[i], variable.name) || is_member(i)) continue;
        escapes |= is_punct(tokens_[i - 1], "&") ||
                   (variable.array && i != variable.name_token && !is_punct(tokens_[i + 1], "["));
      }
      variable.escapes = escapes;
      if (!used_later && !header_use && !escapes) continue;  // kLocal
      variable.storage =
          remat[v] && !header_use && !escapes ? Storage::kRematerialised : Storage::kPerItem;
    }
    // A repeated declaration repeats the values its initialiser reads.
    for (size_t v = plan_.variables.size(); v-- > 0;) {
      if (plan_.variables[v].storage != Storage::kRematerialised) continue;
      for (size_t u = 0; u < v; ++u) {
        if (plan_.variables[u].storage == Storage::kLocal &&
            mentions(plan_.variables[v].init, plan_.variables[u].name)) {
          plan_.variables[u].storage = Storage::kRematerialised;  // remat[u]: pure() said so
        }
      }
    }
    return true;
  }

  // Whether |loop|'s header is in the scope of |variable|.
  bool header_sees(const SplitLoop& loop, const RegionVariable& variable) const {
    if (variable.loop >= 0) return false;
    const size_t region = static_cast<size_t>(variable.region);
    return plan_.declarations[variable.declaration].statement.first < loop.header.first &&
           plan_.regions[region].loop < 0;
  }

  // The per-item variables that keep one value across the block: assigned
  // only uniform values, by statements every work-item runs.
  std::set<std::string> uniform_variables() const {
    std::set<std::string> uniform;
    for (const RegionVariable& variable : plan_.variables) {
      if (!variable.array) uniform.insert(variable.name);
    }
    // A top-level statement `name op= expression;` / `name++;` / `++name;`.
    struct Assignment {
      size_t target;
      Range value;
      int loop;
    };
    std::vector<Assignment> assignments;
    for (const Region& region : plan_.regions) {
      for (const Range& s : region.statements) {
        const size_t n = s.end - s.first;
        if (n >= 4 && tokens_[s.first].kind == TokenKind::kIdentifier &&
            is_assignment(tokens_[s.first + 1])) {
          assignments.push_back(Assignment{s.first, Range{s.first + 2, s.end - 1}, region.loop});
        } else if (n == 3 && tokens_[s.first].kind == TokenKind::kIdentifier &&
                   (is_punct(tokens_[s.first + 1], "++") || is_punct(tokens_[s.first + 1], "--"))) {
          assignments.push_back(Assignment{s.first, Range{s.first, s.first}, region.loop});
        } else if (n == 3 && tokens_[s.first + 1].kind == TokenKind::kIdentifier &&
                   (is_punct(tokens_[s.first], "++") || is_punct(tokens_[s.first], "--"))) {
          assignments.push_back(Assignment{s.first + 1, Range{s.first, s.first}, region.loop});
        }
      }
    }
    for (bool changed = true; changed;) {
      changed = false;
      for (const RegionVariable& variable : plan_.variables) {
        if (uniform.count(variable.name) == 0) continue;
        auto reads = [&](int loop) {
          return [&, loop](const std::string& name) {
            return uniform.count(name) != 0 || is_induction_of(loop, name);
          };
        };
        bool ok =
            variable.init.first == variable.init.end ||
            (!is_punct(tokens_[variable.init.first], "{") &&
             pure(variable.init.first, variable.init.end, Purity::kUniform, reads(variable.loop)));
        for (size_t w : writes_of(variable.name, !variable.pointer)) {
          if (!ok) break;
          if (w == variable.name_token) continue;
          const auto found = std::find_if(assignments.begin(), assignments.end(),
                                          [&](const Assignment& a) { return a.target == w; });
          ok = found != assignments.end() &&
               pure(found->value.first, found->value.end, Purity::kUniform, reads(found->loop));
        }
        if (!ok) {
          uniform.erase(variable.name);
          changed = true;
        }
      }
    }
    return uniform;
  }

  bool check_headers() {
    const std::set<std::string> uniform = uniform_variables();
    for (size_t l = 0; l < plan_.loops.size(); ++l) {
      SplitLoop& loop = plan_.loops[l];
      auto reads = [&](const std::string& name) {
        if (is_induction_of(static_cast<int>(l), name)) return true;
        const RegionVariable* variable = find_variable(name);
        return variable != nullptr && uniform.count(name) != 0 && header_sees(loop, *variable);
      };
      const size_t open = loop.header.first + 1, close = loop.header.end - 1;
      const std::string where =
          " of the loop at line " + std::to_string(tokens_[loop.header.first].line);
      if (is_identifier(tokens_[loop.header.first], "while")) {
        if (!pure(open + 1, close, Purity::kUniform, reads)) {
          return reject("the condition" + where + " may differ between work-items");
        }
      } else {
        const Range init = loop_init_.at(l);
        const size_t condition_end = statement_end(init.end, close + 1);
        if (condition_end > close) return reject("a for header the splitter cannot read");
        for (const RegionVariable& variable : induction_init_) {
          if (variable.loop != static_cast<int>(l) || variable.init.first == variable.init.end) {
            continue;
          }
          if (!pure(variable.init.first, variable.init.end, Purity::kUniform, reads)) {
            return reject("the initialiser of '" + variable.name + "'" + where +
                          " may differ between work-items");
          }
        }
        if (!pure(init.end, condition_end - 1, Purity::kUniform, reads)) {
          return reject("the condition" + where + " may differ between work-items");
        }
        // The step: only the loop's own variables are written.
        for (size_t i = condition_end; i < close; ++i) {
          const Token& token = tokens_[i];
          if (token.kind == TokenKind::kPunct &&
              (is_assignment(token) || token.text == "++" || token.text == "--")) {
            const bool target_before = i > condition_end &&
                                       tokens_[i - 1].kind == TokenKind::kIdentifier &&
                                       is_induction_of(static_cast<int>(l), tokens_[i - 1].text);
            const bool target_after = i + 1 < close &&
                                      tokens_[i + 1].kind == TokenKind::kIdentifier &&
                                      is_induction_of(static_cast<int>(l), tokens_[i + 1].text);
            if (!target_before && !target_after) {
              return reject("the step" + where + " writes something other than its variables");
            }
          }
        }
        // The step's values: everything else in it pure and uniform.
        if (!pure(condition_end, close, Purity::kUniform, reads, true)) {
          return reject("the step" + where + " may differ between work-items");
        }
      }
      for (size_t v = 0; v < plan_.variables.size(); ++v) {
        if (mentions(loop.header, plan_.variables[v].name) &&
            header_sees(loop, plan_.variables[v])) {
          loop.header_reads.push_back(v);
        }
      }
    }
    return true;
  }

  bool bind_regions() {
    for (size_t r = 0; r < plan_.regions.size(); ++r) {
      Region& region = plan_.regions[r];
      std::vector<bool> needed(plan_.variables.size(), false);
      for (size_t v = 0; v < plan_.variables.size(); ++v) {
        const RegionVariable& variable = plan_.variables[v];
        if (variable.storage == Storage::kLocal || !in_scope(variable, r)) continue;
        if (region_mentions(r, variable.name)) needed[v] = true;
      }
      // Rematerialised values read earlier ones: take the closure, walking
      // back through the declarations.
      for (size_t v = plan_.variables.size(); v-- > 0;) {
        const RegionVariable& variable = plan_.variables[v];
        if (!needed[v] || variable.storage != Storage::kRematerialised) continue;
        for (size_t u = 0; u < v; ++u) {
          if (plan_.variables[u].storage != Storage::kLocal && in_scope(plan_.variables[u], r) &&
              mentions(variable.init, plan_.variables[u].name)) {
            needed[u] = true;
          }
        }
      }
      for (size_t v = 0; v < plan_.variables.size(); ++v) {
        if (!needed[v]) continue;
        (plan_.variables[v].storage == Storage::kPerItem ? region.bound : region.repeated)
            .push_back(v);
      }
    }
    return true;
  }

  // ---- interleaving --------------------------------------------------------

  // Whether the macro |name| (and those it uses) reads a work-item's id: its
  // expansion would see the block function's work-item 0, not a copy's own.
  bool macro_reads_item(const std::string& name, int depth) const {
    const Macro* macro = find_macro(name);
    if (macro == nullptr) return false;
    if (macro->function_like || macro->redefined || depth > 8) return true;
    for (size_t i = macro->body.first; i < macro->body.end; ++i) {
      if (!spend()) return true;
      const Token& token = tokens_[i];
      if (token.kind != TokenKind::kIdentifier || token.text == name) continue;
      if (is_item_builtin(token.text) || macro_reads_item(token.text, depth + 1)) return true;
    }
    return false;
  }

  // Whether the `for` statement |s| of a region in the split loop |loop| has
  // a header every work-item runs alike: `for (T i = U; C; STEP)` with U and
  // C pure and uniform, STEP only `++i`, `i++`, `--i`, `i--`, `i += U` or
  // `i -= U`, and a body that never writes i nor leaves an iteration early
  // (break, continue, return, goto: a copy's jump would skip the others').
  // |induction|: the name i; |body|: the loop's body.
  bool uniform_for(Range s, int loop, std::string& induction, Range& body) const {
    if (!is_identifier(tokens_[s.first], "for") || !is_punct(tokens_[s.first + 1], "(")) {
      return false;
    }
    const size_t open = s.first + 1, close = matching(open, s.end);
    if (close >= s.end) return false;
    const size_t init_end = statement_end(open + 1, close + 1);  // one past the ';'
    if (init_end > close) return false;
    // The for-init: type words, one name, '=', a uniform value.
    size_t i = open + 1;
    while (i < init_end && tokens_[i].kind == TokenKind::kIdentifier &&
           names_a_type(tokens_[i].text)) {
      ++i;
    }
    if (i == open + 1 || i + 2 >= init_end || tokens_[i].kind != TokenKind::kIdentifier ||
        !is_punct(tokens_[i + 1], "=")) {
      return false;
    }
    induction = tokens_[i].text;
    const Range init{i + 2, init_end - 1};
    for (size_t j = init.first; j < init.end; ++j) {
      if (is_punct(tokens_[j], ",")) return false;  // a second declarator
    }
    auto reads = [&](const std::string& name) {
      return name == induction || is_induction_of(loop, name);
    };
    if (init.first == init.end || !pure(init.first, init.end, Purity::kUniform, reads)) {
      return false;
    }
    const size_t condition_end = statement_end(init_end, close + 1);
    if (condition_end > close || !pure(init_end, condition_end - 1, Purity::kUniform, reads)) {
      return false;
    }
    const Range step{condition_end, close};
    const size_t n = step.end - step.first;
    const auto at = [&](size_t k) -> const Token& { return tokens_[step.first + k]; };
    const bool increment =
        n == 2 &&
        ((is_identifier(at(0), induction) && (is_punct(at(1), "++") || is_punct(at(1), "--"))) ||
         (is_identifier(at(1), induction) && (is_punct(at(0), "++") || is_punct(at(0), "--"))));
    const bool compound = n >= 3 && is_identifier(at(0), induction) &&
                          (is_punct(at(1), "+=") || is_punct(at(1), "-=")) &&
                          pure(step.first + 2, step.end, Purity::kUniform, reads);
    if (!increment && !compound) return false;
    for (size_t j = close + 1; j < s.end; ++j) {
      const Token& token = tokens_[j];
      if (is_identifier(token, "break") || is_identifier(token, "continue") ||
          is_identifier(token, "return") || is_identifier(token, "goto") ||
          is_identifier(token, "barrier")) {
        return false;
      }
      if (is_identifier(token, induction) && !is_member(j) && written_at(j, false)) return false;
    }
    body = Range{close + 1, s.end};
    return true;
  }

  // Marks the regions that run several work-items at once (Region::interleaved).
  // Never rejects the kernel: a region that does not qualify runs one
  // work-item at a time, as before.
  void plan_interleaving() {
    for (size_t r = 0; r < plan_.regions.size(); ++r) {
      Region& region = plan_.regions[r];
      if (region.returns) continue;
      std::vector<std::string> renamed;
      for (const RegionVariable& variable : plan_.variables) {
        if (variable.region == static_cast<int>(r)) renamed.push_back(variable.name);
      }
      for (size_t v : region.bound) renamed.push_back(plan_.variables[v].name);
      for (size_t v : region.repeated) renamed.push_back(plan_.variables[v].name);
      std::sort(renamed.begin(), renamed.end());
      renamed.erase(std::unique(renamed.begin(), renamed.end()), renamed.end());
      bool item_macro = false;
      for (const Range& statement : region.statements) {
        for (size_t i = statement.first; i < statement.end && !item_macro; ++i) {
          if (tokens_[i].kind == TokenKind::kIdentifier && find_macro(tokens_[i].text) != nullptr) {
            item_macro = macro_reads_item(tokens_[i].text, 0);
          }
        }
      }
      if (item_macro) continue;
      for (size_t s = 0; s < region.statements.size(); ++s) {
        std::string induction;
        Range body;
        if (!uniform_for(region.statements[s], region.loop, induction, body)) continue;
        // The loop's variable is shared by the copies: it may not be one of
        // the names each copy has its own of.
        if (std::binary_search(renamed.begin(), renamed.end(), induction)) continue;
        // Only a loop that writes one of the region's own values can carry a
        // chain from one iteration to the next; one that only stores to
        // memory (a tile copy) gains nothing from more work-items at once.
        bool carries = false;
        for (size_t i = body.first; i < body.end && !carries; ++i) {
          carries = tokens_[i].kind == TokenKind::kIdentifier && !is_member(i) &&
                    std::binary_search(renamed.begin(), renamed.end(), tokens_[i].text) &&
                    written_at(i, false);
        }
        if (!carries) continue;
        // Each value a copy carries by value is one more register per copy.
        const int carried =
            static_cast<int>(std::count_if(region.bound.begin(), region.bound.end(), [&](size_t v) {
              return plan_.variables[v].by_value();
            }));
        const int copies = kInterleaveChains / std::max(carried, 1);
        if (copies < kMinInterleave) break;
        region.copies = copies;
        region.interleaved = static_cast<int>(s);
        region.interleaved_body = body;
        region.renamed = renamed;
        break;
      }
    }
  }

  const Program& program_;
  const std::vector<Token>& tokens_;
  const Kernel& kernel_;
  RegionPlan& plan_;
  std::string& why_;
  std::map<std::string, Macro> macros_;
  std::map<size_t, Range> loop_init_;  // per loop: the for-init through its ';'
  std::vector<RegionVariable> induction_init_;
  mutable size_t budget_ = 1000000;
};

}  // namespace

bool parameter_written(const Program& program, const Kernel& kernel, const std::string& name) {
  const std::vector<Token>& tokens = program.tokens;
  for (size_t i = kernel.body.first + 1; i + 1 < kernel.body.end; ++i) {
    if (!is_identifier(tokens[i], name)) continue;
    const Token& previous = tokens[i - 1];
    const Token& next = tokens[i + 1];
    if (is_punct(previous, ".") || is_punct(previous, "->")) continue;  // a member
    // &p[i] and &p->x take the address of what a pointer points to.
    const bool pointee = is_punct(next, "[") || is_punct(next, "->");
    if ((is_punct(previous, "&") && !pointee) || is_punct(previous, "++") ||
        is_punct(previous, "--") || is_assignment(next) || is_punct(next, "++") ||
        is_punct(next, "--")) {
      return true;
    }
  }
  return false;
}

const RegionDeclaration* RegionPlan::declaration_at(size_t token) const {
  for (const RegionDeclaration& declaration : declarations) {
    if (declaration.statement.first == token) return &declaration;
  }
  return nullptr;
}

size_t RegionPlan::per_item_count() const {
  return static_cast<size_t>(std::count_if(variables.begin(), variables.end(), [](const auto& v) {
    return v.storage == Storage::kPerItem;
  }));
}

bool plan_regions(const Program& program, const Kernel& kernel, RegionPlan& plan,
                  std::string& why) {
  plan = RegionPlan{};
  why.clear();
  Planner planner(program, kernel, plan, why);
  if (planner.run()) return true;
  plan = RegionPlan{};
  return false;
}

}  // namespace hal::dialect
