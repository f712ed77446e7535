// Tokens of the HAL kernel dialect: a C lexer that keeps the line, column and
// spacing of every token, so the translated text maps back to the user's
// source lines (#line) and compiler diagnostics point at what they wrote.
#ifndef HAL_DIALECT_TOKEN_HPP_
#define HAL_DIALECT_TOKEN_HPP_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace hal::dialect {

enum class TokenKind : uint8_t {
  kIdentifier,
  kNumber,
  kString,  // a string or character literal, quotes included
  kPunct,
  kDirectiveStart,  // the '#' that opens a preprocessor line
  kDirectiveEnd,    // the end of that line
};

struct Token {
  TokenKind kind;
  std::string text;
  uint32_t line;
  uint32_t column;
  bool space_before;  // whitespace separated it from the previous token
};

inline bool is_punct(const Token& token, std::string_view text) {
  return token.kind == TokenKind::kPunct && token.text == text;
}
inline bool is_identifier(const Token& token, std::string_view text) {
  return token.kind == TokenKind::kIdentifier && token.text == text;
}

// A problem found in the source, at a 1-based line and column (0 when none).
struct Diagnostic {
  uint32_t line = 0;
  uint32_t column = 0;
  std::string message;

  std::string to_string() const;
};

// Splits |source| into tokens, dropping comments. False, with |error|, on a
// character that is not C (or an unterminated comment or literal).
bool lex(std::string_view source, std::vector<Token>& out_tokens, Diagnostic& error);

}  // namespace hal::dialect

#endif  // HAL_DIALECT_TOKEN_HPP_
