/* Test-only queries of the stand-in CUDA driver (libcuda.so.1 built in the
 * test tree, never installed). A test reaches them with dlsym on the library
 * the plugin opened (HAL_CUDA_DRIVER_PATH). */
#ifndef HAL_TESTS_CUDA_FAKE_DRIVER_H_
#define HAL_TESTS_CUDA_FAKE_DRIVER_H_

#include <stddef.h>
#include <stdint.h>

#include "fake_launch.h"

#ifdef __cplusplus
extern "C" {
#endif

/* cuMemAlloc of exactly this many bytes fails with CUDA_ERROR_OUT_OF_MEMORY. */
#define FAKE_CUDA_OOM_BYTES ((size_t)0x3fff0001u) /* below the declared total */

/* One cuLaunchKernel as the driver received it: the parameter bytes are
 * copied at the call, by the sizes of the PTX entry's .param list (device: 0,
 * not recorded). */
typedef fake_kernel_launch_t fake_cuda_launch_t;

typedef size_t (*fake_cuda_launch_count_fn)(void);
typedef int (*fake_cuda_launch_get_fn)(size_t index, fake_cuda_launch_t* out);
/* what: "allocations", "streams", "events", "modules", "contexts" (primary context
 * references), "context_creations" (primary contexts made, retained from 0),
 * "driver_thread_calls" (CUDA calls made from a host function on the driver's thread) */
typedef long (*fake_cuda_live_fn)(const char* what);
/* While paused, enqueued work waits (queries answer CUDA_ERROR_NOT_READY);
 * unpausing or any synchronize call lets each stream run it in order. */
typedef void (*fake_cuda_set_paused_fn)(int paused);

/* A context of "another library" (the CUDA runtime's, PyTorch's) a test makes
 * current on its thread with cuCtxSetCurrent, to see that HAL puts it back. */
typedef void* (*fake_cuda_foreign_context_fn)(void);
/* Makes device |ordinal|'s context fail every later call with |code| (a fatal
 * CUresult such as CUDA_ERROR_ILLEGAL_ADDRESS = 700), as CUDA's sticky errors. */
typedef void (*fake_cuda_inject_fault_fn)(int ordinal, int code);

/* The hooks as the fake defines them (fake_driver.cpp includes this header,
 * so a definition of another type does not compile). A test opens them with
 * dlsym as the types above: a call through a pointer of another type is
 * undefined, and clang's -fsanitize=function reports it. */
size_t fake_cuda_launch_count(void);
int fake_cuda_launch_get(size_t index, fake_cuda_launch_t* out);
long fake_cuda_live(const char* what);
void fake_cuda_set_paused(int paused);
void* fake_cuda_foreign_context(void);
void fake_cuda_inject_fault(int ordinal, int code);

#ifdef __cplusplus
}
#endif

#endif /* HAL_TESTS_CUDA_FAKE_DRIVER_H_ */
