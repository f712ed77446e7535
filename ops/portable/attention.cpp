#include "registry.hpp"

namespace hal::ops::portable {

void add_attention(ImplementationTable&) {}

}  // namespace hal::ops::portable
