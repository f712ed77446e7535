// Reads a fuzzer's input as a stream of small integers; past the end every
// read is 0, so any input is a complete program.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace hal_fuzz {

class FuzzInput {
 public:
  FuzzInput(const uint8_t* data, size_t size) : data_(data), size_(size) {}

  bool empty() const { return offset_ >= size_; }
  uint8_t byte() { return offset_ < size_ ? data_[offset_++] : 0; }
  uint16_t u16() { return static_cast<uint16_t>(byte() | (byte() << 8)); }
  uint32_t u32() { return static_cast<uint32_t>(u16() | (static_cast<uint32_t>(u16()) << 16)); }
  // A value in [0, bound), bound > 0.
  uint32_t below(uint32_t bound) { return bound <= 256 ? byte() % bound : u32() % bound; }
  // Up to |max_length| bytes as a string (stops at the end of the input).
  std::string text(size_t max_length) {
    const size_t length = std::min<size_t>(below(static_cast<uint32_t>(max_length + 1)),
                                           size_ - std::min(offset_, size_));
    std::string out(reinterpret_cast<const char*>(data_ + offset_), length);
    offset_ += length;
    return out;
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t offset_ = 0;
};

}  // namespace hal_fuzz
