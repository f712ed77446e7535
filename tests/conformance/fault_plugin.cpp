// A deliberately broken plugin for halconform's self-test: it loads the real
// cpu plugin, copies its function table, and replaces behaviours with one
// planted fault, chosen by the environment variable HALCONFORM_FAULT (a name
// of kFaults below). The self-test runs halconform once per fault and checks
// that the certification fails with the right test, and a message naming the
// fault. Built twice: hal_plugin_fault.so (the fault from the environment)
// and hal_plugin_fault_none.so (always healthy, HAL_FAULT_NONE_ONLY), which
// carries the planted stale known-failure file.
//
// Why destroy_result plants a wrong destroy *result*: the loader validates
// every public handle, so a plugin never sees a destroyed handle and cannot
// answer one wrongly. What a plugin can still get wrong is the result of a
// destroy that did its work; the loader passes that through to the caller.
#include <dlfcn.h>
#include <hal_plugin.h>

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

#include "fault_ops.hpp"
#include "hal_util/env.hpp"

namespace {

hal_plugin_table_v1_t g_table;        // the real table with the fault's entries replaced
const hal_plugin_table_v1_t* g_real;  // the cpu plugin's own table

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
  out->compute_units *= 16;
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
};

// The fault named by HALCONFORM_FAULT ("none" when unset); nullptr for an unknown name.
const Fault* selected_fault() {
#ifdef HAL_FAULT_NONE_ONLY
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
  if (fault == nullptr) {
    host->set_error(host->host_context, HAL_ERROR_INVALID_ARGUMENT, 0,
                    "HALCONFORM_FAULT names no planted fault");
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
  g_real = out_plugin->table;
  std::memset(&g_table, 0, sizeof(g_table));
  std::memcpy(&g_table, g_real, std::min(g_real->struct_size, sizeof(g_table)));
  g_table.struct_size = std::min(g_real->struct_size, sizeof(g_table));
  fault->plant(g_table);
  out_plugin->table = &g_table;
  out_plugin->name = HAL_FAULT_PLUGIN_NAME;
  return HAL_SUCCESS;
}
