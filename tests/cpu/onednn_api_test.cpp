// The cpu plugin's oneDNN matmul through the public API: the loader's
// implementation list picks "cpu.onednn" first, and what it declines goes
// on to the loader's implementations with the reason in the plan's declines.
//
// Until the loader has a HAL_OP_MATMUL definition (the operators'
// describe step), hal_op_plan_create refuses every matmul before any
// implementation is asked: these tests then say so and pass without
// checking (tests/cpu/onednn_ops_test.cpp drives the plugin's table
// directly and checks the numbers in any case).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "hal.h"

namespace {

class OnednnSession {
 public:
  OnednnSession() {
    REQUIRE(hal_init(nullptr) == HAL_SUCCESS);
    REQUIRE(hal_device_get(0, &device_) == HAL_SUCCESS);
    REQUIRE(hal_stream_create(device_, 0, &stream_) == HAL_SUCCESS);
  }
  ~OnednnSession() {
    hal_stream_destroy(stream_);
    hal_shutdown();
  }
  OnednnSession(const OnednnSession&) = delete;
  OnednnSession& operator=(const OnednnSession&) = delete;
  hal_device_t device() const { return device_; }
  hal_stream_t stream() const { return stream_; }
  float* alloc(size_t count) {
    void* p = nullptr;
    REQUIRE(hal_mem_alloc(device_, HAL_MEMORY_DEVICE, count * sizeof(float), 0, &p) == HAL_SUCCESS);
    return static_cast<float*>(p);
  }

