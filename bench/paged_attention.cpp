// Times HAL_OP_PAGED_ATTENTION (decode: one new token per sequence) through
// the public API and sets its cache read bandwidth beside two peers over as
// many bytes in the same run, interleaved with it, on as many threads as the
// plugin uses: a memcpy (STREAM's copy) and a plain read of the bytes block by
// block in the block table's (shuffled) order (a sum of their 64-bit words,
// vectorised: the most a kernel that only reads the cache could reach here).
//   _build-rel/bench/paged_attention 1024 8192 32768 [batch=1] [heads=32] [kv=8] [dim=128]
//                                    [dtype=bf16|f16|f32] [block=16] [splits=0] [mla] [threads=N]
// mla: FlashMLA's shape (one latent head of 576, values its first 512, heads=16 unless told).
// op GB/s counts the cache bytes the op must read (keys and values of every position, once) and
// read GB/s the same bytes; copy GB/s counts bytes read plus bytes written (STREAM's
// convention), so %copy = 50% means the op streams the cache as fast as a copy reads its source,
// and %read compares it with reading the bytes and nothing else. The GB/cpu columns divide by
// the process's CPU seconds (all threads) instead of wall seconds: per-core rates that a
// machine shared with other jobs distorts less (every peer measured alike).
#include <hal.h>

#include "bench_common.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <time.h>
#include <vector>

namespace {

const char* dtype_name(hal_dtype_t dtype) {
  return dtype == HAL_DTYPE_F32 ? "f32" : dtype == HAL_DTYPE_F16 ? "f16" : "bf16";
}

#define CHECK(call)                                                      \
  do {                                                                   \
    hal_result_t r_ = (call);                                            \
    if (r_ != HAL_SUCCESS) {                                             \
      std::fprintf(stderr, "%s: %s: %s\n", #call, hal_result_string(r_), \
                   hal_error_last_message());                            \
      std::exit(1);                                                      \
    }                                                                    \
  } while (0)

hal_tensor_desc_t dense(hal_dtype_t dtype, std::vector<int64_t> shape) {
  hal_tensor_desc_t t{};
  hal_tensor_desc_contiguous(&t, dtype, static_cast<uint32_t>(shape.size()), shape.data());
  return t;
}

void* upload(hal_device_t device, hal_stream_t stream, const void* data, size_t bytes) {
  void* p = nullptr;
  CHECK(hal_mem_alloc(device, HAL_MEMORY_DEVICE, std::max<size_t>(bytes, 4), 0, &p));
  CHECK(hal_memcpy_async(p, data, bytes, stream));
  CHECK(hal_stream_synchronize(stream));
  return p;
}

void* filled(hal_device_t device, hal_stream_t stream, size_t bytes) {
  std::vector<unsigned char> host(bytes);
  for (size_t i = 0; i < bytes; ++i)
    host[i] = (i % 2 == 1) ? 0x3c : static_cast<unsigned char>(i * 37);  // small floats
  return upload(device, stream, host.data(), bytes);
}

// The CPU time of the whole process (every thread), seconds: on a machine
// shared with other jobs, wall time measures the scheduler as much as the op.
double cpu_s() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

// memcpy of |bytes| split over |threads| threads; seconds.
double parallel_copy(std::vector<unsigned char>& to, const std::vector<unsigned char>& from,
                     unsigned threads) {
  const double start = bench::now_s();
  std::vector<std::thread> workers;
  const size_t piece = (from.size() + threads - 1) / threads;
  for (unsigned t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      const size_t begin = std::min(from.size(), t * piece);
      const size_t end = std::min(from.size(), begin + piece);
      std::memcpy(to.data() + begin, from.data() + begin, end - begin);
    });
  }
  for (std::thread& w : workers) w.join();
  bench::clobber_memory();
  return bench::now_s() - start;
}

// The sum of |bytes| bytes' 64-bit words (|bytes| a multiple of 64), in
// eight lanes: one vector load per 64 bytes with AVX-512 (a clone per ISA).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("avx512f", "avx2", "default")))
#endif
uint64_t
sum_words(const unsigned char* p, size_t bytes) {
  uint64_t lane[8] = {};
  for (size_t i = 0; i + 64 <= bytes; i += 64) {
    uint64_t word[8];
    std::memcpy(word, p + i, sizeof word);
    for (int j = 0; j < 8; ++j) lane[j] += word[j];
  }
  uint64_t total = 0;
  for (uint64_t v : lane) total += v;
  return total;
}

