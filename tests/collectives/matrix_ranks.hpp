// How many ranks the collectives matrices go up to. ThreadSanitizer stops at 3: the thread code
// that 4 ranks run is the code 3 ranks run (one thread or process per rank, an odd ring, each
// path the chooser has; collective/path.cpp looks at no rank count but "fewer elements than
// ranks"), and each rank adds about a third to the matrix's time there. ASan and Release run 4.
#pragma once

#include <cstdint>

namespace coll_test {

#if defined(HAL_SANITIZER_THREAD)
inline constexpr uint32_t kMatrixMaxRanks = 3;
#else
inline constexpr uint32_t kMatrixMaxRanks = 4;
#endif

}  // namespace coll_test
