// Reads HAL's public headers and writes what halconform knows about the API
// from them alone, so that a new function, enumerator or descriptor field is
// part of the suite's coverage (and of its self-check) the day it is added:
//  - api_model.cpp: every exported function with the results its comment
//    documents, every enum and flag type with its values, every input struct
//    with each field's offset, size and kind, and which op descriptor serves
//    which hal_op_kind_t;
//  - api_wrappers.cpp: one `__wrap_<function>` per function (halconform links
//    with -Wl,--wrap=<function> for each), which marks the call in flight,
//    calls the real function and hands the call to the coverage recorder.
//
//   halconform_model_gen OUT_DIR HEADER...
//
// The headers are clang-formatted C; the parser reads what they hold, not C
// in general: `HAL_API <type> <name>(<params>);` declarations with the
// comment above them, `typedef enum X HAL_ENUM_TYPE { ... } X_t;`, `typedef uint32_t Y_t;`
// right after a `*_bits` enum (its flags type), and `typedef struct X {
// fields } X_t;`. What it cannot read stops the build with the line.
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace {

struct EnumType {
  std::string name;  // the typedef, "hal_memory_kind_t"
  bool bitmask = false;
  std::vector<std::string> values;  // enumerators, without *_MAX_ENUM and *_COUNT
};

struct Field {
  std::string name;
  std::string type;  // as declared, without qualifiers or array bounds
  bool pointer = false;
  bool array = false;
  std::string comment;  // the trailing comment (names a flags enum for uint32_t flags)
};

struct StructType {
  std::string name;  // the typedef
  std::string doc;   // the comment above it
  std::vector<Field> fields;
};

struct Param {
  std::string type;  // as written, "const hal_module_desc_t*"
  std::string name;
};

struct Function {
  std::string name;
  std::string header;
  std::string returns;
  std::vector<Param> params;
  std::string doc;
  std::string section_doc;  // the /*=== banner of its section
};

[[noreturn]] void die(const std::string& message) {
  std::fprintf(stderr, "halconform_model_gen: %s\n", message.c_str());
  std::exit(1);
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) die("cannot read " + path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string trim(const std::string& text) {
  size_t begin = 0, end = text.size();
  while (begin < end && std::isspace(static_cast<unsigned char>(text[begin]))) ++begin;
  while (end > begin && std::isspace(static_cast<unsigned char>(text[end - 1]))) --end;
  return text.substr(begin, end - begin);
}

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() &&
         text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool is_ident(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
}

// The text with every comment replaced by one space.
std::string strip_comments(const std::string& text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text.compare(i, 2, "/*") == 0) {
      const size_t end = text.find("*/", i + 2);
      if (end == std::string::npos) die("an unterminated comment");
      out += ' ';
      i = end + 1;
    } else if (text.compare(i, 2, "//") == 0) {
      const size_t end = text.find('\n', i);
      i = end == std::string::npos ? text.size() : end - 1;
    } else {
      out += text[i];
    }
  }
  return out;
}

// The identifiers of |text| in order.
std::vector<std::string> identifiers(const std::string& text) {
  std::vector<std::string> out;
  for (size_t i = 0; i < text.size();) {
    if (is_ident(text[i]) && !std::isdigit(static_cast<unsigned char>(text[i]))) {
      size_t j = i;
      while (j < text.size() && is_ident(text[j])) ++j;
      out.push_back(text.substr(i, j - i));
      i = j;
    } else {
      ++i;
    }
  }
  return out;
}

// The comment that ends right before |position| (only white space between),
// or "".
std::string comment_before(const std::string& text, size_t position) {
  size_t end = position;
  while (end > 0 && std::isspace(static_cast<unsigned char>(text[end - 1]))) --end;
  if (end < 2 || text.compare(end - 2, 2, "*/") != 0) return {};
  const size_t begin = text.rfind("/*", end - 2);
  return begin == std::string::npos ? std::string() : text.substr(begin, end - begin);
}

