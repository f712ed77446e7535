// What the tests of the cuda plugin's cuDNN ops share (cudnn_conv_test.cpp,
// cudnn_pool_norm_test.cpp): the environment that loads the plugin over the
// stand-in driver and the stand-in cuDNN, and the stand-in's test queries.
#ifndef HAL_TESTS_CUDA_FAKE_CUDNN_SUPPORT_HPP_
#define HAL_TESTS_CUDA_FAKE_CUDNN_SUPPORT_HPP_

#include <catch2/catch.hpp>

#include <dlfcn.h>

#include <cstdint>
#include <cstdlib>

#include "fake_cudnn.h"

namespace fake_cudnn_test {

// cuDNN's statuses (cudnn_graph.h), written out: the tests are independent of the headers.
constexpr int kStatusBadParam = 2000, kStatusNotSupported = 3000;

// HAL_PLUGINS=cuda over the stand-in driver and cuDNN; no NCCL, no cuBLASLt.
[[maybe_unused]] inline const bool kEnvironment = [] {
  setenv("HAL_PLUGINS", "cuda", 1);
  setenv("HAL_CUDA_DRIVER_PATH", HAL_TEST_FAKE_CUDA, 1);
  setenv("HAL_CUDA_NCCL_PATH", "/nonexistent/libnccl.so.2", 1);
  setenv("HAL_CUDA_CUBLASLT_PATH", "/nonexistent/libcublasLt.so.13", 1);
  setenv("HAL_CUDA_CUDNN_PATH", HAL_TEST_FAKE_CUDNN, 1);
  return true;
}();

// The stand-in cuDNN's test queries (the library the plugin opened).
struct FakeDnn {
  FakeDnn() {
    handle = dlopen(HAL_TEST_FAKE_CUDNN, RTLD_NOW);
    REQUIRE(handle != nullptr);
    stats = reinterpret_cast<fake_cudnn_stats_fn>(dlsym(handle, "fake_cudnn_stats"));
    last =
        reinterpret_cast<fake_cudnn_last_execution_fn>(dlsym(handle, "fake_cudnn_last_execution"));
    fail_next = reinterpret_cast<fake_cudnn_fail_next_fn>(dlsym(handle, "fake_cudnn_fail_next"));
    REQUIRE(stats != nullptr);
    REQUIRE(last != nullptr);
    REQUIRE(fail_next != nullptr);
  }
  ~FakeDnn() { dlclose(handle); }
  FakeDnn(const FakeDnn&) = delete;
  FakeDnn& operator=(const FakeDnn&) = delete;
  fake_cudnn_stats_t now() const {
    fake_cudnn_stats_t out{};
    stats(&out);
    return out;
  }
  uint64_t executions() const { return now().executions; }
  fake_cudnn_execution_t last_call() const {
    fake_cudnn_execution_t out{};
    REQUIRE(last(&out) == 1);
    return out;
  }
  void* handle = nullptr;
  fake_cudnn_stats_fn stats = nullptr;
  fake_cudnn_last_execution_fn last = nullptr;
  fake_cudnn_fail_next_fn fail_next = nullptr;
};

}  // namespace fake_cudnn_test

#endif  // HAL_TESTS_CUDA_FAKE_CUDNN_SUPPORT_HPP_
