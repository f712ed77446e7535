// A deliberately broken plugin for halconform's self-test: it loads the real
// cpu plugin, copies its function table, and replaces one behaviour with a
// planted fault chosen at compile time (HAL_FAULT). Each build is one
// hal_plugin_fault_<name>.so; the self-test checks that halconform fails it
// with the right test named.
//
// Why destroy_result plants a wrong destroy *result*: the loader validates
// every public handle, so a plugin never sees a destroyed handle and cannot
// answer one wrongly. What a plugin can still get wrong is the result of a
// destroy that did its work; the loader passes that through to the caller.
#include <dlfcn.h>
#include <hal_plugin.h>

#include <algorithm>
#include <csignal>
#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>

#define FAULT_NONE 0
#define FAULT_COPY_SHORT 1
#define FAULT_EVENT_EARLY 2
#define FAULT_STREAM_REORDER 3
#define FAULT_LAUNCH_SKIPS_LAST_BLOCK 4
#define FAULT_ALIGNMENT_IGNORED 5
#define FAULT_LEAK 6
#define FAULT_CRASH 7
#define FAULT_HANG 8
#define FAULT_DESTROY_RESULT 9
#define FAULT_MEMORY_OVERSTATED 10

#ifndef HAL_FAULT
#error "HAL_FAULT selects the planted fault"
#endif

namespace {

hal_plugin_table_v1_t g_table;        // the real table with one entry replaced
const hal_plugin_table_v1_t* g_real;  // the cpu plugin's own table

// FAULT_ALIGNMENT_IGNORED hands out pointers offset from the real ones.
std::mutex g_offsets_mutex;
std::map<void*, void*> g_real_pointer_of;

[[maybe_unused]] hal_result_t copy_short(hal_impl_stream_t* stream, void* dst, const void* src,
                                         size_t size) {
  return g_real->memcpy_async(stream, dst, src, size > 1 ? size - 1 : size);
}

[[maybe_unused]] hal_result_t event_done_at_once(hal_impl_event_t*) {
  return HAL_SUCCESS;
}

// Fills at enqueue time, ahead of whatever the stream still has queued.
[[maybe_unused]] hal_result_t memset_out_of_order(hal_impl_stream_t*, void* dst, uint8_t value,
                                                  size_t size) {
  std::memset(dst, value, size);
  return HAL_SUCCESS;
}

[[maybe_unused]] hal_result_t launch_skipping_last_block(hal_impl_stream_t* stream,
                                                         hal_impl_kernel_t* kernel,
                                                         const hal_launch_config_t* config,
                                                         uint32_t arg_count,
                                                         const hal_kernel_arg_t* args) {
  hal_launch_config_t shorter = *config;
  if (shorter.grid[0] > 1) --shorter.grid[0];
  return g_real->launch_kernel(stream, kernel, &shorter, arg_count, args);
}

[[maybe_unused]] hal_result_t alloc_ignoring_alignment(hal_impl_device_t* device,
                                                       hal_memory_kind_t kind, size_t size,
                                                       size_t alignment, void** out_ptr) {
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

[[maybe_unused]] hal_result_t free_offset(hal_impl_device_t* device, void* ptr) {
  {
    std::lock_guard lock(g_offsets_mutex);
    if (auto found = g_real_pointer_of.find(ptr); found != g_real_pointer_of.end()) {
      ptr = found->second;
      g_real_pointer_of.erase(found);
    }
  }
  return g_real->mem_free(device, ptr);
}

[[maybe_unused]] hal_result_t free_that_keeps(hal_impl_device_t*, void*) {
  return HAL_SUCCESS;
}

[[maybe_unused]] hal_result_t elapsed_that_crashes(hal_impl_event_t*, hal_impl_event_t*, float*) {
  std::raise(SIGSEGV);
  return HAL_ERROR_INTERNAL;
}

[[maybe_unused]] hal_result_t synchronize_forever(hal_impl_stream_t*) {
  for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
}

[[maybe_unused]] hal_result_t stream_destroy_wrong_result(hal_impl_stream_t* stream) {
  g_real->stream_destroy(stream);
  return HAL_ERROR_INVALID_STATE;
}

[[maybe_unused]] hal_result_t event_destroy_wrong_result(hal_impl_event_t* event) {
  g_real->event_destroy(event);
  return HAL_ERROR_INVALID_STATE;
}

[[maybe_unused]] hal_result_t properties_overstating_memory(hal_impl_device_t* device,
                                                            hal_device_properties_t* out) {
  const hal_result_t result = g_real->device_get_properties(device, out);
  out->total_memory_bytes *= 2;  // max_allocation_bytes stays what one block can be
  return result;
}

void plant_fault(hal_plugin_table_v1_t& table) {
#if HAL_FAULT == FAULT_COPY_SHORT
  table.memcpy_async = copy_short;
#elif HAL_FAULT == FAULT_EVENT_EARLY
  table.event_query = event_done_at_once;
  table.event_synchronize = event_done_at_once;
#elif HAL_FAULT == FAULT_STREAM_REORDER
  table.memset_async = memset_out_of_order;
#elif HAL_FAULT == FAULT_LAUNCH_SKIPS_LAST_BLOCK
  table.launch_kernel = launch_skipping_last_block;
#elif HAL_FAULT == FAULT_ALIGNMENT_IGNORED
  table.mem_alloc = alloc_ignoring_alignment;
  table.mem_free = free_offset;
#elif HAL_FAULT == FAULT_LEAK
  table.mem_free = free_that_keeps;
#elif HAL_FAULT == FAULT_CRASH
  table.event_elapsed_ms = elapsed_that_crashes;
#elif HAL_FAULT == FAULT_HANG
  table.stream_synchronize = synchronize_forever;
#elif HAL_FAULT == FAULT_DESTROY_RESULT
  table.stream_destroy = stream_destroy_wrong_result;
  table.event_destroy = event_destroy_wrong_result;
#elif HAL_FAULT == FAULT_MEMORY_OVERSTATED
  table.device_get_properties = properties_overstating_memory;
#endif
  (void)table;
}

}  // namespace

extern "C" __attribute__((visibility("default"))) hal_result_t hal_plugin_entry(
    const hal_plugin_host_t* host, hal_plugin_v1_t* out_plugin) {
  // Never closed: the cpu plugin's code must outlive every call the loader makes.
  void* real = dlopen(HAL_FAULT_REAL_PLUGIN, RTLD_NOW | RTLD_LOCAL);
  if (real == nullptr) {
    host->set_error(host->host_context, HAL_ERROR_INTERNAL, 0, dlerror());
    return HAL_ERROR_INTERNAL;
  }
  auto entry = reinterpret_cast<hal_plugin_entry_fn_t>(dlsym(real, HAL_PLUGIN_ENTRY_NAME));
  if (entry == nullptr) return HAL_ERROR_INTERNAL;
  if (hal_result_t result = entry(host, out_plugin); result != HAL_SUCCESS) return result;
  g_real = out_plugin->table;
  std::memset(&g_table, 0, sizeof(g_table));
  std::memcpy(&g_table, g_real, std::min(g_real->struct_size, sizeof(g_table)));
  g_table.struct_size = std::min(g_real->struct_size, sizeof(g_table));
  plant_fault(g_table);
  out_plugin->table = &g_table;
  out_plugin->name = HAL_FAULT_PLUGIN_NAME;
  return HAL_SUCCESS;
}
