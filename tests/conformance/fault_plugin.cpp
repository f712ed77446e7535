// A wrapper of the real cpu plugin, generic over two choices:
//  - HALCONFORM_SHAPE picks a healthy plugin of another shape, what the
//    reference plugins of the CI matrix are: "full" (the cpu plugin as it is),
//    "no_ops" (no operator entries: the loader's portable operators serve it),
//    "no_collectives" (no collective entries: the loader's host-staged
//    collectives), "minimal" (neither, nor host functions, stream queries,
//    device synchronize, fills, and only CPU shared objects: every loader
//    fallback at once), "dialect_only" (kernels through the HAL dialect only,
//    as a GPU plugin loads them);
//  - HALCONFORM_FAULT plants one fault (a name of kFaults below) on top.
// The self-test runs halconform once per fault and checks that the
// certification fails with the right test, and a message naming the fault.
// Built three times: hal_plugin_fault.so (shape and fault from the
// environment), hal_plugin_fault_none.so (always healthy, HAL_FAULT_NONE_ONLY,
// with the planted stale known-failure file) and hal_plugin_reference.so
// (healthy, any shape: the reference plugins).
//
// Why destroy_result plants a wrong destroy *result*: the loader validates
// every public handle, so a plugin never sees a destroyed handle and cannot
// answer one wrongly. What a plugin can still get wrong is the result of a
// destroy that did its work; the loader passes that through to the caller.
#include <dlfcn.h>
#include <fcntl.h>
#include <hal_plugin.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string_view>
#include <thread>
#include <vector>

#include "fault_lowp.hpp"
#include "fault_ops.hpp"
#include "hal_util/env.hpp"

