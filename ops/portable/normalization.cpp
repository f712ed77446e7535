#include "registry.hpp"

namespace hal::ops::portable {

void add_normalization(ImplementationTable&) {}

}  // namespace hal::ops::portable
