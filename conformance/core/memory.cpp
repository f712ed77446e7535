// core.memory: allocation sizes, alignment, kinds, and the declared total.
#include <algorithm>
#include <cstring>

#include "check.hpp"
#include "context.hpp"
#include "hal_objects.hpp"

namespace halconform {
namespace {

constexpr uint8_t kGuardByte = 0xee;

// Where a test that holds much memory writes and checks a pattern: all of a
// small allocation; the first, middle and last 4 KiB of a large one (touching
// every byte of most of a device's memory would make the test slow).
std::vector<std::pair<size_t, size_t>> probe_windows(size_t size) {
  constexpr size_t kWindow = 4096;
  if (size <= 3 * kWindow) return {{0, size}};
  return {{0, kWindow}, {size / 2 - kWindow / 2, kWindow}, {size - kWindow, kWindow}};
}

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

HALCONFORM_TEST("core.memory.pressure",
                "up to 90 % of the declared total (at least 45 % when small blocks are charged "
                "more), mixed-size allocations stay disjoint and keep their data",
                {}) {
  const hal_device_properties_t& p = ctx.properties();
  Stream stream(ctx.device());
  // Mixed sizes, 1 byte to 1/16 of the total, until 90 % of the declared total is live.
  const uint64_t budget = p.total_memory_bytes / 10 * 9;
  const uint64_t largest = std::max<uint64_t>(
      4096, std::min<uint64_t>(p.max_allocation_bytes, p.total_memory_bytes / 16));
  struct Live {
    uint8_t* base;
    size_t size;
    uint8_t pattern;
  };
  std::vector<Live> live;
  AllocationList owned;
  uint64_t allocated = 0;
  for (uint32_t i = 0; allocated < budget; ++i) {
    const int shape = static_cast<int>(ctx.random()() % 4);
    const uint64_t big = largest / (shape == 2 ? 4 : 1);
    uint64_t size = shape == 0   ? 1 + ctx.random()() % 64
                    : shape == 1 ? 1 + ctx.random()() % 65536
                                 : big - ctx.random()() % std::min<uint64_t>(big, 4096);
    size = std::min<uint64_t>(std::max<uint64_t>(size, 1), budget - allocated + 1);
    void* pointer = nullptr;
    const hal_result_t result = hal_mem_alloc(ctx.device(), HAL_MEMORY_DEVICE, size, 0, &pointer);
    // An allocator may charge a small block more than its size (the cpu
    // plugin charges a power-of-two class, SPEC.md §6): mixed sizes may run
    // out before 90 % of the total is requested, never before 45 % (less
    // than twice). That the whole total is allocatable is
    // core.memory.total_declared's and core.declared.past_the_total's promise.
    if (result == HAL_ERROR_OUT_OF_MEMORY && allocated >= p.total_memory_bytes / 100 * 45) {
      ctx.note(
          strf("the device ran out at %llu requested bytes (%.0f %% of the declared total): "
               "its allocator charges small blocks more than their size",
               static_cast<unsigned long long>(allocated),
               100.0 * static_cast<double>(allocated) / static_cast<double>(p.total_memory_bytes)));
      break;
    }
    if (result != HAL_SUCCESS) {
      fail(
          strf("hal_mem_alloc of %llu bytes (allocation %u, %llu of the declared %llu bytes "
               "live) returned %s: %s",
               static_cast<unsigned long long>(size), i, static_cast<unsigned long long>(allocated),
               static_cast<unsigned long long>(p.total_memory_bytes), hal_result_string(result),
               hal_error_last_message()));
    }
    owned.pointers.push_back(pointer);
    const auto pattern = static_cast<uint8_t>(i * 131 + 7);
    live.push_back({static_cast<uint8_t*>(pointer), static_cast<size_t>(size), pattern});
    for (const auto& [offset, length] : probe_windows(size)) {
      HC_OK(hal_memset_async(static_cast<uint8_t*>(pointer) + offset, pattern, length, stream));
    }
    allocated += size;
  }
  // Pairwise disjoint: sorted by base, each ends at or before the next begins.
  std::vector<Live> sorted = live;
  std::sort(sorted.begin(), sorted.end(),
            [](const Live& a, const Live& b) { return a.base < b.base; });
  for (size_t i = 1; i < sorted.size(); ++i) {
    const Live& a = sorted[i - 1];
    const Live& b = sorted[i];
    HC_REQUIRE(a.base + a.size <= b.base,
               strf("hal_mem_alloc returned [%p, +%zu) and [%p, +%zu): live allocations overlap",
                    static_cast<void*>(a.base), a.size, static_cast<void*>(b.base), b.size));
  }
  // Every allocation still holds its own pattern after all the fills.
  for (size_t i = 0; i < live.size(); ++i) {
    for (const auto& [offset, length] : probe_windows(live[i].size)) {
      const std::vector<uint8_t> back = read_back(stream, live[i].base + offset, length);
      const auto wrong = std::find_if(back.begin(), back.end(),
                                      [&](uint8_t byte) { return byte != live[i].pattern; });
      HC_REQUIRE(wrong == back.end(),
                 strf("allocation %zu (%zu bytes at %p): byte %zu is 0x%02x, expected its own "
                      "hal_memset_async pattern 0x%02x: another allocation overlaps it",
                      i, live[i].size, static_cast<void*>(live[i].base),
                      offset + static_cast<size_t>(wrong - back.begin()), *wrong, live[i].pattern));
    }
  }
  ctx.note(
      strf("%zu allocations of mixed sizes held %llu bytes (%.0f %% of the declared total)",
           live.size(), static_cast<unsigned long long>(allocated),
           100.0 * static_cast<double>(allocated) / static_cast<double>(p.total_memory_bytes)));
}

HALCONFORM_TEST("core.memory.small_copies_held",
                "many small host->device copies queued behind held work each deliver their own "
                "source",
                {.capabilities = HAL_DEVICE_CAP_HOST_CALLBACKS}) {
  // SPEC.md section 11.6: the source must stay valid until the copy completes,
  // and the copy reads it then or before returning: either way each copy
  // delivers its own source, whatever a plugin stages it through.
  Stream stream(ctx.device());
  constexpr size_t kCopies = 64;
  const size_t sizes[] = {1, 3, 8, 61, 256, 1000, 4096};
  std::vector<std::vector<uint8_t>> sources;
  std::vector<size_t> offsets;
  size_t total = 0;
  for (size_t i = 0; i < kCopies; ++i) {
    sources.push_back(random_bytes(sizes[i % std::size(sizes)], 1000 + i));
    offsets.push_back(total);
    total += sources.back().size() + 5;  // a gap, so a misplaced copy shows
  }
  Buffer device(ctx.device(), total);
  HC_OK(hal_memset_async(device.get(), kGuardByte, total, stream));
  HostGate gate;
  gate.enqueue_on(stream);
  for (size_t i = 0; i < kCopies; ++i) {
    HC_OK(hal_memcpy_async(device.bytes() + offsets[i], sources[i].data(), sources[i].size(),
                           stream));
  }
  gate.open();
  const std::vector<uint8_t> back = read_back(stream, device.get(), total);
  for (size_t i = 0; i < kCopies; ++i) {
    std::string why;
    if (first_mismatch(back.data() + offsets[i], sources[i].data(), sources[i].size(), why) !=
        SIZE_MAX) {
      fail(strf("hal_memcpy_async #%zu of %zu small host->device copies (%zu bytes to offset %zu) "
                "queued behind a held stream: ",
                i, kCopies, sources[i].size(), offsets[i]) +
           why);
    }
    HC_REQUIRE(back[offsets[i] + sources[i].size()] == kGuardByte,
               strf("hal_memcpy_async #%zu of %zu small host->device copies wrote past its %zu "
                    "bytes",
                    i, kCopies, sources[i].size()));
  }
}

}  // namespace halconform
