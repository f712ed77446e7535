// The tracing layer's error paths and its independence from validation.
// (tests/layers/check_trace.cmake checks a whole trace file.)
#include "layers_support.hpp"

#include <fstream>

using namespace layers_test;

TEST_CASE("tracing: an unwritable HAL_TRACE file is reported and HAL still works") {
  StderrCapture capture;
  {
    Session session("0", "/nonexistent-directory/trace.json");
    hal_stream_t stream = nullptr;
    CHECK(hal_stream_create(session.device, 0, &stream) == HAL_SUCCESS);
    CHECK(hal_stream_destroy(stream) == HAL_SUCCESS);
  }
  CHECK(contains(capture.text(),
                 "hal: tracing: cannot create HAL_TRACE file '/nonexistent-directory/trace.json'"));
}

TEST_CASE("tracing: the summary counts calls and failures per entry point") {
  StderrCapture capture;
  {
    Session session("0", "", "1");
    hal_stream_t stream = nullptr;
    REQUIRE(hal_stream_create(session.device, 0, &stream) == HAL_SUCCESS);
    for (int i = 0; i < 5; ++i) REQUIRE(hal_stream_query(stream) == HAL_SUCCESS);
    CHECK(hal_stream_query(nullptr) == HAL_ERROR_INVALID_HANDLE);
    REQUIRE(hal_stream_destroy(stream) == HAL_SUCCESS);
    session.shutdown();
  }
  const std::string summary = capture.text();
  CHECK(contains(summary, "hal: trace summary: 10 calls"));
  CHECK(contains(summary, "hal_stream_query                      6        1"));
  CHECK(contains(summary, "hal_stream_create                     1        0"));
}

TEST_CASE("tracing: a second trace replaces the first, and both are closed JSON") {
  const std::string path = "layers_tracing_twice.json";
  for (int run = 0; run < 2; ++run) {
    Session session("1", path.c_str());
    hal_event_t event = nullptr;
    REQUIRE(hal_event_create(session.device, 0, &event) == HAL_SUCCESS);
    REQUIRE(hal_event_destroy(event) == HAL_SUCCESS);
    session.shutdown();
    std::ifstream in(path);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    CHECK(text.rfind("{\"displayTimeUnit\":\"ns\",\"traceEvents\":[", 0) == 0);
    CHECK(text.size() > 4);
    CHECK(text.substr(text.size() - 4) == "\n]}\n");
    CHECK(contains(text, "\"name\":\"hal_event_create\",\"cat\":\"api\""));
  }
  std::remove(path.c_str());
}
