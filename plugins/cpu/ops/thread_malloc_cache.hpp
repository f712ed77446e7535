// Keeps the calling thread's own malloc cache full of small free blocks, so
// that a large aligned block a library allocates and frees on this thread on
// every call is handed back at the same address, its pages still resident,
// instead of at fresh addresses whose pages fault in again.
//
// Why (measured with dnnl_sgemm 1024^3 on one thread, glibc 2.36): oneDNN's
// gemm driver takes its ~2.2 MB packing buffer with posix_memalign(128, ...)
// on every call and frees it at the end. glibc serves an aligned request by
// carving size + alignment + MINSIZE bytes and freeing the slack in front of
// the aligned block; that slack (32..160 bytes) goes to the thread's tcache,
// where a block stays marked in use. The freed buffer then cannot coalesce
// across it, the hole it leaves is too small for the next aligned request,
// and the next call takes fresh memory above: 552 minor faults (~2.2 MB of
// new pages) a call, for the first 7 to 12 calls of each thread and size
// (until the tcache bins fill), 0.9-4 ms of a 10-22 ms call on this
// project's VMs. With the bins already full the slack goes to the fast and
// unsorted bins, which coalesce, and the buffer is reused from the second
// heap-served call on (0 faults).
//
// Everything here is per thread: it only mallocs and frees small blocks on
// the calling thread, so it changes no process-wide malloc setting. It
// relies on nothing for correctness. With another allocator (jemalloc, a
// sanitizer's), other glibc tunables or a glibc that behaves differently, it
// is a few harmless malloc/free pairs.
#ifndef HAL_PLUGINS_CPU_OPS_THREAD_MALLOC_CACHE_HPP_
#define HAL_PLUGINS_CPU_OPS_THREAD_MALLOC_CACHE_HPP_

#include <cstddef>

namespace hal::cpu::ops {

// The largest request size whose cache bin fill_thread_malloc_cache() fills,
// and how many blocks of each size it leaves in the cache. The bins cover
// the slack of alignments up to 128 bytes (glibc's tcache holds 7 blocks a
// bin by default).
inline constexpr size_t kThreadMallocCacheLargest = 248;
inline constexpr int kThreadMallocCacheDepth = 7;

// Mallocs kThreadMallocCacheDepth blocks of each small size up to
// kThreadMallocCacheLargest bytes and frees them again, on the calling
// thread. Cheap when the cache is already full (each malloc is served from
// it and the free puts the block back): a few microseconds. Returns false
// only when a malloc failed (nothing is held then either).
bool fill_thread_malloc_cache() noexcept;

}  // namespace hal::cpu::ops

#endif  // HAL_PLUGINS_CPU_OPS_THREAD_MALLOC_CACHE_HPP_