// The matching closing brace of the one at |open|.
size_t matching_brace(const std::string& text, size_t open) {
  int depth = 0;
  for (size_t i = open; i < text.size(); ++i) {
    if (text[i] == '{') ++depth;
    if (text[i] == '}' && --depth == 0) return i;
  }
  die("an unbalanced brace");
}

// The next |c| at or after |from| that is not inside a comment.
size_t find_outside_comments(const std::string& text, char c, size_t from) {
  for (size_t i = from; i < text.size(); ++i) {
    if (text.compare(i, 2, "/*") == 0) {
      const size_t end = text.find("*/", i + 2);
      if (end == std::string::npos) return std::string::npos;
      i = end + 1;
    } else if (text[i] == c) {
      return i;
    }
  }
  return std::string::npos;
}

size_t line_of(const std::string& text, size_t position) {
  size_t line = 1;
  for (size_t i = 0; i < position && i < text.size(); ++i) line += text[i] == '\n';
  return line;
}

class Model {
 public:
  void read_header(const std::string& path) {
    const std::string text = read_file(path);
    const size_t api = path.rfind("/api/");
    const std::string header =
        api != std::string::npos ? path.substr(api + 5) : path.substr(path.rfind('/') + 1);
    read_enums(text, path);
    read_structs(text, path);
    read_functions(text, header);
  }

  void write(const std::string& out_dir) const {
    write_model(out_dir + "/api_model.cpp");
    write_wrappers(out_dir + "/api_wrappers.cpp");
  }

 private:
  void read_enums(const std::string& text, const std::string& path) {
    size_t at = 0;
    while ((at = text.find("typedef enum ", at)) != std::string::npos) {
      const size_t open = text.find('{', at);
      const size_t close = matching_brace(text, open);
      const size_t semicolon = text.find(';', close);
      const std::string type = trim(text.substr(close + 1, semicolon - close - 1));
      // `typedef enum hal_x HAL_ENUM_TYPE {`: the tag is the name before the
      // macro (hal/result.h: C++'s fixed underlying type).
      std::string tag = trim(text.substr(at + 13, open - at - 13));
      if (const size_t macro = tag.find("HAL_ENUM_TYPE"); macro != std::string::npos) {
        tag = trim(tag.substr(0, macro));
      }
      EnumType e;
      e.name = type;
      e.bitmask = ends_with(tag, "_bits");
      const std::string body = strip_comments(text.substr(open + 1, close - open - 1));
      std::stringstream items(body);
      std::string item;
      while (std::getline(items, item, ',')) {
        const std::vector<std::string> words = identifiers(item);
        if (words.empty()) continue;
        const std::string& name = words.front();
        if (ends_with(name, "_MAX_ENUM") || ends_with(name, "_COUNT")) continue;
        e.values.push_back(name);
      }
      if (e.values.empty()) {
        die(path + ":" + std::to_string(line_of(text, at)) + ": enum " + type + " has no values");
      }
      enums_[type] = e;
      enum_order_.push_back(type);
      // A bitmask's flags type is the uint32_t typedef that follows it.
      if (e.bitmask) {
        const size_t next = text.find("typedef uint32_t ", semicolon);
        const size_t next_end = next == std::string::npos ? next : text.find(';', next);
        if (next != std::string::npos &&
            trim(text.substr(semicolon + 1, next - semicolon - 1)).empty()) {
          flags_[trim(text.substr(next + 17, next_end - next - 17))] = type;
        }
      }
      at = semicolon;
    }
  }

