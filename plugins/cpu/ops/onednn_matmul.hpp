// The cpu plugin's matmul on oneDNN, as its two files share it:
// onednn_matmul.cpp plans the products oneDNN has kernels for (f32 and bf16
// here), onednn_matmul_f16.cpp serves the rest with an f16 tensor as the f32
// product of its operands widened into the workspace.
#ifndef HAL_PLUGINS_CPU_OPS_ONEDNN_MATMUL_HPP_
#define HAL_PLUGINS_CPU_OPS_ONEDNN_MATMUL_HPP_

#include <cstddef>
#include <memory>

#include "hal/ops.h"
#include "ops.hpp"

namespace hal::cpu {
class ThreadPool;
}

namespace hal::cpu::ops {

// One planned product d = act(alpha * op(a) @ op(b) + beta * c + bias), run
// on the thread that serves the stream (the operands in HAL_OP_MATMUL's
// order; c may be d itself), with the caller's workspace of at least
// workspace_bytes().
class MatmulProduct {
 public:
  virtual ~MatmulProduct() = default;
  virtual void run(ThreadPool& pool, void* a, void* b, const void* c, void* d, void* bias,
                   void* workspace) const = 0;
  virtual size_t workspace_bytes() const { return 0; }
};

// |desc| on oneDNN as it is; nullptr with |decline| set when it is not served.
std::shared_ptr<const MatmulProduct> plan_onednn_product(const hal_op_matmul_desc_t& desc,
                                                         Decline& decline);

// |desc|, which has an f16 tensor, as the f32 product of its operands
// converted into the workspace, d converted back; nullptr with |decline| set
// when the f32 product is not served either.
std::shared_ptr<const MatmulProduct> plan_widened_product(const hal_op_matmul_desc_t& desc,
                                                          Decline& decline);

}  // namespace hal::cpu::ops

#endif  // HAL_PLUGINS_CPU_OPS_ONEDNN_MATMUL_HPP_
