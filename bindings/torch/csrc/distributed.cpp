#include <pybind11/pybind11.h>

namespace hal_torch {
void register_distributed(pybind11::module_& /*module*/) {}
}  // namespace hal_torch