  void read_structs(const std::string& text, const std::string& path) {
    size_t at = 0;
    while ((at = text.find("typedef struct ", at)) != std::string::npos) {
      const size_t open = text.find('{', at);
      const size_t semicolon_after_name = text.find(';', at);
      if (open == std::string::npos || semicolon_after_name < open) {  // an opaque handle
        at = semicolon_after_name;
        continue;
      }
      const size_t close = matching_brace(text, open);
      const size_t semicolon = text.find(';', close);
      StructType s;
      s.name = trim(text.substr(close + 1, semicolon - close - 1));
      s.doc = comment_before(text, at);
      // Fields: one declaration a line group, ended by ';', with its trailing comment.
      const std::string body = text.substr(open + 1, close - open - 1);
      size_t start = 0;
      while (start < body.size()) {
        const size_t end = find_outside_comments(body, ';', start);
        if (end == std::string::npos) break;
        const std::string declaration = trim(strip_comments(body.substr(start, end - start)));
        // The comment after the ';' on the same line.
        std::string trailing;
        const size_t line_end = body.find('\n', end);
        const std::string rest = body.substr(end + 1, line_end - end - 1);
        if (const size_t c = rest.find("/*"); c != std::string::npos) trailing = rest.substr(c);
        start = end + 1;
        if (declaration.empty()) continue;
        if (declaration.find('(') != std::string::npos) {
          die(path + ": struct " + s.name + " has a function pointer field: " + declaration);
        }
        // "type a, b[3], *c": the type is the words before the first declarator.
        const size_t first_comma = declaration.find(',');
        const std::string first = declaration.substr(0, first_comma);
        std::vector<std::string> declarators;
        size_t name_begin = first.size();
        while (name_begin > 0 && (is_ident(first[name_begin - 1]) || first[name_begin - 1] == '[' ||
                                  first[name_begin - 1] == ']')) {
          --name_begin;
        }
        std::string type = trim(first.substr(0, name_begin));
        declarators.push_back(trim(first.substr(name_begin)));
        if (first_comma != std::string::npos) {
          std::stringstream others(declaration.substr(first_comma + 1));
          std::string other;
          while (std::getline(others, other, ',')) declarators.push_back(trim(other));
        }
        bool pointer = false;
        while (!type.empty() && (type.back() == '*' || std::isspace(type.back()))) {
          pointer |= type.back() == '*';
          type.pop_back();
        }
        std::string bare = type;
        for (const char* qualifier : {"const ", "volatile "}) {
          for (size_t q; (q = bare.find(qualifier)) != std::string::npos;) bare.erase(q, 9);
        }
        if (bare.find('*') != std::string::npos) pointer = true;
        bare = trim(bare.substr(0, bare.find('*')));
        for (std::string declarator : declarators) {
          Field f;
          f.pointer = pointer || declarator.find('*') != std::string::npos;
          f.array = declarator.find('[') != std::string::npos;
          declarator = declarator.substr(0, declarator.find('['));
          while (!declarator.empty() && declarator.front() == '*') declarator.erase(0, 1);
          f.name = trim(declarator);
          f.type = bare;
          f.comment = trailing;
          if (f.name.empty()) die(path + ": cannot read a field of " + s.name + ": " + declaration);
          s.fields.push_back(f);
        }
      }
      structs_[s.name] = s;
      struct_order_.push_back(s.name);
      at = semicolon;
    }
  }

  void read_functions(const std::string& text, const std::string& header) {
    std::string section_doc;
    std::string last_doc;
    size_t scanned = 0;
    size_t at = 0;
    while ((at = text.find("HAL_API ", at)) != std::string::npos) {
      // A line that defines the macro is not a declaration.
      const size_t line_start = text.rfind('\n', at) + 1;
      if (text.compare(line_start, 7, "#define") == 0) {
        at += 8;
        continue;
      }
      // Section banners between the last declaration and this one.
      for (size_t b = scanned; (b = text.find("/*===", b)) != std::string::npos && b < at;) {
        const size_t end = text.find("*/", b);
        section_doc = text.substr(b, end - b);
        if (section_doc.find("rrors") != std::string::npos) common_banner_ = section_doc;
        b = end;
      }
      const size_t open = text.find('(', at);
      const size_t close = text.find(");", open);
      const std::string head = trim(text.substr(at + 8, open - at - 8));
      const size_t name_begin = head.find_last_of(" *") + 1;
      Function f;
      f.name = head.substr(name_begin);
      f.returns = trim(head.substr(0, name_begin));
      f.header = header;
      f.section_doc = section_doc;
      f.doc = comment_before(text, line_start);
      // Declarations that share one comment (hal_comm_count, _rank, ...) inherit it.
      if (f.doc.empty()) f.doc = last_doc;
      last_doc = f.doc;
      const std::string params = strip_comments(text.substr(open + 1, close - open - 1));
      std::stringstream list(params);
      std::string param;
      while (std::getline(list, param, ',')) {
        param = trim(param);
        if (param.empty() || param == "void") continue;
        size_t n = param.size();
        while (n > 0 && is_ident(param[n - 1])) --n;
        f.params.push_back({trim(param.substr(0, n)), param.substr(n)});
      }
      if (f.name.rfind("hal_", 0) != 0) die(header + ": cannot read the declaration " + head);
      functions_.push_back(f);
      scanned = close;
      at = close;
    }
  }

