#include "launch.hpp"

#include "command.hpp"
#include "device.hpp"
#include "hal/cpu_kernel.h"
#include "module.hpp"
#include "stream.hpp"
#include "thread_pool.hpp"

namespace hal::cpu {
namespace {

struct LaunchJob {
  const LaunchCommand* launch;
  WorkerScratch* caller_scratch;
  std::vector<WorkerScratch>* pool_scratch;
  uint32_t worker_count;
};

// Runs blocks [begin, end) of the grid, x fastest, on one worker.
void run_blocks(void* context, uint64_t begin, uint64_t end, uint32_t worker) {
  const LaunchJob& job = *static_cast<const LaunchJob*>(context);
  const LaunchCommand& launch = *job.launch;
  const Kernel& kernel = *launch.kernel;
  WorkerScratch& scratch = worker == 0 ? *job.caller_scratch : (*job.pool_scratch)[worker];

  hal_cpu_block_context_t block_context{};
  block_context.struct_size = sizeof(block_context);
  for (int d = 0; d < 3; ++d) {
    block_context.grid[d] = launch.grid[d];
    block_context.block[d] = launch.block[d];
  }
  block_context.shared_memory_bytes = launch.shared_memory_bytes;
  block_context.shared_memory = scratch.reserve(launch.shared_memory_bytes);
  block_context.worker_index = worker;
  block_context.worker_count = job.worker_count;

  // Argument storage is read-only during the launch; every worker points
  // libffi at the same slots and at its own block context.
  const hal_cpu_block_context_t* context_pointer = &block_context;
  void* values[HAL_MAX_KERNEL_ARGS + 2];
  values[0] = &context_pointer;
  auto* slots = const_cast<uint64_t*>(const_cast<ArgSlots&>(launch.args).data());
  for (uint32_t i = 0; i < launch.arg_count; ++i) values[i + 1] = &slots[i];
  if (launch.bounds) values[launch.arg_count + 1] = &launch.bounds->record_pointer;

  const uint64_t grid_x = launch.grid[0];
  const uint64_t grid_xy = grid_x * launch.grid[1];
  uint64_t x = begin % grid_x;
  uint64_t y = (begin / grid_x) % launch.grid[1];
  uint64_t z = begin / grid_xy;
  for (uint64_t id = begin; id < end; ++id) {
    block_context.block_id[0] = static_cast<uint32_t>(x);
    block_context.block_id[1] = static_cast<uint32_t>(y);
    block_context.block_id[2] = static_cast<uint32_t>(z);
    if (kernel.plain()) {
      kernel.call_plain(&block_context);
    } else {
      kernel.call(values);
    }
    if (++x == grid_x) {
      x = 0;
      if (++y == launch.grid[1]) {
        y = 0;
        ++z;
      }
    }
  }
}

}  // namespace

void execute_launch(const LaunchCommand& launch, ThreadPool& pool, WorkerScratch& caller_scratch,
                    std::vector<WorkerScratch>& pool_scratch) {
  const uint64_t workers = uint64_t{pool.workers()} + 1;
  LaunchJob job{&launch, &caller_scratch, &pool_scratch, static_cast<uint32_t>(workers)};
  const uint64_t blocks = uint64_t{launch.grid[0]} * launch.grid[1] * launch.grid[2];
  // About 8 chunks per worker balances uneven blocks without making the
  // shared claim counter hot.
  const uint64_t grain = blocks / (workers * 8) > 0 ? blocks / (workers * 8) : 1;
  pool.parallel_for(blocks, grain, ParallelTask{&run_blocks, &job});
}

hal_result_t Kernel::launch(Stream& stream, const hal_launch_config_t& config, uint32_t arg_count,
                            const hal_kernel_arg_t* args) {
  // The loader checked the shape, the shared memory and the arguments
  // against this kernel (SPEC 10.3); the plugin trusts them.
  LaunchCommand launch{};
  launch.kernel = this;
  launch.module = module_.shared_from_this();
  launch.grid = {config.grid[0], config.grid[1], config.grid[2]};
  launch.block = {config.block[0], config.block[1], config.block[2]};
  launch.shared_memory_bytes = config.shared_memory_bytes;
  launch.arg_count = arg_count;
  launch.args.assign(arg_count, args);
  if (bounds_checked_) {
    launch.bounds =
        make_bounds_launch(stream.device().plugin().allocation_extents(), arg_types(), args);
  }
  return stream.enqueue(std::move(launch));
}

}  // namespace hal::cpu
