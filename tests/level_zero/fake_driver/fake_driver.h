/* Test-only queries of the stand-in Level Zero driver (libhal_fake_ze.so,
 * built in the test tree, never installed). The real loader opens it through
 * ZE_ENABLE_ALT_DRIVERS; a test reaches these with dlsym on the same file. */
#ifndef HAL_TESTS_LEVEL_ZERO_FAKE_DRIVER_H_
#define HAL_TESTS_LEVEL_ZERO_FAKE_DRIVER_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* zeMemAllocDevice of exactly this many bytes fails with
 * ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY. */
#define FAKE_ZE_OOM_BYTES ((size_t)0x7fff0001u)
/* The devices' maxMemAllocSize: larger allocations fail with
 * ZE_RESULT_ERROR_UNSUPPORTED_SIZE. */
#define FAKE_ZE_MAX_ALLOC_BYTES ((uint64_t)4 << 30)

/* One zeCommandListAppendLaunchKernel as the driver received it: the kernel's
 * arguments and group size as set when the launch was appended. */
typedef struct fake_ze_launch {
  char name[64];
  uint32_t group_count[3];
  uint32_t group_size[3];
  uint32_t arg_count;
  uint32_t arg_sizes[32];
  uint32_t local_args; /* bit i: argument i is a __local size (no value) */
  uint8_t args[512];   /* the values back to back (none for __local ones) */
  uint64_t list_id;    /* which command list (an opaque number) */
} fake_ze_launch_t;

typedef size_t (*fake_ze_launch_count_fn)(void);
typedef int (*fake_ze_launch_get_fn)(size_t index, fake_ze_launch_t* out);
/* what: "allocations", "contexts", "command_lists", "event_pools", "events",
 * "modules", "kernels", "build_logs", "barriers" (appended so far), "event_resets"
 * (zeEventHostReset calls so far) */
typedef long (*fake_ze_live_fn)(const char* what);
/* While paused, appended work waits (event queries answer NOT_READY, and
 * blocking waits wait); unpausing lets each list run it in order. */
typedef void (*fake_ze_set_paused_fn)(int paused);

#ifdef __cplusplus
}
#endif

#endif /* HAL_TESTS_LEVEL_ZERO_FAKE_DRIVER_H_ */
