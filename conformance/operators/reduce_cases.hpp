// What the HAL_OP_REDUCE checks share (reduce.cpp, reduce_more.cpp): the
// descriptor, and the shape and size of a reduction over an axes mask.
#ifndef HAL_CONFORMANCE_OPERATORS_REDUCE_CASES_HPP_
#define HAL_CONFORMANCE_OPERATORS_REDUCE_CASES_HPP_

#include <cstdint>
#include <vector>

#include "op_harness.hpp"

namespace halconform::ops {

inline hal_op_reduce_desc_t reduce_desc(hal_reduce_kind_t kind, uint32_t axes,
                                        const hal_tensor_desc_t& x, const hal_tensor_desc_t& out) {
  hal_op_reduce_desc_t desc{};
  desc.header.struct_size = sizeof(desc);
  desc.header.kind = HAL_OP_REDUCE;
  desc.reduce = kind;
  desc.axes_mask = axes;
  desc.x = x;
  desc.out = out;
  return desc;
}

// |x|'s shape with the reduced axes kept at extent 1.
inline std::vector<int64_t> reduced_shape(const hal_tensor_desc_t& x, uint32_t axes) {
  std::vector<int64_t> shape = shape_of(x);
  for (size_t d = 0; d < shape.size(); ++d) {
    if ((axes >> d) & 1u) shape[d] = 1;
  }
  return shape;
}

// How many elements of |x| each output element folds.
inline int64_t reduced_count(const hal_tensor_desc_t& x, uint32_t axes) {
  int64_t count = 1;
  for (uint32_t d = 0; d < x.rank; ++d) {
    if ((axes >> d) & 1u) count *= x.shape[d];
  }
  return count;
}

}  // namespace halconform::ops

#endif  // HAL_CONFORMANCE_OPERATORS_REDUCE_CASES_HPP_
