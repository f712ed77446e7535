// The core profile: every promise of hal.h (memory, streams, events,
// kernels, error paths, the plugin's load report), checked on each device
// against what the device declares.
#include "registry.hpp"

HALCONFORM_PROFILE("core", 0,
                   "everything in hal.h: memory, streams, events, kernels, errors, load report");
