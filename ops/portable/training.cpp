#include "registry.hpp"

namespace hal::ops::portable {

void add_training(ImplementationTable&) {}

}  // namespace hal::ops::portable
