#include "onednn_common.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <system_error>
#include <thread>

#if defined(_OPENMP)
#include <omp.h>
#endif

#include "../thread_pool.hpp"  // spin_pause

namespace hal::cpu::ops {

const dnnl::engine& onednn_engine() {
  static const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

dnnl::stream& onednn_stream() {
  static dnnl::stream stream(onednn_engine());
  return stream;
}

namespace {

// How long the oneDNN thread polls for the next call before it sleeps (a
// pipelined producer's next matmul usually follows at once), and how long
// the caller of a short call polls for it to finish before it sleeps. The
// caller of any other call sleeps at once: a polling caller is one more
// runnable thread beside the team, and on a 2-core host it was measured
// taking its ~10 us from the call itself. A wake-up through the kernel
// costs ~4 us on this project's VMs (median, measured with a futex
// ping-pong).
constexpr auto kOnednnThreadSpin = std::chrono::microseconds(50);
constexpr auto kShortCallSpin = std::chrono::microseconds(10);

// True on the oneDNN thread, and on a caller while it runs a call itself.
thread_local bool tls_on_onednn_thread = false;

// Sets the calling thread's OpenMP thread count (the count oneDNN sizes a
// primitive's work split and scratchpad by, at creation and at execution)
// for the scope's life; the previous count comes back at the end.
class OmpThreadCount {
 public:
  explicit OmpThreadCount([[maybe_unused]] int threads) noexcept {
#if defined(_OPENMP)
    previous_ = omp_get_max_threads();
    if (previous_ != threads) omp_set_num_threads(threads);
#endif
  }
  ~OmpThreadCount() {
#if defined(_OPENMP)
    if (omp_get_max_threads() != previous_) omp_set_num_threads(previous_);
#endif
  }
  OmpThreadCount(const OmpThreadCount&) = delete;
  OmpThreadCount& operator=(const OmpThreadCount&) = delete;

 private:
  int previous_ = 1;
};

// Marks this thread as running a oneDNN call for the scope's life.
class OnThisThread {
 public:
  OnThisThread() : was_(tls_on_onednn_thread) { tls_on_onednn_thread = true; }
  ~OnThisThread() { tls_on_onednn_thread = was_; }
  OnThisThread(const OnThisThread&) = delete;
  OnThisThread& operator=(const OnThisThread&) = delete;

 private:
  bool was_;
};

// Polls |ready| (pausing politely) for up to |limit|; true when it became true.
template <class Ready>
bool poll_for(std::chrono::microseconds limit, Ready ready) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  for (uint32_t i = 0;; ++i) {
    if (ready()) return true;
    spin_pause(i);
    if ((i & 31u) == 31u && std::chrono::steady_clock::now() > deadline) return ready();
  }
}

// Keeps the shared library that holds |symbol| loaded for the rest of the
// process (RTLD_NODELETE on the copy already loaded; nothing is loaded anew).
void keep_loaded(const void* symbol) {
  Dl_info info{};
  if (dladdr(symbol, &info) == 0 || info.dli_fname == nullptr) return;
  dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);  // the handle is never closed
}

class OnednnThread {
 public:
  OnednnThread() : thread_(start()) {}
  ~OnednnThread() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
      stop_flag_.store(true, std::memory_order_relaxed);
    }
    work_cv_.notify_all();
    thread_.join();  // its OpenMP workers end with it
  }
  OnednnThread(const OnednnThread&) = delete;
  OnednnThread& operator=(const OnednnThread&) = delete;

  // Runs one call; the caller holds the turn (below).
  void run(void (*body)(void*), void* context, bool short_call) {
    body_ = body;
    context_ = context;
    failure_ = nullptr;
    const uint64_t ticket = posted_.load(std::memory_order_relaxed) + 1;
    {
      std::lock_guard lock(mutex_);
      posted_.store(ticket, std::memory_order_release);
      if (server_sleeping_) work_cv_.notify_one();
    }
    const auto finished = [&] { return finished_.load(std::memory_order_acquire) >= ticket; };
    if (!short_call || !poll_for(kShortCallSpin, finished)) {
      std::unique_lock lock(mutex_);
      caller_sleeping_ = true;
      done_cv_.wait(lock, finished);
      caller_sleeping_ = false;
    }
    if (failure_) std::rethrow_exception(failure_);
  }

 private:
  std::thread start() {
    // The thread is joined when the plugin is unloaded, and its OpenMP
    // workers, released then, finish exiting in libgomp's and oneDNN's code
    // after the join returns: were those libraries unloaded with the plugin,
    // a worker would crash in code no longer mapped (seen in a process that
    // unloaded the plugin at exit). So they stay loaded once it has started.
#if defined(_OPENMP)
    keep_loaded(reinterpret_cast<const void*>(&omp_get_max_threads));
#endif
    keep_loaded(reinterpret_cast<const void*>(&dnnl_sgemm));
    return std::thread([this] { serve(); });
  }

  void serve() {
    tls_on_onednn_thread = true;
#if defined(_OPENMP)
    omp_set_num_threads(onednn_team_threads());
#endif
    uint64_t served = 0;
    while (true) {
      const auto posted = [&] {
        return posted_.load(std::memory_order_acquire) != served ||
               stop_flag_.load(std::memory_order_relaxed);
      };
      if (!poll_for(kOnednnThreadSpin, posted)) {
        std::unique_lock lock(mutex_);
        server_sleeping_ = true;
        work_cv_.wait(lock, [&] { return stopping_ || posted_.load() != served; });
        server_sleeping_ = false;
      }
      if (posted_.load(std::memory_order_acquire) == served) return;  // stopping, nothing left
      ++served;
      try {
        body_(context_);
      } catch (...) {
        failure_ = std::current_exception();
      }
      std::lock_guard lock(mutex_);
      finished_.store(served, std::memory_order_release);
      if (caller_sleeping_) done_cv_.notify_one();
    }
  }

  // The call in flight: written by its caller before posted_ is released,
  // failure_ by this thread before finished_ is.
  void (*body_)(void*) = nullptr;
  void* context_ = nullptr;
  std::exception_ptr failure_;
  std::atomic<uint64_t> posted_{0};    // calls handed over
  std::atomic<uint64_t> finished_{0};  // calls done
  std::atomic<bool> stop_flag_{false};
  std::mutex mutex_;  // guards the flags below; posted_ and finished_ change under it
  std::condition_variable work_cv_;
  std::condition_variable done_cv_;
  bool server_sleeping_ = false;
  bool caller_sleeping_ = false;
  bool stopping_ = false;
  std::thread thread_;  // last: starts once everything above exists
};

}  // namespace

