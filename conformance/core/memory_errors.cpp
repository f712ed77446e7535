// core.memory error paths: bounds, overflow, overlap, frees of what is not
// an allocation, and out-parameters left alone on failure.
#include <cstdint>
#include <cstring>

#include "check.hpp"
#include "context.hpp"
#include "hal_objects.hpp"

namespace halconform {

HALCONFORM_TEST("core.memory.bounds",
                "ranges that overrun an allocation are HAL_ERROR_OUT_OF_BOUNDS, overflowing ones "
                "HAL_ERROR_INVALID_SIZE, overlapping copies HAL_ERROR_INVALID_ARGUMENT",
                {}) {
  Stream stream(ctx.device());
  constexpr size_t kSize = 4000;
  Buffer buffer(ctx.device(), kSize);
  std::vector<uint8_t> host(8192);
  HC_EXPECT_RESULT(hal_memcpy_async(buffer.get(), host.data(), kSize + 1, stream),
                   HAL_ERROR_OUT_OF_BOUNDS);
  HC_EXPECT_RESULT(hal_memcpy_async(host.data(), buffer.bytes() + 3900, 101, stream),
                   HAL_ERROR_OUT_OF_BOUNDS);
  HC_EXPECT_RESULT(hal_memset_async(buffer.bytes() + 1, 0, kSize, stream), HAL_ERROR_OUT_OF_BOUNDS);
  HC_EXPECT_RESULT(hal_memcpy_async(buffer.get(), host.data(), SIZE_MAX, stream),
                   HAL_ERROR_INVALID_SIZE);
  HC_EXPECT_RESULT(hal_memcpy_async(buffer.bytes() + 8, buffer.get(), 64, stream),
                   HAL_ERROR_INVALID_ARGUMENT);
  HC_EXPECT_RESULT(hal_memcpy_async(nullptr, host.data(), 16, stream), HAL_ERROR_NULL_POINTER);
  HC_EXPECT_RESULT(hal_memset_async(nullptr, 0, 16, stream), HAL_ERROR_NULL_POINTER);
  // The exact fit still works after all those rejections.
  HC_OK(hal_memset_async(buffer.get(), 0x42, kSize, stream));
  const std::vector<uint8_t> back = read_back(stream, buffer.get(), kSize);
  HC_REQUIRE(back.front() == 0x42 && back.back() == 0x42, "an exact-fit fill did not land");
}

HALCONFORM_TEST("core.memory.bounds_into_allocation",
                "a range that starts before an allocation and runs into it overruns (SPEC.md §6)",
                {}) {
  Stream stream(ctx.device());
  constexpr size_t kSize = 4000;
  Buffer buffer(ctx.device(), kSize);
  // [base - 16, base + 16) either starts in host memory and runs into the
  // buffer (rule 3) or starts in an allocation before it and overruns that
  // (rule 2): out of bounds either way, and rejected before anything is written.
  uint8_t* const before = buffer.bytes() - 16;
  HC_EXPECT_RESULT(hal_memset_async(before, 0, 32, stream), HAL_ERROR_OUT_OF_BOUNDS);
  uint8_t host[32] = {};
  HC_EXPECT_RESULT(hal_memcpy_async(host, before, 32, stream), HAL_ERROR_OUT_OF_BOUNDS);
}

HALCONFORM_TEST("core.memory.free_errors",
                "freeing inside an allocation, twice, or something never allocated fails; NULL "
                "is a no-op",
                {}) {
  void* pointer = nullptr;
  HC_OK(hal_mem_alloc(ctx.device(), HAL_MEMORY_DEVICE, 1000, 0, &pointer));
  HC_EXPECT_RESULT(hal_mem_free(static_cast<uint8_t*>(pointer) + 10), HAL_ERROR_INVALID_ARGUMENT);
  HC_OK(hal_mem_free(pointer));
  HC_EXPECT_RESULT(hal_mem_free(pointer), HAL_ERROR_NOT_FOUND);
  hal_memory_info_t info{};
  info.struct_size = sizeof(info);
  HC_EXPECT_RESULT(hal_mem_get_info(pointer, &info), HAL_ERROR_NOT_FOUND);
  int on_stack = 0;
  HC_EXPECT_RESULT(hal_mem_free(&on_stack), HAL_ERROR_NOT_FOUND);
  HC_OK(hal_mem_free(nullptr));
  HC_EXPECT_RESULT(hal_mem_alloc(ctx.device(), HAL_MEMORY_DEVICE, 16, 0, nullptr),
                   HAL_ERROR_NULL_POINTER);
}

HALCONFORM_TEST("core.memory.info_struct_sizes",
                "hal_mem_get_info rejects a short struct and fills a longer one", {}) {
  Buffer buffer(ctx.device(), 128);
  struct Longer {
    hal_memory_info_t info;
    uint8_t tail[32];
  } longer;
  std::memset(&longer, 0xff, sizeof(longer));
  longer.info.struct_size = sizeof(longer);
  longer.info.next = nullptr;
  HC_OK(hal_mem_get_info(buffer.get(), &longer.info));
  HC_REQUIRE(longer.info.struct_size == sizeof(longer), "the library wrote struct_size");
  hal_memory_info_t shorter{};
  shorter.struct_size = sizeof(shorter) - 8;
  HC_EXPECT_RESULT(hal_mem_get_info(buffer.get(), &shorter), HAL_ERROR_INVALID_ARGUMENT);
}

}  // namespace halconform
