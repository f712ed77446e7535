/* HAL public C API: library lifetime, versions, plugins and their load reports. */
#ifndef HAL_INIT_H_
#define HAL_INIT_H_

#include "hal/result.h"

#ifdef __cplusplus
extern "C" {
#endif

/*===------------------------------------------------------------------===*
 * Types and enums
 *===------------------------------------------------------------------===*/

/* Options of hal_init. Every field has a meaning when zero. */
typedef struct hal_init_options {
  size_t struct_size; /* [in] sizeof(hal_init_options_t) */
  const void* next;   /* [in] extension chain, NULL */
  /* [optional] Extra plugin directories searched before HAL_PLUGIN_PATH, separated by ':'. */
  const char* plugin_path;
  /* [optional] An explicit list of plugins (names or paths, separated by ',').
   * Overrides HAL_PLUGINS. When set, only these are loaded and each one that
   * fails makes hal_init fail with HAL_ERROR_PLUGIN_LOAD. */
  const char* plugins;
  /* Do not search the default directories (install prefix, build tree). */
  uint32_t skip_default_search;
  uint32_t reserved;
} hal_init_options_t;

#define HAL_INIT_OPTIONS_INIT \
  { sizeof(hal_init_options_t), NULL, NULL, NULL, 0, 0 }

/* What happened to one plugin candidate. */
typedef enum hal_plugin_outcome HAL_ENUM_TYPE {
  HAL_PLUGIN_LOADED = 0,            /* loaded, negotiated, initialised */
  HAL_PLUGIN_SKIPPED_DUPLICATE = 1, /* same plugin name already loaded from an earlier path */
  HAL_PLUGIN_FAILED_OPEN = 2,       /* dlopen failed: not ELF, missing dependency, permissions */
  HAL_PLUGIN_FAILED_SYMBOL = 3,     /* the entry symbol hal_plugin_entry is missing */
  HAL_PLUGIN_FAILED_ABI = 4,        /* the ABI could not be negotiated */
  HAL_PLUGIN_FAILED_INIT = 5,       /* the entry or device enumeration returned an error */
  HAL_PLUGIN_OUTCOME_MAX_ENUM = 0x7fffffff
} hal_plugin_outcome_t;

/* The load report of one plugin candidate. Strings are owned by the loader and
 * valid until hal_shutdown. */
typedef struct hal_plugin_report {
  size_t struct_size;   /* [in] sizeof(hal_plugin_report_t) as the caller knows it */
  const void* next;     /* [in] extension chain, NULL */
  const char* path;     /* the file the loader tried */
  const char* name;     /* the plugin's name ("cpu"), or the file stem when unknown */
  const char* version;  /* the plugin's own version string, "" when unknown */
  const char* vendor;   /* the plugin's vendor string, "" when unknown */
  const char* build_id; /* the plugin's build identifier, "" when unknown */
  const char* reason;   /* why it failed or was skipped; "" when loaded */
  const char* found_by; /* "HAL_PLUGINS", "options", "HAL_PLUGIN_PATH", "install", "build" */
  hal_plugin_outcome_t outcome; /* what happened */
  hal_result_t result;          /* the result behind a failure, HAL_SUCCESS when loaded */
  uint32_t abi_version;         /* the ABI the plugin implements (HAL_MAKE_VERSION), 0 unknown */
  uint32_t device_count;        /* devices it contributed */
  uint32_t requested;           /* 1 when named explicitly (HAL_PLUGINS or options) */
  uint32_t reserved;
} hal_plugin_report_t;

/*===------------------------------------------------------------------===*
 * Functions
 *===------------------------------------------------------------------===*/

/* Returns the version of the loaded libhal as HAL_MAKE_VERSION(major, minor,
 * patch). An application compares it with HAL_ABI_VERSION it was built with.
 * Thread-safe. Never fails. Works before hal_init. */
HAL_API uint32_t hal_get_version(void);

/* Discovers and loads plugins and enumerates their devices. |options| may be
 * NULL. Reference counted: each successful hal_init needs one hal_shutdown;
 * later calls only add a reference and ignore |options|.
 * Search order: HAL_PLUGINS / options->plugins (explicit list, exclusive),
 * else options->plugin_path, HAL_PLUGIN_PATH, the build tree's plugin
 * directory, the install prefix's plugin directory. A plugin found by search
 * that fails is skipped with its reason recorded; one named explicitly that
 * fails makes hal_init return HAL_ERROR_PLUGIN_LOAD (nothing stays loaded).
 * Zero plugins or devices is success.
 * Errors: HAL_ERROR_INVALID_ARGUMENT (struct_size too small),
 * HAL_ERROR_PLUGIN_LOAD. Not thread-safe against hal_shutdown or other calls
 * on other threads: call it before using HAL from several threads. */
HAL_API hal_result_t hal_init(const hal_init_options_t* options);

/* Drops one reference taken by hal_init; the last one shuts every plugin down
 * and invalidates every handle and pointer HAL gave out. Returns
 * HAL_ERROR_NOT_INITIALIZED when HAL is not initialised. Not thread-safe: no
 * other HAL call may run concurrently with the last hal_shutdown. */
HAL_API hal_result_t hal_shutdown(void);

/* Number of plugin candidates the loader considered (loaded or not). Thread-safe.
 * Errors: HAL_ERROR_NOT_INITIALIZED, HAL_ERROR_NULL_POINTER. */
HAL_API hal_result_t hal_plugin_report_count(uint32_t* out_count);

/* Fills |out_report| for candidate |index| (0 <= index < count). Only
 * out_report->struct_size bytes are written. Thread-safe.
 * Errors: HAL_ERROR_NOT_INITIALIZED, HAL_ERROR_NULL_POINTER,
 * HAL_ERROR_INVALID_ARGUMENT (struct_size too small), HAL_ERROR_NOT_FOUND (index). */
HAL_API hal_result_t hal_plugin_report_get(uint32_t index, hal_plugin_report_t* out_report);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* HAL_INIT_H_ */
