#include "onednn_primitive.hpp"

#include <algorithm>
#include <cassert>
#include <unordered_map>
#include <utility>

#include "../device.hpp"
#include "../stream.hpp"
#include "onednn_common.hpp"

namespace hal::cpu::ops {
namespace {

using dnnl::memory;

size_t aligned_size(size_t bytes) {
  return (bytes + kWorkspaceAlignment - 1) / kWorkspaceAlignment * kWorkspaceAlignment;
}

}  // namespace

struct PrimitivePlanBody {
  std::vector<PrimitiveStep> steps;

  void run(void* const* operands, void* workspace, const hal_op_scalar_t* scalars) const {
    const dnnl::engine& engine = onednn_engine();
    dnnl::stream& stream = onednn_stream();
    auto* base =
        static_cast<unsigned char*>(workspace != nullptr ? aligned_workspace(workspace) : nullptr);
    for (const PrimitiveStep& step : steps) {
      if (step.host) {
        step.host(operands, base, scalars);
        continue;
      }
      std::unordered_map<int, memory> args;
      std::vector<std::pair<const PrimitiveTensor*, std::pair<memory, memory>>> outputs;
      for (const PrimitiveTensor& tensor : step.tensors) {
        if (tensor.scratch) {
          args.emplace(tensor.arg, memory(tensor.prim, engine, base + tensor.scratch->offset));
          continue;
        }
        void* pointer = operands[tensor.operand];
        memory user(tensor.user, engine, pointer);
        memory prim = tensor.staged ? memory(tensor.prim, engine, base + tensor.offset) : user;
        if (tensor.role == TensorRole::kInput && tensor.staged) {
          tensor.copy.execute(stream, user, prim);
        }
        if (tensor.preload_operand >= 0) {
          void* source = operands[tensor.preload_operand];
          if (tensor.staged || source != pointer) {
            memory from(tensor.preload, engine, source);
            tensor.preload_copy.execute(stream, from, prim);
          }
        }
        if (tensor.role == TensorRole::kOutput && tensor.staged) {
          outputs.push_back({&tensor, {prim, user}});
        }
        args.emplace(tensor.arg, prim);
      }
      step.primitive->execute(stream, args);
      for (auto& [tensor, memories] : outputs) {
        tensor->copy.execute(stream, memories.first, memories.second);
      }
      stream.wait();
    }
  }
};

namespace {

class PrimitiveTask final : public StreamTask {
 public:
  PrimitiveTask(std::shared_ptr<const PrimitivePlanBody> body, const hal_op_exec_args_t& args,
                bool short_call)
      : body_(std::move(body)),
        operands_(args.operands, args.operands + args.operand_count),
        scalars_(args.scalars, args.scalars + args.scalar_count),
        workspace_(args.workspace),
        short_call_(short_call) {}
  void run() override {
    run_onednn_call(
        short_call_ ? OnednnPlacement::kShortOnOnednnThread : OnednnPlacement::kOnednnThread,
        [&] { body_->run(operands_.data(), workspace_, scalars_.data()); });
  }

