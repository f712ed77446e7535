// The performance profile: achieved against declared figures, recorded as
// metrics; a test fails only on a gross violation (see SPEC.md, Conformance).
#include "registry.hpp"

HALCONFORM_PROFILE("performance", 20,
                   "copy bandwidth per direction, launch latency, FMA throughput vs peak");
