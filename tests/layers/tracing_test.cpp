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

TEST_CASE("tracing: collective calls are traced like every other entry point") {
  const std::string path = "layers_tracing_collectives.json";
  {
    Session session("0", path.c_str(), "1");
    hal_comm_t comm = nullptr;
    REQUIRE(hal_comm_init_all(1, &session.device, nullptr, &comm) == HAL_SUCCESS);
    uint32_t ranks = 0;
    REQUIRE(hal_comm_count(comm, &ranks) == HAL_SUCCESS);
    CHECK(ranks == 1);
    hal_stream_t stream = nullptr;
    REQUIRE(hal_stream_create(session.device, 0, &stream) == HAL_SUCCESS);
    void* memory = nullptr;
    REQUIRE(hal_mem_alloc(session.device, HAL_MEMORY_DEVICE, 64, 0, &memory) == HAL_SUCCESS);
    REQUIRE(hal_group_start() == HAL_SUCCESS);
    REQUIRE(hal_allreduce(memory, memory, 16, HAL_DTYPE_F32, HAL_REDUCE_SUM, comm, stream) ==
            HAL_SUCCESS);
    REQUIRE(hal_group_end() == HAL_SUCCESS);
    CHECK(hal_broadcast(memory, memory, 16, HAL_DTYPE_F32, 5, comm, stream) ==
          HAL_ERROR_INVALID_ARGUMENT);
    REQUIRE(hal_stream_synchronize(stream) == HAL_SUCCESS);
    REQUIRE(hal_comm_destroy(comm) == HAL_SUCCESS);
    REQUIRE(hal_mem_free(memory) == HAL_SUCCESS);
    REQUIRE(hal_stream_destroy(stream) == HAL_SUCCESS);
    session.shutdown();
  }
  std::ifstream in(path);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (const char* name : {"hal_comm_init_all", "hal_comm_count", "hal_group_start",
                           "hal_allreduce", "hal_group_end", "hal_broadcast", "hal_comm_destroy"}) {
    CAPTURE(name);
    CHECK(contains(text, std::string("\"name\":\"") + name + "\",\"cat\":\"api\""));
  }
  CHECK(contains(text, "\"count\":16"));
  CHECK(contains(text, "\"root\":5"));
  std::remove(path.c_str());
}
