/* HAL plugin ABI, version 1. FROZEN: a later ABI major gets plugin_v2.h; a
 * minor release only appends entries at the end of hal_plugin_table_v1_t and
 * fields at the end of the structs, which struct_size tells apart.
 *
 * A plugin is a shared object that exports exactly one symbol,
 * hal_plugin_entry (HAL_PLUGIN_ENTRY_NAME). The loader calls it once with the
 * services it offers; the plugin checks the ABI major, fills |out_plugin| with
 * its identity, its context and one function table, and returns HAL_SUCCESS.
 *
 * Each table entry below is marked:
 * - [required]: the loader refuses a plugin whose table leaves it NULL: the
 *   load fails (FAILED_ABI, HAL_ERROR_ABI_MISMATCH) and the plugin report's
 *   reason names the entry. The nine: device_count, device_open,
 *   device_get_properties, mem_alloc, mem_free, memcpy_async, stream_create,
 *   stream_destroy, stream_synchronize.
 * - [group: ...]: used only when every entry of the group is set; otherwise
 *   the loader serves the whole group itself, or reports it unsupported.
 * - [optional: fallback ...]: NULL means "not implemented"; the loader then
 *   does what the mark says. A NULL optional entry never disables the plugin.
 * SPEC.md §10 is the full contract; plugins/null is a plugin to start from.
 *
 * Rules for every table entry:
 * - The loader has already validated handles, NULL pointers, sizes and the
 *   bounds of HAL allocations; the plugin checks what only it can know
 *   (device limits, module contents, its driver's answers).
 * - On failure the plugin calls host->set_error() with a sentence and the
 *   vendor's native code, then returns the result. It keeps no thread-local
 *   error state of its own.
 * - Objects the plugin returns (hal_impl_*_t) are opaque to the loader. The
 *   loader wraps each in a public handle carrying the dispatch header, so a
 *   plugin never sees a public handle and never needs to validate one.
 * - Entries may be called from any thread concurrently, except
 *   plugin_shutdown, which is called once after every other call returned.
 */
#ifndef HAL_PLUGIN_V1_H_
#define HAL_PLUGIN_V1_H_

#include "hal.h"

