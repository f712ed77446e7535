// What every oneDNN operator of the cpu plugin shares: one CPU engine, one
// turn that every oneDNN call of the plugin takes, and one thread on which
// every call that starts an OpenMP team runs.
//
// Threads: Debian's libdnnl 2.6 is built on OpenMP (libgomp). A call runs
// on an OpenMP team of OMP_NUM_THREADS threads (unset: one per hardware
// thread) whose master is the calling thread, and libgomp keeps a team of
// workers per master thread for as long as that thread lives. Stream
// commands run on whichever thread serves the stream (an executor, or the
// application's thread inside a synchronize), so calling oneDNN there gave
// every such thread a team of its own: measured with dnnl_sgemm 1024^3 on 2
// threads, a call whose master differs from the previous call's ran up to
// 2x slower while the other team's workers still held the cores, and the
// bench's HAL rows alternated between full and one-core speed. Calls that
// start a team (the matmul primitive's planning and execution) therefore run
// on the plugin's oneDNN thread: one team serves the plugin and the
// application's threads never host OpenMP workers. Calls that start none
// (dnnl_sgemm pieces, each single-threaded on the kernel thread pool) run on
// their caller. One call at a time: HAL_CPU_DEVICES' virtual devices share
// the host's cores, as the kernel thread pool does, and take turns.
#ifndef HAL_PLUGINS_CPU_OPS_ONEDNN_COMMON_HPP_
#define HAL_PLUGINS_CPU_OPS_ONEDNN_COMMON_HPP_

#include <dnnl.hpp>

#include <optional>
#include <string>
#include <type_traits>
#include <unordered_map>

#include "hal/ops.h"

namespace hal::cpu::ops {

// The process's oneDNN CPU engine (created on first use).
const dnnl::engine& onednn_engine();

// The oneDNN stream on the engine; use only on the oneDNN thread.
dnnl::stream& onednn_stream();

// Where a oneDNN call runs, in its turn (one call at a time, plugin-wide):
//  - kOnednnThread: on the oneDNN thread, for calls that start an OpenMP
//    team (the caller sleeps until it is done);
//  - kShortOnOnednnThread: the same for a call expected to take a few
//    microseconds, which the caller polls for before it sleeps;
//  - kCaller: on the calling thread, for a call that starts no OpenMP team
//    (its oneDNN calls run under SingleThreadedOnednn).
// When the plugin's team is one thread (onednn_team_threads(), whatever the
// caller's own OpenMP setting), the caller runs every call itself, at one
// thread; so does a body that calls this again.
enum class OnednnPlacement { kOnednnThread, kShortOnOnednnThread, kCaller };

// Work (multiply-adds or elements) up to which a plan's execution counts as a
// short call (kShortOnOnednnThread): 64^3 multiply-adds take a few microseconds.
inline constexpr double kShortCallWork = 64.0 * 64.0 * 64.0;

// Runs body(context) in its turn where |placement| says, and returns when it
// is done, rethrowing what it threw. Throws std::system_error when the
// oneDNN thread cannot be started.
void run_onednn_call(OnednnPlacement placement, void (*body)(void* context), void* context);

template <class Body>
void run_onednn_call(OnednnPlacement placement, Body&& body) {
  using Callable = std::remove_reference_t<Body>;
  run_onednn_call(
      placement, [](void* context) { (*static_cast<Callable*>(context))(); },
      static_cast<void*>(&body));
}

// For its lifetime, the oneDNN calls of the constructing thread run on that
// thread alone: its OpenMP thread count (the one oneDNN sizes its work by)
// is 1, and the previous count comes back at the end.
class SingleThreadedOnednn {
 public:
  SingleThreadedOnednn() noexcept;
  ~SingleThreadedOnednn();
  SingleThreadedOnednn(const SingleThreadedOnednn&) = delete;
  SingleThreadedOnednn& operator=(const SingleThreadedOnednn&) = delete;

 private:
  int previous_ = 1;
};

// The threads of the plugin's OpenMP team: the process's OpenMP thread count
// (OMP_NUM_THREADS, or one per hardware thread; 1 without OpenMP), read once.
// Every call that run_onednn_call places on the oneDNN thread, planning and
// execution alike, runs at this count, whatever count its caller set for its
// own thread: oneDNN sizes a primitive's work split and scratchpad by the
// count at creation and assumes the same count at execution, so a primitive
// created on a caller at 1 thread (an application's thread after
// torch.set_num_threads(1)) and run on the team wrote past its scratchpad.
int onednn_team_threads() noexcept;

// Scratchpads. The plugin's primitives (the matmul here; convolution,
// pooling and batch norm through user_scratchpad() and scratchpad_of,
// onednn_primitive.hpp) take their scratchpad from the plan's workspace,
// which the caller hands to each execution: |attr| with
// scratchpad_mode::user. oneDNN's default, a library-managed scratchpad,
// lives in thread-local storage of the thread that created the primitive,
// yet an execution takes the executing thread's: a primitive planned on one
// thread and run on another (a plan made on the application's thread and
// run by a stream executor, as every call runs on its caller when the
// plugin's team is one thread) wrote into that thread's scratchpad, absent
// or smaller: a segfault in oneDNN's convolution through hal_torch. The
// reorders that stage tensors keep oneDNN's own.
dnnl::primitive_attr with_user_scratchpad(dnnl::primitive_attr attr = dnnl::primitive_attr());

// The bytes of |primitive|'s scratchpad (created with_user_scratchpad); 0
// when it needs none.
size_t scratchpad_bytes(const dnnl::primitive& primitive);

// Executes |primitive| on |stream| with |args| and, when it needs one, its
// scratchpad at |scratchpad| (scratchpad_bytes(primitive) bytes).
void execute_with_scratchpad(const dnnl::primitive& primitive, dnnl::stream& stream,
                             std::unordered_map<int, dnnl::memory> args, void* scratchpad);

// oneDNN's data type for a HAL floating dtype; nullopt for the others.
std::optional<dnnl::memory::data_type> onednn_dtype(hal_dtype_t dtype);

// "f32", "bf16", ...
const char* dtype_text(hal_dtype_t dtype);

// A oneDNN memory descriptor of |dims| with |strides| (elements). A
// dimension of extent 1 gets the stride a dense layout would give it, which
// oneDNN's fast kernels recognise; its value is never used for addressing.
dnnl::memory::desc strided_desc(const dnnl::memory::dims& dims, const dnnl::memory::dims& strides,
                                dnnl::memory::data_type type);

}  // namespace hal::cpu::ops

#endif  // HAL_PLUGINS_CPU_OPS_ONEDNN_COMMON_HPP_