namespace {

hal_plugin_table_v1_t g_table;          // the shaped table with the fault's entries replaced
hal_plugin_table_v1_t g_shaped;         // the cpu plugin's table in the chosen shape
const hal_plugin_table_v1_t* g_real;    // what the faults call: the shaped table
const hal_plugin_table_v1_t* g_plugin;  // the cpu plugin's own table
uint32_t g_dropped_formats = 0;         // module formats the shape does not declare

// ---- shapes ------------------------------------------------------------------

hal_result_t shaped_properties(hal_impl_device_t* device, hal_device_properties_t* out) {
  const hal_result_t result = g_plugin->device_get_properties(device, out);
  out->module_formats &= ~g_dropped_formats;
  return result;
}

struct Shape {
  const char* name;
  void (*apply)(hal_plugin_table_v1_t& table);
};

void drop_operators(hal_plugin_table_v1_t& t) {
  t.op_plan_create = nullptr;
  t.op_plan_destroy = nullptr;
  t.op_execute = nullptr;
  t.op_implementation = nullptr;
}

void drop_collectives(hal_plugin_table_v1_t& t) {
  t.comm_init_local = nullptr;
  t.comm_init_rank = nullptr;
  t.comm_destroy = nullptr;
  t.comm_abort = nullptr;
  t.comm_get_async_error = nullptr;
  t.comm_enqueue = nullptr;
  t.comm_init_rank_exchange = nullptr;
}

const Shape kShapes[] = {
    {"full", [](hal_plugin_table_v1_t&) {}},
    {"no_ops", drop_operators},
    {"no_collectives", drop_collectives},
    {"minimal",
     [](hal_plugin_table_v1_t& t) {
       drop_operators(t);
       drop_collectives(t);
       t.stream_enqueue_host_fn = nullptr;
       t.stream_query = nullptr;
       t.device_synchronize = nullptr;
       t.memset_async = nullptr;
       g_dropped_formats = 1u << HAL_MODULE_FORMAT_HAL_DIALECT;
       t.device_get_properties = shaped_properties;
     }},
    {"dialect_only",
     [](hal_plugin_table_v1_t& t) {
       g_dropped_formats = 1u << HAL_MODULE_FORMAT_CPU_SHARED_OBJECT;
       t.device_get_properties = shaped_properties;
     }},
};

// ---- memory ----------------------------------------------------------------

hal_result_t copy_short(hal_impl_stream_t* stream, void* dst, const void* src, size_t size) {
  return g_real->memcpy_async(stream, dst, src, size > 1 ? size - 1 : size);
}

// Writes the right bytes one place too far (the last one lost), inside the range.
hal_result_t copy_dst_off_by_one(hal_impl_stream_t* stream, void* dst, const void* src,
                                 size_t size) {
  if (size < 2) return g_real->memcpy_async(stream, dst, src, size);
  return g_real->memcpy_async(stream, static_cast<uint8_t*>(dst) + 1, src, size - 1);
}

// Loses one in 61 copies of exactly 64 bytes: a racy enqueue path.
hal_result_t copy_dropped_sometimes(hal_impl_stream_t* stream, void* dst, const void* src,
                                    size_t size) {
  static std::atomic<uint64_t> count{0};
  if (size == 64 && count.fetch_add(1) % 61 == 60) return HAL_SUCCESS;
  return g_real->memcpy_async(stream, dst, src, size);
}

// Small copies staged through one reused buffer at enqueue time: a copy that
// runs late reads whatever the latest small copy staged.
std::mutex g_staging_mutex;
uint8_t g_staging[4096];
hal_result_t copy_small_staged(hal_impl_stream_t* stream, void* dst, const void* src, size_t size) {
  if (size > sizeof(g_staging)) return g_real->memcpy_async(stream, dst, src, size);
  std::lock_guard lock(g_staging_mutex);
  std::memcpy(g_staging, src, size);
  return g_real->memcpy_async(stream, dst, g_staging, size);
}

// Fills at enqueue time, ahead of whatever the stream still has queued.
hal_result_t memset_out_of_order(hal_impl_stream_t*, void* dst, uint8_t value, size_t size) {
  std::memset(dst, value, size);
  return HAL_SUCCESS;
}

// The tail of a size that is not a multiple of 4 is zeroed, not set.
hal_result_t memset_tail_zero(hal_impl_stream_t* stream, void* dst, uint8_t value, size_t size) {
  const size_t words = size & ~size_t{3};
  if (words > 0) {
    if (hal_result_t r = g_real->memset_async(stream, dst, value, words); r != HAL_SUCCESS) {
      return r;
    }
  }
  if (words == size) return HAL_SUCCESS;
  return g_real->memset_async(stream, static_cast<uint8_t*>(dst) + words, 0, size - words);
}

// The value passed through a signed char: the high bit is lost.
hal_result_t memset_high_bit(hal_impl_stream_t* stream, void* dst, uint8_t value, size_t size) {
  return g_real->memset_async(stream, dst, static_cast<uint8_t>(value & 0x7f), size);
}

// FAULT alignment_ignored hands out pointers offset from the real ones.
std::mutex g_offsets_mutex;
std::map<void*, void*> g_real_pointer_of;

hal_result_t alloc_ignoring_alignment(hal_impl_device_t* device, hal_memory_kind_t kind,
                                      size_t size, size_t alignment, void** out_ptr) {
  if (alignment <= 64) return g_real->mem_alloc(device, kind, size, alignment, out_ptr);
  void* real = nullptr;
  if (hal_result_t result = g_real->mem_alloc(device, kind, size + 64, 64, &real);
      result != HAL_SUCCESS) {
    return result;
  }
  // Only 64-aligned: whichever of real and real + 64 is not |alignment|-aligned.
  void* handed_out =
      reinterpret_cast<uintptr_t>(real) % alignment == 0 ? static_cast<uint8_t*>(real) + 64 : real;
  std::lock_guard lock(g_offsets_mutex);
  g_real_pointer_of[handed_out] = real;
  *out_ptr = handed_out;
  return HAL_SUCCESS;
}

hal_result_t free_offset(hal_impl_device_t* device, void* ptr) {
  {
    std::lock_guard lock(g_offsets_mutex);
    if (auto found = g_real_pointer_of.find(ptr); found != g_real_pointer_of.end()) {
      ptr = found->second;
      g_real_pointer_of.erase(found);
    }
  }
  return g_real->mem_free(device, ptr);
}

hal_result_t free_that_keeps(hal_impl_device_t*, void*) {
  return HAL_SUCCESS;
}

// FAULT alloc_overlap_under_pressure: past 75 % of the declared total, an
// allocation is handed out inside a live one (the loader must refuse it).
std::mutex g_live_mutex;
std::map<void*, size_t> g_live;  // real allocations and their sizes
std::set<void*> g_fakes;         // the overlapping pointers handed out
size_t g_live_bytes = 0;

hal_result_t alloc_overlapping(hal_impl_device_t* device, hal_memory_kind_t kind, size_t size,
                               size_t alignment, void** out_ptr) {
  hal_device_properties_t properties{};
  properties.struct_size = sizeof(properties);
  g_real->device_get_properties(device, &properties);
  {
    std::lock_guard lock(g_live_mutex);
    if (g_live_bytes + size > properties.total_memory_bytes / 4 * 3) {
      for (const auto& [base, live_size] : g_live) {
        if (live_size < 2 * size + 4096) continue;
        void* inside = static_cast<uint8_t*>(base) + 4096;
        g_fakes.insert(inside);
        *out_ptr = inside;
        return HAL_SUCCESS;
      }
    }
  }
  hal_result_t result = g_real->mem_alloc(device, kind, size, alignment, out_ptr);
  if (result == HAL_SUCCESS) {
    std::lock_guard lock(g_live_mutex);
    g_live[*out_ptr] = size;
    g_live_bytes += size;
  }
  return result;
}

hal_result_t free_overlapping(hal_impl_device_t* device, void* ptr) {
  {
    std::lock_guard lock(g_live_mutex);
    if (g_fakes.erase(ptr) != 0) return HAL_SUCCESS;
    if (auto found = g_live.find(ptr); found != g_live.end()) {
      g_live_bytes -= found->second;
      g_live.erase(found);
    }
  }
  return g_real->mem_free(device, ptr);
}

// ---- device properties -----------------------------------------------------

hal_result_t properties_overstating_memory(hal_impl_device_t* device,
                                           hal_device_properties_t* out) {
  const hal_result_t result = g_real->device_get_properties(device, out);
  out->total_memory_bytes *= 2;  // max_allocation_bytes stays what one block can be
  return result;
}

hal_result_t properties_overstating_units(hal_impl_device_t* device, hal_device_properties_t* out) {
  const hal_result_t result = g_real->device_get_properties(device, out);
  // Four times: the smallest overstatement the check's "at least half" must catch with a
  // launching thread that runs blocks too (real + 1 at once), and the cheapest to catch: each
  // block the device cannot run at once polls the probe's whole budget, in turn (16 times cost
  // 30 s of the self-test's wall time).
  out->compute_units *= 4;
  return result;
}

hal_result_t device_synchronize_nothing(hal_impl_device_t*) {
  return HAL_SUCCESS;
}

// ---- streams ---------------------------------------------------------------

hal_result_t synchronize_forever(hal_impl_stream_t*) {
  for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
}

hal_result_t stream_destroy_wrong_result(hal_impl_stream_t* stream) {
  g_real->stream_destroy(stream);
  return HAL_ERROR_INVALID_STATE;
}

hal_result_t stream_query_always_done(hal_impl_stream_t*) {
  return HAL_SUCCESS;
}

// Runs the host function now, on the caller's thread, ahead of queued work.
hal_result_t host_fn_immediately(hal_impl_stream_t*, hal_host_fn_t fn, void* user_data) {
  fn(user_data);
  return HAL_SUCCESS;
}

hal_result_t wait_event_ignored(hal_impl_stream_t*, hal_impl_event_t*) {
  return HAL_SUCCESS;
}

// Waits on the host thread instead of enqueuing the wait: ordering holds, but
// the caller blocks on work that may be held behind its own next call.
hal_result_t wait_event_on_host(hal_impl_stream_t*, hal_impl_event_t* event) {
  return g_real->event_synchronize(event);
}

// An event record that captures nothing: the event stays complete at once.
hal_result_t event_record_nothing(hal_impl_event_t*, hal_impl_stream_t*) {
  return HAL_SUCCESS;
}

// ---- events ----------------------------------------------------------------

hal_result_t event_done_at_once(hal_impl_event_t*) {
  return HAL_SUCCESS;
}

hal_result_t event_never_ready(hal_impl_event_t*) {
  return HAL_NOT_READY;
}

hal_result_t event_destroy_wrong_result(hal_impl_event_t* event) {
  g_real->event_destroy(event);
  return HAL_ERROR_INVALID_STATE;
}

hal_result_t elapsed_that_crashes(hal_impl_event_t*, hal_impl_event_t*, float*) {
  std::raise(SIGSEGV);
  return HAL_ERROR_INTERNAL;
}

hal_result_t elapsed_negated(hal_impl_event_t* start, hal_impl_event_t* end, float* out_ms) {
  return g_real->event_elapsed_ms(end, start, out_ms);
}

hal_result_t elapsed_in_microseconds(hal_impl_event_t* start, hal_impl_event_t* end,
                                     float* out_ms) {
  const hal_result_t result = g_real->event_elapsed_ms(start, end, out_ms);
  if (result == HAL_SUCCESS) *out_ms *= 1000.0f;
  return result;
}

// ---- modules and launches --------------------------------------------------

hal_result_t module_load_wrong_error(hal_impl_device_t* device, const hal_module_desc_t* desc,
                                     hal_impl_module_t** out_module) {
  const hal_result_t result = g_real->module_load(device, desc, out_module);
  return result == HAL_ERROR_INVALID_MODULE ? HAL_ERROR_INVALID_ARGUMENT : result;
}

hal_result_t kernel_get_wrong_error(hal_impl_module_t* module, const hal_kernel_desc_t* desc,
                                    hal_impl_kernel_t** out_kernel, hal_kernel_info_t* out_info) {
  const hal_result_t result = g_real->kernel_get(module, desc, out_kernel, out_info);
  return result == HAL_ERROR_NOT_FOUND ? HAL_ERROR_INVALID_ARGUMENT : result;
}

using LaunchChange = void (*)(hal_launch_config_t&);

template <LaunchChange change>
hal_result_t launch_changed(hal_impl_stream_t* stream, hal_impl_kernel_t* kernel,
                            const hal_launch_config_t* config, uint32_t arg_count,
                            const hal_kernel_arg_t* args) {
  hal_launch_config_t changed = *config;
  change(changed);
  return g_real->launch_kernel(stream, kernel, &changed, arg_count, args);
}

void skip_last_block(hal_launch_config_t& config) {
  if (config.grid[0] > 1) --config.grid[0];
}

// Runs at most 256 threads per block, whatever the device declares.
void cap_block_at_256(hal_launch_config_t& config) {
  while (config.block[0] * config.block[1] * config.block[2] > 256) {
    uint32_t* largest = std::max_element(config.block, config.block + 3);
    *largest = (*largest + 1) / 2;
  }
}

void cap_grid_y_z(hal_launch_config_t& config) {
  config.grid[1] = std::min(config.grid[1], 4096u);
  config.grid[2] = std::min(config.grid[2], 4096u);
}

void swap_grid_y_z(hal_launch_config_t& config) {
  std::swap(config.grid[1], config.grid[2]);
}

// Past eight arguments, the last one arrives as zero.
hal_result_t launch_zeroing_last_arg(hal_impl_stream_t* stream, hal_impl_kernel_t* kernel,
                                     const hal_launch_config_t* config, uint32_t arg_count,
                                     const hal_kernel_arg_t* args) {
  if (arg_count <= 8) return g_real->launch_kernel(stream, kernel, config, arg_count, args);
  static const uint64_t zero = 0;
  std::vector<hal_kernel_arg_t> changed(args, args + arg_count);
  changed.back().value = &zero;
  return g_real->launch_kernel(stream, kernel, config, arg_count, changed.data());
}

// ---- collectives -----------------------------------------------------------

hal_result_t comm_init_without_deadline(uint32_t count, hal_impl_device_t* const* devices,
                                        const hal_comm_config_t* config,
                                        hal_impl_comm_t** out_comms) {
  hal_comm_config_t changed = *config;
  changed.timeout_ms = 3600u * 1000u;
  return g_real->comm_init_local(count, devices, &changed, out_comms);
}

// 16-bit float allreduces come out one unit in the last place high in one
// element (a rounding that truncates, or rounds half away from zero).
struct UlpOff {
  uint16_t* element;
};

void add_one_ulp(void* data) {
  std::unique_ptr<UlpOff> off(static_cast<UlpOff*>(data));
  if ((*off->element & 0x7fffu) < 0x7c00u) ++*off->element;  // finite f16 (and most bf16)
}

hal_result_t comm_enqueue_half_ulp_off(hal_impl_comm_t* comm, hal_impl_stream_t* stream,
                                       uint32_t call_count, const hal_collective_call_t* calls) {
  const hal_result_t result = g_real->comm_enqueue(comm, stream, call_count, calls);
  if (result != HAL_SUCCESS) return result;
  for (uint32_t i = 0; i < call_count; ++i) {
    const hal_collective_call_t& call = calls[i];
    if (call.kind != HAL_COLLECTIVE_ALLREDUCE || call.count < 16 ||
        (call.dtype != HAL_DTYPE_F16 && call.dtype != HAL_DTYPE_BF16)) {
      continue;
    }
    auto off = std::make_unique<UlpOff>(UlpOff{static_cast<uint16_t*>(call.recv) + 12});
    if (g_real->stream_enqueue_host_fn(stream, add_one_ulp, off.get()) == HAL_SUCCESS) {
      off.release();
    }
  }
  return HAL_SUCCESS;
}

// ---- declared facts ---------------------------------------------------------

// Declares one allocation of the whole total, delivers at most half of it.
hal_result_t properties_max_allocation_overstated(hal_impl_device_t* device,
                                                  hal_device_properties_t* out) {
  const hal_result_t result = g_real->device_get_properties(device, out);
  out->max_allocation_bytes = out->total_memory_bytes;
  return result;
}
hal_result_t alloc_at_most_half(hal_impl_device_t* device, hal_memory_kind_t kind, size_t size,
                                size_t alignment, void** out_ptr) {
  hal_device_properties_t p{};
  p.struct_size = sizeof(p);
  g_real->device_get_properties(device, &p);
  if (size > p.total_memory_bytes / 2) return HAL_ERROR_OUT_OF_MEMORY;
  return g_real->mem_alloc(device, kind, size, alignment, out_ptr);
}

// Large blocks (1 MiB and more) are only 64-byte aligned, whatever was asked.
hal_result_t alloc_ignoring_alignment_when_large(hal_impl_device_t* device, hal_memory_kind_t kind,
                                                 size_t size, size_t alignment, void** out_ptr) {
  if (size < (size_t{1} << 20) || alignment <= 64) {
    return g_real->mem_alloc(device, kind, size, alignment, out_ptr);
  }
  return alloc_ignoring_alignment(device, kind, size, alignment, out_ptr);
}

// Past the declared total, an allocation "succeeds" with address space that
// is reserved but not accessible.
std::mutex g_reserved_mutex;
std::map<void*, size_t> g_reserved;
std::map<void*, size_t> g_budget_live;
size_t g_budget_bytes = 0;
hal_result_t alloc_fake_past_total(hal_impl_device_t* device, hal_memory_kind_t kind, size_t size,
                                   size_t alignment, void** out_ptr) {
  hal_device_properties_t p{};
  p.struct_size = sizeof(p);
  g_real->device_get_properties(device, &p);
  std::lock_guard lock(g_reserved_mutex);
  if (g_budget_bytes + size > p.total_memory_bytes) {
    const size_t rounded = (size + 4095) / 4096 * 4096 + 65536;
    void* reserved = mmap(nullptr, rounded, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (reserved == MAP_FAILED) return HAL_ERROR_OUT_OF_MEMORY;
    void* aligned =
        reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(reserved) + 65535) / 65536 * 65536);
    g_reserved[aligned] = rounded;
    *out_ptr = aligned;
    return HAL_SUCCESS;
  }
  const hal_result_t result = g_real->mem_alloc(device, kind, size, alignment, out_ptr);
  if (result == HAL_SUCCESS) {
    g_budget_live[*out_ptr] = size;
    g_budget_bytes += size;
  }
  return result;
}
hal_result_t free_fake_past_total(hal_impl_device_t* device, void* ptr) {
  {
    std::lock_guard lock(g_reserved_mutex);
    if (auto found = g_reserved.find(ptr); found != g_reserved.end()) {
      g_reserved.erase(found);  // the reservation stays: a leak, in a process about to fail
      return HAL_SUCCESS;
    }
    if (auto found = g_budget_live.find(ptr); found != g_budget_live.end()) {
      g_budget_bytes -= found->second;
      g_budget_live.erase(found);
    }
  }
  return g_real->mem_free(device, ptr);
}