 private:
  std::shared_ptr<const PrimitivePlanBody> body_;
  std::vector<void*> operands_;
  std::vector<hal_op_scalar_t> scalars_;
  void* workspace_;
  bool short_call_;
};

}  // namespace

PrimitivePlan::PrimitivePlan(std::vector<PrimitiveStep> steps, size_t workspace_bytes,
                             uint32_t operand_count, uint32_t scalar_count, double work)
    : body_(std::make_shared<const PrimitivePlanBody>(PrimitivePlanBody{std::move(steps)})),
      workspace_bytes_(workspace_bytes),
      operand_count_(operand_count),
      scalar_count_(scalar_count),
      short_call_(work <= kShortCallWork) {}

// The loader checked the counts against the plan's signature (SPEC.md §10.4a).
hal_result_t PrimitivePlan::enqueue(Stream& stream, const hal_op_exec_args_t& args) const {
  assert(args.operand_count == operand_count_ && args.scalar_count == scalar_count_);
  return stream.enqueue(TaskCommand{std::make_unique<PrimitiveTask>(body_, args, short_call_)});
}

size_t lay_out_workspace(std::vector<PrimitiveStep>& steps,
                         const std::vector<std::shared_ptr<Scratch>>& scratch) {
  const dnnl::engine& engine = onednn_engine();
  size_t used = 0;
  std::vector<Scratch*> blocks;
  for (const auto& block : scratch) blocks.push_back(block.get());
  for (PrimitiveStep& step : steps) {
    if (step.primitive) {
      if (auto scratchpad = scratchpad_of(*step.primitive)) {
        step.tensors.push_back(std::move(*scratchpad));
      }
    }
    for (PrimitiveTensor& tensor : step.tensors) {
      if (tensor.scratch) {
        tensor.scratch->bytes = std::max(tensor.scratch->bytes, tensor.prim.get_size());
        if (std::find(blocks.begin(), blocks.end(), tensor.scratch.get()) == blocks.end()) {
          blocks.push_back(tensor.scratch.get());
        }
        continue;
      }
      if (tensor.staged) {
        tensor.offset = used;
        used += aligned_size(tensor.prim.get_size());
        tensor.copy = tensor.role == TensorRole::kInput
                          ? dnnl::reorder(dnnl::reorder::primitive_desc(engine, tensor.user, engine,
                                                                        tensor.prim))
                          : dnnl::reorder(dnnl::reorder::primitive_desc(engine, tensor.prim, engine,
                                                                        tensor.user));
      }
      if (tensor.preload_operand >= 0) {
        tensor.preload_copy = dnnl::reorder(
            dnnl::reorder::primitive_desc(engine, tensor.preload, engine, tensor.prim));
      }
    }
  }
  for (Scratch* block : blocks) {
    block->offset = used;
    used += aligned_size(block->bytes);
  }
  return used == 0 ? 0 : used + kWorkspaceAlignment - 1;
}

PrimitiveTensor bind(int arg, int operand, TensorRole role, const memory::desc& user,
                     const memory::desc& prim) {
  PrimitiveTensor tensor;
  tensor.arg = arg;
  tensor.operand = operand;
  tensor.role = role;
  tensor.user = user;
  tensor.prim = prim;
  tensor.staged = !(user == prim);
  return tensor;
}

PrimitiveTensor bind_scratch(int arg, TensorRole role, const memory::desc& prim,
                             std::shared_ptr<Scratch> scratch) {
  PrimitiveTensor tensor;
  tensor.arg = arg;
  tensor.role = role;
  tensor.prim = prim;
  tensor.scratch = std::move(scratch);
  return tensor;
}

dnnl::primitive_attr user_scratchpad() {
  return with_user_scratchpad();
}

std::optional<PrimitiveTensor> scratchpad_of(const dnnl::primitive& primitive) {
  const_dnnl_primitive_desc_t pd = primitive.get_primitive_desc();
  const dnnl_memory_desc_t* md = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
  if (md == nullptr) return std::nullopt;
  const memory::desc scratchpad(*md);
  if (scratchpad.get_size() == 0) return std::nullopt;
  return bind_scratch(DNNL_ARG_SCRATCHPAD, TensorRole::kOutput, scratchpad,
                      std::make_shared<Scratch>());
}

memory::desc user_desc(const memory::dims& dims, const memory::dims& strides, hal_dtype_t dtype) {
  return strided_desc(dims, strides, *onednn_dtype(dtype));
}

const std::vector<Attempt>& attempts() {
  static const std::vector<Attempt> list = {
      {false, false, false}, {false, true, false}, {false, true, true},
      {true, false, false},  {true, true, false},  {true, true, true},
  };
  return list;
}

std::string onednn_version_text() {
  return "oneDNN " + std::to_string(dnnl_version()->major) + "." +
         std::to_string(dnnl_version()->minor);
}

int64_t tensor_elements(const hal_tensor_desc_t& tensor) {
  int64_t count = 1;
  for (uint32_t d = 0; d < tensor.rank; ++d) count *= tensor.shape[d];
  return count;
}

}  // namespace hal::cpu::ops