int onednn_team_threads() noexcept {
#if defined(_OPENMP)
  // Read on a thread of its own: libgomp gives a thread that never set a
  // count of its own the process's (OMP_NUM_THREADS, or one per hardware
  // thread), whereas the caller may have set its own (torch.set_num_threads
  // sets its calling thread's only). Without a thread, no team can start.
  static const int threads = [] {
    int read = 1;
    try {
      std::thread([&read] { read = omp_get_max_threads(); }).join();
    } catch (const std::system_error&) {
      return 1;
    }
    return std::max(1, read);
  }();
  return threads;
#else
  return 1;
#endif
}

SingleThreadedOnednn::SingleThreadedOnednn() noexcept {
#if defined(_OPENMP)
  previous_ = omp_get_max_threads();
  omp_set_num_threads(1);
#endif
}

SingleThreadedOnednn::~SingleThreadedOnednn() {
#if defined(_OPENMP)
  omp_set_num_threads(previous_);
#endif
}

void run_onednn_call(OnednnPlacement placement, void (*body)(void* context), void* context) {
  if (tls_on_onednn_thread) {
    body(context);
    return;
  }
  static std::mutex turn;  // one call at a time, on the thread or not
  std::lock_guard hold(turn);
  if (placement == OnednnPlacement::kCaller) {
    OnThisThread on_this_thread;
    body(context);
    return;
  }
  // A team of one thread (OMP_NUM_THREADS=1, or one core) starts no OpenMP
  // worker: the call runs on its caller without a hand-over, at the plugin's
  // count whatever the caller's own.
  if (onednn_team_threads() == 1) {
    OnThisThread on_this_thread;
    OmpThreadCount team_of_one(1);
    body(context);
    return;
  }
  // Started on first use; stopped and joined when the plugin is unloaded or
  // the process exits, which ends its OpenMP team too.
  static OnednnThread thread;
  thread.run(body, context, placement == OnednnPlacement::kShortOnOnednnThread);
}

dnnl::primitive_attr with_user_scratchpad(dnnl::primitive_attr attr) {
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

namespace {

const dnnl_memory_desc_t* scratchpad_md(const dnnl::primitive& primitive) {
  return dnnl_primitive_desc_query_md(primitive.get_primitive_desc(), dnnl_query_scratchpad_md, 0);
}

}  // namespace

size_t scratchpad_bytes(const dnnl::primitive& primitive) {
  const dnnl_memory_desc_t* md = scratchpad_md(primitive);
  return md == nullptr ? 0 : dnnl_memory_desc_get_size(md);
}

void execute_with_scratchpad(const dnnl::primitive& primitive, dnnl::stream& stream,
                             std::unordered_map<int, dnnl::memory> args, void* scratchpad) {
  const dnnl_memory_desc_t* md = scratchpad_md(primitive);
  if (md != nullptr && dnnl_memory_desc_get_size(md) > 0) {
    args.insert_or_assign(DNNL_ARG_SCRATCHPAD,
                          dnnl::memory(dnnl::memory::desc(*md), onednn_engine(), scratchpad));
  }
  primitive.execute(stream, args);
}

std::optional<dnnl::memory::data_type> onednn_dtype(hal_dtype_t dtype) {
  switch (dtype) {
    case HAL_DTYPE_F32:
      return dnnl::memory::data_type::f32;
    case HAL_DTYPE_BF16:
      return dnnl::memory::data_type::bf16;
    case HAL_DTYPE_F16:
      return dnnl::memory::data_type::f16;
    default:
      return std::nullopt;
  }
}

const char* dtype_text(hal_dtype_t dtype) {
  switch (dtype) {
    case HAL_DTYPE_F32:
      return "f32";
    case HAL_DTYPE_F16:
      return "f16";
    case HAL_DTYPE_BF16:
      return "bf16";
    case HAL_DTYPE_F64:
      return "f64";
    case HAL_DTYPE_I32:
      return "i32";
    case HAL_DTYPE_I64:
      return "i64";
    case HAL_DTYPE_I8:
      return "i8";
    case HAL_DTYPE_U8:
      return "u8";
    default:
      return "an unknown dtype";
  }
}

dnnl::memory::desc strided_desc(const dnnl::memory::dims& dims, const dnnl::memory::dims& strides,
                                dnnl::memory::data_type type) {
  dnnl::memory::dims canonical = strides;
  // Inner to outer: a unit dimension takes the span of everything inside it.
  dnnl::memory::dim span = 1;
  for (size_t d = dims.size(); d-- > 0;) {
    if (dims[d] == 1) canonical[d] = span;
    span = std::max(span, canonical[d] * dims[d]);
  }
  return dnnl::memory::desc(dims, type, canonical);
}

}  // namespace hal::cpu::ops
