/* The zoo of broken plugins: one source, one fault per build (ZOO_FAULT). Each
 * must be skipped with a precise reason when found by search, and must make
 * hal_init fail when named explicitly. */
#include <hal_plugin.h>

#include <string.h>

#define ZOO_ENTRY_ABI_MISMATCH 1 /* the entry refuses the loader's ABI */
#define ZOO_ABI_MAJOR_2 2        /* claims to implement ABI 2.0.0 */
#define ZOO_NULL_TABLE 3         /* returns no function table */
#define ZOO_MISSING_ENTRY 4      /* the table lacks memcpy_async */
#define ZOO_INIT_FAILS 5         /* the entry fails with a set_error sentence */
#define ZOO_DEVICE_COUNT_FAILS 6 /* device_count fails with a sentence */
#define ZOO_MISSING_DEPENDENCY 7 /* linked against a library absent at run time */
#define ZOO_NO_ENTRY 8           /* exports no hal_plugin_entry */
#define ZOO_TOO_MANY_DEVICES 9   /* device_count answers 0xffffffff */

#if ZOO_FAULT == ZOO_MISSING_DEPENDENCY
int zoo_dependency_answer(void);
#endif

static const hal_plugin_host_t* zoo_host;

static hal_result_t zoo_device_count(hal_plugin_context_t* context, uint32_t* out_count) {
  (void)context;
#if ZOO_FAULT == ZOO_DEVICE_COUNT_FAILS
  (void)out_count;
  zoo_host->set_error(zoo_host->host_context, HAL_ERROR_DEVICE_LOST, -3,
                      "zoo driver lost its devices");
  return HAL_ERROR_DEVICE_LOST;
#elif ZOO_FAULT == ZOO_TOO_MANY_DEVICES
  *out_count = 0xffffffffu;
  return HAL_SUCCESS;
#else
  *out_count = 0;
  return HAL_SUCCESS;
#endif
}

static hal_result_t zoo_unsupported(void) {
  return HAL_ERROR_UNSUPPORTED;
}

/* Never called: the faults stop the loader before, or there are no devices. */
#define ZOO_STUB(type) ((type)(void (*)(void))zoo_unsupported)

static const hal_plugin_table_v1_t zoo_table = {
    .struct_size = sizeof(hal_plugin_table_v1_t),
    .device_count = zoo_device_count,
    .device_open = ZOO_STUB(hal_result_t(*)(hal_plugin_context_t*, uint32_t, hal_impl_device_t**)),
    .device_get_properties =
        ZOO_STUB(hal_result_t(*)(hal_impl_device_t*, hal_device_properties_t*)),
    .mem_alloc =
        ZOO_STUB(hal_result_t(*)(hal_impl_device_t*, hal_memory_kind_t, size_t, size_t, void**)),
    .mem_free = ZOO_STUB(hal_result_t(*)(hal_impl_device_t*, void*)),
#if ZOO_FAULT != ZOO_MISSING_ENTRY
    .memcpy_async = ZOO_STUB(hal_result_t(*)(hal_impl_stream_t*, void*, const void*, size_t)),
#endif
    .stream_create =
        ZOO_STUB(hal_result_t(*)(hal_impl_device_t*, hal_stream_flags_t, hal_impl_stream_t**)),
    .stream_destroy = ZOO_STUB(hal_result_t(*)(hal_impl_stream_t*)),
    .stream_synchronize = ZOO_STUB(hal_result_t(*)(hal_impl_stream_t*)),
};

#if ZOO_FAULT == ZOO_NO_ENTRY
/* Exports a symbol, just not the entry. */
__attribute__((visibility("default"))) const void* zoo_not_an_entry(void) {
  return zoo_host != NULL ? (const void*)&zoo_table : NULL;
}
#else
HAL_PLUGIN_EXPORT hal_result_t hal_plugin_entry(const hal_plugin_host_t* host,
                                                hal_plugin_v1_t* out_plugin) {
  zoo_host = host;
  host->log(host->host_context, HAL_LOG_INFO, "zoo plugin " ZOO_NAME " entered");
  out_plugin->abi_version = HAL_ABI_VERSION;
  out_plugin->name = ZOO_NAME;
  out_plugin->version = "0";
  out_plugin->vendor = "HAL zoo";
  out_plugin->build_id = "zoo";
  out_plugin->table = &zoo_table;
#if ZOO_FAULT == ZOO_ENTRY_ABI_MISMATCH
  return HAL_ERROR_ABI_MISMATCH;
#elif ZOO_FAULT == ZOO_ABI_MAJOR_2
  out_plugin->abi_version = HAL_MAKE_VERSION(2, 0, 0);
#elif ZOO_FAULT == ZOO_NULL_TABLE
  out_plugin->table = NULL;
#elif ZOO_FAULT == ZOO_INIT_FAILS
  host->set_error(host->host_context, HAL_ERROR_DEVICE_LOST, 42,
                  "zoo driver is not installed on this machine");
  return HAL_ERROR_DEVICE_LOST;
#elif ZOO_FAULT == ZOO_MISSING_DEPENDENCY
  if (zoo_dependency_answer() != 42) return HAL_ERROR_INTERNAL;
#endif
  return HAL_SUCCESS;
}
#endif
