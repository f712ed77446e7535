// RAII owners of the HAL handles the trainer uses, and the one rule for a
// failed call: throw HalError with HAL's own message. Exceptions stay inside
// the sample; nothing here crosses the C ABI.
#pragma once

#include <hal.h>

#include <stdexcept>
#include <string>
#include <utility>

namespace train {

class HalError : public std::runtime_error {
 public:
  HalError(hal_result_t code, const std::string& message)
      : std::runtime_error(message), code_(code) {}
  hal_result_t code() const { return code_; }

 private:
  hal_result_t code_;
};

// Throws when |result| is not HAL_SUCCESS, naming |what| and HAL's detail.
inline void check(hal_result_t result, const char* what) {
  if (result == HAL_SUCCESS) return;
  throw HalError(result, std::string(what) + " failed: " + hal_result_string(result) + ": " +
                             hal_error_last_message());
}

// A move-only owner of one handle, released by |Release|.
template <typename Handle, hal_result_t (*Release)(Handle)>
class Owned {
 public:
  Owned() = default;
  explicit Owned(Handle handle) : handle_(handle) {}
  Owned(Owned&& other) noexcept : handle_(std::exchange(other.handle_, nullptr)) {}
  Owned& operator=(Owned&& other) noexcept {
    if (this != &other) {
      reset();
      handle_ = std::exchange(other.handle_, nullptr);
    }
    return *this;
  }
  Owned(const Owned&) = delete;
  Owned& operator=(const Owned&) = delete;
  ~Owned() { reset(); }

  Handle get() const { return handle_; }
  void reset() {
    if (handle_ != nullptr) Release(handle_);
    handle_ = nullptr;
  }

 private:
  Handle handle_ = nullptr;
};

using Stream = Owned<hal_stream_t, hal_stream_destroy>;
using Plan = Owned<hal_op_plan_t, hal_op_plan_destroy>;
using Comm = Owned<hal_comm_t, hal_comm_destroy>;
using Event = Owned<hal_event_t, hal_event_destroy>;

// Device memory of one device.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(hal_device_t device, size_t bytes) : bytes_(bytes) {
    check(hal_mem_alloc(device, HAL_MEMORY_DEVICE, bytes == 0 ? 1 : bytes, 0, &pointer_),
          "hal_mem_alloc");
  }
  DeviceBuffer(DeviceBuffer&& other) noexcept
      : pointer_(std::exchange(other.pointer_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    if (this != &other) {
      hal_mem_free(pointer_);
      pointer_ = std::exchange(other.pointer_, nullptr);
      bytes_ = std::exchange(other.bytes_, 0);
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { hal_mem_free(pointer_); }

  void* get() const { return pointer_; }
  float* f32(size_t element_offset = 0) const {
    return static_cast<float*>(pointer_) + element_offset;
  }
  size_t bytes() const { return bytes_; }

 private:
  void* pointer_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace train
