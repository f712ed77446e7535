#include "definitions.hpp"

namespace hal::ops::definitions {

hal_result_t describe_attention_family(const hal_op_header_t* desc, OpSignature*,
                                       std::string* message) {
  *message = std::string("no definition of op ") + std::to_string(desc->kind) + " in this build";
  return HAL_ERROR_UNSUPPORTED;
}

}  // namespace hal::ops::definitions
