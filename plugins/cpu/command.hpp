// The commands a stream executes, and the queue that holds them.
//
// A command is a std::variant of small structs; kernel arguments live in the
// command (16 inline slots, a heap spill only beyond), so enqueueing a launch
// allocates nothing once the queue has its working chunk.
#ifndef HAL_PLUGINS_CPU_COMMAND_HPP_
#define HAL_PLUGINS_CPU_COMMAND_HPP_

#include <array>
#include <cstdint>
#include <cstring>
#include <memory>
#include <variant>
#include <vector>

#include "bounds.hpp"
#include "event.hpp"
#include "hal_plugin.h"

namespace hal::cpu {

class Kernel;
class Module;

struct CopyCommand {
  void* dst;
  const void* src;
  size_t size;
};

struct FillCommand {
  void* dst;
  size_t size;
  uint8_t value;
};

struct HostFnCommand {
  hal_host_fn_t fn;
  void* user_data;
};

struct RecordCommand {
  std::shared_ptr<Marker> marker;
};

struct WaitCommand {
  std::shared_ptr<Marker> marker;
};

// Argument values, one 8-byte slot each (every HAL argument type fits), so a
// slot's address is what libffi wants as the argument's storage.
class ArgSlots {
 public:
  static constexpr uint32_t kInline = 16;

  // |args[i].size| is 4 or 8 (the loader checked it against the signature).
  void assign(uint32_t count, const hal_kernel_arg_t* args) {
    uint64_t* slots = inline_.data();
    if (count > kInline) {
      spill_ = std::make_unique<uint64_t[]>(count);
      slots = spill_.get();
    }
    for (uint32_t i = 0; i < count; ++i) {
      slots[i] = 0;
      std::memcpy(&slots[i], args[i].value, args[i].size < 8 ? args[i].size : 8);
    }
  }
  uint64_t* data() { return spill_ ? spill_.get() : inline_.data(); }

 private:
  std::array<uint64_t, kInline> inline_;
  std::unique_ptr<uint64_t[]> spill_;
};

struct LaunchCommand {
  const Kernel* kernel;
  std::shared_ptr<Module> module;  // keeps the code loaded until the launch ran
  std::array<uint32_t, 3> grid;
  std::array<uint32_t, 3> block;
  uint32_t shared_memory_bytes;
  uint32_t arg_count;
  ArgSlots args;
  // A bounds-checked kernel's record (bounds.hpp); null otherwise.
  std::unique_ptr<BoundsLaunch> bounds;
};

// Work another part of the plugin (collectives) runs in stream order; a
// std::exception thrown by run() fails the stream like any other command.
class StreamTask {
 public:
  virtual ~StreamTask() = default;
  virtual void run() = 0;
  // Offered the task on an idle stream by Stream::enqueue_task, on the
  // enqueueing thread: true when it finished the work there, briefly (it
  // must not block for long). False leaves the work, or what is left of it,
  // to run() in stream order; a failure is reported there too.
  virtual bool finish_inline() noexcept { return false; }
};

struct TaskCommand {
  std::unique_ptr<StreamTask> task;
};

using Command = std::variant<std::monostate, CopyCommand, FillCommand, HostFnCommand, RecordCommand,
                             WaitCommand, LaunchCommand, TaskCommand>;

class ChunkCache;

// A FIFO of commands in fixed-size (~16 KiB) chunks. Push and pop only move
// commands; the queue keeps one drained chunk for reuse, so a stream that
// stays shallow allocates nothing after warm-up. Other drained chunks go to
// a cache shared by all queues (4 MiB at most) and beyond it back to the
// system, so a deep backlog does not pin its memory until the stream is
// destroyed. Not thread-safe; the stream's mutex guards it.
class CommandQueue {
 public:
  CommandQueue() = default;
  ~CommandQueue();
  CommandQueue(const CommandQueue&) = delete;
  CommandQueue& operator=(const CommandQueue&) = delete;

  bool empty() const { return count_ == 0; }
  size_t size() const { return count_; }
  // Requires !empty().
  Command& front();

  // May throw std::bad_alloc when a new chunk cannot be mapped.
  void push(Command&& command);
  // Requires !empty().
  Command pop();

  // The chunk cache every queue shares lives from the first plugin context
  // to the last (Plugin's constructor and destructor).
  static void retain_cache();
  static void release_cache() noexcept;

 private:
  struct Chunk;
  static ChunkCache& cache();  // drained chunks shared by every queue
  static Chunk* new_chunk();
  static void delete_chunk(Chunk* chunk);

  Chunk* head_ = nullptr;  // oldest chunk: pop reads here
  Chunk* tail_ = nullptr;  // newest chunk: push writes here
  size_t head_index_ = 0;
  size_t tail_index_ = 0;
  size_t count_ = 0;
  Chunk* spare_ = nullptr;  // one drained chunk kept for the next push
};

}  // namespace hal::cpu

#endif  // HAL_PLUGINS_CPU_COMMAND_HPP_
