// core.declared: what a device declares is a claim to prove. Memory limits
// are exercised at the limit and past it (a success past a limit must be
// real memory: mapped, writable, disjoint from every live allocation),
// alignment for every size class, the properties are the same in another
// process, and a declared capability behaves as SPEC.md §11.3 promises.
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "check.hpp"
#include "context.hpp"
#include "hal_objects.hpp"
#include "names.hpp"
#include "results.hpp"

namespace halconform {
namespace {

struct Range {
  uintptr_t begin, end;
};

// The mappings of this process with their permissions (/proc/self/maps).
struct Mapping {
  uintptr_t begin, end;
  bool writable;
};
std::vector<Mapping> mappings() {
  std::vector<Mapping> out;
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    Mapping m{};
    char perms[8] = {};
    unsigned long begin = 0, end = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx %7s", &begin, &end, perms) != 3) continue;
    m.begin = begin;
    m.end = end;
    m.writable = perms[0] == 'r' && perms[1] == 'w';
    out.push_back(m);
  }
  return out;
}

// "" when [p, p + size) is mapped readable and writable, else the first hole.
std::string unmapped_part(const void* pointer, size_t size) {
  const auto begin = reinterpret_cast<uintptr_t>(pointer);
  uintptr_t at = begin;
  const uintptr_t end = begin + size;
  for (const Mapping& m : mappings()) {
    if (m.end <= at || m.begin > at) continue;
    if (!m.writable) {
      return strf("bytes [%zu, %zu) are mapped but not readable and writable",
                  static_cast<size_t>(at - begin),
                  static_cast<size_t>(std::min(m.end, end) - begin));
    }
    at = m.end;
    if (at >= end) return {};
  }
  return strf("bytes from offset %zu on (of %zu) are not mapped in the process",
              static_cast<size_t>(at - begin), size);
}

bool host_addressable(const TestContext& ctx, hal_memory_kind_t kind) {
  return kind != HAL_MEMORY_DEVICE || ctx.has(HAL_DEVICE_CAP_UNIFIED_ADDRESSING);
}

// What a successful allocation must be: disjoint from every live one,
// mapped and writable where the host can see it, and holding what is
// written at its start, middle and end (through the device's stream).
void check_real_allocation(TestContext& ctx, hal_stream_t stream, const void* pointer, size_t size,
                           hal_memory_kind_t kind, const std::vector<Range>& live,
                           const char* what) {
  const auto begin = reinterpret_cast<uintptr_t>(pointer);
  for (const Range& other : live) {
    HC_REQUIRE(begin + size <= other.begin || other.end <= begin,
               strf("%s: hal_mem_alloc returned [%p, +%zu), which overlaps the live allocation "
                    "[%p, +%zu)",
                    what, pointer, size, reinterpret_cast<void*>(other.begin),
                    static_cast<size_t>(other.end - other.begin)));
  }
  if (host_addressable(ctx, kind)) {
    const std::string hole = unmapped_part(pointer, size);
    HC_REQUIRE(hole.empty(),
               strf("%s: hal_mem_alloc of %zu bytes succeeded at %p, but ", what, size, pointer) +
                   hole + ": a success must be real memory");
  }
  const size_t window = std::min<size_t>(size, 4096);
  const size_t offsets[] = {0, size / 2 - std::min(size / 2, window / 2), size - window};
  for (size_t i = 0; i < 3; ++i) {
    const auto pattern = static_cast<uint8_t>(0x5a + i);
    auto* at = static_cast<uint8_t*>(const_cast<void*>(pointer)) + offsets[i];
    HC_OK(hal_memset_async(at, pattern, window, stream));
    const std::vector<uint8_t> back = read_back(stream, at, window);
    for (size_t b = 0; b < window; ++b) {
      HC_REQUIRE(back[b] == pattern,
                 strf("%s: byte %zu of the %zu-byte allocation at %p holds 0x%02x after "
                      "hal_memset_async wrote 0x%02x: a success must be real memory",
                      what, offsets[i] + b, size, pointer, back[b], pattern));
    }
  }
}

std::vector<uint8_t> from_hex(const std::string& hex) {
  std::vector<uint8_t> bytes;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    bytes.push_back(static_cast<uint8_t>(std::stoul(hex.substr(i, 2), nullptr, 16)));
  }
  return bytes;
}

}  // namespace

