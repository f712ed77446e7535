/* A loader test plugin: the smallest plugin the loader accepts, only the
 * nine [required] table entries (SPEC.md §10.3), in C. Memory is host memory
 * from aligned_alloc and a stream runs each operation as it is enqueued, so
 * the loader's fallbacks provide memset, host functions, events and
 * device_synchronize. It passes `halconform --profile core`
 * (conformance.minimal.core). A vendor starts from plugins/null instead. */
#include <hal_plugin.h>

#include <stdlib.h>
#include <string.h>

struct hal_impl_device_s {
  int unused;
};
struct hal_impl_stream_s {
  int unused;
};

static struct hal_impl_device_s minimal_device;

static hal_result_t minimal_device_count(hal_plugin_context_t* context, uint32_t* out_count) {
  (void)context;
  *out_count = 1;
  return HAL_SUCCESS;
}

static hal_result_t minimal_device_open(hal_plugin_context_t* context, uint32_t index,
                                        hal_impl_device_t** out_device) {
  (void)context;
  (void)index;
  *out_device = &minimal_device;
  return HAL_SUCCESS;
}

static hal_result_t minimal_device_get_properties(hal_impl_device_t* device,
                                                  hal_device_properties_t* out) {
  (void)device;
  strcpy(out->name, "HAL minimal test device");
  strcpy(out->vendor, "HAL tests");
  strcpy(out->driver_version, "1");
  out->type = HAL_DEVICE_TYPE_CPU;
  /* Claims more than the table backs: the loader clears kernels, host
   * callbacks, stream query and event timing, keeping what is true. */
  out->capabilities = HAL_DEVICE_CAP_UNIFIED_ADDRESSING | HAL_DEVICE_CAP_KERNELS |
                      HAL_DEVICE_CAP_HOST_CALLBACKS | HAL_DEVICE_CAP_STREAM_QUERY |
                      HAL_DEVICE_CAP_EVENT_TIMING;
  out->module_formats = 1u << HAL_MODULE_FORMAT_OPENCL_C;
  /* Launch limits are at least 1 even without kernels (SPEC.md §11.3). */
  out->compute_units = 1;
  out->max_threads_per_block = 1;
  out->max_block_dims[0] = out->max_block_dims[1] = out->max_block_dims[2] = 1;
  out->max_grid_dims[0] = out->max_grid_dims[1] = out->max_grid_dims[2] = 1;
  out->subgroup_size = 1;
  out->total_memory_bytes = 1ull << 30;
  out->max_allocation_bytes = 1ull << 28;
  out->min_alignment_bytes = 64;
  return HAL_SUCCESS;
}

static hal_result_t minimal_mem_alloc(hal_impl_device_t* device, hal_memory_kind_t kind,
                                      size_t size, size_t alignment, void** out_ptr) {
  (void)device;
  (void)kind;
  /* The loader promises at least min_alignment_bytes (SPEC.md §10.3). */
  if (alignment < 64) return HAL_ERROR_INTERNAL;
  /* aligned_alloc wants a size that is a multiple of the alignment. */
  void* ptr = aligned_alloc(alignment, (size + alignment - 1) / alignment * alignment);
  if (ptr == NULL) return HAL_ERROR_OUT_OF_MEMORY;
  *out_ptr = ptr;
  return HAL_SUCCESS;
}

static hal_result_t minimal_mem_free(hal_impl_device_t* device, void* ptr) {
  (void)device;
  free(ptr);
  return HAL_SUCCESS;
}

static hal_result_t minimal_memcpy_async(hal_impl_stream_t* stream, void* dst, const void* src,
                                         size_t size) {
  (void)stream;
  memcpy(dst, src, size);
  return HAL_SUCCESS;
}

static hal_result_t minimal_stream_create(hal_impl_device_t* device, hal_stream_flags_t flags,
                                          hal_impl_stream_t** out_stream) {
  (void)device;
  (void)flags;
  *out_stream = malloc(sizeof(hal_impl_stream_t));
  return *out_stream != NULL ? HAL_SUCCESS : HAL_ERROR_OUT_OF_MEMORY;
}

static hal_result_t minimal_stream_destroy(hal_impl_stream_t* stream) {
  free(stream);
  return HAL_SUCCESS;
}

static hal_result_t minimal_stream_synchronize(hal_impl_stream_t* stream) {
  (void)stream;
  return HAL_SUCCESS;
}

static const hal_plugin_table_v1_t minimal_table = {
    .struct_size = sizeof(hal_plugin_table_v1_t),
    .device_count = minimal_device_count,
    .device_open = minimal_device_open,
    .device_get_properties = minimal_device_get_properties,
    .mem_alloc = minimal_mem_alloc,
    .mem_free = minimal_mem_free,
    .memcpy_async = minimal_memcpy_async,
    .stream_create = minimal_stream_create,
    .stream_destroy = minimal_stream_destroy,
    .stream_synchronize = minimal_stream_synchronize,
};

HAL_PLUGIN_EXPORT hal_result_t hal_plugin_entry(const hal_plugin_host_t* host,
                                                hal_plugin_v1_t* out_plugin) {
  if (HAL_VERSION_MAJOR(host->abi_version) != HAL_ABI_VERSION_MAJOR) return HAL_ERROR_ABI_MISMATCH;
  out_plugin->abi_version = HAL_ABI_VERSION;
  out_plugin->name = MINIMAL_PLUGIN_NAME;
  out_plugin->version = "1.0";
  out_plugin->vendor = "HAL tests";
  out_plugin->build_id = "test";
  out_plugin->table = &minimal_table;
  return HAL_SUCCESS;
}
