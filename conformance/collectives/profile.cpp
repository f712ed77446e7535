// The collectives profile: every collective over ranks of this process on the
// device under test and its sibling devices, abort, and a killed peer process.
#include "registry.hpp"

HALCONFORM_PROFILE("collectives", 30,
                   "collectives x dtypes x reductions x counts over 1..N in-process ranks, abort, "
                   "a killed peer process");