#ifdef __cplusplus
extern "C" {
#endif

/*===------------------------------------------------------------------===*
 * Types
 *===------------------------------------------------------------------===*/

/* The name of the one symbol a plugin exports. */
#define HAL_PLUGIN_ENTRY_NAME "hal_plugin_entry"

/* Plugin-side objects, opaque to the loader. A plugin defines these structs
 * (in C++ usually as its own class names, reinterpret_cast at the table
 * boundary). */
typedef struct hal_plugin_context_s hal_plugin_context_t;
typedef struct hal_impl_device_s hal_impl_device_t;
typedef struct hal_impl_stream_s hal_impl_stream_t;
typedef struct hal_impl_event_s hal_impl_event_t;
typedef struct hal_impl_module_s hal_impl_module_t;
typedef struct hal_impl_kernel_s hal_impl_kernel_t;
typedef struct hal_impl_comm_s hal_impl_comm_t;
typedef struct hal_impl_op_plan_s hal_impl_op_plan_t;

typedef enum hal_log_level HAL_ENUM_TYPE {
  HAL_LOG_DEBUG = 0,
  HAL_LOG_INFO = 1,
  HAL_LOG_WARNING = 2,
  HAL_LOG_LEVEL_MAX_ENUM = 0x7fffffff
} hal_log_level_t;

/* The kinds of collective call a plugin receives in comm_enqueue. */
typedef enum hal_collective_kind HAL_ENUM_TYPE {
  HAL_COLLECTIVE_ALLREDUCE = 0,
  HAL_COLLECTIVE_BROADCAST = 1,
  HAL_COLLECTIVE_REDUCE = 2,
  HAL_COLLECTIVE_ALLGATHER = 3,
  HAL_COLLECTIVE_REDUCE_SCATTER = 4,
  HAL_COLLECTIVE_ALLTOALL = 5,
  HAL_COLLECTIVE_SEND = 6,
  HAL_COLLECTIVE_RECV = 7,
  /* Appended; only to plugins whose devices declare HAL_DEVICE_CAP_ALLTOALLV. */
  HAL_COLLECTIVE_ALLTOALLV = 8,
  HAL_COLLECTIVE_KIND_MAX_ENUM = 0x7fffffff
} hal_collective_kind_t;

/* One collective call as the public function received it, validated. */
typedef struct hal_collective_call {
  hal_collective_kind_t kind;
  hal_dtype_t dtype;
  hal_reduce_op_t op; /* reductions only */
  uint32_t peer;      /* the root (broadcast, reduce) or the peer (send, recv) */
  const void* send;   /* NULL for recv */
  void* recv;         /* NULL for send */
  size_t count;       /* elements, with the public function's meaning */
} hal_collective_call_t;

/* The layout of an HAL_COLLECTIVE_ALLTOALLV call: the call's |send| points to
 * it, its |recv| is NULL and its |count| is the rank count, the length of
 * each array. Counts and displacements are in elements; the loader filled in
 * packed displacements where the caller gave none and checked every range
 * against the buffers. Valid during comm_enqueue only: a plugin copies what
 * it keeps. Whether the ranks' counts agree is the plugin's to check. */
typedef struct hal_alltoallv_layout {
  const void* sendbuf;
  void* recvbuf;
  const size_t* send_counts; /* [count]: elements to rank r */
  const size_t* send_displs; /* [count]: where they start in sendbuf */
  const size_t* recv_counts; /* [count]: elements from rank r */
  const size_t* recv_displs; /* [count]: where they land in recvbuf */
} hal_alltoallv_layout_t;

/* Appended: the loader's bootstrap, lent to comm_init_rank_exchange so that
 * a plugin whose library makes its own id (NCCL's ncclUniqueId) can hand it
 * to its peers over the rendezvous HAL already made (the unique id's store,
 * the TCP store). Valid during that call only. */
typedef struct hal_comm_exchange {
  size_t struct_size; /* sizeof(hal_comm_exchange_t) of the loader */
  void* context;      /* pass back to broadcast */
  /* Blocking: every rank calls it with the same |root| and |size|; the
   * |size| bytes at |data| on rank |root| are copied to |data| on every
   * other rank. Within the communicator's deadline, else HAL_ERROR_TIMEOUT;
   * HAL_ERROR_REMOTE (a peer or the store went away),
   * HAL_ERROR_ARGUMENT_MISMATCH (the ranks disagree on root or size). The
   * loader keeps the detail: the plugin returns the result without
   * set_error. */
  hal_result_t (*broadcast)(void* context, uint32_t root, void* data, size_t size);
} hal_comm_exchange_t;

/* Services the loader offers a plugin. Valid from the entry call until
 * plugin_shutdown returns. */
typedef struct hal_plugin_host {
  size_t struct_size;   /* sizeof(hal_plugin_host_t) of the loader */
  uint32_t abi_version; /* the loader's HAL_ABI_VERSION */
  uint32_t reserved;
  void* host_context; /* pass back to the functions below */
  /* Records the detail of the failure the plugin is about to return on the
   * calling thread: a sentence and the vendor's own code (0 if none). */
  void (*set_error)(void* host_context, hal_result_t result, int64_t native_code,
                    const char* message);
  /* A diagnostic line (shown with HAL_LOG=1); never an error. */
  void (*log)(void* host_context, hal_log_level_t level, const char* message);
} hal_plugin_host_t;

/* The function table. Entries are grouped by object, in the order of the
 * public headers. */
typedef struct hal_plugin_table_v1 {
  size_t struct_size; /* sizeof(hal_plugin_table_v1_t) the plugin was built with */

  /* plugin */
  /* [optional: fallback nothing is called] */
  void (*plugin_shutdown)(hal_plugin_context_t* context);
  /* [required] */
  hal_result_t (*device_count)(hal_plugin_context_t* context, uint32_t* out_count);
  /* [required] */
  hal_result_t (*device_open)(hal_plugin_context_t* context, uint32_t index,
                              hal_impl_device_t** out_device);
  /* [optional: fallback nothing is called] */
  void (*device_close)(hal_impl_device_t* device);

  /* device: the loader passes a zeroed struct whose struct_size is the
   * loader's; the plugin writes the fields it knows, and the loader sets
   * index, plugin_device_index and plugin. Launch limits
   * (compute_units, max_threads_per_block, max_block_dims, max_grid_dims,
   * subgroup_size) are at least 1 even on a device without kernels.
   * [required] */
  hal_result_t (*device_get_properties)(hal_impl_device_t* device,
                                        hal_device_properties_t* out_properties);
  /* [optional: fallback the loader synchronises each live stream] */
  hal_result_t (*device_synchronize)(hal_impl_device_t* device);

  /* memory: size > 0, alignment a power of two and at least the device's
   * min_alignment_bytes (the loader resolves 0 and smaller values to it).
   * Before mem_free the loader has synchronised the device, so no enqueued
   * work still uses |ptr|. memcpy_async/memset_async get size > 0 and ranges
   * the loader has bounds-checked against the allocation table. */
  /* [required] */
  hal_result_t (*mem_alloc)(hal_impl_device_t* device, hal_memory_kind_t kind, size_t size,
                            size_t alignment, void** out_ptr);
  /* [required] */
  hal_result_t (*mem_free)(hal_impl_device_t* device, void* ptr);
  /* [required] */
  hal_result_t (*memcpy_async)(hal_impl_stream_t* stream, void* dst, const void* src, size_t size);
  /* [optional: fallback memcpy_async from a host staging buffer] */
  hal_result_t (*memset_async)(hal_impl_stream_t* stream, void* dst, uint8_t value, size_t size);

  /* stream */
  /* [required] */
  hal_result_t (*stream_create)(hal_impl_device_t* device, hal_stream_flags_t flags,
                                hal_impl_stream_t** out_stream);
  /* [required] */
  hal_result_t (*stream_destroy)(hal_impl_stream_t* stream);
  /* [required] */
  hal_result_t (*stream_synchronize)(hal_impl_stream_t* stream);
  /* [optional: fallback stream_synchronize, then HAL_SUCCESS; clears
   * HAL_DEVICE_CAP_STREAM_QUERY] */
  hal_result_t (*stream_query)(hal_impl_stream_t* stream);
  /* |event| belongs to this plugin (maybe another of its devices).
   * [optional: fallback a host function that waits for the event] */
  hal_result_t (*stream_wait_event)(hal_impl_stream_t* stream, hal_impl_event_t* event);
  /* [optional: fallback stream_synchronize, then |fn| on the calling thread;
   * clears HAL_DEVICE_CAP_HOST_CALLBACKS] */
  hal_result_t (*stream_enqueue_host_fn)(hal_impl_stream_t* stream, hal_host_fn_t fn,
                                         void* user_data);

  /* event: [group: events] event_create, event_destroy, event_record,
   * event_query and event_synchronize are used only all together; with any
   * of them NULL the loader's own events (built on host functions) serve the
   * plugin's devices. */
  hal_result_t (*event_create)(hal_impl_device_t* device, hal_event_flags_t flags,
                               hal_impl_event_t** out_event);
  hal_result_t (*event_destroy)(hal_impl_event_t* event);
  hal_result_t (*event_record)(hal_impl_event_t* event, hal_impl_stream_t* stream);
  hal_result_t (*event_query)(hal_impl_event_t* event);
  hal_result_t (*event_synchronize)(hal_impl_event_t* event);
  /* [optional: fallback none; clears HAL_DEVICE_CAP_EVENT_TIMING, also when
   * the events group is incomplete] */
  hal_result_t (*event_elapsed_ms)(hal_impl_event_t* start, hal_impl_event_t* end, float* out_ms);

  /* module and kernel: kernels belong to their module; module_unload frees them.
   * [group: kernels] module_load, module_unload, kernel_get and
   * launch_kernel: with any of them NULL every call of the group returns
   * HAL_ERROR_UNSUPPORTED and HAL_DEVICE_CAP_KERNELS is cleared. */
  hal_result_t (*module_load)(hal_impl_device_t* device, const hal_module_desc_t* desc,
                              hal_impl_module_t** out_module);
  hal_result_t (*module_unload)(hal_impl_module_t* module);
  hal_result_t (*kernel_get)(hal_impl_module_t* module, const hal_kernel_desc_t* desc,
                             hal_impl_kernel_t** out_kernel, hal_kernel_info_t* out_info);
  /* The loader has checked the grid and block against the device's limits
   * and the arguments against the kernel's signature. */
  hal_result_t (*launch_kernel)(hal_impl_stream_t* stream, hal_impl_kernel_t* kernel,
                                const hal_launch_config_t* config, uint32_t arg_count,
                                const hal_kernel_arg_t* args);

  /* ---- appended after v1.0: collectives (SPEC.md §10.4) ----
   * [group: collectives] A plugin leaves all of them NULL (the loader then
   * runs host-staged collectives) or sets at least comm_init_local,
   * comm_destroy, comm_abort and comm_enqueue. |config| is complete: the
   * loader resolved the defaults (timeout_ms > 0). */

  /* Ranks 0..count-1 over distinct devices of this plugin, one process. */
  hal_result_t (*comm_init_local)(uint32_t count, hal_impl_device_t* const* devices,
                                  const hal_comm_config_t* config, hal_impl_comm_t** out_comms);
  /* One rank of a multi-process communicator. HAL_ERROR_UNSUPPORTED
   * (without set_error) for a bootstrap the plugin does not serve makes the
   * loader use its host-staged path.
   * [optional: fallback the loader's host-staged path] */
  hal_result_t (*comm_init_rank)(hal_impl_device_t* device, uint32_t nranks, uint32_t rank,
                                 const hal_comm_config_t* config, hal_impl_comm_t** out_comm);
  /* Frees the plugin's rank; enqueued calls keep what they need. */
  hal_result_t (*comm_destroy)(hal_impl_comm_t* comm);
  /* Makes in-flight and queued calls of this rank fail promptly; bounded,
   * never waits for peers. comm_destroy follows. */
  void (*comm_abort)(hal_impl_comm_t* comm);
  /* HAL_SUCCESS or the first asynchronous failure of the rank.
   * [optional: fallback HAL_SUCCESS] */
  hal_result_t (*comm_get_async_error)(hal_impl_comm_t* comm);
  /* Enqueues |call_count| calls (one call, or a group's calls on this rank)
   * on |stream| as one operation whose parts progress together. The loader
   * has checked handles, counts, dtypes, ops, roots and peers, and the
   * buffers against the allocation table and the communicator's device. */
  hal_result_t (*comm_enqueue)(hal_impl_comm_t* comm, hal_impl_stream_t* stream,
                               uint32_t call_count, const hal_collective_call_t* calls);

  /* ---- appended after v1.0: operators (SPEC.md §17) ----
   * [group: operators] op_plan_create, op_plan_destroy and op_execute: with
   * any of them NULL the plugin has no operators of its own, and the
   * loader's portable and reference implementations serve its devices. */

  /* Plans |desc|, which the loader has checked against its op's rules
   * (shapes, dtypes, strides). A plugin that does not implement this case
   * returns HAL_ERROR_UNSUPPORTED after set_error with a sentence saying why
   * (the dtype, the layout, the shape); the loader then tries the next
   * implementation. |out_implementation| names the implementation ("cpu.onednn"):
   * static storage of the plugin. */
  hal_result_t (*op_plan_create)(hal_impl_device_t* device, const hal_op_header_t* desc,
                                 hal_op_plan_flags_t flags, hal_impl_op_plan_t** out_plan,
                                 size_t* out_workspace_bytes, const char** out_implementation);
  /* Executions already enqueued keep what they need. */
  hal_result_t (*op_plan_destroy)(hal_impl_op_plan_t* plan);
  /* Enqueues one execution on |stream| (of the plan's device). The loader has
   * checked the counts, every operand against its tensor's extent in the
   * allocation table, the forbidden overlaps and the workspace size. */
  hal_result_t (*op_execute)(hal_impl_op_plan_t* plan, hal_impl_stream_t* stream,
                             const hal_op_exec_args_t* args);

  /* ---- appended after v1.0: bootstrap exchange (SPEC.md §10.4) ----
   * One rank of a multi-process communicator meeting its peers through the
   * loader's bootstrap (HAL_COMM_BOOTSTRAP_UNIQUE_ID and _TCP_STORE): the
   * loader has joined the store with the other ranks and lends |exchange|
   * to move the plugin's own bytes between them. Used in place of
   * comm_init_rank for those bootstraps (MPI still goes to comm_init_rank);
   * HAL_ERROR_UNSUPPORTED (without set_error) makes the loader run the rank
   * host-staged over the same store.
   * [optional: fallback comm_init_rank, then the host-staged path; used only
   * by a plugin with the collectives group] */
  hal_result_t (*comm_init_rank_exchange)(hal_impl_device_t* device, uint32_t nranks, uint32_t rank,
                                          const hal_comm_config_t* config,
                                          const hal_comm_exchange_t* exchange,
                                          hal_impl_comm_t** out_comm);

  /* ---- appended after v1.0: the implementation list (SPEC.md §17.3) ----
   * Names, before anything is planned, the plugin's own implementation that
   * op_plan_create would use for |kind| ("cpu.onednn"; static storage of the
   * plugin), or NULL when the plugin has none of its own for |kind|. The
   * loader filters this name (HAL_OPS_IMPLEMENTATIONS) and calls
   * op_plan_create only when it is allowed; the plan reports this name.
   * Pure: no work, no set_error.
   * [optional: without it the plugin is one candidate named by the plugin's
   * own name; used only by a plugin with the operators group] */
  const char* (*op_implementation)(hal_impl_device_t* device, hal_op_kind_t kind);
} hal_plugin_table_v1_t;

/* What a plugin tells the loader about itself. The loader zeroes it and sets
 * struct_size to its own sizeof; the plugin writes no more than that. */
typedef struct hal_plugin_v1 {
  size_t struct_size;   /* [in] set by the loader */
  uint32_t abi_version; /* [out] HAL_ABI_VERSION the plugin was built against */
  uint32_t reserved;
  /* Identity strings are static storage of the plugin, valid until it is unloaded. */
  const char* name;                   /* [out] short, unique, lower case: "cpu", "opencl" */
  const char* version;                /* [out] the plugin's own version */
  const char* vendor;                 /* [out] who made it */
  const char* build_id;               /* [out] e.g. a git hash and build date */
  hal_plugin_context_t* context;      /* [out] passed back to the table's plugin entries */
  const hal_plugin_table_v1_t* table; /* [out] static storage, valid until unload */
} hal_plugin_v1_t;

/* The entry point's type. It returns HAL_ERROR_ABI_MISMATCH when
 * HAL_VERSION_MAJOR(host->abi_version) is not the major it implements, and
 * any other error (with host->set_error) when it cannot initialise. */
typedef hal_result_t (*hal_plugin_entry_fn_t)(const hal_plugin_host_t* host,
                                              hal_plugin_v1_t* out_plugin);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* HAL_PLUGIN_V1_H_ */
