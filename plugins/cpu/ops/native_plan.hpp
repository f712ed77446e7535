// How cpu.native's planners (native_ops.cpp, native_ops_math.cpp) run an
// execution: a body over the operands as a task on the stream, split into
// chunks over the plugin's thread pool. Work is split by the shape alone, so
// every plan is deterministic.
#ifndef HAL_PLUGINS_CPU_OPS_NATIVE_PLAN_HPP_
#define HAL_PLUGINS_CPU_OPS_NATIVE_PLAN_HPP_

#include <algorithm>
#include <cassert>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "../device.hpp"
#include "../stream.hpp"
#include "ops.hpp"

namespace hal::cpu::ops {

inline uint64_t element_count(const hal_tensor_desc_t& tensor) {
  uint64_t count = 1;
  for (uint32_t d = 0; d < tensor.rank; ++d) count *= static_cast<uint64_t>(tensor.shape[d]);
  return count;
}

// Row-major without gaps (extent-1 dimensions may have any stride).
inline bool dense(const hal_tensor_desc_t& tensor) {
  int64_t expected = 1;
  for (uint32_t d = tensor.rank; d-- > 0;) {
    if (tensor.shape[d] != 1 && tensor.strides[d] != expected) return false;
    expected *= tensor.shape[d];
  }
  return true;
}

// Runs fn(begin, end) over [0, count) in chunks of |grain|, on the pool when
// there is more than one chunk.
template <typename Fn>
void parallel_ranges(ThreadPool& pool, uint64_t count, uint64_t grain, const Fn& fn) {
  if (count == 0) return;
  const uint64_t chunks = (count + grain - 1) / grain;
  if (chunks == 1) {
    fn(uint64_t{0}, count);
    return;
  }
  struct Context {
    const Fn* fn;
    uint64_t count;
    uint64_t grain;
  } context{&fn, count, grain};
  pool.parallel_for(chunks, 1,
                    ParallelTask{[](void* data, uint64_t begin, uint64_t end, uint32_t) {
                                   const auto* c = static_cast<const Context*>(data);
                                   for (uint64_t k = begin; k < end; ++k) {
                                     (*c->fn)(k * c->grain, std::min((k + 1) * c->grain, c->count));
                                   }
                                 },
                                 &context});
}

// Runs fn(item, worker) for every item in [0, count) on the pool; |worker|
// indexes per-worker scratch, in [0, pool.workers()].
template <typename Fn>
void parallel_items(ThreadPool& pool, uint64_t count, const Fn& fn) {
  if (count == 0) return;
  pool.parallel_for(count, 1,
                    ParallelTask{[](void* data, uint64_t begin, uint64_t end, uint32_t worker) {
                                   const auto* f = static_cast<const Fn*>(data);
                                   for (uint64_t item = begin; item < end; ++item) {
                                     (*f)(item, worker);
                                   }
                                 },
                                 const_cast<Fn*>(&fn)});
}

// What an execution does with its operands, shared by the plan and every
// execution still queued; a WorkspaceBody also gets the caller's workspace
// (at least the plan's workspace_bytes()).
using Body =
    std::function<void(ThreadPool& pool, void* const* operands, const hal_op_scalar_t* scalars)>;
using WorkspaceBody = std::function<void(ThreadPool& pool, void* const* operands,
                                         const hal_op_scalar_t* scalars, void* workspace)>;

class NativeTask final : public StreamTask {
 public:
  NativeTask(std::shared_ptr<const WorkspaceBody> body, ThreadPool& pool,
             const hal_op_exec_args_t& args)
      : body_(std::move(body)),
        pool_(pool),
        operands_(args.operands, args.operands + args.operand_count),
        scalars_(args.scalars, args.scalars + args.scalar_count),
        workspace_(args.workspace) {}
  void run() override { (*body_)(pool_, operands_.data(), scalars_.data(), workspace_); }

 private:
  std::shared_ptr<const WorkspaceBody> body_;
  ThreadPool& pool_;
  std::vector<void*> operands_;
  std::vector<hal_op_scalar_t> scalars_;
  void* workspace_;
};

class NativePlan final : public OpPlan {
 public:
  NativePlan(uint32_t operand_count, Body body, uint32_t scalar_count = 0)
      : NativePlan(
            operand_count, 0,
            [body = std::move(body)](ThreadPool& pool, void* const* operands,
                                     const hal_op_scalar_t* scalars,
                                     void*) { body(pool, operands, scalars); },
            scalar_count) {}
  NativePlan(uint32_t operand_count, size_t workspace_bytes, WorkspaceBody body,
             uint32_t scalar_count = 0)
      : operand_count_(operand_count),
        scalar_count_(scalar_count),
        workspace_bytes_(workspace_bytes),
        body_(std::make_shared<const WorkspaceBody>(std::move(body))) {}
  size_t workspace_bytes() const override { return workspace_bytes_; }
  // The loader checked the operand and scalar counts against the plan's
  // signature (SPEC.md §10.4a): the counts here only state what it promised.
  hal_result_t enqueue(Stream& stream, const hal_op_exec_args_t& args) const override {
    assert(args.operand_count == operand_count_ && args.scalar_count == scalar_count_);
    return stream.enqueue(
        TaskCommand{std::make_unique<NativeTask>(body_, stream.device().plugin().pool(), args)});
  }

 private:
  // Read only by the assertion (clang warns of unused fields where NDEBUG removes it).
  [[maybe_unused]] uint32_t operand_count_;
  [[maybe_unused]] uint32_t scalar_count_;
  size_t workspace_bytes_;
  std::shared_ptr<const WorkspaceBody> body_;
};

constexpr uint64_t kElementGrain = 16384;  // elements per chunk of an elementwise op

}  // namespace hal::cpu::ops

#endif  // HAL_PLUGINS_CPU_OPS_NATIVE_PLAN_HPP_
