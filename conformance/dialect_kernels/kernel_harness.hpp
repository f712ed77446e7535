// The harness of the dialect kernel checks: a device under test with the
// suite's dialect module (kernels.hal) loaded on it, device buffers, launches,
// and host references for f16/bf16. The cases (kernels.cpp) use only this
// interface and two backends run them:
//  - halconform's `kernels` profile (this folder): each case is a test that
//    applies to every device whose module_formats include HAL_DIALECT;
//  - the Catch2 suite tests/kernels (compiled with HAL_KERNELS_CATCH2): each
//    case runs on every dialect device of the cpu and opencl plugins.
// REQUIRE(condition) and INFO(stream expression) mean the same in both.
#ifndef HAL_CONFORMANCE_DIALECT_KERNELS_KERNEL_HARNESS_HPP_
#define HAL_CONFORMANCE_DIALECT_KERNELS_KERNEL_HARNESS_HPP_

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "hal.h"

#define HAL_KERNELS_CONCAT_INNER(a, b) a##b
#define HAL_KERNELS_CONCAT(a, b) HAL_KERNELS_CONCAT_INNER(a, b)

#ifdef HAL_KERNELS_CATCH2
#include <catch2/catch.hpp>
#else
#include <sstream>

#include "check.hpp"
#include "context.hpp"

namespace hal_test {
// The INFO messages in scope on this thread, joined; a failure reports them.
std::string info_text();
class ScopedInfo {
 public:
  explicit ScopedInfo(std::string message);
  ~ScopedInfo();
  ScopedInfo(const ScopedInfo&) = delete;
  ScopedInfo& operator=(const ScopedInfo&) = delete;
};
}  // namespace hal_test

#define REQUIRE(...) HC_REQUIRE((__VA_ARGS__), ::hal_test::info_text())
#define INFO(message)                                                                \
  const ::hal_test::ScopedInfo HAL_KERNELS_CONCAT(hal_kernels_info_, __LINE__)([&] { \
    std::ostringstream text;                                                         \
    text << message;                                                                 \
    return text.str();                                                               \
  }())
#endif

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

#ifdef HAL_KERNELS_CATCH2
// hal_init once per process; the module is loaded on each device on first use.
std::vector<TestDevice>& devices();
#else
// halconform: the test's device with the module loaded and a stream, for |body|.
void with_device(halconform::TestContext& ctx, void (*body)(TestDevice&));
inline constexpr halconform::Requirements kDialectRequirements{
    HAL_DEVICE_CAP_KERNELS, 1u << HAL_MODULE_FORMAT_HAL_DIALECT, 1};
#endif

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

// Defines one case; the body follows as a block with |device| (TestDevice&).
// halconform names it "kernels.dialect.<kernel>", the Catch2 suite
// "kernels.<kernel>: <summary>".
#define KERNEL_TEST(kernel, summary) KERNEL_TEST_NUMBERED(__COUNTER__, kernel, summary)
#ifdef HAL_KERNELS_CATCH2
#define KERNEL_TEST_NUMBERED(id, kernel, summary)                                \
  static void HAL_KERNELS_CONCAT(hal_kernel_case_, id)(::hal_test::TestDevice&); \
  TEST_CASE("kernels." kernel ": " summary, "[kernels]") {                       \
    for (::hal_test::TestDevice & device : ::hal_test::devices()) {              \
      INFO(device.label);                                                        \
      HAL_KERNELS_CONCAT(hal_kernel_case_, id)(device);                          \
    }                                                                            \
  }                                                                              \
  static void HAL_KERNELS_CONCAT(hal_kernel_case_, id)(::hal_test::TestDevice & device)
#else
#define KERNEL_TEST_NUMBERED(id, kernel, summary)                                         \
  static void HAL_KERNELS_CONCAT(hal_kernel_case_, id)(::hal_test::TestDevice&);          \
  HALCONFORM_TEST("kernels.dialect." kernel, summary, ::hal_test::kDialectRequirements) { \
    ::hal_test::with_device(ctx, &HAL_KERNELS_CONCAT(hal_kernel_case_, id));              \
  }                                                                                       \
  static void HAL_KERNELS_CONCAT(hal_kernel_case_, id)(::hal_test::TestDevice & device)
#endif

#endif  // HAL_CONFORMANCE_DIALECT_KERNELS_KERNEL_HARNESS_HPP_
