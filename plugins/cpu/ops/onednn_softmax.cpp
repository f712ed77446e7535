// HAL_OP_SOFTMAX (softmax or log-softmax over the last dimension) on
// oneDNN's softmax_v2 primitive (softmax_accurate: the row maximum is
// subtracted first; softmax_log). x and y keep their own strides and dtypes
// (f32 or bf16; f32 arithmetic inside); y may be x (oneDNN runs in place).
// The primitive is created once, at planning.
//
// Declined: empty tensors (left to the portable implementation, as for
// matmul), rank 0, f16 where oneDNN 2.6 has no kernel, and whatever oneDNN
// refuses to build. Deterministic: each row is reduced by one thread in a
// fixed order.
#include <dnnl.hpp>

#include <memory>
#include <string>
#include <unordered_map>

#include "../device.hpp"
#include "../stream.hpp"
#include "onednn_common.hpp"
#include "ops.hpp"

namespace hal::cpu::ops {
namespace {

using dnnl::memory;

constexpr uint32_t kOperands = 2;  // x, y

struct SoftmaxState {
  dnnl::softmax_v2_forward primitive;
  memory::desc x, y;

  void run(void* x_ptr, void* y_ptr) const {
    std::lock_guard lock(onednn_execution_mutex());
    const dnnl::engine& engine = onednn_engine();
    dnnl::stream& stream = onednn_stream();
    primitive.execute(stream, {{DNNL_ARG_SRC, memory(x, engine, x_ptr)},
                               {DNNL_ARG_DST, memory(y, engine, y_ptr)}});
    stream.wait();
  }
};

class SoftmaxTask final : public StreamTask {
 public:
  SoftmaxTask(std::shared_ptr<const SoftmaxState> state, void* x, void* y)
      : state_(std::move(state)), x_(x), y_(y) {}
  void run() override { state_->run(x_, y_); }

 private:
  std::shared_ptr<const SoftmaxState> state_;
  void* x_;
  void* y_;
};

class SoftmaxPlan final : public OpPlan {
 public:
  explicit SoftmaxPlan(std::shared_ptr<const SoftmaxState> state) : state_(std::move(state)) {}
  hal_result_t enqueue(Stream& stream, const hal_op_exec_args_t& args) const override {
    if (args.operand_count != kOperands || args.operands == nullptr) {
      return stream.device().report().fail(
          HAL_ERROR_INVALID_ARGUMENT, 0,
          "op_execute: a softmax plan takes %u operands, args has %u", kOperands,
          args.operand_count);
    }
    return stream.enqueue(
        TaskCommand{std::make_unique<SoftmaxTask>(state_, args.operands[0], args.operands[1])});
  }

 private:
  std::shared_ptr<const SoftmaxState> state_;
};

memory::desc tensor_desc(const hal_tensor_desc_t& tensor, memory::data_type type) {
  memory::dims dims(tensor.shape, tensor.shape + tensor.rank);
  memory::dims strides(tensor.strides, tensor.strides + tensor.rank);
  return strided_desc(dims, strides, type);
}

}  // namespace

std::unique_ptr<OpPlan> plan_softmax(const hal_op_softmax_desc_t& desc, hal_op_plan_flags_t,
                                     Decline& decline) {
  const hal_tensor_desc_t& x = desc.x;
  const hal_tensor_desc_t& y = desc.y;
  if (x.rank == 0 || x.rank != y.rank) {
    decline.reason = "rank 0 (or x and y of different ranks) is not served";
    return nullptr;
  }
  for (uint32_t d = 0; d < x.rank; ++d) {
    if (x.shape[d] == 0) {
      decline.reason = "empty tensors are left to the portable implementation";
      return nullptr;
    }
    if (x.shape[d] != y.shape[d]) {
      decline.reason = "x and y of different shapes are not served";
      return nullptr;
    }
    if (y.strides[d] == 0 && y.shape[d] > 1) {
      decline.reason = "y broadcasts (stride 0), which an output cannot";
      return nullptr;
    }
  }
  const auto x_type = onednn_dtype(x.dtype);
  const auto y_type = onednn_dtype(y.dtype);
  if (!x_type || !y_type) {
    decline.reason = std::string("dtypes x=") + dtype_text(x.dtype) + " y=" + dtype_text(y.dtype) +
                     " are not floating types oneDNN takes";
    return nullptr;
  }
  auto state = std::make_shared<SoftmaxState>();
  state->x = tensor_desc(x, *x_type);
  state->y = tensor_desc(y, *y_type);
  try {
    const dnnl::softmax_v2_forward::desc op(
        dnnl::prop_kind::forward_inference,
        desc.log != 0 ? dnnl::algorithm::softmax_log : dnnl::algorithm::softmax_accurate, state->x,
        state->y, static_cast<int>(x.rank - 1));
    run_on_planning_thread([&] {
      const dnnl::softmax_v2_forward::primitive_desc pd(op, onednn_engine());
      state->primitive = dnnl::softmax_v2_forward(pd);
    });
  } catch (const dnnl::error& error) {
    if (error.status != dnnl_unimplemented) throw;
    decline.reason = std::string("oneDNN has no ") + (desc.log != 0 ? "log-softmax" : "softmax") +
                     " for x=" + dtype_text(x.dtype) + " y=" + dtype_text(y.dtype) +
                     " with these layouts on this CPU";
    if (x.dtype == HAL_DTYPE_F16 || y.dtype == HAL_DTYPE_F16) {
      decline.reason += " (its f16 kernels need AVX512-FP16)";
    }
    return nullptr;
  }
  return std::make_unique<SoftmaxPlan>(std::move(state));
}

}  // namespace hal::cpu::ops