HALCONFORM_TEST("core.declared.stable_across_processes",
                "the properties (uuid included) are the same in another process", {}) {
  if (ctx.settings().expected_properties.empty()) {
    ctx.skip("the discovering process passed no properties (a worker run by hand)");
  }
  const std::vector<uint8_t> bytes = from_hex(ctx.settings().expected_properties);
  HC_REQUIRE(bytes.size() == sizeof(hal_device_properties_t),
             strf("the discovering process passed %zu bytes of properties, expected %zu",
                  bytes.size(), sizeof(hal_device_properties_t)));
  hal_device_properties_t seen{};
  std::memcpy(&seen, bytes.data(), sizeof(seen));
  const hal_device_properties_t& now = ctx.properties();
  // Field by field, so the message names the one that moved. |index| is the
  // loader's position, which depends on the plugins loaded beside it.
#define HC_SAME(field)                                                                           \
  HC_REQUIRE(std::memcmp(&seen.field, &now.field, sizeof(now.field)) == 0,                       \
             std::string("hal_device_properties_t." #field                                       \
                         " differs between the process that discovered the device and this one " \
                         "(SPEC.md §10.6: declared, not measured; the same at every call)"))
  HC_SAME(name);
  HC_SAME(vendor);
  HC_SAME(plugin);
  HC_SAME(driver_version);
  HC_SAME(uuid);
  HC_SAME(type);
  HC_SAME(plugin_device_index);
  HC_SAME(capabilities);
  HC_SAME(module_formats);
  HC_SAME(compute_units);
  HC_SAME(total_memory_bytes);
  HC_SAME(max_allocation_bytes);
  HC_SAME(min_alignment_bytes);
  HC_SAME(max_threads_per_block);
  HC_SAME(max_block_dims);
  HC_SAME(max_grid_dims);
  HC_SAME(max_shared_memory_bytes);
  HC_SAME(subgroup_size);
  HC_SAME(peak_fp32_flops);
  HC_SAME(peak_memory_bandwidth);
#undef HC_SAME
  ctx.note("uuid " + uuid_string(now.uuid));
}

HALCONFORM_TEST("core.declared.max_allocation",
                "one allocation of max_allocation_bytes succeeds on an empty device and is real "
                "memory; one byte more is HAL_ERROR_OUT_OF_MEMORY",
                {}) {
  const hal_device_properties_t& p = ctx.properties();
  Stream stream(ctx.device());
  void* pointer = nullptr;
  const hal_result_t result =
      hal_mem_alloc(ctx.device(), HAL_MEMORY_DEVICE, p.max_allocation_bytes, 0, &pointer);
  HC_REQUIRE(result == HAL_SUCCESS,
             strf("hal_mem_alloc(HAL_MEMORY_DEVICE, max_allocation_bytes %llu) on a device with "
                  "nothing allocated returned %s: %s",
                  static_cast<unsigned long long>(p.max_allocation_bytes),
                  hal_result_string(result), hal_error_last_message()));
  {
    AllocationList owned;
    owned.pointers.push_back(pointer);
    check_real_allocation(ctx, stream, pointer, p.max_allocation_bytes, HAL_MEMORY_DEVICE, {},
                          "the declared max_allocation_bytes");
  }
  void* over = nullptr;
  const hal_result_t past =
      hal_mem_alloc(ctx.device(), HAL_MEMORY_DEVICE, p.max_allocation_bytes + 1, 0, &over);
  if (past == HAL_SUCCESS) hal_mem_free(over);
  HC_REQUIRE(
      past == HAL_ERROR_OUT_OF_MEMORY,
      strf("hal_mem_alloc of max_allocation_bytes + 1 (%llu) returned %s, expected "
           "HAL_ERROR_OUT_OF_MEMORY (SPEC.md §11.6)",
           static_cast<unsigned long long>(p.max_allocation_bytes + 1), hal_result_string(past)));
}