// A uuid that is not stable: it changes with the process.
hal_result_t properties_uuid_per_process(hal_impl_device_t* device, hal_device_properties_t* out) {
  const hal_result_t result = g_real->device_get_properties(device, out);
  const auto pid = static_cast<uint32_t>(getpid());
  std::memcpy(out->uuid + 12, &pid, sizeof(pid));
  return result;
}

// Declares host callbacks, runs host functions on the enqueuing thread once
// the stream is drained: the order is right, the call blocks.
hal_result_t host_fn_synchronous(hal_impl_stream_t* stream, hal_host_fn_t fn, void* user_data) {
  if (hal_result_t r = g_real->stream_synchronize(stream); r != HAL_SUCCESS) return r;
  fn(user_data);
  return HAL_SUCCESS;
}

// ---- documented paths --------------------------------------------------------

// What kind each allocation is, for faults of one kind of memory.
std::mutex g_kinds_mutex;
std::map<uintptr_t, std::pair<size_t, hal_memory_kind_t>> g_kinds;
hal_result_t alloc_tracking_kind(hal_impl_device_t* device, hal_memory_kind_t kind, size_t size,
                                 size_t alignment, void** out_ptr) {
  const hal_result_t result = g_real->mem_alloc(device, kind, size, alignment, out_ptr);
  if (result == HAL_SUCCESS) {
    std::lock_guard lock(g_kinds_mutex);
    g_kinds[reinterpret_cast<uintptr_t>(*out_ptr)] = {size, kind};
  }
  return result;
}
hal_result_t free_tracking_kind(hal_impl_device_t* device, void* ptr) {
  {
    std::lock_guard lock(g_kinds_mutex);
    g_kinds.erase(reinterpret_cast<uintptr_t>(ptr));
  }
  return g_real->mem_free(device, ptr);
}
bool is_kind(const void* pointer, hal_memory_kind_t kind) {
  std::lock_guard lock(g_kinds_mutex);
  const auto address = reinterpret_cast<uintptr_t>(pointer);
  auto it = g_kinds.upper_bound(address);
  if (it == g_kinds.begin()) return false;
  --it;
  return address < it->first + it->second.first && it->second.second == kind;
}