 private:
  hal_device_t device_ = nullptr;
  hal_stream_t stream_ = nullptr;
};

hal_op_matmul_desc_t batched_desc(int64_t batch, int64_t m, int64_t n, int64_t k, uint32_t flags,
                                  hal_activation_t activation) {
  hal_op_matmul_desc_t desc{};
  desc.header.struct_size = sizeof(desc);
  desc.header.kind = HAL_OP_MATMUL;
  desc.flags = flags;
  desc.activation = activation;
  desc.alpha = 1.0f;
  const int64_t a[3] = {batch, m, k}, b[3] = {batch, k, n}, d[3] = {batch, m, n}, bias[1] = {n};
  hal_tensor_desc_contiguous(&desc.a, HAL_DTYPE_F32, 3, a);
  hal_tensor_desc_contiguous(&desc.b, HAL_DTYPE_F32, 3, b);
  hal_tensor_desc_contiguous(&desc.c, HAL_DTYPE_F32, 3, d);
  hal_tensor_desc_contiguous(&desc.d, HAL_DTYPE_F32, 3, d);
  hal_tensor_desc_contiguous(&desc.bias, HAL_DTYPE_F32, 1, bias);
  hal_tensor_desc_contiguous(&desc.aux, HAL_DTYPE_F32, 3, d);
  return desc;
}

// True when the loader cannot describe a matmul yet (see the top).
bool loader_lacks_matmul(hal_result_t result) {
  const std::string message = hal_error_last_message();
  if (result != HAL_SUCCESS && message.find("no definition of op") != std::string::npos) {
    WARN("the loader has no HAL_OP_MATMUL definition in this build: " << message);
    return true;
  }
  return false;
}

hal_op_plan_info_t info_of(hal_op_plan_t plan) {
  hal_op_plan_info_t info{};
  info.struct_size = sizeof(info);
  REQUIRE(hal_op_plan_get_info(plan, &info) == HAL_SUCCESS);
  return info;
}

// |count| values in [-1, 1) stored as |dtype| (f32 or bf16, truncated) at
// |stored|; returns them as float64.
std::vector<double> fill(std::mt19937& random, void* stored, int64_t count, hal_dtype_t dtype) {
  std::uniform_real_distribution<float> values(-1.0f, 1.0f);
  std::vector<double> out(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    float v = values(random);
    if (dtype == HAL_DTYPE_BF16) {
      uint32_t bits = 0;
      std::memcpy(&bits, &v, 4);
      const auto high = static_cast<uint16_t>(bits >> 16);
      static_cast<uint16_t*>(stored)[i] = high;
      bits = static_cast<uint32_t>(high) << 16;
      std::memcpy(&v, &bits, 4);
    } else {
      static_cast<float*>(stored)[i] = v;
    }
    out[static_cast<size_t>(i)] = v;
  }
  return out;
}

// Plans and runs a batched matmul with bias and gelu (a and b of |dtype|,
// f32 accumulation, bias and d) on cpu.onednn against float64, with the
// workspace the plan asks; |plan_on_another_thread|: planned on a thread
// that ends before the plan runs on this one.
void check_batched_matmul(int64_t batch, int64_t m, int64_t n, int64_t k, hal_dtype_t dtype,
                          bool plan_on_another_thread) {
  OnednnSession session;
  hal_op_matmul_desc_t desc =
      batched_desc(batch, m, n, k, HAL_MATMUL_BIAS, HAL_ACTIVATION_GELU_ERF);
  desc.a.dtype = desc.b.dtype = dtype;
  hal_op_plan_t plan = nullptr;
  hal_result_t result = HAL_SUCCESS;
  std::string message;
  const auto create = [&] {
    result = hal_op_plan_create(session.device(), &desc.header, 0, &plan);
    message = hal_error_last_message();
  };
  if (plan_on_another_thread) {
    std::thread(create).join();
  } else {
    create();
  }
  INFO(message);
  REQUIRE(result == HAL_SUCCESS);
  const hal_op_plan_info_t info = info_of(plan);
  CHECK(std::string(info.implementation) == "cpu.onednn");

  float* workspace =
      info.workspace_bytes > 0 ? session.alloc((info.workspace_bytes + 3) / 4) : nullptr;
  // f32 floats hold the operands whatever their dtype (bf16 takes half).
  float* a = session.alloc(batch * m * k);
  float* b = session.alloc(batch * k * n);
  float* d = session.alloc(batch * m * n);
  float* bias = session.alloc(n);
  std::mt19937 random(17);
  const std::vector<double> av = fill(random, a, batch * m * k, dtype);
  const std::vector<double> bv = fill(random, b, batch * k * n, dtype);
  const std::vector<double> biasv = fill(random, bias, n, HAL_DTYPE_F32);
  void* operands[6] = {a, b, nullptr, d, bias, nullptr};
  hal_op_exec_args_t args{};
  args.struct_size = sizeof(args);
  args.operand_count = 6;
  args.operands = operands;
  args.workspace = workspace;
  args.workspace_bytes = info.workspace_bytes;
  REQUIRE(hal_op_execute(plan, &args, session.stream()) == HAL_SUCCESS);
  const hal_result_t ran = hal_stream_synchronize(session.stream());
  INFO(hal_error_last_message());
  REQUIRE(ran == HAL_SUCCESS);
  size_t bad = 0;
  for (int64_t p = 0; p < batch; ++p) {
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double x = biasv[j];
        for (int64_t q = 0; q < k; ++q) x += av[(p * m + i) * k + q] * bv[(p * k + q) * n + j];
        const double expected = 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
        if (std::fabs(d[(p * m + i) * n + j] - expected) > 1e-5 * (k + 1)) ++bad;
      }
    }
  }
  CHECK(bad == 0);
  REQUIRE(hal_op_plan_destroy(plan) == HAL_SUCCESS);
}

}  // namespace

TEST_CASE("cpu.onednn serves an f32 batched matmul with bias and gelu through the API",
          "[cpu][api][ops]") {
  check_batched_matmul(2, 24, 16, 40, HAL_DTYPE_F32, false);
}

// oneDNN's library-managed scratchpad lives in thread-local storage of the
// thread that created the primitive; the plugin's primitives take theirs from
// the workspace instead (plugins/cpu/ops/onednn_common.hpp). Planned on a
// thread that ends, run on this one: with OMP_NUM_THREADS=1 (the
// team_of_one registration) every oneDNN call runs on its caller, and the
// bf16 product's scratchpad (its brgemm kernel's buffers) was absent on the
// executing thread. oneDNN 2.6 has bf16 matmul from AVX-512 on.
TEST_CASE("cpu.onednn's matmul planned on one thread and executed on another",
          "[cpu][api][ops][threads]") {
  check_batched_matmul(2, 33, 47, 70, HAL_DTYPE_F32, true);
  if (__builtin_cpu_supports("avx512bw")) {
    check_batched_matmul(2, 33, 47, 70, HAL_DTYPE_BF16, true);
  } else {
    WARN("no AVX-512 on this CPU: the bf16 product is not oneDNN's");
  }
}

