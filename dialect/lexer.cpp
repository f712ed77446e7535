// The dialect's lexer: C tokens, comments dropped, preprocessor lines bracketed
// by kDirectiveStart/kDirectiveEnd so the parser sees where a directive ends.
#include <array>
#include <cctype>

#include "hal_dialect/token.hpp"

namespace hal::dialect {
namespace {

// Longest first, so "<<=" wins over "<<" and "<".
constexpr std::array<std::string_view, 24> kMultiCharPunct = {
    "<<=", ">>=", "...", "->", "++", "--", "<<", ">>", "<=", ">=", "==", "!=",
    "&&",  "||",  "+=",  "-=", "*=", "/=", "%=", "&=", "|=", "^=", "##", "::"};
constexpr std::string_view kSingleCharPunct = "{}[]()<>;:,.?+-*/%&|^!~=#";

bool is_identifier_start(char c) {
  return std::isalpha(static_cast<unsigned char>(c)) != 0 || c == '_';
}
bool is_identifier_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_';
}

class Lexer {
 public:
  Lexer(std::string_view source, std::vector<Token>& out) : source_(source), out_(out) {}

  bool run(Diagnostic& error) {
    while (pos_ < source_.size()) {
      const char c = source_[pos_];
      if (c == '\n') {
        end_directive();
        advance();
        at_line_start_ = true;
        space_ = true;
        continue;
      }
      if (c == '\\' && peek(1) == '\n') {  // a line continuation is blank space
        advance();
        advance();
        space_ = true;
        continue;
      }
      if (std::isspace(static_cast<unsigned char>(c)) != 0) {
        advance();
        space_ = true;
        continue;
      }
      if (c == '/' && peek(1) == '/') {
        while (pos_ < source_.size() && source_[pos_] != '\n') advance();
        space_ = true;
        continue;
      }
      if (c == '/' && peek(1) == '*') {
        const uint32_t line = line_, column = column_;
        advance();
        advance();
        while (pos_ < source_.size() && !(source_[pos_] == '*' && peek(1) == '/')) advance();
        if (pos_ >= source_.size()) return fail(error, line, column, "unterminated /* comment");
        advance();
        advance();
        space_ = true;
        continue;
      }
      if (!lex_token(error)) return false;
      at_line_start_ = false;
    }
    end_directive();
    return true;
  }

 private:
  char peek(size_t ahead) const {
    return pos_ + ahead < source_.size() ? source_[pos_ + ahead] : '\0';
  }
  void advance() {
    if (source_[pos_] == '\n') {
      ++line_;
      column_ = 1;
    } else {
      ++column_;
    }
    ++pos_;
  }
  bool fail(Diagnostic& error, uint32_t line, uint32_t column, std::string message) {
    error = Diagnostic{line, column, std::move(message)};
    return false;
  }
  void push(TokenKind kind, size_t begin, uint32_t line, uint32_t column) {
    out_.push_back(
        Token{kind, std::string(source_.substr(begin, pos_ - begin)), line, column, space_});
    space_ = false;
  }
  void end_directive() {
    if (!in_directive_) return;
    out_.push_back(Token{TokenKind::kDirectiveEnd, "", line_, column_, false});
    in_directive_ = false;
  }

  bool lex_token(Diagnostic& error) {
    const size_t begin = pos_;
    const uint32_t line = line_, column = column_;
    const char c = source_[pos_];
    if (c == '#' && at_line_start_) {
      advance();
      push(TokenKind::kDirectiveStart, begin, line, column);
      in_directive_ = true;
      return true;
    }
    if (is_identifier_start(c)) {
      while (pos_ < source_.size() && is_identifier_char(source_[pos_])) advance();
      push(TokenKind::kIdentifier, begin, line, column);
      return true;
    }
    if (std::isdigit(static_cast<unsigned char>(c)) != 0 ||
        (c == '.' && std::isdigit(static_cast<unsigned char>(peek(1))) != 0)) {
      // A pp-number: digits, letters, '.', and a sign right after an exponent.
      while (pos_ < source_.size()) {
        const char d = source_[pos_];
        const char previous = pos_ != begin ? source_[pos_ - 1] : '\0';  // none at offset 0
        if (is_identifier_char(d) || d == '.' ||
            ((d == '+' || d == '-') &&
             (previous == 'e' || previous == 'E' || previous == 'p' || previous == 'P') &&
             pos_ != begin)) {
          advance();
        } else {
          break;
        }
      }
      push(TokenKind::kNumber, begin, line, column);
      return true;
    }
    if (c == '"' || c == '\'') {
      advance();
      while (pos_ < source_.size() && source_[pos_] != c && source_[pos_] != '\n') {
        if (source_[pos_] == '\\' && pos_ + 1 < source_.size()) advance();
        advance();
      }
      if (pos_ >= source_.size() || source_[pos_] != c) {
        return fail(error, line, column, "unterminated literal");
      }
      advance();
      push(TokenKind::kString, begin, line, column);
      return true;
    }
    for (std::string_view punct : kMultiCharPunct) {
      if (source_.substr(pos_, punct.size()) == punct) {
        for (size_t i = 0; i < punct.size(); ++i) advance();
        push(TokenKind::kPunct, begin, line, column);
        return true;
      }
    }
    if (kSingleCharPunct.find(c) != std::string_view::npos) {
      advance();
      push(TokenKind::kPunct, begin, line, column);
      return true;
    }
    return fail(error, line, column,
                std::string("unexpected character '") +
                    (std::isprint(static_cast<unsigned char>(c)) ? std::string(1, c)
                                                                 : std::string("\\x") + "??") +
                    "'");
  }

  std::string_view source_;
  std::vector<Token>& out_;
  size_t pos_ = 0;
  uint32_t line_ = 1;
  uint32_t column_ = 1;
  bool space_ = false;
  bool at_line_start_ = true;
  bool in_directive_ = false;
};

}  // namespace

std::string Diagnostic::to_string() const {
  if (line == 0) return message;
  return "line " + std::to_string(line) + ":" + std::to_string(column) + ": " + message;
}

bool lex(std::string_view source, std::vector<Token>& out_tokens, Diagnostic& error) {
  out_tokens.clear();
  Lexer lexer(source, out_tokens);
  return lexer.run(error);
}

}  // namespace hal::dialect
