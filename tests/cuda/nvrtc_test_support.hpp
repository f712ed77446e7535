// What the NVRTC tests share: the system's NVRTC, and compile targets.
#ifndef HAL_TESTS_CUDA_NVRTC_TEST_SUPPORT_HPP_
#define HAL_TESTS_CUDA_NVRTC_TEST_SUPPORT_HPP_

#include <catch2/catch.hpp>

#include <memory>
#include <string>

#include "nvrtc.hpp"

namespace nvrtc_test {

// The toolkit's NVRTC; fails the test (with the reason) when it cannot be opened.
inline std::unique_ptr<hal::cuda::Nvrtc> open_nvrtc() {
  std::string why;
  auto nvrtc = hal::cuda::Nvrtc::open(why);
  INFO(why);
  REQUIRE(nvrtc != nullptr);
  return nvrtc;
}

// PTX for compute_|arch|.
inline hal::cuda::CompileTarget ptx(int arch) {
  hal::cuda::CompileTarget target;
  target.arch = arch;
  return target;
}

// A cubin for sm_|arch|.
inline hal::cuda::CompileTarget cubin(int arch) {
  hal::cuda::CompileTarget target = ptx(arch);
  target.cubin = true;
  return target;
}

}  // namespace nvrtc_test

#endif  // HAL_TESTS_CUDA_NVRTC_TEST_SUPPORT_HPP_