// A copy out of HAL_MEMORY_HOST memory into device memory loses its last byte.
hal_result_t copy_host_kind_to_device_short(hal_impl_stream_t* stream, void* dst, const void* src,
                                            size_t size) {
  if (size > 1 && is_kind(src, HAL_MEMORY_HOST) && is_kind(dst, HAL_MEMORY_DEVICE)) --size;
  return g_real->memcpy_async(stream, dst, src, size);
}

// A fill of HAL_MEMORY_SHARED memory loses the value's high bit.
hal_result_t memset_shared_kind_high_bit(hal_impl_stream_t* stream, void* dst, uint8_t value,
                                         size_t size) {
  if (is_kind(dst, HAL_MEMORY_SHARED)) value &= 0x7f;
  return g_real->memset_async(stream, dst, value, size);
}

// A copy whose source and destination are both another device's, enqueued
// on this device's stream, is dropped.
std::mutex g_stream_devices_mutex;
std::map<hal_impl_stream_t*, hal_impl_device_t*> g_stream_devices;
std::map<uintptr_t, std::pair<size_t, hal_impl_device_t*>> g_owners;
hal_result_t stream_create_tracking(hal_impl_device_t* device, hal_stream_flags_t flags,
                                    hal_impl_stream_t** out) {
  const hal_result_t result = g_real->stream_create(device, flags, out);
  if (result == HAL_SUCCESS) {
    std::lock_guard lock(g_stream_devices_mutex);
    g_stream_devices[*out] = device;
  }
  return result;
}
hal_result_t alloc_tracking_owner(hal_impl_device_t* device, hal_memory_kind_t kind, size_t size,
                                  size_t alignment, void** out_ptr) {
  const hal_result_t result = g_real->mem_alloc(device, kind, size, alignment, out_ptr);
  if (result == HAL_SUCCESS) {
    std::lock_guard lock(g_stream_devices_mutex);
    g_owners[reinterpret_cast<uintptr_t>(*out_ptr)] = {size, device};
  }
  return result;
}
hal_impl_device_t* owner_of(const void* pointer) {
  const auto address = reinterpret_cast<uintptr_t>(pointer);
  auto it = g_owners.upper_bound(address);
  if (it == g_owners.begin()) return nullptr;
  --it;
  return address < it->first + it->second.first ? it->second.second : nullptr;
}
hal_result_t copy_on_third_stream_dropped(hal_impl_stream_t* stream, void* dst, const void* src,
                                          size_t size) {
  {
    std::lock_guard lock(g_stream_devices_mutex);
    hal_impl_device_t* mine = g_stream_devices[stream];
    hal_impl_device_t* from = owner_of(src);
    hal_impl_device_t* to = owner_of(dst);
    if (from != nullptr && to != nullptr && from != mine && to != mine) return HAL_SUCCESS;
  }
  return g_real->memcpy_async(stream, dst, src, size);
}

