// Helpers of the layer tests: a session over the cpu plugin with chosen layer
// variables, and a capture of stderr (where warnings and reports go).
#pragma once

#include <catch2/catch.hpp>
#include <hal.h>

#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

namespace layers_test {

// Sets the layer variables, then hal_init over the cpu plugin (two devices);
// shuts down on scope exit unless the test already did.
class Session {
 public:
  explicit Session(const char* validation, const char* trace = "", const char* summary = "0") {
    setenv("HAL_VALIDATION", validation, 1);
    setenv("HAL_TRACE", trace, 1);
    setenv("HAL_TRACE_SUMMARY", summary, 1);
    REQUIRE(hal_init(nullptr) == HAL_SUCCESS);
    REQUIRE(hal_device_get(0, &device) == HAL_SUCCESS);
    REQUIRE(hal_device_get(1, &other_device) == HAL_SUCCESS);
  }
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;
  ~Session() {
    if (!shut_down) hal_shutdown();
  }
  void shutdown() {
    REQUIRE(hal_shutdown() == HAL_SUCCESS);
    shut_down = true;
  }

  hal_device_t device = nullptr;
  hal_device_t other_device = nullptr;
  bool shut_down = false;
};

// Redirects stderr to a temporary file until text() or destruction.
class StderrCapture {
 public:
  StderrCapture() {
    char name[] = "/tmp/hal_layers_stderr_XXXXXX";
    file_ = mkstemp(name);
    path_ = name;
    std::fflush(stderr);
    saved_ = dup(2);
    dup2(file_, 2);
  }
  StderrCapture(const StderrCapture&) = delete;
  StderrCapture& operator=(const StderrCapture&) = delete;
  ~StderrCapture() {
    restore();
    close(file_);
    unlink(path_.c_str());
  }
  // What was written so far (stderr stays redirected).
  std::string peek() const {
    std::fflush(stderr);
    std::ifstream in(path_);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }
  // Stops the capture and returns everything written.
  std::string text() {
    restore();
    return peek();
  }

 private:
  void restore() {
    if (saved_ < 0) return;
    std::fflush(stderr);
    dup2(saved_, 2);
    close(saved_);
    saved_ = -1;
  }
  int file_ = -1;
  int saved_ = -1;
  std::string path_;
};

inline bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

inline std::string last_message() {
  return hal_error_last_message();
}

}  // namespace layers_test
