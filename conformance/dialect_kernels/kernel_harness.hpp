// The harness of the `kernels` suite: every device HAL finds, each with the
// suite's dialect module loaded once per process, device buffers, launches,
// and host references for f16/bf16. The cases (kernels_test.cpp) only use
// this interface, so they move into a halconform profile unchanged.
#ifndef HAL_TESTS_KERNELS_KERNEL_HARNESS_HPP_
#define HAL_TESTS_KERNELS_KERNEL_HARNESS_HPP_

#include <catch2/catch.hpp>

#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "hal.h"

namespace hal_test {

// One device under test with the suite's module loaded on it.
struct TestDevice {
  hal_device_t device = nullptr;
  std::string label;  // "cpu #0: HAL CPU device 0 (...)"
  hal_module_t module = nullptr;
  hal_stream_t stream = nullptr;
  std::map<std::string, hal_kernel_t> kernels;

  hal_kernel_t kernel(const std::string& name) {
    auto found = kernels.find(name);
    if (found != kernels.end()) return found->second;
    hal_kernel_desc_t desc{};
    desc.struct_size = sizeof(desc);
    desc.name = name.c_str();  // arg_types NULL: the signature comes from the source
    hal_kernel_t kernel = nullptr;
    INFO(hal_error_last_message());
    REQUIRE(hal_kernel_get(module, &desc, &kernel) == HAL_SUCCESS);
    kernels.emplace(name, kernel);
    return kernel;
  }
};

// hal_init once per process; the module is loaded on each device on first use.
std::vector<TestDevice>& devices();

// A device allocation of |count| T, freed at scope exit.
template <class T>
class DeviceBuffer {
 public:
  DeviceBuffer(TestDevice& device, size_t count) : device_(device), count_(count) {
    INFO(hal_error_last_message());
    REQUIRE(hal_mem_alloc(device.device, HAL_MEMORY_DEVICE, std::max<size_t>(count, 1) * sizeof(T),
                          0, &ptr_) == HAL_SUCCESS);
  }
  DeviceBuffer(TestDevice& device, const std::vector<T>& values)
      : DeviceBuffer(device, values.size()) {
    upload(values);
  }
  ~DeviceBuffer() { hal_mem_free(ptr_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* ptr() const { return ptr_; }
  void upload(const std::vector<T>& values) {
    REQUIRE(hal_memcpy_async(ptr_, values.data(), values.size() * sizeof(T), device_.stream) ==
            HAL_SUCCESS);
    REQUIRE(hal_stream_synchronize(device_.stream) == HAL_SUCCESS);
  }
  std::vector<T> download() const {
    std::vector<T> values(count_);
    REQUIRE(hal_memcpy_async(values.data(), ptr_, count_ * sizeof(T), device_.stream) ==
            HAL_SUCCESS);
    REQUIRE(hal_stream_synchronize(device_.stream) == HAL_SUCCESS);
    return values;
  }

 private:
  TestDevice& device_;
  size_t count_;
  void* ptr_ = nullptr;
};

// A kernel argument: a buffer's pointer or a scalar, copied.
struct Arg {
  template <class T>
  Arg(const DeviceBuffer<T>& buffer) : size(sizeof(void*)) {  // NOLINT: implicit by design
    void* pointer = buffer.ptr();
    std::memcpy(bytes.data(), &pointer, sizeof(pointer));
  }
  template <class T, class = std::enable_if_t<std::is_arithmetic_v<T>>>
  Arg(T value) : size(sizeof(T)) {  // NOLINT
    std::memcpy(bytes.data(), &value, sizeof(T));
  }
  std::array<unsigned char, 8> bytes{};
  size_t size;
};

struct Shape {
  std::array<uint32_t, 3> grid{1, 1, 1};
  std::array<uint32_t, 3> block{1, 1, 1};
  uint32_t shared_bytes = 0;
};

// Launches |name| and waits for it.
void run(TestDevice& device, const std::string& name, const Shape& shape,
         const std::vector<Arg>& args);

inline uint32_t blocks_for(size_t items, uint32_t block) {
  return static_cast<uint32_t>((items + block - 1) / block);
}

// Host references for the storage types, written from the definitions
// (nearest representable value, ties to even), not from the bit tricks the
// backends use.
uint16_t reference_f32_to_f16(float value);
float reference_f16_to_f32(uint16_t bits);
uint16_t reference_f32_to_bf16(float value);
float reference_bf16_to_f32(uint16_t bits);

}  // namespace hal_test

#endif  // HAL_TESTS_KERNELS_KERNEL_HARNESS_HPP_
