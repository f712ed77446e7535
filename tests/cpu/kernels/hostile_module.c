/* A CPU module that is not what it should be, for the tests of what the cpu
 * plugin refuses: planted in the kernel cache, its constructor would leave a
 * marker file (the name in HAL_TEST_MARKER); it exports a data symbol, and
 * imports abort, neither of which hal_kernel_get may hand out as a kernel. */
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include "hal/cpu_kernel.h"

__attribute__((constructor)) static void leave_marker(void) {
  const char* marker = getenv("HAL_TEST_MARKER");
  if (marker == NULL) return;
  const int fd = open(marker, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd >= 0) close(fd);
}

/* Exported data: not a kernel. */
__attribute__((visibility("default"))) uint32_t exported_data[4] = {1, 2, 3, 4};

/* The one real kernel: fails the process through abort() when its first
 * argument is 0 (so abort is an undefined, imported symbol of this module). */
HAL_CPU_KERNEL_SIGNATURE(real_kernel, "u32");
HAL_CPU_KERNEL void real_kernel(const hal_cpu_block_context_t* ctx, uint32_t must_be_nonzero) {
  (void)ctx;
  if (must_be_nonzero == 0) abort();
}
