// The stress profile: concurrency and churn for a bounded time (--duration).
#include "registry.hpp"

HALCONFORM_PROFILE("stress", 10,
                   "threads x streams, allocation churn past the declared memory, event chains");