// A reduce writes zeros into the receive buffer of the ranks that are not its root.
std::mutex g_comm_ranks_mutex;
std::map<hal_impl_comm_t*, uint32_t> g_comm_ranks;
hal_result_t comm_init_tracking_ranks(uint32_t count, hal_impl_device_t* const* devices,
                                      const hal_comm_config_t* config, hal_impl_comm_t** out) {
  const hal_result_t result = g_real->comm_init_local(count, devices, config, out);
  if (result == HAL_SUCCESS) {
    std::lock_guard lock(g_comm_ranks_mutex);
    for (uint32_t i = 0; i < count; ++i) g_comm_ranks[out[i]] = i;
  }
  return result;
}
hal_result_t comm_enqueue_reduce_writes_non_root(hal_impl_comm_t* comm, hal_impl_stream_t* stream,
                                                 uint32_t call_count,
                                                 const hal_collective_call_t* calls) {
  const hal_result_t result = g_real->comm_enqueue(comm, stream, call_count, calls);
  if (result != HAL_SUCCESS) return result;
  uint32_t rank = 0;
  {
    std::lock_guard lock(g_comm_ranks_mutex);
    rank = g_comm_ranks[comm];
  }
  for (uint32_t i = 0; i < call_count; ++i) {
    const hal_collective_call_t& call = calls[i];
    if (call.kind == HAL_COLLECTIVE_REDUCE && call.peer != rank && call.count > 0 &&
        call.recv != nullptr && call.recv != call.send) {
      g_real->memset_async(stream, call.recv, 0, call.count * HAL_DTYPE_SIZE(call.dtype));
    }
  }
  return HAL_SUCCESS;
}

// An alltoallv also writes the element right after the first received block
// (a gap in the layouts the suite uses, which the call must leave untouched).
hal_result_t comm_enqueue_alltoallv_fills_gap(hal_impl_comm_t* comm, hal_impl_stream_t* stream,
                                              uint32_t call_count,
                                              const hal_collective_call_t* calls) {
  const hal_result_t result = g_real->comm_enqueue(comm, stream, call_count, calls);
  if (result != HAL_SUCCESS) return result;
  for (uint32_t i = 0; i < call_count; ++i) {
    if (calls[i].kind != HAL_COLLECTIVE_ALLTOALLV) continue;
    const auto* layout = static_cast<const hal_alltoallv_layout_t*>(calls[i].send);
    if (layout->recv_counts[0] == 0) continue;
    const size_t elem = HAL_DTYPE_SIZE(calls[i].dtype);
    const size_t end = layout->recv_displs[0] + layout->recv_counts[0];
    g_real->memset_async(stream, static_cast<uint8_t*>(layout->recvbuf) + end * elem, 0, elem);
  }
  return HAL_SUCCESS;
}

// ---- the shape of failure ------------------------------------------------------

// A lost stream recovers: after reporting HAL_ERROR_DEVICE_LOST once, its
// synchronize and query succeed again.
std::mutex g_reported_mutex;
std::set<hal_impl_stream_t*> g_reported;
hal_result_t synchronize_loss_not_sticky(hal_impl_stream_t* stream) {
  {
    std::lock_guard lock(g_reported_mutex);
    if (g_reported.count(stream) != 0) return HAL_SUCCESS;
  }
  const hal_result_t result = g_real->stream_synchronize(stream);
  if (result == HAL_ERROR_DEVICE_LOST) {
    std::lock_guard lock(g_reported_mutex);
    g_reported.insert(stream);
  }
  return result;
}
hal_result_t query_loss_not_sticky(hal_impl_stream_t* stream) {
  {
    std::lock_guard lock(g_reported_mutex);
    if (g_reported.count(stream) != 0) return HAL_SUCCESS;
  }
  return g_real->stream_query(stream);
}

// Events over failed work say complete.
hal_result_t event_query_hiding_loss(hal_impl_event_t* event) {
  const hal_result_t result = g_real->event_query(event);
  return result == HAL_ERROR_DEVICE_LOST ? HAL_SUCCESS : result;
}
hal_result_t event_synchronize_hiding_loss(hal_impl_event_t* event) {
  const hal_result_t result = g_real->event_synchronize(event);
  return result == HAL_ERROR_DEVICE_LOST ? HAL_SUCCESS : result;
}

// The device says all is well with a lost stream on it.
hal_result_t device_synchronize_hiding_loss(hal_impl_device_t* device) {
  const hal_result_t result = g_real->device_synchronize(device);
  return result == HAL_ERROR_DEVICE_LOST ? HAL_SUCCESS : result;
}

// Elapsed time between events of two streams is off by 5 ms (a per-stream clock).
std::mutex g_event_streams_mutex;
std::map<hal_impl_event_t*, hal_impl_stream_t*> g_event_streams;
hal_result_t event_record_tracking(hal_impl_event_t* event, hal_impl_stream_t* stream) {
  const hal_result_t result = g_real->event_record(event, stream);
  if (result == HAL_SUCCESS) {
    std::lock_guard lock(g_event_streams_mutex);
    g_event_streams[event] = stream;
  }
  return result;
}
hal_result_t elapsed_offset_across_streams(hal_impl_event_t* start, hal_impl_event_t* end,
                                           float* out_ms) {
  const hal_result_t result = g_real->event_elapsed_ms(start, end, out_ms);
  std::lock_guard lock(g_event_streams_mutex);
  if (result == HAL_SUCCESS && g_event_streams[start] != g_event_streams[end]) *out_ms += 5.0f;
  return result;
}

// ---- leaks ---------------------------------------------------------------------

// Each module load keeps a descriptor open forever.
hal_result_t module_load_leaking_fd(hal_impl_device_t* device, const hal_module_desc_t* desc,
                                    hal_impl_module_t** out) {
  const hal_result_t result = g_real->module_load(device, desc, out);
  if (result == HAL_SUCCESS) (void)open("/dev/null", O_RDONLY | O_CLOEXEC);
  return result;
}

// Each stream starts a thread that never ends.
hal_result_t stream_create_leaking_thread(hal_impl_device_t* device, hal_stream_flags_t flags,
                                          hal_impl_stream_t** out) {
  const hal_result_t result = g_real->stream_create(device, flags, out);
  if (result == HAL_SUCCESS) {
    std::thread([] {
      for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
    }).detach();
  }
  return result;
}

// Each event keeps 512 KiB of touched memory forever.
hal_result_t event_create_leaking_memory(hal_impl_device_t* device, hal_event_flags_t flags,
                                         hal_impl_event_t** out) {
  const hal_result_t result = g_real->event_create(device, flags, out);
  if (result == HAL_SUCCESS) {
    auto* kept = static_cast<volatile uint8_t*>(std::malloc(512 * 1024));
    for (size_t i = 0; i < 512 * 1024; i += 4096) kept[i] = 1;
  }
  return result;
}

