// Shared helpers of the loader tests: sessions over the test plugin
// directories, report lookup and the thread's error detail.
#pragma once

#include <catch2/catch.hpp>
#include <hal.h>

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace loader_test {

inline const std::string kPluginDir = HAL_TEST_PLUGIN_DIR;
inline const std::string kZooDir = HAL_TEST_ZOO_DIR;
inline const std::string kEmptyDir = HAL_TEST_EMPTY_DIR;

// hal_init over |plugin_path| only (no default directories), optionally with
// an explicit list; shuts down on scope exit when it succeeded.
class Session {
 public:
  explicit Session(const std::string& plugin_path, const char* plugins = nullptr) {
    hal_init_options_t options = HAL_INIT_OPTIONS_INIT;
    options.plugin_path = plugin_path.c_str();
    options.plugins = plugins;
    options.skip_default_search = 1;
    result = hal_init(&options);
  }
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;
  ~Session() {
    if (result == HAL_SUCCESS) hal_shutdown();
  }
  hal_result_t result;
};

// Everything the process writes on stderr while |body| runs, through an unnamed temporary
// file: a named one would be shared by the tests CTest runs at once.
template <class Body>
std::string capture_stderr(Body&& body) {
  std::fflush(stderr);
  const int saved = dup(STDERR_FILENO);
  REQUIRE(saved >= 0);
  std::FILE* sink = std::tmpfile();
  REQUIRE(sink != nullptr);
  dup2(fileno(sink), STDERR_FILENO);
  body();
  std::fflush(stderr);
  dup2(saved, STDERR_FILENO);
  close(saved);
  std::string text;
  std::rewind(sink);
  char chunk[4096];
  for (size_t got; (got = std::fread(chunk, 1, sizeof(chunk), sink)) > 0;) text.append(chunk, got);
  std::fclose(sink);
  return text;
}

inline std::vector<hal_plugin_report_t> reports() {
  uint32_t count = 0;
  REQUIRE(hal_plugin_report_count(&count) == HAL_SUCCESS);
  std::vector<hal_plugin_report_t> all(count);
  for (uint32_t i = 0; i < count; ++i) {
    all[i].struct_size = sizeof(hal_plugin_report_t);
    REQUIRE(hal_plugin_report_get(i, &all[i]) == HAL_SUCCESS);
  }
  return all;
}

// The report whose file name is hal_plugin_<stem>.so.
inline hal_plugin_report_t report_for_file(const std::string& stem) {
  const std::string suffix = "/hal_plugin_" + stem + ".so";
  for (const hal_plugin_report_t& report : reports()) {
    const std::string path = report.path;
    if (path.size() >= suffix.size() &&
        path.compare(path.size() - suffix.size(), suffix.size(), suffix) == 0) {
      return report;
    }
  }
  FAIL("no report for hal_plugin_" << stem << ".so");
  return {};
}

// The |nth| device of plugin |plugin|.
inline hal_device_t device_of(const std::string& plugin, uint32_t nth = 0) {
  uint32_t count = 0;
  REQUIRE(hal_device_count(&count) == HAL_SUCCESS);
  for (uint32_t i = 0; i < count; ++i) {
    hal_device_t device = nullptr;
    REQUIRE(hal_device_get(i, &device) == HAL_SUCCESS);
    hal_device_properties_t properties{};
    properties.struct_size = sizeof(properties);
    REQUIRE(hal_device_get_properties(device, &properties) == HAL_SUCCESS);
    if (plugin == properties.plugin && properties.plugin_device_index == nth) return device;
  }
  FAIL("no device " << nth << " of plugin " << plugin);
  return nullptr;
}

inline hal_device_properties_t properties_of(hal_device_t device) {
  hal_device_properties_t properties{};
  properties.struct_size = sizeof(properties);
  REQUIRE(hal_device_get_properties(device, &properties) == HAL_SUCCESS);
  return properties;
}

struct Detail {
  hal_result_t result;
  std::string function;
  std::string message;
  std::string plugin;
  int64_t native_code;
};

inline Detail last_detail() {
  hal_error_detail_t detail{};
  detail.struct_size = sizeof(detail);
  REQUIRE(hal_error_get_detail(&detail) == HAL_SUCCESS);
  return {detail.result, detail.function, detail.message, detail.plugin, detail.native_code};
}

// Checks, field by field, that the thread's error detail is still |before|: a
// call that succeeded since must not have changed it (SPEC 4.2).
inline void check_detail_unchanged(const Detail& before) {
  const Detail now = last_detail();
  CHECK(now.result == before.result);
  CHECK(now.function == before.function);
  CHECK(now.message == before.message);
  CHECK(now.plugin == before.plugin);
  CHECK(now.native_code == before.native_code);
}

// A HAL_OP_UNARY that scales 16 f32 elements by 2: an op every plugin (and the mock) serves.
// An OpenCL C module whose image is |text|, as the mock plugin reads it (kernel_test.cpp,
// api_errors_test.cpp: "broken..." is refused with a report, "bogus" with a code outside
// hal_result_t and no report).
inline hal_module_desc_t opencl_source_desc(const char* text) {
  hal_module_desc_t desc{};
  desc.struct_size = sizeof(desc);
  desc.format = HAL_MODULE_FORMAT_OPENCL_C;
  desc.data = text;
  desc.size = std::strlen(text);
  return desc;
}

inline hal_op_unary_desc_t scale_desc() {
  hal_op_unary_desc_t desc{};
  desc.header.struct_size = sizeof(desc);
  desc.header.kind = HAL_OP_UNARY;
  desc.activation = HAL_ACTIVATION_NONE;
  desc.alpha = 2.0f;
  const int64_t shape[1] = {16};
  hal_tensor_desc_contiguous(&desc.x, HAL_DTYPE_F32, 1, shape);
  hal_tensor_desc_contiguous(&desc.out, HAL_DTYPE_F32, 1, shape);
  return desc;
}

inline bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace loader_test