HALCONFORM_TEST("core.declared.past_the_total",
                "with the declared total_memory_bytes live, further allocations fail with "
                "HAL_ERROR_OUT_OF_MEMORY or are real memory; freeing it all gives it back",
                {}) {
  const hal_device_properties_t& p = ctx.properties();
  Stream stream(ctx.device());
  const uint64_t unit = uint64_t{2} << 20;
  uint64_t chunk = std::min(p.max_allocation_bytes, std::max(unit, p.total_memory_bytes / 8));
  chunk = std::max(unit, chunk / unit * unit);
  std::vector<Range> live;
  {
    AllocationList owned;
    uint64_t allocated = 0;
    while (allocated < p.total_memory_bytes) {
      const uint64_t size = std::min(chunk, p.total_memory_bytes - allocated);
      void* pointer = nullptr;
      const hal_result_t result = hal_mem_alloc(ctx.device(), HAL_MEMORY_DEVICE, size, 0, &pointer);
      HC_REQUIRE(result == HAL_SUCCESS,
                 strf("after %llu of the declared total_memory_bytes %llu, hal_mem_alloc of %llu "
                      "more returned %s: %s",
                      static_cast<unsigned long long>(allocated),
                      static_cast<unsigned long long>(p.total_memory_bytes),
                      static_cast<unsigned long long>(size), hal_result_string(result),
                      hal_error_last_message()));
      owned.pointers.push_back(pointer);
      live.push_back({reinterpret_cast<uintptr_t>(pointer),
                      reinterpret_cast<uintptr_t>(pointer) + static_cast<size_t>(size)});
      allocated += size;
    }
    // Past the total: each further allocation fails, or is memory that is really there.
    size_t real = 0;
    for (const uint64_t size : {uint64_t{1}, uint64_t{4096}, uint64_t{65537}, chunk}) {
      void* pointer = nullptr;
      const hal_result_t result = hal_mem_alloc(ctx.device(), HAL_MEMORY_DEVICE, size, 0, &pointer);
      if (result == HAL_ERROR_OUT_OF_MEMORY) continue;
      HC_REQUIRE(result == HAL_SUCCESS,
                 strf("hal_mem_alloc of %llu bytes with the declared total live returned %s, "
                      "expected HAL_SUCCESS or HAL_ERROR_OUT_OF_MEMORY",
                      static_cast<unsigned long long>(size), hal_result_string(result)));
      owned.pointers.push_back(pointer);
      check_real_allocation(ctx, stream, pointer, static_cast<size_t>(size), HAL_MEMORY_DEVICE,
                            live, "past the declared total_memory_bytes");
      live.push_back({reinterpret_cast<uintptr_t>(pointer),
                      reinterpret_cast<uintptr_t>(pointer) + static_cast<size_t>(size)});
      ++real;
    }
    // The first allocations still hold their own data after everything past them.
    auto head = [&](size_t i) { return std::min<size_t>(64, live[i].end - live[i].begin); };
    for (size_t i = 0; i < live.size(); ++i) {
      HC_OK(hal_memset_async(reinterpret_cast<void*>(live[i].begin), static_cast<uint8_t>(i + 1),
                             head(i), stream));
    }
    for (size_t i = 0; i < live.size(); ++i) {
      const std::vector<uint8_t> back =
          read_back(stream, reinterpret_cast<void*>(live[i].begin), head(i));
      HC_REQUIRE(back[0] == static_cast<uint8_t>(i + 1) && back.back() == back[0],
                 strf("allocation %zu of %zu live at and past the declared total holds 0x%02x, "
                      "not its own 0x%02x: two allocations share memory",
                      i, live.size(), back[0], static_cast<unsigned>(i + 1)));
    }
    ctx.note(
        strf("%zu allocations held the declared %llu bytes; %zu of 4 more succeeded as real "
             "memory",
             live.size() - real, static_cast<unsigned long long>(p.total_memory_bytes), real));
  }
  // Everything was freed: the largest single allocation fits again.
  void* again = nullptr;
  const hal_result_t result =
      hal_mem_alloc(ctx.device(), HAL_MEMORY_DEVICE, p.max_allocation_bytes, 0, &again);
  if (result == HAL_SUCCESS) hal_mem_free(again);
  HC_REQUIRE(result == HAL_SUCCESS,
             strf("after every allocation was freed, hal_mem_alloc of max_allocation_bytes %llu "
                  "returned %s: freed memory did not come back (%s)",
                  static_cast<unsigned long long>(p.max_allocation_bytes),
                  hal_result_string(result), hal_error_last_message()));
}