  // The results a function's comment documents: every HAL_ERROR_* name,
  // "A/B" shorthand (HAL_ERROR_INVALID_HANDLE/DESTROYED_HANDLE), HAL_NOT_READY,
  // and for "the common ones" (or no list of its own) its section's list.
  std::vector<std::string> documented_results(const Function& f) const {
    const EnumType& results = enums_.at("hal_result_t");
    const std::set<std::string> known(results.values.begin(), results.values.end());
    auto scan = [&](const std::string& text, std::set<std::string>& out) {
      for (size_t i = 0; i < text.size();) {
        if (text.compare(i, 4, "HAL_") != 0 || (i > 0 && is_ident(text[i - 1]))) {
          ++i;
          continue;
        }
        size_t j = i;
        while (j < text.size() && is_ident(text[j])) ++j;
        std::string name = text.substr(i, j - i);
        if (known.count(name) != 0 && name != "HAL_SUCCESS") out.insert(name);
        // The shorthand: a '/' and a bare code right after a HAL_ERROR_ name.
        size_t k = j;
        while (k < text.size() && (text[k] == '/' || text[k] == ' ')) {
          if (text[k] == '/') {
            size_t m = k + 1;
            while (m < text.size() && text[m] == ' ') ++m;
            size_t e = m;
            while (e < text.size() && is_ident(text[e])) ++e;
            const std::string bare = "HAL_ERROR_" + text.substr(m, e - m);
            if (known.count(bare) != 0) out.insert(bare);
            k = e;
          } else {
            ++k;
          }
        }
        i = j;
      }
    };
    std::set<std::string> found;
    const size_t errors = f.doc.find("Errors:");
    // No list of its own: the results its comment names ("Returns HAL_ERROR_X if ...").
    scan(errors != std::string::npos ? f.doc.substr(errors) : f.doc, found);
    if (f.doc.find("HAL_NOT_READY") != std::string::npos) found.insert("HAL_NOT_READY");
    // "the common ones" of a section (collective.h's local errors), or no
    // list at all in a section that has one.
    if (f.doc.find("common") != std::string::npos) {
      if (!common_banner_.empty()) scan(common_banner_.substr(common_banner_.find("rrors")), found);
    } else if (errors == std::string::npos && f.section_doc.find("rrors") != std::string::npos) {
      scan(f.section_doc.substr(f.section_doc.find("rrors")), found);
    }
    // "Same rules and errors as hal_x" / "Rules and errors as hal_x".
    if (const size_t as = f.doc.find("errors as hal_"); as != std::string::npos) {
      size_t end = as + 10;
      while (end < f.doc.size() && is_ident(f.doc[end])) ++end;
      const std::string other = f.doc.substr(as + 10, end - as - 10);
      for (const Function& g : functions_) {
        if (g.name == other && g.name != f.name) {
          for (const std::string& r : documented_results(g)) found.insert(r);
        }
      }
    }
    return {found.begin(), found.end()};
  }

  // The enum a struct field holds: its type, or for a uint32_t flags field
  // the *_bits_t its comment names.
  std::string field_enum(const Field& f) const {
    if (f.pointer) return {};
    if (enums_.count(f.type) != 0) return f.type;
    if (flags_.count(f.type) != 0) return flags_.at(f.type);
    for (const auto& [name, e] : enums_) {
      if (e.bitmask && f.comment.find(name) != std::string::npos) return name;
    }
    return {};
  }

