// The cpu plugin's own operators (api/hal/plugin_v1.h, the operator
// entries), tried by the loader before its portable ones: matmul on oneDNN
// ("cpu.onednn", when oneDNN was found at configure time:
// HAL_CPU_HAS_ONEDNN) and the vectorised elementwise, reduction and
// normalisation-backward ops ("cpu.native", always built). A case they do
// not serve is declined with HAL_ERROR_UNSUPPORTED and a sentence saying
// why, and the loader moves on.
#ifndef HAL_PLUGINS_CPU_OPS_OPS_HPP_
#define HAL_PLUGINS_CPU_OPS_OPS_HPP_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "hal_plugin.h"
#include "hal_plugin_sdk/table.hpp"

namespace hal::cpu {

class Device;
class Stream;

namespace ops {

// The names hal_op_plan_get_info reports for the plans served here.
inline constexpr char kOneDnnName[] = "cpu.onednn";
inline constexpr char kNativeName[] = "cpu.native";

// HAL_CPU_AVX512 (SPEC.md's environment table): unset or "1", the
// hand-written AVX-512 loops run where the CPU has AVX-512; "0", never (the
// portable loops serve: how the tests cover them on an AVX-512 machine).
// False, with |out_error| naming the value, for anything else. Set once, at
// the plugin's load, before any operator runs.
bool parse_avx512_setting(const char* text, bool* out_allowed, std::string& out_error);
void allow_avx512(bool allowed);

// The caller's workspace may start at any address of its allocation (SPEC
// §17.2 asks no alignment). A plan that keeps f32 tensors there asks for
// kWorkspaceAlignment - 1 bytes more than it uses and starts them at
// aligned_workspace(workspace).
inline constexpr size_t kWorkspaceAlignment = 64;
inline void* aligned_workspace(void* workspace) {
  const auto address = reinterpret_cast<uintptr_t>(workspace);
  return reinterpret_cast<void*>((address + kWorkspaceAlignment - 1) & ~(kWorkspaceAlignment - 1));
}

// A planned operator. Executions hold a shared_ptr to what they use, so a
// plan destroyed while executions are queued leaves them intact.
class OpPlan {
 public:
  virtual ~OpPlan() = default;
  // Enqueues one execution on |stream|; the loader checked |args|.
  virtual hal_result_t enqueue(Stream& stream, const hal_op_exec_args_t& args) const = 0;
  // The caller's workspace each execution needs (hal_op_plan_info_t).
  virtual size_t workspace_bytes() const { return 0; }
};

// Why a descriptor is not served: filled by a planner that declines.
struct Decline {
  std::string reason;
};

// Plans HAL_OP_MATMUL on a oneDNN matmul primitive; nullptr with
// |decline| set when the case is not served.
std::unique_ptr<OpPlan> plan_matmul(const hal_op_matmul_desc_t& desc, hal_op_plan_flags_t flags,
                                    Decline& decline);

// Plans HAL_OP_CONVOLUTION(_BACKWARD_DATA, _BACKWARD_WEIGHTS) on oneDNN's
// convolution and deconvolution primitives (onednn_convolution.cpp).
std::unique_ptr<OpPlan> plan_convolution(const hal_op_convolution_desc_t& desc,
                                         hal_op_plan_flags_t flags, Decline& decline);

// Plans HAL_OP_POOLING(_BACKWARD) on oneDNN's pooling primitives
// (onednn_pooling.cpp): average pooling; max pooling is declined.
std::unique_ptr<OpPlan> plan_pooling(const hal_op_pooling_desc_t& desc, hal_op_plan_flags_t flags,
                                     Decline& decline);

// Plans max pooling (forward and backward) as host loops on the plugin's
// thread pool (max_pooling.cpp); plan_pooling hands it HAL_POOLING_MAX.
std::unique_ptr<OpPlan> plan_max_pooling(const hal_op_pooling_desc_t& desc, Decline& decline);

// Plans HAL_OP_BATCH_NORM(_BACKWARD): plan_native_batch_norm's host loops
// where they serve (channels-first f32), else oneDNN's batch normalization
// primitives (onednn_batch_norm.cpp).
std::unique_ptr<OpPlan> plan_batch_norm(const hal_op_batch_norm_desc_t& desc,
                                        hal_op_plan_flags_t flags, Decline& decline);

// Plans batch norm on channels-first dense f32 tensors as loops over the
// channels on the plugin's thread pool (native_batch_norm.cpp); nullptr
// with |decline| set otherwise.
std::unique_ptr<OpPlan> plan_native_batch_norm(const hal_op_batch_norm_desc_t& desc,
                                               Decline& decline);

// Plans the ops native_ops.cpp serves (every kind but matmul); nullptr
// with |decline| set otherwise.
std::unique_ptr<OpPlan> plan_native(const hal_op_header_t& desc, hal_op_plan_flags_t flags,
                                    Decline& decline);

// Plans the PyTorch device's ops native_ops_math.cpp serves (UNARY_MATH,
// BINARY_SCALAR, WHERE, CLAMP, FILL, CAT on dense tensors); nullptr with
// |decline| set otherwise.
std::unique_ptr<OpPlan> plan_native_math(const hal_op_header_t& desc, Decline& decline);

// Plans PAGED_KV_APPEND and PAGED_ATTENTION (native_paged.cpp) when the head
// dims are unit-stride; nullptr with |decline| set otherwise.
std::unique_ptr<OpPlan> plan_paged(const hal_op_header_t& desc, Decline& decline);
// Plans the low-precision ops native_lowp.cpp serves (SCALED_MATMUL,
// QUANTIZE and DEQUANTIZE on dense tensors); nullptr with |decline| set otherwise.
std::unique_ptr<OpPlan> plan_native_lowp(const hal_op_header_t& desc, Decline& decline);

}  // namespace ops

// The operator entries (ops/entry.cpp), of the SDK's entry types.
plugin::v1::op_plan_create_fn op_plan_create;
plugin::v1::op_plan_destroy_fn op_plan_destroy;
plugin::v1::op_execute_fn op_execute;
plugin::v1::op_implementation_fn op_implementation;

}  // namespace hal::cpu

#endif  // HAL_PLUGINS_CPU_OPS_OPS_HPP_
