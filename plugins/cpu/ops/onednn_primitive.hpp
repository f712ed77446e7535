// What the cpu plugin's oneDNN convolution, pooling and batch-norm plans
// share: one oneDNN primitive whose tensors are the op's operands, each
// used where it lies when the primitive takes the caller's layout and dtype,
// or staged through the workspace with a oneDNN reorder when it does not
// (a blocked weight layout, f16 widened to f32, a strided bias). A plan is a
// list of such steps plus native host steps, run in stream order on the
// plugin's oneDNN thread (onednn_common.hpp).
#ifndef HAL_PLUGINS_CPU_OPS_ONEDNN_PRIMITIVE_HPP_
#define HAL_PLUGINS_CPU_OPS_ONEDNN_PRIMITIVE_HPP_

#include <dnnl.hpp>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "hal/ops.h"
#include "ops.hpp"

namespace hal::cpu::ops {

// How a primitive takes one tensor.
enum class TensorRole { kInput, kOutput };

// A block of the workspace the steps use between themselves (a primitive's
// statistics a host step reads, f32 buffers of a host step), at |offset|
// of the aligned workspace once laid out.
struct Scratch {
  size_t bytes = 0;
  size_t offset = 0;
};

// One tensor of a primitive. |operand| names the HAL operand that holds the
// caller's tensor (|user|: its exact strides and dtype); |prim| is what the
// primitive was built for. When they differ the tensor lives at |offset| of
// the workspace and a reorder copies it in (input) or out (output). A
// tensor with |scratch| has no operand: it lives in that workspace block.
struct PrimitiveTensor {
  std::shared_ptr<Scratch> scratch;
  int arg = 0;
  int operand = -1;
  TensorRole role = TensorRole::kInput;
  dnnl::memory::desc user;
  dnnl::memory::desc prim;
  bool staged = false;
  size_t offset = 0;
  dnnl::reorder copy;
  // An output the primitive accumulates into (a sum post-op): before it
  // runs, operand |preload_operand| (|preload|'s layout) is copied into it,
  // unless it is the output itself, unstaged.
  int preload_operand = -1;
  dnnl::memory::desc preload;
  dnnl::reorder preload_copy;
};

// One step of a plan: a primitive over its tensors, or a host function.
struct PrimitiveStep {
  std::optional<dnnl::primitive> primitive;
  std::vector<PrimitiveTensor> tensors;
  // A host step (runs instead of a primitive): operands, the aligned
  // workspace base, the execution's scalars.
  std::function<void(void* const* operands, unsigned char* workspace,
                     const hal_op_scalar_t* scalars)>
      host;
};

struct PrimitivePlanBody;

// A planned op: its steps, and the workspace they need. |work| (multiply-adds
// or elements) decides whether an execution is a short call of the oneDNN
// thread.
class PrimitivePlan final : public OpPlan {
 public:
  PrimitivePlan(std::vector<PrimitiveStep> steps, size_t workspace_bytes, uint32_t operand_count,
                uint32_t scalar_count, double work);
  hal_result_t enqueue(Stream& stream, const hal_op_exec_args_t& args) const override;
  size_t workspace_bytes() const override { return workspace_bytes_; }

 private:
  // Shared with every queued execution: a plan destroyed while they wait
  // leaves them intact.
  std::shared_ptr<const PrimitivePlanBody> body_;
  size_t workspace_bytes_;
  uint32_t operand_count_;
  uint32_t scalar_count_;
  bool short_call_;
};

// Lays the staged tensors of |steps| and |scratch| out in one workspace
// (each on a 64-byte boundary of the aligned base; the plan asks 63 bytes
// more, since the caller's workspace may start anywhere), with the
// scratchpad of each primitive built with user_scratchpad(), creates their
// reorders, and returns the workspace bytes.
size_t lay_out_workspace(std::vector<PrimitiveStep>& steps,
                         const std::vector<std::shared_ptr<Scratch>>& scratch);

// A tensor of the primitive kept in the workspace (no operand).
PrimitiveTensor bind_scratch(int arg, TensorRole role, const dnnl::memory::desc& prim,
                             std::shared_ptr<Scratch> scratch);

// Binds a tensor: |user| is the caller's, |prim| the primitive's.
PrimitiveTensor bind(int arg, int operand, TensorRole role, const dnnl::memory::desc& user,
                     const dnnl::memory::desc& prim);

// Primitive attributes that leave the scratchpad to the caller
// (scratchpad_mode::user), and the scratchpad of a primitive built with them
// as a tensor in the workspace (nullopt when it needs none; every primitive
// of a PrimitivePlan is built with them, lay_out_workspace adds it). Why not
// oneDNN's own (library mode): Debian's libdnnl 2.6 keeps it per thread
// and sizes it when a primitive is created, so a primitive executed on
// another thread than the one that created it finds no scratchpad there
// (invalid arguments, or a crash at 2 threads) - which is what runs at one
// OpenMP thread, where the plan is made on the caller and executed on the
// stream's thread (onednn_common.hpp); in the workspace it is also sized
// once, at planning, and the caller's to reuse.
dnnl::primitive_attr user_scratchpad();
std::optional<PrimitiveTensor> scratchpad_of(const dnnl::primitive& primitive);

// A oneDNN memory descriptor of |dims| with the element |strides| of a HAL
// tensor (strided_desc's canonical strides for extent-1 dimensions).
dnnl::memory::desc user_desc(const dnnl::memory::dims& dims, const dnnl::memory::dims& strides,
                             hal_dtype_t dtype);

// The attempts a planner makes, in order, until oneDNN offers an
// implementation that is not its reference one: the caller's dtypes or all
// f32 (f16 widened, odd mixes), with the caller's layouts, weights in
// oneDNN's choice, or every tensor in oneDNN's choice.
// |activations_channels_first| is no attempt of that list: a planner that
// knows a layout serves better asks for it by name (the activations dense in
// canonical [N, C, spatial...] order, staged through the workspace).
struct Attempt {
  bool f32 = false;                         // every floating tensor as f32
  bool weights_any = false;                 // weights in the primitive's preferred layout
  bool activations_any = false;             // activations too
  bool activations_channels_first = false;  // activations dense channels-first
};
const std::vector<Attempt>& attempts();

// "oneDNN 2.6" for decline messages.
std::string onednn_version_text();

// The element count of a HAL tensor (0 when empty).
int64_t tensor_elements(const hal_tensor_desc_t& tensor);

}  // namespace hal::cpu::ops

#endif  // HAL_PLUGINS_CPU_OPS_ONEDNN_PRIMITIVE_HPP_
