#include "registry.hpp"

namespace hal::ops::portable {

void add_matmul(ImplementationTable&) {}

}  // namespace hal::ops::portable
