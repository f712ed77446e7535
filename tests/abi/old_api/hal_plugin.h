/* HAL plugin ABI: what a vendor implements. Include this (it includes hal.h).
 *
 * A minimal plugin (memory, streams, copies) fills a handful of table entries;
 * everything left NULL is either served by a loader fallback or reported as
 * HAL_ERROR_UNSUPPORTED. tests/loader/plugins/minimal.c is one in full (nine entries). */
#ifndef HAL_PLUGIN_H_
#define HAL_PLUGIN_H_

#include "hal/plugin_v1.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Marks the entry point as the plugin's one exported symbol. Build plugins
 * with -fvisibility=hidden so nothing else is exported. */
#define HAL_PLUGIN_EXPORT __attribute__((visibility("default")))

/* The entry point every plugin defines:
 *
 *   HAL_PLUGIN_EXPORT hal_result_t hal_plugin_entry(const hal_plugin_host_t* host,
 *                                                   hal_plugin_v1_t* out_plugin);
 */
HAL_PLUGIN_EXPORT hal_result_t hal_plugin_entry(const hal_plugin_host_t* host,
                                                hal_plugin_v1_t* out_plugin);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* HAL_PLUGIN_H_ */