TEST_CASE("what cpu.onednn declines goes on to the next implementation with its reason",
          "[cpu][api][ops]") {
  OnednnSession session;
  // SAVE_AUX: the pre-activation is not one oneDNN primitive's output.
  const hal_op_matmul_desc_t desc =
      batched_desc(1, 8, 8, 8, HAL_MATMUL_BIAS | HAL_MATMUL_SAVE_AUX, HAL_ACTIVATION_RELU);
  hal_op_plan_t plan = nullptr;
  const hal_result_t result = hal_op_plan_create(session.device(), &desc.header, 0, &plan);
  if (loader_lacks_matmul(result)) return;
  if (result == HAL_SUCCESS) {
    const hal_op_plan_info_t info = info_of(plan);
    CHECK(std::string(info.implementation) != "cpu.onednn");
    CHECK_THAT(std::string(info.declines), Catch::Contains("cpu.onednn: SAVE_AUX"));
    REQUIRE(hal_op_plan_destroy(plan) == HAL_SUCCESS);
  } else {
    // No portable matmul in this build: the failure lists the decline.
    CHECK(result == HAL_ERROR_UNSUPPORTED);
    CHECK_THAT(std::string(hal_error_last_message()), Catch::Contains("cpu.onednn: SAVE_AUX"));
  }
}

TEST_CASE("HAL_OPS_IMPLEMENTATIONS=portable keeps matmul off cpu.onednn", "[cpu][api][ops]") {
  OnednnSession session;
  const hal_op_matmul_desc_t desc = batched_desc(1, 8, 8, 8, 0, HAL_ACTIVATION_NONE);
  setenv("HAL_OPS_IMPLEMENTATIONS", "portable", 1);
  hal_op_plan_t plan = nullptr;
  const hal_result_t result = hal_op_plan_create(session.device(), &desc.header, 0, &plan);
  const std::string message = hal_error_last_message();
  unsetenv("HAL_OPS_IMPLEMENTATIONS");
  if (loader_lacks_matmul(result)) return;
  if (result == HAL_SUCCESS) {
    CHECK(std::string(info_of(plan).implementation) == "portable");
    REQUIRE(hal_op_plan_destroy(plan) == HAL_SUCCESS);
  } else {
    CHECK(result == HAL_ERROR_UNSUPPORTED);
    CHECK_THAT(message, Catch::Contains("cpu.onednn: excluded by HAL_OPS_IMPLEMENTATIONS"));
  }
}

// SPEC §12: a token names an implementation ("cpu.onednn") or its first
// component ("cpu"). The plugin names its implementation before planning
// (op_implementation), so one excluded by name is declined unasked.
TEST_CASE("HAL_OPS_IMPLEMENTATIONS takes implementation names, not only plugin names",
          "[cpu][api][ops]") {
  OnednnSession session;
  const hal_op_matmul_desc_t desc = batched_desc(1, 8, 8, 8, 0, HAL_ACTIVATION_NONE);
  const auto plan_with = [&](const char* list, std::string* implementation, std::string* declines) {
    setenv("HAL_OPS_IMPLEMENTATIONS", list, 1);
    hal_op_plan_t plan = nullptr;
    const hal_result_t result = hal_op_plan_create(session.device(), &desc.header, 0, &plan);
    unsetenv("HAL_OPS_IMPLEMENTATIONS");
    if (result == HAL_SUCCESS) {
      const hal_op_plan_info_t info = info_of(plan);
      *implementation = info.implementation;
      *declines = info.declines;
      REQUIRE(hal_op_plan_destroy(plan) == HAL_SUCCESS);
    }
    return result;
  };
  std::string implementation, declines;
  const hal_result_t onednn = plan_with("cpu.onednn", &implementation, &declines);
  if (loader_lacks_matmul(onednn)) return;
  REQUIRE(onednn == HAL_SUCCESS);
  CHECK(implementation == "cpu.onednn");
  REQUIRE(plan_with("cpu.native,portable", &implementation, &declines) == HAL_SUCCESS);
  CHECK(implementation == "portable");
  CHECK_THAT(declines, Catch::Contains("cpu.onednn: excluded by HAL_OPS_IMPLEMENTATIONS"));
  REQUIRE(plan_with("cpu", &implementation, &declines) == HAL_SUCCESS);
  CHECK(implementation == "cpu.onednn");
}