HALCONFORM_TEST("core.declared.alignment_classes",
                "every size class, from 1 byte to megabytes, honours every alignment and "
                "min_alignment_bytes, and holds its data",
                {}) {
  const hal_device_properties_t& p = ctx.properties();
  const uint64_t minimum = std::max<uint64_t>(p.min_alignment_bytes, 1);
  Stream stream(ctx.device());
  // Powers of two and their neighbours, up to 4 MiB (and 1/16 of the total).
  const uint64_t largest = std::min<uint64_t>(uint64_t{4} << 20, p.max_allocation_bytes / 16);
  std::vector<size_t> sizes;
  for (uint64_t power = 1; power <= largest; power *= 2) {
    for (const uint64_t size : {power - 1, power, power + 1}) {
      if (size >= 1 && size <= largest) sizes.push_back(static_cast<size_t>(size));
    }
  }
  std::vector<size_t> alignments = {
      0, 1, 16, static_cast<size_t>(minimum), static_cast<size_t>(minimum) * 2, 4096, 65536};
  if (minimum > 1) alignments.push_back(static_cast<size_t>(minimum / 2));
  if (p.total_memory_bytes >= (uint64_t{512} << 20)) alignments.push_back(size_t{2} << 20);
  size_t checked = 0;
  for (const size_t alignment : alignments) {
    AllocationList owned;
    std::vector<Range> live;
    for (const size_t size : sizes) {
      void* pointer = nullptr;
      const hal_result_t result =
          hal_mem_alloc(ctx.device(), HAL_MEMORY_DEVICE, size, alignment, &pointer);
      HC_REQUIRE(result == HAL_SUCCESS,
                 strf("hal_mem_alloc(size %zu, alignment %zu) returned %s: %s", size, alignment,
                      hal_result_string(result), hal_error_last_message()));
      owned.pointers.push_back(pointer);
      const size_t wanted = std::max<size_t>(alignment, static_cast<size_t>(minimum));
      HC_REQUIRE(reinterpret_cast<uintptr_t>(pointer) % wanted == 0,
                 strf("hal_mem_alloc(size %zu, alignment %zu) returned %p, not aligned to "
                      "max(alignment, min_alignment_bytes %llu) = %zu (SPEC.md §11.6)",
                      size, alignment, pointer, static_cast<unsigned long long>(minimum), wanted));
      const auto begin = reinterpret_cast<uintptr_t>(pointer);
      for (const Range& other : live) {
        HC_REQUIRE(begin + size <= other.begin || other.end <= begin,
                   strf("hal_mem_alloc(size %zu, alignment %zu) returned %p, inside the live "
                        "allocation [%p, +%zu)",
                        size, alignment, pointer, reinterpret_cast<void*>(other.begin),
                        static_cast<size_t>(other.end - other.begin)));
      }
      live.push_back({begin, begin + size});
      // The first and the last byte are the allocation's own.
      HC_OK(hal_memset_async(pointer, 0xc3, 1, stream));
      HC_OK(hal_memset_async(static_cast<uint8_t*>(pointer) + size - 1, 0x3c, 1, stream));
      ++checked;
    }
    for (size_t i = 0; i < live.size(); ++i) {
      const auto* base = reinterpret_cast<const uint8_t*>(live[i].begin);
      const size_t size = live[i].end - live[i].begin;
      const std::vector<uint8_t> first = read_back(stream, base, 1);
      const std::vector<uint8_t> last = read_back(stream, base + size - 1, 1);
      HC_REQUIRE((size == 1 ? last[0] == 0x3c : first[0] == 0xc3 && last[0] == 0x3c),
                 strf("the allocation of %zu bytes (alignment %zu) at %p does not hold its first "
                      "and last byte (0x%02x, 0x%02x): another allocation shares them",
                      size, alignment, static_cast<const void*>(base), first[0], last[0]));
    }
  }
  ctx.note(strf("%zu allocations: %zu sizes from 1 to %llu bytes x %zu alignments", checked,
                sizes.size(), static_cast<unsigned long long>(largest), alignments.size()));
}

