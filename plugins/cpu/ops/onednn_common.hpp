// What every oneDNN operator of the cpu plugin shares: one CPU engine, and
// one thread on which every oneDNN call of the plugin runs.
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
// bench's HAL rows alternated between full and one-core speed. Every oneDNN
// call (planning and execution) therefore runs on the plugin's oneDNN
// thread, one at a time: one team serves the plugin, the application's
// threads never host OpenMP workers, and HAL_CPU_DEVICES' virtual devices,
// which share the host's cores as the kernel thread pool does, take turns.
#ifndef HAL_PLUGINS_CPU_OPS_ONEDNN_COMMON_HPP_
#define HAL_PLUGINS_CPU_OPS_ONEDNN_COMMON_HPP_

#include <dnnl.hpp>

#include <optional>
#include <string>
#include <type_traits>

#include "hal/ops.h"

namespace hal::cpu::ops {

// The process's oneDNN CPU engine (created on first use).
const dnnl::engine& onednn_engine();

// The oneDNN stream on the engine; use only on the oneDNN thread.
dnnl::stream& onednn_stream();

// Runs body(context) on the oneDNN thread and returns when it is done,
// rethrowing what it threw. One body runs at a time; callers wait their
// turn. A caller whose oneDNN calls would run on a team of one thread
// (OMP_NUM_THREADS=1) runs the body itself, in its turn; so does a body
// that calls this. |short_call|: the body is expected to take a few
// microseconds, and the caller polls for it before it sleeps. Throws
// std::system_error when the thread cannot be started.
void run_on_onednn_thread(void (*body)(void* context), void* context, bool short_call);

template <class Body>
void run_on_onednn_thread(Body&& body, bool short_call = false) {
  using Callable = std::remove_reference_t<Body>;
  run_on_onednn_thread([](void* context) { (*static_cast<Callable*>(context))(); },
                       static_cast<void*>(&body), short_call);
}

// Fills the malloc cache (thread_malloc_cache.hpp) of every thread of the
// OpenMP team that a oneDNN call from this thread runs on: oneDNN's gemm
// allocates a packing buffer per team thread per call. Call on the oneDNN
// thread before a large call.
void fill_onednn_team_malloc_caches() noexcept;

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