  // A descriptor struct (SPEC.md §1): it starts with struct_size.
  bool is_descriptor(const std::string& name) const {
    auto it = structs_.find(name);
    return it != structs_.end() && !it->second.fields.empty() &&
           it->second.fields.front().name == "struct_size";
  }

  // Structs a caller passes in: `const T*` parameters of descriptor structs,
  // the op descriptors, and the structs nested in them.
  std::vector<std::string> input_structs() const {
    std::vector<std::string> out;
    std::set<std::string> seen;
    std::vector<std::string> pending;
    for (const Function& f : functions_) {
      for (const Param& p : f.params) {
        if (p.type.rfind("const ", 0) != 0 || p.type.back() != '*') continue;
        const std::string base = trim(p.type.substr(6, p.type.size() - 7));
        if (is_descriptor(base)) pending.push_back(base);
      }
    }
    // Every op descriptor is passed through hal_op_header_t*.
    for (const auto& [kind, descriptor] : op_descriptors()) pending.push_back(descriptor);
    while (!pending.empty()) {
      const std::string name = pending.back();
      pending.pop_back();
      if (!seen.insert(name).second) continue;
      out.push_back(name);
      for (const Field& field : structs_.at(name).fields) {
        if (!field.pointer && structs_.count(field.type) != 0) pending.push_back(field.type);
      }
    }
    return out;
  }

  // hal_op_kind_t values and the descriptor that carries each: a struct whose
  // first field is hal_op_header_t and whose comment names the kind.
  std::vector<std::pair<std::string, std::string>> op_descriptors() const {
    std::vector<std::pair<std::string, std::string>> out;
    if (enums_.count("hal_op_kind_t") == 0) return out;
    for (const std::string& kind : enums_.at("hal_op_kind_t").values) {
      for (const std::string& name : struct_order_) {
        const StructType& s = structs_.at(name);
        if (s.fields.empty() || s.fields.front().type != "hal_op_header_t") continue;
        const std::string& doc = s.doc;
        for (size_t at = doc.find(kind); at != std::string::npos; at = doc.find(kind, at + 1)) {
          const size_t end = at + kind.size();
          if (end < doc.size() && is_ident(doc[end])) continue;  // HAL_OP_SOFTMAX_BACKWARD
          out.emplace_back(kind, name);
          break;
        }
        if (!out.empty() && out.back().first == kind) break;
      }
    }
    return out;
  }

  // The enums a caller passes: parameters, and fields of input structs.
  std::set<std::string> input_enums() const {
    std::set<std::string> out;
    for (const Function& f : functions_) {
      for (const Param& p : f.params) {
        if (enums_.count(p.type) != 0) out.insert(p.type);
        if (flags_.count(p.type) != 0) out.insert(flags_.at(p.type));
      }
    }
    for (const std::string& name : input_structs()) {
      for (const Field& field : structs_.at(name).fields) {
        if (const std::string e = field_enum(field); !e.empty()) out.insert(e);
      }
    }
    return out;
  }

  static std::string ident(const std::string& name) {
    std::string out;
    for (char c : name) out += is_ident(c) ? c : '_';
    return out;
  }

