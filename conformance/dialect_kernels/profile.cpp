// The kernels profile: the dialect kernels of kernels.hal (arithmetic, wide
// arguments, atomics, barriers, shared memory, f16/bf16, math) on every device
// that takes HAL dialect modules, each checked against a host reference on
// seeded inputs. (The folder is dialect_kernels/: kernels/ holds the suite's
// CPU shared-object kernels.)
#include "registry.hpp"

HALCONFORM_PROFILE("kernels", 5,
                   "HAL dialect kernels (atomics, barriers, shared memory, f16/bf16, math) vs "
                   "host references");
