// What the hiprtc tests share: the system's hiprtc.
#ifndef HAL_TESTS_HIP_HIPRTC_TEST_SUPPORT_HPP_
#define HAL_TESTS_HIP_HIPRTC_TEST_SUPPORT_HPP_

#include <catch2/catch.hpp>

#include <memory>
#include <string>

#include "hiprtc.hpp"

namespace hiprtc_test {

// The system's hiprtc; fails the test (with the reason) when it cannot be opened.
inline std::unique_ptr<hal::hip::Hiprtc> open_hiprtc() {
  std::string why;
  auto hiprtc = hal::hip::Hiprtc::open(nullptr, why);
  INFO(why);
  REQUIRE(hiprtc != nullptr);
  return hiprtc;
}

}  // namespace hiprtc_test

#endif  // HAL_TESTS_HIP_HIPRTC_TEST_SUPPORT_HPP_
