// The operator cases halinfo --ops asks each device's implementation list
// about: small descriptors of the main dtype and layout variants of the
// convolutional network ops and matmul, each labelled for reading.
#ifndef HAL_TOOLS_HALINFO_OP_CASES_HPP_
#define HAL_TOOLS_HALINFO_OP_CASES_HPP_

#include <hal.h>

#include <string>
#include <vector>

namespace halinfo {

struct OpCase {
  std::string label;                // "f32 NHWC 3x3", the variant in words
  std::vector<unsigned char> desc;  // a whole descriptor, starting with its hal_op_header_t

  const hal_op_header_t* header() const {
    return reinterpret_cast<const hal_op_header_t*>(desc.data());
  }
};

// The cases of |kind|, in a fixed order; none for a kind without any.
std::vector<OpCase> op_cases(hal_op_kind_t kind);

}  // namespace halinfo

#endif  // HAL_TOOLS_HALINFO_OP_CASES_HPP_
