/* Test-only queries of the stand-in HIP runtime (libamdhip64.so.5 built in
 * the test tree, never installed). A test reaches them with dlsym on the
 * library the plugin opened (HAL_HIP_RUNTIME_PATH). */
#ifndef HAL_TESTS_HIP_FAKE_RUNTIME_H_
#define HAL_TESTS_HIP_FAKE_RUNTIME_H_

#include <stddef.h>
#include <stdint.h>

#include "fake_launch.h"

#ifdef __cplusplus
extern "C" {
#endif

/* hipMalloc of exactly this many bytes fails with hipErrorOutOfMemory. */
#define FAKE_HIP_OOM_BYTES ((size_t)0x7fff0001u)

/* One hipModuleLaunchKernel as the runtime received it: the argument bytes
 * are copied at the call, by the sizes of the code object's metadata; device
 * is the device current on the launching thread. */
typedef fake_kernel_launch_t fake_hip_launch_t;

typedef size_t (*fake_hip_launch_count_fn)(void);
typedef int (*fake_hip_launch_get_fn)(size_t index, fake_hip_launch_t* out);
/* what: "allocations", "streams", "events", "modules", "callbacks" (pending
 * hipStreamAddCallback calls), "host_funcs" (hipLaunchHostFunc calls: only the
 * FAKE_HIP_LAUNCH_HOST_FUNC build has it; -1 in the other); -1 for anything else */
typedef long (*fake_hip_live_fn)(const char* what);
/* While paused, enqueued work waits (queries answer hipErrorNotReady);
 * unpausing or any synchronize call lets each stream run it in order. */
typedef void (*fake_hip_set_paused_fn)(int paused);

#ifdef __cplusplus
}
#endif

#endif /* HAL_TESTS_HIP_FAKE_RUNTIME_H_ */