  void write_model(const std::string& path) const {
    std::ostringstream o;
    o << "// Generated by halconform_model_gen from HAL's public headers. Do not edit.\n"
         "#include <hal.h>\n\n#include <cstddef>\n\n#include \"api_model.hpp\"\n\n"
         "namespace halconform::model {\nnamespace {\n\n";
    const std::set<std::string> inputs = input_enums();
    for (const std::string& name : enum_order_) {
      const EnumType& e = enums_.at(name);
      o << "const EnumValue k_values_" << ident(name) << "[] = {\n";
      for (const std::string& value : e.values) {
        o << "    {\"" << value << "\", static_cast<int64_t>(" << value << ")},\n";
      }
      o << "};\n";
    }
    o << "\n}  // namespace\n\nconst EnumType kEnums[] = {\n";
    for (const std::string& name : enum_order_) {
      const EnumType& e = enums_.at(name);
      o << "    {\"" << name << "\", " << (e.bitmask ? "true" : "false") << ", "
        << (inputs.count(name) != 0 ? "true" : "false") << ", k_values_" << ident(name) << "},\n";
    }
    o << "};\n\n";
    // Structs: every input struct, then the op descriptor table.
    const std::vector<std::string> inputs_structs = input_structs();
    o << "namespace {\n\n";
    for (const std::string& name : inputs_structs) {
      const StructType& s = structs_.at(name);
      o << "const Field k_fields_" << ident(name) << "[] = {\n";
      for (const Field& f : s.fields) {
        std::string kind = "FieldKind::kScalar";
        std::string type = "nullptr";
        if (f.pointer) {
          kind = "FieldKind::kPointer";
        } else if (const std::string e = field_enum(f); !e.empty()) {
          kind = enums_.at(e).bitmask ? "FieldKind::kFlags" : "FieldKind::kEnum";
          type = "\"" + e + "\"";
        } else if (structs_.count(f.type) != 0) {
          kind = "FieldKind::kStruct";
          type = "\"" + f.type + "\"";
        } else if (f.array) {
          kind = "FieldKind::kArray";
        }
        o << "    {\"" << f.name << "\", offsetof(" << name << ", " << f.name << "), sizeof(((("
          << name << "*)nullptr)->" << f.name << ")), " << kind << ", " << type << "},\n";
      }
      o << "};\n";
    }
    o << "\n}  // namespace\n\nconst StructType kStructs[] = {\n";
    for (const std::string& name : inputs_structs) {
      o << "    {\"" << name << "\", sizeof(" << name << "), k_fields_" << ident(name) << "},\n";
    }
    o << "};\n\nconst OpDescriptor kOpDescriptors[] = {\n";
    for (const auto& [kind, descriptor] : op_descriptors()) {
      o << "    {static_cast<int64_t>(" << kind << "), \"" << kind << "\", \"" << descriptor
        << "\"},\n";
    }
    o << "};\n\nnamespace {\n\n";
    for (const Function& f : functions_) {
      const std::vector<std::string> results = documented_results(f);
      o << "const char* const k_results_" << f.name << "[] = {";
      for (const std::string& r : results) o << "\"" << r << "\", ";
      o << "nullptr};\n";
    }
    o << "\n}  // namespace\n\nconst Function kFunctions[] = {\n";
    for (const Function& f : functions_) {
      o << "    {\"" << f.name << "\", \"" << f.header << "\", "
        << (f.returns == "hal_result_t" ? "true" : "false") << ", k_results_" << f.name << "},\n";
    }
    o << "};\n\nstd::span<const EnumType> enums() { return kEnums; }\n"
         "std::span<const StructType> structs() { return kStructs; }\n"
         "std::span<const OpDescriptor> op_descriptors() { return kOpDescriptors; }\n"
         "std::span<const Function> functions() { return kFunctions; }\n\n"
         "}  // namespace halconform::model\n";
    write_if_changed(path, o.str());
  }

  // How the wrapper records a parameter, as a statement (or "").
  std::string record_param(const Param& p) const {
    const std::string type = trim(p.type);
    if (enums_.count(type) != 0) {
      return "::halconform::coverage::record_enum(\"" + type + "\", static_cast<int64_t>(" +
             p.name + "));";
    }
    if (flags_.count(type) != 0) {
      return "::halconform::coverage::record_flags(\"" + flags_.at(type) +
             "\", static_cast<uint64_t>(" + p.name + "));";
    }
    if (type.rfind("const ", 0) == 0 && type.back() == '*') {
      const std::string base = trim(type.substr(6, type.size() - 7));
      if (base == "hal_op_header_t") {
        return "::halconform::coverage::record_op_descriptor(" + p.name + ");";
      }
      if (is_descriptor(base)) {
        return "::halconform::coverage::record_struct(\"" + base + "\", " + p.name + ");";
      }
    }
    return {};
  }

