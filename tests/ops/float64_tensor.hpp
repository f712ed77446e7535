// Dense tensors on the device set and read as float64 values, and a plan run with its own
// workspace, for the op tests that check against float64 references (tests/ops/conv_ops_test.cpp,
// tests/cuda/cudnn_conv_test.cpp): f32, f16, bf16, i32 and i64 elements, the 16-bit ones
// converted by tests/cpu/float16_bits.hpp, independently of any plugin.
#ifndef HAL_TESTS_OPS_FLOAT64_TENSOR_HPP_
#define HAL_TESTS_OPS_FLOAT64_TENSOR_HPP_

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "../cpu/float16_bits.hpp"
#include "hal.h"
#include "op_session.hpp"

namespace op_test {

inline size_t dtype_size(hal_dtype_t dtype) {
  return dtype == HAL_DTYPE_F32 || dtype == HAL_DTYPE_I32 ? 4 : dtype == HAL_DTYPE_I64 ? 8 : 2;
}

// A dense tensor on the device, set and read as float64 values.
struct Tensor {
  hal_tensor_desc_t desc{};
  void* data = nullptr;
  Tensor() = default;
  // |shift| bytes into its allocation (an element's size: not 16-byte aligned).
  Tensor(Session& session, hal_dtype_t dtype, std::vector<int64_t> shape, size_t shift = 0) {
    hal_tensor_desc_contiguous(&desc, dtype, static_cast<uint32_t>(shape.size()), shape.data());
    data = static_cast<unsigned char*>(session.alloc_bytes(count() * dtype_size(dtype) + shift)) +
           shift;
  }
  size_t count() const {
    size_t n = 1;
    for (uint32_t d = 0; d < desc.rank; ++d) n *= static_cast<size_t>(desc.shape[d]);
    return n;
  }
  void set(Session& session, const std::vector<double>& values) const {
    std::vector<unsigned char> bytes(count() * dtype_size(desc.dtype));
    for (size_t i = 0; i < count(); ++i) {
      const float f = static_cast<float>(values[i]);
      if (desc.dtype == HAL_DTYPE_F32) {
        std::memcpy(&bytes[i * 4], &f, 4);
      } else if (desc.dtype == HAL_DTYPE_I64) {
        const auto v = static_cast<int64_t>(values[i]);
        std::memcpy(&bytes[i * 8], &v, 8);
      } else if (desc.dtype == HAL_DTYPE_I32) {
        const auto v = static_cast<int32_t>(values[i]);
        std::memcpy(&bytes[i * 4], &v, 4);
      } else {
        const uint16_t h =
            desc.dtype == HAL_DTYPE_BF16 ? hal::test::to_bf16(f) : hal::test::to_f16(f);
        std::memcpy(&bytes[i * 2], &h, 2);
      }
    }
    session.copy(data, bytes.data(), bytes.size());
  }
  std::vector<double> get(Session& session) const {
    std::vector<unsigned char> bytes(count() * dtype_size(desc.dtype));
    session.copy(bytes.data(), data, bytes.size());
    std::vector<double> values(count());
    for (size_t i = 0; i < count(); ++i) {
      if (desc.dtype == HAL_DTYPE_F32) {
        float f;
        std::memcpy(&f, &bytes[i * 4], 4);
        values[i] = f;
      } else if (desc.dtype == HAL_DTYPE_I64) {
        int64_t v;
        std::memcpy(&v, &bytes[i * 8], 8);
        values[i] = static_cast<double>(v);
      } else if (desc.dtype == HAL_DTYPE_I32) {
        int32_t v;
        std::memcpy(&v, &bytes[i * 4], 4);
        values[i] = v;
      } else {
        uint16_t h;
        std::memcpy(&h, &bytes[i * 2], 2);
        values[i] = desc.dtype == HAL_DTYPE_BF16 ? hal::test::from_bf16(h) : hal::test::from_f16(h);
      }
    }
    return values;
  }
};

// Random values in [low, high) already rounded to |dtype|.
inline std::vector<double> random_values(std::mt19937& random, size_t count, hal_dtype_t dtype,
                                         double low = -1, double high = 1) {
  std::uniform_real_distribution<double> dist(low, high);
  std::vector<double> values(count);
  for (double& v : values) {
    const float f = static_cast<float>(dist(random));
    v = dtype == HAL_DTYPE_BF16  ? hal::test::from_bf16(hal::test::to_bf16(f))
        : dtype == HAL_DTYPE_F16 ? hal::test::from_f16(hal::test::to_f16(f))
                                 : f;
  }
  return values;
}

// SPEC §17.5's tolerance for an output of |dtype| accumulating |terms|.
inline void expect_close(const std::vector<double>& got, const std::vector<double>& want,
                         hal_dtype_t dtype, double terms, const std::string& what) {
  REQUIRE(got.size() == want.size());
  const double e = dtype == HAL_DTYPE_F32 ? 1e-5 : dtype == HAL_DTYPE_F16 ? 2e-3 : 1.6e-2;
  const double atol = e * std::sqrt(std::max(1.0, terms));
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::fabs(got[i] - want[i]) > atol + e * std::fabs(want[i])) {
      FAIL(what << ": element " << i << " is " << got[i] << ", expected " << want[i]);
    }
  }
}

// A plan, what hal_op_plan_get_info says of it, destroyed with the object.
struct Planned {
  hal_op_plan_t plan = nullptr;
  std::string implementation, declines;
  size_t workspace = 0;
  Planned() = default;
  Planned(const Planned&) = delete;
  Planned& operator=(const Planned&) = delete;
  ~Planned() { hal_op_plan_destroy(plan); }
};

// Plans |desc| with |flags| into |out| (which holds no plan yet) and reads its info.
inline void plan_with_flags(Session& session, const hal_op_header_t* desc,
                            hal_op_plan_flags_t flags, Planned& out) {
  const hal_result_t result = hal_op_plan_create(session.device(), desc, flags, &out.plan);
  INFO(hal_error_last_message());
  REQUIRE(result == HAL_SUCCESS);
  hal_op_plan_info_t info{};
  info.struct_size = sizeof info;
  REQUIRE(hal_op_plan_get_info(out.plan, &info) == HAL_SUCCESS);
  out.implementation = info.implementation;
  out.declines = info.declines;
  out.workspace = info.workspace_bytes;
}

// Runs |planned| on the session's stream, with its workspace starting |shift| bytes into an
// allocation of its own, and waits.
inline void run(Session& session, const Planned& planned, std::vector<void*> operands,
                std::vector<hal_op_scalar_t> scalars = {}, size_t shift = 0) {
  void* workspace = nullptr;
  if (planned.workspace > 0) {
    workspace = static_cast<unsigned char*>(session.alloc_bytes(planned.workspace + shift)) + shift;
  }
  INFO(planned.implementation);
  session.execute(planned.plan, std::move(operands), std::move(scalars), workspace,
                  planned.workspace);
}

}  // namespace op_test

#endif  // HAL_TESTS_OPS_FLOAT64_TENSOR_HPP_
