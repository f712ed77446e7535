// core.memory: allocation sizes, alignment, kinds, and the declared total.
#include <algorithm>
#include <cstring>

#include "check.hpp"
#include "context.hpp"
#include "hal_objects.hpp"

namespace halconform {
namespace {

// Allocates |size| bytes, checks what hal_mem_get_info says about it, fills
// it with seeded data through a stream, and reads the data back.
void check_round_trip(TestContext& ctx, hal_stream_t stream, size_t size, hal_memory_kind_t kind) {
  Buffer buffer(ctx.device(), size, kind);
  const uint64_t alignment = ctx.properties().min_alignment_bytes;
  HC_REQUIRE(alignment == 0 || reinterpret_cast<uintptr_t>(buffer.get()) % alignment == 0,
             strf("%zu-byte allocation at %p is not aligned to min_alignment_bytes %llu", size,
                  buffer.get(), static_cast<unsigned long long>(alignment)));
  hal_memory_info_t info{};
  info.struct_size = sizeof(info);
  HC_OK(hal_mem_get_info(buffer.bytes() + size - 1, &info));
  HC_REQUIRE(
      info.base == buffer.get() && info.size == size && info.device == ctx.device() &&
          info.kind == kind,
      strf("hal_mem_get_info of the last byte of a %zu-byte allocation says base %p size %zu", size,
           info.base, info.size));
  const std::vector<uint8_t> data = random_bytes(size, size * 7919 + kind);
  HC_OK(hal_memcpy_async(buffer.get(), data.data(), size, stream));
  const std::vector<uint8_t> back = read_back(stream, buffer.get(), size);
  std::string why;
  if (first_mismatch(back.data(), data.data(), size, why) != SIZE_MAX) {
    fail(strf("%zu-byte allocation does not hold what was copied in: ", size) + why);
  }
}

}  // namespace

HALCONFORM_TEST("core.memory.alloc_sizes",
                "sizes 1, odd and large hold their data; size 0 is HAL_ERROR_INVALID_SIZE", {}) {
  Stream stream(ctx.device());
  const uint64_t large =
      std::min<uint64_t>({ctx.properties().max_allocation_bytes / 4, uint64_t{64} << 20});
  for (size_t size : {size_t{1}, size_t{3}, size_t{63}, size_t{4097}, size_t{65537},
                      size_t{(1u << 20) + 13}, static_cast<size_t>(large) + 1}) {
    check_round_trip(ctx, stream, size, HAL_MEMORY_DEVICE);
  }
  void* pointer = reinterpret_cast<void*>(0x1);
  HC_EXPECT_RESULT(hal_mem_alloc(ctx.device(), HAL_MEMORY_DEVICE, 0, 0, &pointer),
                   HAL_ERROR_INVALID_SIZE);
  HC_REQUIRE(pointer == reinterpret_cast<void*>(0x1), "a failed hal_mem_alloc wrote *out_ptr");
}

HALCONFORM_TEST("core.memory.alignment",
                "requested power-of-two alignments are honoured; others are invalid", {}) {
  const uint64_t min_alignment = ctx.properties().min_alignment_bytes;
  HC_REQUIRE(min_alignment != 0 && (min_alignment & (min_alignment - 1)) == 0,
             strf("min_alignment_bytes %llu is not a power of two",
                  static_cast<unsigned long long>(min_alignment)));
  std::vector<Buffer> buffers;
  for (size_t alignment :
       {size_t{0}, size_t{1}, size_t{16}, static_cast<size_t>(min_alignment),
        static_cast<size_t>(min_alignment) * 2, size_t{4096}, size_t{65536}, size_t{1} << 21}) {
    for (size_t size : {size_t{1}, size_t{100}, size_t{5000}}) {
      buffers.emplace_back(ctx.device(), size, HAL_MEMORY_DEVICE, alignment);
      const size_t expected = std::max<size_t>(alignment, min_alignment);
      HC_REQUIRE(reinterpret_cast<uintptr_t>(buffers.back().get()) % expected == 0,
                 strf("a %zu-byte allocation with alignment %zu came back at %p", size, alignment,
                      buffers.back().get()));
    }
  }
  void* pointer = nullptr;
  HC_EXPECT_RESULT(hal_mem_alloc(ctx.device(), HAL_MEMORY_DEVICE, 64, 48, &pointer),
                   HAL_ERROR_INVALID_ARGUMENT);
}

HALCONFORM_TEST("core.memory.kinds",
                "HOST and SHARED memory work when declared and are UNSUPPORTED when not", {}) {
  Stream stream(ctx.device());
  const std::pair<hal_memory_kind_t, hal_device_cap_bits_t> kinds[] = {
      {HAL_MEMORY_HOST, HAL_DEVICE_CAP_HOST_MEMORY},
      {HAL_MEMORY_SHARED, HAL_DEVICE_CAP_SHARED_MEMORY}};
  for (const auto& [kind, capability] : kinds) {
    if (!ctx.has(capability)) {
      void* pointer = nullptr;
      HC_EXPECT_RESULT(hal_mem_alloc(ctx.device(), kind, 64, 0, &pointer), HAL_ERROR_UNSUPPORTED);
      continue;
    }
    check_round_trip(ctx, stream, 12345, kind);
    // The host dereferences these kinds directly.
    Buffer buffer(ctx.device(), 4096, kind);
    std::memset(buffer.get(), 0x5a, 4096);
    HC_OK(hal_memset_async(buffer.bytes() + 100, 0xa5, 200, stream));
    HC_OK(hal_stream_synchronize(stream));
    HC_REQUIRE(buffer.bytes()[99] == 0x5a && buffer.bytes()[100] == 0xa5 &&
                   buffer.bytes()[299] == 0xa5 && buffer.bytes()[300] == 0x5a,
               "a fill of host-visible memory is not visible to the host after synchronize");
  }
  void* pointer = nullptr;
  HC_EXPECT_RESULT(hal_mem_alloc(ctx.device(), static_cast<hal_memory_kind_t>(7), 64, 0, &pointer),
                   HAL_ERROR_INVALID_ARGUMENT);
}

HALCONFORM_TEST("core.memory.unified_addressing",
                "device memory is host-readable after synchronize when declared",
                {.capabilities = HAL_DEVICE_CAP_UNIFIED_ADDRESSING}) {
  Stream stream(ctx.device());
  Buffer buffer(ctx.device(), 10007);
  HC_OK(hal_memset_async(buffer.get(), 0x3c, buffer.size(), stream));
  HC_OK(hal_stream_synchronize(stream));
  for (size_t i = 0; i < buffer.size(); ++i) {
    HC_REQUIRE(buffer.bytes()[i] == 0x3c,
               strf("byte %zu read by the host is 0x%02x", i, buffer.bytes()[i]));
  }
}

HALCONFORM_TEST("core.memory.total_declared",
                "the declared total_memory_bytes can be allocated, all live at once", {}) {
  const hal_device_properties_t& p = ctx.properties();
  HC_REQUIRE(p.max_allocation_bytes > 0 && p.max_allocation_bytes <= p.total_memory_bytes,
             strf("max_allocation_bytes %llu is not in (0, total_memory_bytes %llu]",
                  static_cast<unsigned long long>(p.max_allocation_bytes),
                  static_cast<unsigned long long>(p.total_memory_bytes)));
  // Eight chunks in whole 2 MiB units (no allocator rounds past a huge page).
  const uint64_t unit = uint64_t{2} << 20;
  uint64_t chunk = std::min(p.max_allocation_bytes, std::max(unit, p.total_memory_bytes / 8));
  chunk = std::max(unit, chunk / unit * unit);
  AllocationList live;
  uint64_t allocated = 0;
  while (allocated < p.total_memory_bytes) {
    const uint64_t size = std::min(chunk, p.total_memory_bytes - allocated);
    void* pointer = nullptr;
    const hal_result_t result = hal_mem_alloc(ctx.device(), HAL_MEMORY_DEVICE, size, 0, &pointer);
    if (result != HAL_SUCCESS) {
      fail(strf("after %llu of the declared %llu bytes, allocating %llu more returned %s: %s",
                static_cast<unsigned long long>(allocated),
                static_cast<unsigned long long>(p.total_memory_bytes),
                static_cast<unsigned long long>(size), hal_result_string(result),
                hal_error_last_message()));
    }
    live.pointers.push_back(pointer);
    allocated += size;
  }
  ctx.note(strf("%zu allocations held %llu bytes at once", live.pointers.size(),
                static_cast<unsigned long long>(allocated)));
  void* too_large = nullptr;
  HC_EXPECT_RESULT(
      hal_mem_alloc(ctx.device(), HAL_MEMORY_DEVICE, p.max_allocation_bytes + 1, 0, &too_large),
      HAL_ERROR_OUT_OF_MEMORY);
}

}  // namespace halconform