  void write_wrappers(const std::string& path) const {
    std::ostringstream o;
    o << "// Generated by halconform_model_gen from HAL's public headers. Do not edit.\n"
         "// halconform links with -Wl,--wrap=<function> for every function below: its\n"
         "// own calls come here, are marked in flight (a hang names the call), are\n"
         "// recorded for the coverage report, and go on to libhal.\n"
         "#include <hal.h>\n\n#include \"coverage.hpp\"\n#include \"coverage_hooks.hpp\"\n"
         "#include \"in_flight.hpp\"\n\n"
         "// NOLINTBEGIN: the names are the linker's.\nextern \"C\" {\n\n";
    for (size_t i = 0; i < functions_.size(); ++i) {
      const Function& f = functions_[i];
      std::string params, args, args_after;
      for (const Param& p : f.params) {
        params +=
            (params.empty() ? "" : ", ") + p.type + (p.type.back() == '*' ? "" : " ") + p.name;
        args += (args.empty() ? "" : ", ") + p.name;
      }
      if (params.empty()) params = "void";
      o << f.returns << " __real_" << f.name << "(" << params << ");\n";
      o << f.returns << " __wrap_" << f.name << "(" << params << ") {\n";
      o << "  const ::halconform::InFlight in_flight_(" << i << ", \"" << f.name << "\");\n";
      o << "  const bool recording_ = ::halconform::coverage::recording();\n";
      o << "  if (recording_) {\n";
      for (const Param& p : f.params) {
        if (const std::string statement = record_param(p); !statement.empty()) {
          o << "    " << statement << "\n";
        }
      }
      o << "  }\n";
      if (f.returns == "hal_result_t") {
        o << "  const ::halconform::coverage::PreCall before_ =\n"
          << "      recording_ ? ::halconform::coverage::before_call(::halconform::coverage::tag::"
          << f.name << "{}" << (args.empty() ? "" : ", ") << args
          << ") : ::halconform::coverage::PreCall{};\n";
      }
      o << "  " << (f.returns == "void" ? "" : f.returns + " returned_ = ") << "__real_" << f.name
        << "(" << args << ");\n";
      if (f.returns == "hal_result_t") {
        o << "  if (recording_) {\n";
        o << "    ::halconform::coverage::record_result(\"" << f.name << "\", returned_);\n";
        o << "    ::halconform::coverage::after(::halconform::coverage::tag::" << f.name
          << "{}, before_, returned_" << (args.empty() ? "" : ", ") << args << ");\n";
        o << "  }\n";
      } else {
        o << "  if (recording_) ::halconform::coverage::record_call(\"" << f.name << "\");\n";
      }
      if (f.returns != "void") o << "  return returned_;\n";
      o << "}\n\n";
    }
    o << "}  // extern \"C\"\n// NOLINTEND\n";
    write_if_changed(path, o.str());
    // The tags the hooks overload on, one per function.
    std::ostringstream t;
    t << "// Generated by halconform_model_gen from HAL's public headers. Do not edit.\n"
         "#pragma once\nnamespace halconform::coverage::tag {\n";
    for (const Function& f : functions_) t << "struct " << f.name << " {};\n";
    t << "}  // namespace halconform::coverage::tag\n";
    write_if_changed(path.substr(0, path.rfind('/')) + "/api_tags.hpp", t.str());
    std::ostringstream w;
    for (const Function& f : functions_) w << "-Wl,--wrap=" << f.name << "\n";
    write_if_changed(path.substr(0, path.rfind('/')) + "/wrap_options.txt", w.str());
  }

  static void write_if_changed(const std::string& path, const std::string& content) {
    std::ifstream in(path, std::ios::binary);
    if (in) {
      std::ostringstream old;
      old << in.rdbuf();
      if (old.str() == content) return;
    }
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << content;
    if (!out) die("cannot write " + path);
  }

  std::map<std::string, EnumType> enums_;
  std::vector<std::string> enum_order_;
  std::map<std::string, std::string> flags_;  // flags typedef -> its *_bits_t enum
  std::map<std::string, StructType> structs_;
  std::vector<std::string> struct_order_;
  std::vector<Function> functions_;
  std::string common_banner_;  // the section comment that lists the common errors
};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) die("usage: halconform_model_gen OUT_DIR HEADER...");
  Model model;
  for (int i = 2; i < argc; ++i) model.read_header(argv[i]);
  model.write(argv[1]);
  return 0;
}
