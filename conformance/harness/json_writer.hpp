// A minimal streaming JSON writer: enough for the certification record,
// with correct string escaping and no dependency.
#ifndef HAL_CONFORMANCE_HARNESS_JSON_WRITER_HPP_
#define HAL_CONFORMANCE_HARNESS_JSON_WRITER_HPP_

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace halconform {

std::string json_quote(const std::string& text);

class JsonWriter {
 public:
  JsonWriter& begin_object() { return open('{'); }
  JsonWriter& end_object() { return close('}'); }
  JsonWriter& begin_array() { return open('['); }
  JsonWriter& end_array() { return close(']'); }
  JsonWriter& key(const std::string& name) {
    separate();
    out_ += json_quote(name) + ": ";
    after_key_ = true;
    return *this;
  }
  JsonWriter& value(const std::string& text) { return raw(json_quote(text)); }
  JsonWriter& value(const char* text) { return raw(json_quote(text)); }
  JsonWriter& value(bool flag) { return raw(flag ? "true" : "false"); }
  JsonWriter& value(uint64_t number) { return raw(std::to_string(number)); }
  JsonWriter& value(uint32_t number) { return raw(std::to_string(number)); }
  JsonWriter& value(double number) {
    if (!std::isfinite(number)) return raw("null");
    char text[32];
    std::snprintf(text, sizeof(text), "%.17g", number);
    return raw(text);
  }
  JsonWriter& null() { return raw("null"); }
  template <typename T>
  JsonWriter& field(const std::string& name, const T& v) {
    key(name);
    return value(v);
  }
  const std::string& text() const { return out_; }

 private:
  JsonWriter& raw(const std::string& text) {
    separate();
    out_ += text;
    return *this;
  }
  void separate() {
    if (after_key_) {
      after_key_ = false;
      return;
    }
    if (!first_.empty()) {
      if (!first_.back()) out_ += ",";
      first_.back() = false;
      out_ += "\n" + std::string(2 * first_.size(), ' ');
    }
  }
  JsonWriter& open(char bracket) {
    separate();
    out_ += bracket;
    first_.push_back(true);
    return *this;
  }
  JsonWriter& close(char bracket) {
    const bool empty = first_.back();
    first_.pop_back();
    if (!empty) out_ += "\n" + std::string(2 * first_.size(), ' ');
    out_ += bracket;
    return *this;
  }
  std::string out_;
  std::vector<bool> first_;
  bool after_key_ = false;
};

}  // namespace halconform

#endif  // HAL_CONFORMANCE_HARNESS_JSON_WRITER_HPP_
