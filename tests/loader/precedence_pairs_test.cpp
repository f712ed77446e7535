// SPEC §4.1 "Which error is reported", from step 4 on: for each pair of
// steps the order states (values before ranges, where a range lies before
// how ranges relate, ranges before devices, devices before launch checks,
// the launch's shape before its signature, left to right within a step, and
// a pointer required by a value checked with that value), one call breaks
// both rules, and the earlier step must be the one reported. loader.every entry reports the first
// fault ... (in precedence_test.cpp) walks steps 1 to 4 for every entry; this walks the steps after
// them where the copies, fills, launches and collectives take them, on the mock plugin (two peer
// devices) and the minimal one (another plugin's device).
#include "test_support.hpp"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

using namespace loader_test;

namespace {

struct Pair {
  const char* what;
  std::function<hal_result_t()> call;
  hal_result_t expected;
};

}  // namespace

TEST_CASE("each pair of faults from step 4 on reports the earlier step", "[errors]") {
  for (const char* validation : {"0", "1"}) {
    INFO("HAL_VALIDATION=" << validation);
    REQUIRE(setenv("HAL_VALIDATION", validation, 1) == 0);
    Session session(kPluginDir, "mock,minimal");
    REQUIRE(session.result == HAL_SUCCESS);
    hal_device_t mock = device_of("mock", 0), peer = device_of("mock", 1);
    hal_device_t other = device_of("minimal");
    hal_stream_t stream = nullptr, peer_stream = nullptr;
    REQUIRE(hal_stream_create(mock, HAL_STREAM_FLAG_NONE, &stream) == HAL_SUCCESS);
    REQUIRE(hal_stream_create(peer, HAL_STREAM_FLAG_NONE, &peer_stream) == HAL_SUCCESS);
    void *small = nullptr, *foreign = nullptr, *freed = nullptr;
    REQUIRE(hal_mem_alloc(mock, HAL_MEMORY_DEVICE, 64, 0, &small) == HAL_SUCCESS);
    REQUIRE(hal_mem_alloc(other, HAL_MEMORY_DEVICE, 4096, 0, &foreign) == HAL_SUCCESS);
    REQUIRE(hal_mem_alloc(mock, HAL_MEMORY_DEVICE, 4096, 0, &freed) == HAL_SUCCESS);
    REQUIRE(hal_mem_free(freed) == HAL_SUCCESS);
    void* const kOverflow = reinterpret_cast<void*>(UINTPTR_MAX - 15);
    char* const inside = static_cast<char*>(small);

    static const char kSource[] = "kernel void scale() {}";
    hal_module_desc_t module_desc{};
    module_desc.struct_size = sizeof(module_desc);
    module_desc.format = HAL_MODULE_FORMAT_OPENCL_C;
    module_desc.data = kSource;
    module_desc.size = sizeof(kSource) - 1;
    hal_module_t module = nullptr;
    REQUIRE(hal_module_load(mock, &module_desc, &module) == HAL_SUCCESS);
    hal_kernel_desc_t kernel_desc{};
    kernel_desc.struct_size = sizeof(kernel_desc);
    kernel_desc.name = "scale";
    hal_kernel_t kernel = nullptr;  // scale(ptr, u32, f32)
    REQUIRE(hal_kernel_get(module, &kernel_desc, &kernel) == HAL_SUCCESS);
    auto config = [](uint32_t grid, size_t struct_size = sizeof(hal_launch_config_t)) {
      hal_launch_config_t c{};
      c.struct_size = struct_size;
      c.grid[0] = grid;
      c.grid[1] = c.grid[2] = 1;
      c.block[0] = c.block[1] = c.block[2] = 1;
      return c;
    };
    void* x = small;
    uint32_t n = 1;
    float f = 1;
    const hal_kernel_arg_t args[] = {{&x, 8}, {&n, 4}, {&f, 4}};
    const hal_kernel_arg_t wrong_size_then_null[] = {{&x, 4}, {&n, 4}, {nullptr, 4}};

    hal_comm_t comm = nullptr;
    REQUIRE(hal_comm_init_all(1, &mock, nullptr, &comm) == HAL_SUCCESS);

    const std::vector<Pair> pairs = {
        // hal_memcpy_async(dst, src, size, stream)
        {"memcpy: dst overruns (5), src NULL (4)",
         [&] { return hal_memcpy_async(inside, nullptr, 128, stream); }, HAL_ERROR_NULL_POINTER},
        {"memcpy: dst overruns (5), src overflows (4)",
         [&] { return hal_memcpy_async(inside, kOverflow, 128, stream); }, HAL_ERROR_INVALID_SIZE},
        {"memcpy: dst NULL (4), src overflows (4): left to right",
         [&] { return hal_memcpy_async(nullptr, kOverflow, 128, stream); }, HAL_ERROR_NULL_POINTER},
        {"memcpy: dst overflows (4), src NULL (4): left to right",
         [&] { return hal_memcpy_async(kOverflow, nullptr, 128, stream); }, HAL_ERROR_INVALID_SIZE},
        {"memcpy: the ranges overlap (5, how ranges relate), both overrun (5, where they lie)",
         [&] { return hal_memcpy_async(inside, inside + 8, 128, stream); },
         HAL_ERROR_OUT_OF_BOUNDS},
        {"memcpy: the ranges overlap (5), dst another plugin's (6)",
         [&] { return hal_memcpy_async(static_cast<char*>(foreign) + 8, foreign, 16, stream); },
         HAL_ERROR_INVALID_ARGUMENT},
        {"memcpy: dst another plugin's (6), src overruns (5)",
         [&] { return hal_memcpy_async(foreign, inside, 128, stream); }, HAL_ERROR_OUT_OF_BOUNDS},
        {"memcpy: dst another plugin's (6), src freed (5)",
         [&] { return hal_memcpy_async(foreign, freed, 16, stream); }, HAL_ERROR_INVALID_ARGUMENT},
        {"memcpy: dst freed (5), src overflows (4)",
         [&] { return hal_memcpy_async(freed, kOverflow, 16, stream); }, HAL_ERROR_INVALID_SIZE},
        // hal_memset_async(dst, value, size, stream)
        {"memset: dst another plugin's and overrunning (5 before 6)",
         [&] { return hal_memset_async(foreign, 0, 8192, stream); }, HAL_ERROR_OUT_OF_BOUNDS},
        // hal_launch_kernel(kernel, config, arg_count, args, stream)
        {"launch: args NULL with arg_count (4), another device's stream (6)",
         [&] {
           const hal_launch_config_t c = config(1);
           return hal_launch_kernel(kernel, &c, 3, nullptr, peer_stream);
         },
         HAL_ERROR_NULL_POINTER},
        {"launch: args NULL with arg_count (4), the wrong count (8)",
         [&] {
           const hal_launch_config_t c = config(1);
           return hal_launch_kernel(kernel, &c, 2, nullptr, stream);
         },
         HAL_ERROR_NULL_POINTER},
        {"launch: a NULL value (4) after a wrong size (8)",
         [&] {
           const hal_launch_config_t c = config(1);
           return hal_launch_kernel(kernel, &c, 3, wrong_size_then_null, stream);
         },
         HAL_ERROR_NULL_POINTER},
        {"launch: config->struct_size (4), then args NULL (4): left to right",
         [&] {
           const hal_launch_config_t c = config(1, 8);
           return hal_launch_kernel(kernel, &c, 3, nullptr, stream);
         },
         HAL_ERROR_INVALID_ARGUMENT},
        {"launch: arg_count above HAL_MAX_KERNEL_ARGS (4), another device's stream (6)",
         [&] {
           const hal_launch_config_t c = config(1);
           return hal_launch_kernel(kernel, &c, HAL_MAX_KERNEL_ARGS + 1, args, peer_stream);
         },
         HAL_ERROR_INVALID_ARGUMENT},
        {"launch: another device's stream (6), a zero grid (8)",
         [&] {
           const hal_launch_config_t c = config(0);
           return hal_launch_kernel(kernel, &c, 3, args, peer_stream);
         },
         HAL_ERROR_DEVICE_MISMATCH},
        {"launch: a zero grid (8, shape), the wrong count (8, signature)",
         [&] {
           const hal_launch_config_t c = config(0);
           return hal_launch_kernel(kernel, &c, 2, args, stream);
         },
         HAL_ERROR_INVALID_LAUNCH},
        // hal_allreduce(sendbuf, recvbuf, count, dtype, op, comm, stream)
        {"allreduce: sendbuf overruns (5), recvbuf NULL (4)",
         [&] {
           return hal_allreduce(inside, nullptr, 32, HAL_DTYPE_F32, HAL_REDUCE_SUM, comm, stream);
         },
         HAL_ERROR_NULL_POINTER},
        {"allreduce: sendbuf another plugin's (6), recvbuf overruns (5)",
         [&] {
           return hal_allreduce(foreign, inside, 32, HAL_DTYPE_F32, HAL_REDUCE_SUM, comm, stream);
         },
         HAL_ERROR_OUT_OF_BOUNDS},
        {"allreduce: sendbuf overruns (5), the stream on another device (6)",
         [&] {
           return hal_allreduce(inside, inside, 32, HAL_DTYPE_F32, HAL_REDUCE_SUM, comm,
                                peer_stream);
         },
         HAL_ERROR_OUT_OF_BOUNDS},
        {"alltoall: in place (5), the stream on another device (6)",
         [&] { return hal_alltoall(inside, inside, 4, HAL_DTYPE_F32, comm, peer_stream); },
         HAL_ERROR_INVALID_ARGUMENT},
        {"allreduce: recvbuf freed (5), sendbuf another plugin's (6)",
         [&] {
           return hal_allreduce(foreign, freed, 4, HAL_DTYPE_F32, HAL_REDUCE_SUM, comm, stream);
         },
         HAL_ERROR_INVALID_ARGUMENT},
    };
    for (const Pair& pair : pairs) {
      INFO(pair.what);
      const hal_result_t result = pair.call();
      CHECK(std::string(hal_result_string(result)) == hal_result_string(pair.expected));
      if (result != HAL_SUCCESS) CHECK(last_detail().result == result);
    }
    CHECK(hal_comm_destroy(comm) == HAL_SUCCESS);
    CHECK(hal_module_unload(module) == HAL_SUCCESS);
    CHECK(hal_mem_free(foreign) == HAL_SUCCESS);
    CHECK(hal_mem_free(small) == HAL_SUCCESS);
    CHECK(hal_stream_destroy(peer_stream) == HAL_SUCCESS);
    CHECK(hal_stream_destroy(stream) == HAL_SUCCESS);
  }
  unsetenv("HAL_VALIDATION");
}