// Each load of the plugin maps 256 KiB of a file of its own (so the kernel
// cannot merge it with a neighbour) that plugin_shutdown never unmaps.
void map_leaked_segment() {
  const int fd = memfd_create("hal-fault-leak", MFD_CLOEXEC);
  if (fd < 0) return;
  if (ftruncate(fd, 256 * 1024) == 0) {
    void* mapped = mmap(nullptr, 256 * 1024, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (mapped != MAP_FAILED) {
      for (size_t i = 0; i < 256 * 1024; i += 4096) static_cast<volatile uint8_t*>(mapped)[i] = 1;
    }
  }
  close(fd);
}

// ---- kernels on every format -----------------------------------------------------

std::mutex g_modules_mutex;
std::map<hal_impl_module_t*, hal_module_format_t> g_module_formats;
struct KernelState {
  hal_module_format_t format;
  hal_kernel_info_t info;
};
std::map<hal_impl_kernel_t*, KernelState> g_kernel_states;
hal_result_t module_load_tracking(hal_impl_device_t* device, const hal_module_desc_t* desc,
                                  hal_impl_module_t** out) {
  const hal_result_t result = g_real->module_load(device, desc, out);
  if (result == HAL_SUCCESS) {
    std::lock_guard lock(g_modules_mutex);
    g_module_formats[*out] = desc->format;
  }
  return result;
}
hal_result_t kernel_get_tracking(hal_impl_module_t* module, const hal_kernel_desc_t* desc,
                                 hal_impl_kernel_t** out, hal_kernel_info_t* info) {
  const hal_result_t result = g_real->kernel_get(module, desc, out, info);
  if (result == HAL_SUCCESS) {
    std::lock_guard lock(g_modules_mutex);
    g_kernel_states[*out] = {g_module_formats[module], *info};
  }
  return result;
}
bool from_dialect(hal_impl_kernel_t* kernel, KernelState* out = nullptr) {
  std::lock_guard lock(g_modules_mutex);
  auto it = g_kernel_states.find(kernel);
  if (it == g_kernel_states.end() || it->second.format != HAL_MODULE_FORMAT_HAL_DIALECT) {
    return false;
  }
  if (out != nullptr) *out = it->second;
  return true;
}

// Kernels compiled from the dialect skip the last block of a grid.
hal_result_t launch_dialect_skips_last_block(hal_impl_stream_t* stream, hal_impl_kernel_t* kernel,
                                             const hal_launch_config_t* config, uint32_t arg_count,
                                             const hal_kernel_arg_t* args) {
  if (!from_dialect(kernel) || config->grid[0] < 2) {
    return g_real->launch_kernel(stream, kernel, config, arg_count, args);
  }
  hal_launch_config_t changed = *config;
  --changed.grid[0];
  return g_real->launch_kernel(stream, kernel, &changed, arg_count, args);
}

// f64 arguments of dialect kernels arrive rounded to f32.
hal_result_t launch_dialect_f64_as_f32(hal_impl_stream_t* stream, hal_impl_kernel_t* kernel,
                                       const hal_launch_config_t* config, uint32_t arg_count,
                                       const hal_kernel_arg_t* args) {
  KernelState state{};
  if (!from_dialect(kernel, &state)) {
    return g_real->launch_kernel(stream, kernel, config, arg_count, args);
  }
  std::vector<hal_kernel_arg_t> changed(args, args + arg_count);
  std::vector<double> rounded(arg_count);
  for (uint32_t i = 0; i < arg_count && i < state.info.arg_count; ++i) {
    if (state.info.arg_types[i] != HAL_ARG_F64) continue;
    double value;
    std::memcpy(&value, args[i].value, sizeof(value));
    rounded[i] = static_cast<double>(static_cast<float>(value));
    changed[i].value = &rounded[i];
  }
  return g_real->launch_kernel(stream, kernel, config, arg_count, changed.data());
}

// Declares kernels, and no module loads.
hal_result_t module_load_never(hal_impl_device_t*, const hal_module_desc_t*, hal_impl_module_t**) {
  return HAL_ERROR_INVALID_MODULE;
}

// ---- hangs -----------------------------------------------------------------------

hal_result_t wait_event_forever(hal_impl_stream_t*, hal_impl_event_t*) {
  for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
}

// ---- the faults ------------------------------------------------------------

struct Fault {
  const char* name;
  void (*plant)(hal_plugin_table_v1_t& table);
};

const Fault kFaults[] = {
    {"none", [](hal_plugin_table_v1_t&) {}},
    {"copy_short", [](hal_plugin_table_v1_t& t) { t.memcpy_async = copy_short; }},
    {"copy_dst_off_by_one", [](hal_plugin_table_v1_t& t) { t.memcpy_async = copy_dst_off_by_one; }},
    {"copy_dropped_sometimes",
     [](hal_plugin_table_v1_t& t) { t.memcpy_async = copy_dropped_sometimes; }},
    {"copy_small_staged", [](hal_plugin_table_v1_t& t) { t.memcpy_async = copy_small_staged; }},
    {"event_early",
     [](hal_plugin_table_v1_t& t) {
       t.event_query = event_done_at_once;
       t.event_synchronize = event_done_at_once;
     }},
    {"event_query_never_ready",
     [](hal_plugin_table_v1_t& t) { t.event_query = event_never_ready; }},
    {"event_record_captures_nothing",
     [](hal_plugin_table_v1_t& t) { t.event_record = event_record_nothing; }},
    {"stream_reorder", [](hal_plugin_table_v1_t& t) { t.memset_async = memset_out_of_order; }},
    {"memset_tail_zero", [](hal_plugin_table_v1_t& t) { t.memset_async = memset_tail_zero; }},
    {"memset_high_bit", [](hal_plugin_table_v1_t& t) { t.memset_async = memset_high_bit; }},
    {"launch_skips_last_block",
     [](hal_plugin_table_v1_t& t) { t.launch_kernel = launch_changed<skip_last_block>; }},
    {"max_block_capped",
     [](hal_plugin_table_v1_t& t) { t.launch_kernel = launch_changed<cap_block_at_256>; }},
    {"max_grid_capped",
     [](hal_plugin_table_v1_t& t) { t.launch_kernel = launch_changed<cap_grid_y_z>; }},
    {"grid_dims_swapped",
     [](hal_plugin_table_v1_t& t) { t.launch_kernel = launch_changed<swap_grid_y_z>; }},
    {"last_arg_zeroed",
     [](hal_plugin_table_v1_t& t) { t.launch_kernel = launch_zeroing_last_arg; }},
    {"alignment_ignored",
     [](hal_plugin_table_v1_t& t) {
       t.mem_alloc = alloc_ignoring_alignment;
       t.mem_free = free_offset;
     }},
    {"alloc_overlap_under_pressure",
     [](hal_plugin_table_v1_t& t) {
       t.mem_alloc = alloc_overlapping;
       t.mem_free = free_overlapping;
     }},
    {"leak", [](hal_plugin_table_v1_t& t) { t.mem_free = free_that_keeps; }},
    {"crash", [](hal_plugin_table_v1_t& t) { t.event_elapsed_ms = elapsed_that_crashes; }},
    {"elapsed_negated", [](hal_plugin_table_v1_t& t) { t.event_elapsed_ms = elapsed_negated; }},
    {"elapsed_in_microseconds",
     [](hal_plugin_table_v1_t& t) { t.event_elapsed_ms = elapsed_in_microseconds; }},
    {"hang", [](hal_plugin_table_v1_t& t) { t.stream_synchronize = synchronize_forever; }},
    {"destroy_result",
     [](hal_plugin_table_v1_t& t) {
       t.stream_destroy = stream_destroy_wrong_result;
       t.event_destroy = event_destroy_wrong_result;
     }},
    {"stream_query_always_done",
     [](hal_plugin_table_v1_t& t) { t.stream_query = stream_query_always_done; }},
    {"host_fn_immediate",
     [](hal_plugin_table_v1_t& t) { t.stream_enqueue_host_fn = host_fn_immediately; }},
    {"wait_event_ignored",
     [](hal_plugin_table_v1_t& t) { t.stream_wait_event = wait_event_ignored; }},
    {"wait_event_on_host",
     [](hal_plugin_table_v1_t& t) { t.stream_wait_event = wait_event_on_host; }},
    {"device_synchronize_skips_streams",
     [](hal_plugin_table_v1_t& t) { t.device_synchronize = device_synchronize_nothing; }},
    {"memory_overstated",
     [](hal_plugin_table_v1_t& t) { t.device_get_properties = properties_overstating_memory; }},
    {"compute_units_overstated",
     [](hal_plugin_table_v1_t& t) { t.device_get_properties = properties_overstating_units; }},
    {"module_load_wrong_error",
     [](hal_plugin_table_v1_t& t) { t.module_load = module_load_wrong_error; }},
    {"kernel_get_wrong_error",
     [](hal_plugin_table_v1_t& t) { t.kernel_get = kernel_get_wrong_error; }},
    {"collective_half_ulp_off",
     [](hal_plugin_table_v1_t& t) { t.comm_enqueue = comm_enqueue_half_ulp_off; }},
    {"collective_deadline_ignored",
     [](hal_plugin_table_v1_t& t) { t.comm_init_local = comm_init_without_deadline; }},
    // operators (fault_ops.cpp)
    {"conv_padding_swapped",
     [](hal_plugin_table_v1_t& t) {
       fault_ops::plant(t, g_real, fault_ops::OpFault::kConvPaddingSwapped);
     }},
    {"conv_filter_flipped",
     [](hal_plugin_table_v1_t& t) {
       fault_ops::plant(t, g_real, fault_ops::OpFault::kConvFilterFlipped);
     }},
    {"batch_norm_unbiased_variance",
     [](hal_plugin_table_v1_t& t) {
       fault_ops::plant(t, g_real, fault_ops::OpFault::kBatchNormUnbiased);
     }},
    {"pooling_indices_off_by_one",
     [](hal_plugin_table_v1_t& t) {
       fault_ops::plant(t, g_real, fault_ops::OpFault::kPoolingIndicesOffByOne);
     }},
    {"count_include_pad_inverted",
     [](hal_plugin_table_v1_t& t) {
       fault_ops::plant(t, g_real, fault_ops::OpFault::kCountIncludePadInverted);
     }},
    // low precision (fault_lowp.cpp)
    {"scale_per_column",
     [](hal_plugin_table_v1_t& t) {
       fault_lowp::plant(t, g_real, fault_lowp::LowpFault::kScalePerColumn);
     }},
    {"e4m3_nan_as_number",
     [](hal_plugin_table_v1_t& t) {
       fault_lowp::plant(t, g_real, fault_lowp::LowpFault::kE4m3NanAsNumber);
     }},
    {"ste_outside_clipping_range",
     [](hal_plugin_table_v1_t& t) {
       fault_lowp::plant(t, g_real, fault_lowp::LowpFault::kSteOutsideRange);
     }},
    {"clip_rounded_ignored",
     [](hal_plugin_table_v1_t& t) {
       fault_lowp::plant(t, g_real, fault_lowp::LowpFault::kClipRoundedIgnored);
     }},
    {"quantize_ties_away_from_zero",
     [](hal_plugin_table_v1_t& t) {
       fault_lowp::plant(t, g_real, fault_lowp::LowpFault::kQuantizeHalfAway);
     }},
    {"dequantize_row_blocks_ignored",
     [](hal_plugin_table_v1_t& t) {
       fault_lowp::plant(t, g_real, fault_lowp::LowpFault::kDequantizeRowBlocksIgnored);
     }},
    {"paged_block_table_off_by_one",
     [](hal_plugin_table_v1_t& t) {
       fault_ops::plant(t, g_real, fault_ops::OpFault::kPagedBlockTableOffByOne);
     }},
    {"paged_last_block_ignored",
     [](hal_plugin_table_v1_t& t) {
       fault_ops::plant(t, g_real, fault_ops::OpFault::kPagedLastBlockIgnored);
     }},
    {"paged_merge_without_max",
     [](hal_plugin_table_v1_t& t) {
       fault_ops::plant(t, g_real, fault_ops::OpFault::kPagedMergeWithoutMax);
     }},
    {"paged_mla_rope_wrong_frequencies",
     [](hal_plugin_table_v1_t& t) {
       fault_ops::plant(t, g_real, fault_ops::OpFault::kPagedRopeWrongFrequencies);
     }},
    // declared facts
    {"max_allocation_overstated",
     [](hal_plugin_table_v1_t& t) {
       t.device_get_properties = properties_max_allocation_overstated;
       t.mem_alloc = alloc_at_most_half;
     }},
    {"alignment_ignored_when_large",
     [](hal_plugin_table_v1_t& t) {
       t.mem_alloc = alloc_ignoring_alignment_when_large;
       t.mem_free = free_offset;
     }},
    {"fake_memory_past_total",
     [](hal_plugin_table_v1_t& t) {
       t.mem_alloc = alloc_fake_past_total;
       t.mem_free = free_fake_past_total;
     }},
    {"uuid_per_process",
     [](hal_plugin_table_v1_t& t) { t.device_get_properties = properties_uuid_per_process; }},
    {"host_fn_synchronous",
     [](hal_plugin_table_v1_t& t) { t.stream_enqueue_host_fn = host_fn_synchronous; }},
    // documented paths
    {"copy_host_kind_to_device_short",
     [](hal_plugin_table_v1_t& t) {
       t.mem_alloc = alloc_tracking_kind;
       t.mem_free = free_tracking_kind;
       t.memcpy_async = copy_host_kind_to_device_short;
     }},
    {"memset_shared_kind_high_bit",
     [](hal_plugin_table_v1_t& t) {
       t.mem_alloc = alloc_tracking_kind;
       t.mem_free = free_tracking_kind;
       t.memset_async = memset_shared_kind_high_bit;
     }},
    {"copy_on_third_stream_dropped",
     [](hal_plugin_table_v1_t& t) {
       t.stream_create = stream_create_tracking;
       t.mem_alloc = alloc_tracking_owner;
       t.memcpy_async = copy_on_third_stream_dropped;
     }},
    {"reduce_writes_non_root",
     [](hal_plugin_table_v1_t& t) {
       t.comm_init_local = comm_init_tracking_ranks;
       t.comm_enqueue = comm_enqueue_reduce_writes_non_root;
     }},
    {"alltoallv_fills_gap",
     [](hal_plugin_table_v1_t& t) { t.comm_enqueue = comm_enqueue_alltoallv_fills_gap; }},
    // the shape of failure
    {"lost_stream_recovers",
     [](hal_plugin_table_v1_t& t) {
       t.stream_synchronize = synchronize_loss_not_sticky;
       t.stream_query = query_loss_not_sticky;
     }},
    {"event_hides_failed_work",
     [](hal_plugin_table_v1_t& t) {
       t.event_query = event_query_hiding_loss;
       t.event_synchronize = event_synchronize_hiding_loss;
     }},
    {"device_synchronize_hides_loss",
     [](hal_plugin_table_v1_t& t) { t.device_synchronize = device_synchronize_hiding_loss; }},
    {"elapsed_offset_across_streams",
     [](hal_plugin_table_v1_t& t) {
       t.event_record = event_record_tracking;
       t.event_elapsed_ms = elapsed_offset_across_streams;
     }},
    // leaks
    {"module_load_leaks_fd",
     [](hal_plugin_table_v1_t& t) { t.module_load = module_load_leaking_fd; }},
    {"stream_leaks_thread",
     [](hal_plugin_table_v1_t& t) { t.stream_create = stream_create_leaking_thread; }},
    {"event_leaks_memory",
     [](hal_plugin_table_v1_t& t) { t.event_create = event_create_leaking_memory; }},
    {"plugin_leaks_mapping", [](hal_plugin_table_v1_t&) { map_leaked_segment(); }},
    // kernels on every format
    {"dialect_skips_last_block",
     [](hal_plugin_table_v1_t& t) {
       t.module_load = module_load_tracking;
       t.kernel_get = kernel_get_tracking;
       t.launch_kernel = launch_dialect_skips_last_block;
     }},
    {"dialect_f64_as_f32",
     [](hal_plugin_table_v1_t& t) {
       t.module_load = module_load_tracking;
       t.kernel_get = kernel_get_tracking;
       t.launch_kernel = launch_dialect_f64_as_f32;
     }},
    {"kernels_never_load", [](hal_plugin_table_v1_t& t) { t.module_load = module_load_never; }},
    // hangs, reported as the call that hangs
    {"hang_in_wait_event",
     [](hal_plugin_table_v1_t& t) { t.stream_wait_event = wait_event_forever; }},
};

// The shape named by HALCONFORM_SHAPE ("full" when unset); nullptr for an unknown name.
const Shape* selected_shape() {
  const char* name = hal::util::env("HALCONFORM_SHAPE");
  const std::string_view wanted = name == nullptr || *name == '\0' ? "full" : name;
  for (const Shape& shape : kShapes) {
    if (wanted == shape.name) return &shape;
  }
  return nullptr;
}

// The fault named by HALCONFORM_FAULT ("none" when unset); nullptr for an unknown name.
const Fault* selected_fault() {
#if defined(HAL_FAULT_NONE_ONLY) || defined(HAL_FAULT_REFERENCE)
  return &kFaults[0];
#else
  const char* name = hal::util::env("HALCONFORM_FAULT");
  const std::string_view wanted = name == nullptr || *name == '\0' ? "none" : name;
  for (const Fault& fault : kFaults) {
    if (wanted == fault.name) return &fault;
  }
  return nullptr;
#endif
}

}  // namespace

