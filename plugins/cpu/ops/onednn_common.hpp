// What every oneDNN operator of the cpu plugin shares: one CPU engine, and
// one lock that lets a single oneDNN primitive run at a time.
//
// Threads: Debian's libdnnl 2.6 is built on OpenMP (libgomp). A primitive
// runs on an OpenMP team of OMP_NUM_THREADS threads (unset: one per
// hardware thread), the team size being fixed when the plan's primitive is
// created (oneDNN decides its work split then). The plugin's virtual devices
// (HAL_CPU_DEVICES) all share the host's cores, as its kernel thread pool
// does, so primitives of every device and stream take turns behind one
// plugin-wide lock: two OpenMP teams never compete for the same cores, and
// a oneDNN execution runs with the whole machine like a kernel launch does.
#ifndef HAL_PLUGINS_CPU_OPS_ONEDNN_COMMON_HPP_
#define HAL_PLUGINS_CPU_OPS_ONEDNN_COMMON_HPP_

#include <dnnl.hpp>

#include <functional>
#include <mutex>
#include <optional>
#include <string>

#include "hal/ops.h"

namespace hal::cpu::ops {

// The process's oneDNN CPU engine (created on first use).
const dnnl::engine& onednn_engine();

// Held while a primitive executes (see above). Also serialises use of the
// oneDNN stream below.
std::mutex& onednn_execution_mutex();

// A oneDNN stream on the engine; use only under onednn_execution_mutex().
dnnl::stream& onednn_stream();

// Runs |body| on a thread of its own and returns when it is done, passing
// on what it throws. Creating a primitive may start an OpenMP team on the
// calling thread, whose workers then live as long as that thread: planning
// on a short-lived thread keeps the application's threads free of OpenMP
// workers. (It also keeps GCC 12's LeakSanitizer from crashing at exit: it
// misreads the dynamic TLS of workers still alive then.)
void run_on_planning_thread(const std::function<void()>& body);

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