// A plain read of |from| split over |threads| threads, as the op reads a
// cache: |from| holds chunks of |chunk| bytes (a block of keys, then the
// blocks of values), read whole in the order |order| names them (the block
// table's), a sum of their 64-bit words with eight running sums. Seconds.
// The most a kernel that only reads the cache could do on this machine.
double parallel_read(const std::vector<unsigned char>& from, unsigned threads, size_t chunk,
                     const std::vector<int32_t>& order) {
  const double start = bench::now_s();
  std::vector<std::thread> workers;
  std::vector<uint64_t> sums(threads);
  const size_t chunks = order.size(), per_chunk = from.size() / std::max<size_t>(1, chunks);
  const size_t piece = (chunks + threads - 1) / threads;
  for (unsigned t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      uint64_t total = 0;
      const size_t begin = std::min(chunks, t * piece), end = std::min(chunks, begin + piece);
      for (size_t c = begin; c < end; ++c) {
        // Each chunk of |per_chunk| bytes (keys and values of a block) in
        // pieces of |chunk|.
        for (size_t at = 0; at + chunk <= per_chunk; at += chunk) {
          const unsigned char* p =
              from.data() + static_cast<size_t>(order[c]) * chunk + at / chunk * chunks * chunk;
          total += sum_words(p, chunk);
        }
      }
      sums[t] = total;
    });
  }
  for (std::thread& w : workers) w.join();
  bench::do_not_optimize(sums.data());
  return bench::now_s() - start;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int64_t> lens;
  int64_t batch = 1, heads = 32, kv = 8, dim = 128, block = 16;
  uint32_t splits = 0;
  bool mla = false, heads_given = false;
  unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  hal_dtype_t dtype = HAL_DTYPE_BF16;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const auto value = [&](const char* key) -> const char* {
      const size_t n = std::strlen(key);
      return arg.compare(0, n, key) == 0 ? arg.c_str() + n : nullptr;
    };
    if (const char* v = value("batch="))
      batch = std::atoll(v);
    else if (const char* v = value("heads="))
      heads = std::atoll(v), heads_given = true;
    else if (const char* v = value("kv="))
      kv = std::atoll(v);
    else if (const char* v = value("dim="))
      dim = std::atoll(v);
    else if (const char* v = value("block="))
      block = std::atoll(v);
    else if (const char* v = value("splits="))
      splits = static_cast<uint32_t>(std::atoi(v));
    else if (const char* v = value("threads="))
      threads = static_cast<unsigned>(std::atoi(v));
    else if (const char* v = value("dtype=")) {
      dtype = std::strcmp(v, "f32") == 0   ? HAL_DTYPE_F32
              : std::strcmp(v, "f16") == 0 ? HAL_DTYPE_F16
                                           : HAL_DTYPE_BF16;
    } else if (arg == "mla")
      mla = true;
    else
      lens.push_back(std::atoll(arg.c_str()));
  }
  if (lens.empty()) lens = {1024, 8192, 32768};
  int64_t dim_v = dim;
  if (mla) {
    kv = 1, dim = 576, dim_v = 512, block = 64;
    if (!heads_given) heads = 16;
  }
  const size_t elt = dtype == HAL_DTYPE_F32 ? 4 : 2;
  CHECK(hal_init(nullptr));
  hal_device_t device = nullptr;
  CHECK(hal_device_get(0, &device));
  hal_stream_t stream = nullptr;
  CHECK(hal_stream_create(device, 0, &stream));
  std::printf(
      "paged attention decode: batch %lld, heads %lld, kv heads %lld, dim %lld/%lld, %s "
      "cache, blocks of %lld, splits %u%s; copy peer on %u threads\n",
      static_cast<long long>(batch), static_cast<long long>(heads), static_cast<long long>(kv),
      static_cast<long long>(dim), static_cast<long long>(dim_v), dtype_name(dtype),
      static_cast<long long>(block), splits, mla ? " (MLA)" : "", threads);
  std::printf("%8s %9s %9s %8s %9s %9s %6s %6s %10s %10s %10s %6s %6s\n", "len", "bytes MiB", "ms",
              "op GB/s", "copy GB/s", "read GB/s", "%copy", "%read", "op GB/cpu", "copy GB/cpu",
              "read GB/cpu", "%copy", "%read");
  for (int64_t len : lens) {
    const int64_t blocks_per_seq = (len + block - 1) / block;
    const int64_t num_blocks = batch * blocks_per_seq;
    std::vector<int32_t> table(static_cast<size_t>(num_blocks));
    std::iota(table.begin(), table.end(), 0);
    std::shuffle(table.begin(), table.end(), std::mt19937(7));
    const std::vector<int32_t> seq_lens(static_cast<size_t>(batch), static_cast<int32_t>(len));
    hal_op_paged_attention_desc_t desc{};
    desc.header.struct_size = sizeof desc;
    desc.header.kind = HAL_OP_PAGED_ATTENTION;
    desc.values_in_keys = mla ? 1 : 0;
    desc.num_splits = splits;
    desc.q = dense(HAL_DTYPE_F32, {batch, 1, heads, dim});
    desc.k_cache = dense(dtype, {num_blocks, block, kv, dim});
    if (!mla) desc.v_cache = dense(dtype, {num_blocks, block, kv, dim_v});
    desc.block_table = dense(HAL_DTYPE_I32, {batch, blocks_per_seq});
    desc.seq_lens = dense(HAL_DTYPE_I32, {batch});
    desc.out = dense(HAL_DTYPE_F32, {batch, 1, heads, dim_v});
    desc.lse = dense(HAL_DTYPE_F32, {batch, heads, 1});
    const size_t k_bytes = static_cast<size_t>(num_blocks * block * kv * dim) * elt;
    const size_t v_bytes = mla ? 0 : static_cast<size_t>(num_blocks * block * kv * dim_v) * elt;
    void* q = filled(device, stream, static_cast<size_t>(batch * heads * dim) * 4);
    void* k = filled(device, stream, k_bytes);
    void* v = mla ? nullptr : filled(device, stream, v_bytes);
    void* t = upload(device, stream, table.data(), table.size() * 4);
    void* l = upload(device, stream, seq_lens.data(), seq_lens.size() * 4);
    void* out = filled(device, stream, static_cast<size_t>(batch * heads * dim_v) * 4);
    void* lse = filled(device, stream, static_cast<size_t>(batch * heads) * 4);
    void* status = filled(device, stream, 4);
    CHECK(hal_memset_async(status, 0, 4, stream));
    hal_op_plan_t plan = nullptr;
    CHECK(hal_op_plan_create(device, &desc.header, 0, &plan));
    hal_op_plan_info_t info{};
    info.struct_size = sizeof info;
    CHECK(hal_op_plan_get_info(plan, &info));
    void* workspace = nullptr;
    if (info.workspace_bytes > 0)
      CHECK(hal_mem_alloc(device, HAL_MEMORY_DEVICE, info.workspace_bytes, 0, &workspace));
    std::vector<void*> operands{q, k, v, t, l, out, lse, status};
    hal_op_exec_args_t args{};
    args.struct_size = sizeof args;
    args.operand_count = static_cast<uint32_t>(operands.size());
    args.operands = operands.data();
    args.workspace = workspace;
    args.workspace_bytes = info.workspace_bytes;
    const size_t bytes = k_bytes + v_bytes;  // what decode must read
    const size_t block_bytes = static_cast<size_t>(block * kv * dim) * elt;
    std::vector<unsigned char> from(bytes, 1), to(bytes, 0);
    CHECK(hal_op_execute(plan, &args, stream));  // warm-up
    CHECK(hal_stream_synchronize(stream));
    parallel_copy(to, from, threads);
    // Interleaved repetitions: the op and the copy in the same time window.
    const int reps = std::max(3, static_cast<int>(200e6 / static_cast<double>(bytes + 1)));
    std::vector<double> op_s, copy_s, read_s, op_cpu, copy_cpu, read_cpu;
    const auto median = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      return v[v.size() / 2];
    };
    for (int r = 0; r < std::min(reps, 50); ++r) {
      const double start = bench::now_s(), start_cpu = cpu_s();
      CHECK(hal_op_execute(plan, &args, stream));
      CHECK(hal_stream_synchronize(stream));
      op_s.push_back(bench::now_s() - start);
      op_cpu.push_back(cpu_s() - start_cpu);
      const double copy_start_cpu = cpu_s();
      copy_s.push_back(parallel_copy(to, from, threads));
      copy_cpu.push_back(cpu_s() - copy_start_cpu);
      const double read_start_cpu = cpu_s();
      read_s.push_back(parallel_read(from, threads, block_bytes, table));
      read_cpu.push_back(cpu_s() - read_start_cpu);
    }
    const double b = static_cast<double>(bytes);
    const double op = median(op_s), copy = median(copy_s), read = median(read_s);
    const double op_c = median(op_cpu), copy_c = median(copy_cpu), read_c = median(read_cpu);
    // GB/s: the op's and the plain read's count the bytes read; the copy's
    // read + write (STREAM's convention).
    const double op_gbs = b / op / 1e9, copy_gbs = 2.0 * b / copy / 1e9, read_gbs = b / read / 1e9;
    const double op_cpu_gbs = b / op_c / 1e9, copy_cpu_gbs = 2.0 * b / copy_c / 1e9,
                 read_cpu_gbs = b / read_c / 1e9;
    std::printf(
        "%8lld %9.1f %9.3f %8.2f %9.2f %9.2f %5.0f%% %5.0f%% %10.2f %10.2f %10.2f %5.0f%% "
        "%5.0f%%\n",
        static_cast<long long>(len), b / (1 << 20), op * 1e3, op_gbs, copy_gbs, read_gbs,
        100.0 * op_gbs / copy_gbs, 100.0 * op_gbs / read_gbs, op_cpu_gbs, copy_cpu_gbs,
        read_cpu_gbs, 100.0 * op_cpu_gbs / copy_cpu_gbs, 100.0 * op_cpu_gbs / read_cpu_gbs);
    CHECK(hal_op_plan_destroy(plan));
    for (void* p : {q, k, v, t, l, out, lse, status, workspace})
      if (p != nullptr) CHECK(hal_mem_free(p));
  }
  CHECK(hal_stream_destroy(stream));
  CHECK(hal_shutdown());
  return 0;
}