extern "C" __attribute__((visibility("default"))) hal_result_t hal_plugin_entry(
    const hal_plugin_host_t* host, hal_plugin_v1_t* out_plugin) {
  const Fault* fault = selected_fault();
  const Shape* shape = selected_shape();
  if (fault == nullptr || shape == nullptr) {
    host->set_error(host->host_context, HAL_ERROR_INVALID_ARGUMENT, 0,
                    fault == nullptr ? "HALCONFORM_FAULT names no planted fault"
                                     : "HALCONFORM_SHAPE names no shape");
    return HAL_ERROR_INVALID_ARGUMENT;
  }
  // Never closed: the cpu plugin's code must outlive every call the loader makes.
  void* real = dlopen(HAL_FAULT_REAL_PLUGIN, RTLD_NOW | RTLD_LOCAL);
  if (real == nullptr) {
    host->set_error(host->host_context, HAL_ERROR_INTERNAL, 0, dlerror());
    return HAL_ERROR_INTERNAL;
  }
  auto entry = reinterpret_cast<hal_plugin_entry_fn_t>(dlsym(real, HAL_PLUGIN_ENTRY_NAME));
  if (entry == nullptr) return HAL_ERROR_INTERNAL;
  if (hal_result_t result = entry(host, out_plugin); result != HAL_SUCCESS) return result;
  g_plugin = out_plugin->table;
  std::memset(&g_shaped, 0, sizeof(g_shaped));
  std::memcpy(&g_shaped, g_plugin, std::min(g_plugin->struct_size, sizeof(g_shaped)));
  g_shaped.struct_size = std::min(g_plugin->struct_size, sizeof(g_shaped));
  g_dropped_formats = 0;
  shape->apply(g_shaped);
  g_real = &g_shaped;
  g_table = g_shaped;
  fault->plant(g_table);
  out_plugin->table = &g_table;
  out_plugin->name = HAL_FAULT_PLUGIN_NAME;
  return HAL_SUCCESS;
}
