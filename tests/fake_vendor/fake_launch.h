/* One kernel launch as a stand-in vendor library received it (tests/cuda's
 * libcuda.so.1, tests/hip's libamdhip64.so.5), read back by a test through
 * that library's fake_<vendor>_launch_get. */
#ifndef HAL_TESTS_FAKE_VENDOR_FAKE_LAUNCH_H_
#define HAL_TESTS_FAKE_VENDOR_FAKE_LAUNCH_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The parameter bytes are copied at the call, by the sizes the module gave
 * the kernel (a PTX entry's .param list, a code object's metadata). */
typedef struct fake_kernel_launch {
  char name[64];
  uint32_t grid[3];
  uint32_t block[3];
  uint32_t shared_bytes;
  uint32_t param_count;
  uint32_t param_sizes[64];
  uint8_t params[512]; /* the parameters back to back */
  uint64_t stream_id;  /* which stream (an opaque number) */
  int device;          /* the device current on the launching thread (0 where not modelled) */
} fake_kernel_launch_t;

#ifdef __cplusplus
}
#endif

#endif /* HAL_TESTS_FAKE_VENDOR_FAKE_LAUNCH_H_ */
