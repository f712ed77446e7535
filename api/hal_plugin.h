/* HAL plugin ABI: what a vendor implements. Include this (it includes hal.h).
 *
 * Start from plugins/null: the skeleton to copy (one device on host memory,
 * in-order streams, timed events, no kernels; every gap marked TODO(null)),
 * built against an installed HAL with find_package(hal) and hal_add_plugin().
 * SPEC.md §10 is the contract; hal/plugin_v1.h marks each table entry
 * [required], [group: ...] or [optional: fallback ...]. `halconform --plugin
 * PATH --profile core` certifies the result. */
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