HALCONFORM_TEST("core.declared.host_callbacks",
                "HAL_DEVICE_CAP_HOST_CALLBACKS: a host function runs on another thread and its "
                "enqueue does not wait; without it, on the calling thread before the enqueue "
                "returns",
                {}) {
  Stream stream(ctx.device());
  struct Seen {
    std::atomic<bool> ran{false};
    std::atomic<uint64_t> thread{0};
  } seen;
  auto note = [](void* data) {
    auto* s = static_cast<Seen*>(data);
    s->thread.store(static_cast<uint64_t>(syscall(SYS_gettid)));
    s->ran.store(true);
  };
  const auto me = static_cast<uint64_t>(syscall(SYS_gettid));
  if (ctx.has(HAL_DEVICE_CAP_HOST_CALLBACKS)) {
    HostGate gate;
    gate.enqueue_on(stream);
    // Held behind the gate: an enqueue that waited for it would only return at
    // the gate's own time-out, which open() turns into a failure.
    HC_OK(hal_stream_enqueue_host_fn(stream, note, &seen));
    const bool ran_early = seen.ran.load();
    gate.open();
    // No HAL call from this thread until it has run: a plugin thread must run
    // it (a synchronize may run queued work on its caller, SPEC.md §7).
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!seen.ran.load() && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    const bool ran_by_itself = seen.ran.load();
    HC_OK(hal_stream_synchronize(stream));
    HC_REQUIRE(!ran_early, std::string("HAL_DEVICE_CAP_HOST_CALLBACKS: the host function ran "
                                       "before the work held ahead of it"));
    HC_REQUIRE(ran_by_itself,
               std::string("HAL_DEVICE_CAP_HOST_CALLBACKS is declared, but the host function did "
                           "not run within 20 s of its stream being free without a HAL call to "
                           "drive it: it does not run asynchronously (SPEC.md §7)"));
    HC_REQUIRE(seen.thread.load() != me,
               std::string("HAL_DEVICE_CAP_HOST_CALLBACKS is declared, but the host function ran "
                           "on the thread that enqueued it, not asynchronously on one of the "
                           "plugin's (SPEC.md §7)"));
  } else {
    HC_OK(hal_stream_enqueue_host_fn(stream, note, &seen));
    HC_REQUIRE(seen.ran.load() && seen.thread.load() == me,
               std::string("without HAL_DEVICE_CAP_HOST_CALLBACKS the host function must have "
                           "run on the calling thread before hal_stream_enqueue_host_fn "
                           "returned (SPEC.md §7, the loader's fallback)"));
  }
}

}  // namespace halconform
