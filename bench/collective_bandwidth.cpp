// Allreduce bandwidth and latency in the style of nccl-tests, beside a peer
// measured in the same run:
//
//   collective_bandwidth local        2 ranks in one process (cpu plugin,
//                                     shared memory); peer: the memory
//                                     bandwidth bound, measured here
//   collective_bandwidth moe          MoE dispatch and combine, 2 ranks in
//                                     one process (below)
//   mpirun -np 2 --allow-run-as-root collective_bandwidth mpi
//                                     2 processes (cpu plugin over MPI);
//                                     peer: MPI_Allreduce on the same buffers
//   ... mpi MAX_BYTES                 the same, sizes up to MAX_BYTES only
//   ... mpi-alltoallv [MAX_BYTES]     the alltoallv table alone (HAL's and
//                                     MPI's samples interleaved)
//   ... mpi-moe                       MoE dispatch and combine, one rank per
//                                     process; peer: MPI_Alltoallv of the
//                                     same rows
//   collective_bandwidth store [MAX_BYTES]
//                                     2 processes forked here, met over a TCP
//                                     store (HAL_COMM_BOOTSTRAP_TCP_STORE): the
//                                     cpu plugin through shared memory; peer:
//                                     the same with HAL_COMM_SHM=0 (the
//                                     loader's host-staged path over the store)
//
// HAL_COLL_PATH=segment|direct|ring (SPEC §13.8) forces HAL's path, to measure
// the crossovers of collective/include/hal_collective/limits.hpp (a forced path
// ends the run at the first call it cannot serve); HAL_COLL_VERBOSE=1 prints
// which path each size took.
//
// algbw = S / t, busbw = algbw * 2(n-1)/n (nccl-tests, allreduce). Sizes
// 8 B .. 256 MiB of f32, out of place. A sample is a batch of calls lasting
// >= 20 ms (at least one); the figure is the median of 5 samples, and under
// MPI a sample's time is the slowest rank's. Nothing here asserts on time.
//
// alltoallv (uneven): each rank sends S bytes in all, a share of 3 parts
// to its right neighbour and 1 part to every other rank (itself included).
// algbw = S / t, busbw = algbw * (n-1)/n (nccl-tests, alltoall). In one
// process the peer is hal_alltoall of the same S, even, and the traffic
// bound (each rank reads S and writes S: t >= 2·n·S / B); over MPI the
// peer is MPI_Alltoallv with the same counts.
//
// MoE (collective_bandwidth moe; dispatch unweighted, combine weighted): 2 ranks in one process, 8
// experts (4 per rank), top_k 2, hidden 4096, T tokens per rank, each token's experts drawn
// uniformly (distinct). S = the bytes of the rows one rank sends = T·k·
// hidden·elem (rows for its own experts included, as nccl-tests counts the
// whole alltoall buffer). dispatch and combine: algbw = S / t, busbw =
// algbw * (n-1)/n (the alltoall convention). The peer is hal_alltoallv of
// the same row counts alone, so the ratio is what the gathers, the weight
// multiply and the sum cost on top of the exchange; routing_create's time
// (indices to the host, the count exchange, the permutations uploaded) is
// reported beside.
//
// In-process traffic model: the engine reads every rank's input once and
// writes every rank's output once, 2·n·S bytes per allreduce, spread over
// the n ranks' threads. The bound is t >= 2·n·S / B, with B the read+write
// bandwidth of n threads each copying its own buffer (measured below), so
// bound_busbw = B / (2·n) * 2(n-1)/n.
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "bench_common.h"

#ifdef HAL_BENCH_HAVE_MPI
#define OMPI_SKIP_MPICXX 1
#include <mpi.h>
#endif

namespace {

constexpr size_t kMaxBytes = size_t{256} << 20;
constexpr int kSamples = 5;
constexpr double kMinSampleSeconds = 0.02;
constexpr int kAlltoallvSamples = 9;

// Elements rank |from| sends rank |to| of |total| per rank: 3 parts to the
// right neighbour, 1 part to everyone else, the remainder to the neighbour.
size_t uneven_share(size_t total, uint32_t from, uint32_t to, uint32_t n) {
  const size_t parts = n + 2;
  const size_t part = total / parts;
  const bool neighbour = to == (from + 1) % n;
  return neighbour ? total - part * (parts - 3) : part;
}

struct UnevenCounts {
  std::vector<size_t> send, recv;
};
UnevenCounts uneven_counts(size_t total, uint32_t rank, uint32_t n) {
  UnevenCounts c;
  for (uint32_t r = 0; r < n; ++r) {
    c.send.push_back(uneven_share(total, rank, r, n));
    c.recv.push_back(uneven_share(total, r, rank, n));
  }
  return c;
}

void print_alltoall_row(size_t bytes, double seconds, uint32_t ranks, const char* peer_name,
                        double peer_seconds) {
  const double busbw = bytes / seconds / 1e9 * (ranks - 1) / ranks;
  const double peer_busbw = peer_seconds > 0 ? bytes / peer_seconds / 1e9 * (ranks - 1) / ranks : 0;
  std::printf("%12zu %12.2f %10.3f %10.3f   %-10s %10.3f %10.2f   %6.2fx\n", bytes, seconds * 1e6,
              bytes / seconds / 1e9, busbw, peer_name, peer_busbw, peer_seconds * 1e6,
              peer_busbw > 0 ? busbw / peer_busbw : 0.0);
}

// Warm-up and calibration: how many calls fill kMinSampleSeconds, found by
// doubling until a batch lasts a quarter of a sample. One call's time alone
// is at the mercy of a single preemption (on a loaded machine a 64-byte call
// that met one took milliseconds and made every sample a single call).
template <class Batch>
int calls_per_sample(Batch& batch, double (*slowest)(double)) {
  batch(1);
  int calls = 1;
  double t = slowest(batch(calls));
  while (t < kMinSampleSeconds / 4 && calls < (1 << 24)) {
    calls *= 2;
    t = slowest(batch(calls));
  }
  return std::max(1, static_cast<int>(calls * kMinSampleSeconds / std::max(t, 1e-9)));
}

template <class Batch>
double median_seconds_per_call(Batch batch, double (*slowest)(double)) {
  const int calls = calls_per_sample(batch, slowest);
  std::vector<double> samples;
  for (int s = 0; s < kSamples; ++s) samples.push_back(slowest(batch(calls)) / calls);
  std::sort(samples.begin(), samples.end());
  return samples[kSamples / 2];
}

double identity(double t) {
  return t;
}

void print_row(size_t bytes, double seconds, uint32_t ranks, const char* peer_name,
               double peer_busbw, double peer_seconds) {
  const double algbw = bytes / seconds / 1e9;
  const double busbw = algbw * 2.0 * (ranks - 1) / ranks;
  std::printf("%12zu %12.2f %10.3f %10.3f   %-10s %10.3f %10.2f   %6.2fx\n", bytes, seconds * 1e6,
              algbw, busbw, peer_name, peer_busbw, peer_seconds * 1e6,
              peer_busbw > 0 ? busbw / peer_busbw : 0.0);
}

void check(hal_result_t result, const char* what) {
  if (result == HAL_SUCCESS) return;
  std::fprintf(stderr, "%s: %s %s\n", what, hal_result_string(result), hal_error_last_message());
  std::exit(1);
}

// Read+write bytes per second of |threads| threads each copying |bytes|.
double copy_bandwidth(size_t bytes, uint32_t threads) {
  std::vector<std::vector<uint8_t>> src(threads, std::vector<uint8_t>(bytes, 1));
  std::vector<std::vector<uint8_t>> dst(threads, std::vector<uint8_t>(bytes, 2));
  auto batch = [&](int calls) {
    const double t0 = bench::now_s();
    std::vector<std::thread> pool;
    for (uint32_t t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        for (int c = 0; c < calls; ++c) std::memcpy(dst[t].data(), src[t].data(), bytes);
      });
    }
    for (auto& th : pool) th.join();
    return bench::now_s() - t0;
  };
  return 2.0 * bytes * threads / median_seconds_per_call(batch, identity);
}

int run_local() {
  check(hal_init(nullptr), "hal_init");
  const uint32_t n = 2;
  hal_device_t devices[n];
  hal_comm_t comms[n];
  hal_stream_t streams[n];
  void* send[n];
  void* recv[n];
  for (uint32_t i = 0; i < n; ++i) {
    check(hal_device_get(i, &devices[i]), "hal_device_get (set HAL_CPU_DEVICES=2)");
    check(hal_stream_create(devices[i], 0, &streams[i]), "hal_stream_create");
    check(hal_mem_alloc(devices[i], HAL_MEMORY_DEVICE, kMaxBytes, 0, &send[i]), "hal_mem_alloc");
    check(hal_mem_alloc(devices[i], HAL_MEMORY_DEVICE, kMaxBytes, 0, &recv[i]), "hal_mem_alloc");
    std::memset(send[i], 0, kMaxBytes);
    std::memset(recv[i], 0, kMaxBytes);
  }
  check(hal_comm_init_all(n, devices, nullptr, comms), "hal_comm_init_all");
  std::printf("# allreduce f32 sum, %u ranks in one process (cpu plugin)\n", n);
  std::printf("# bound: %u threads copying, read+write B; bound busbw = B/(2n) * 2(n-1)/n\n", n);
  std::printf("%12s %12s %10s %10s   %-10s %10s %10s   %7s\n", "bytes", "time_us", "algbw", "busbw",
              "peer", "peer_busbw", "peer_us", "ratio");
  for (size_t bytes = 8; bytes <= kMaxBytes; bytes *= 2) {
    const size_t count = bytes / 4;
    auto batch = [&](int calls) {
      const double t0 = bench::now_s();
      for (int c = 0; c < calls; ++c) {
        for (uint32_t i = 0; i < n; ++i) {
          check(hal_allreduce(send[i], recv[i], count, HAL_DTYPE_F32, HAL_REDUCE_SUM, comms[i],
                              streams[i]),
                "hal_allreduce");
        }
      }
      for (uint32_t i = 0; i < n; ++i) check(hal_stream_synchronize(streams[i]), "sync");
      return bench::now_s() - t0;
    };
    const double t = median_seconds_per_call(batch, identity);
    double bound_busbw = 0;
    double bound_t = 0;
    if (bytes >= (size_t{1} << 20)) {
      const double rw = copy_bandwidth(bytes, n);
      bound_t = 2.0 * n * bytes / rw;
      bound_busbw = bytes / bound_t / 1e9 * 2.0 * (n - 1) / n;
    }
    print_row(bytes, t, n, bound_busbw > 0 ? "mem-bound" : "-", bound_busbw, bound_t);
  }
  // Every dtype at 64 MiB against the same traffic bound: the reductions'
  // arithmetic must keep up with memory (16-bit types widen and narrow).
  constexpr size_t kDtypeBytes = size_t{64} << 20;
  const double rw = copy_bandwidth(kDtypeBytes, n);
  const double bound_t = 2.0 * n * kDtypeBytes / rw;
  const double bound_busbw = kDtypeBytes / bound_t / 1e9 * 2.0 * (n - 1) / n;
  std::printf("\n# allreduce sum of 64 MiB per dtype, %u ranks in one process; goal >= 0.95x\n", n);
  std::printf("%12s %12s %10s %10s   %-10s %10s %10s   %7s\n", "dtype", "time_us", "algbw", "busbw",
              "peer", "peer_busbw", "peer_us", "ratio");
  const std::pair<hal_dtype_t, const char*> dtypes[] = {
      {HAL_DTYPE_F32, "f32"},   {HAL_DTYPE_F64, "f64"}, {HAL_DTYPE_F16, "f16"},
      {HAL_DTYPE_BF16, "bf16"}, {HAL_DTYPE_I32, "i32"}, {HAL_DTYPE_I64, "i64"},
      {HAL_DTYPE_I8, "i8"},     {HAL_DTYPE_U8, "u8"}};
  for (const auto& [dtype, dtype_name] : dtypes) {
    const size_t count = kDtypeBytes / HAL_DTYPE_SIZE(dtype);
    auto batch = [&](int calls) {
      const double t0 = bench::now_s();
      for (int c = 0; c < calls; ++c) {
        for (uint32_t i = 0; i < n; ++i) {
          check(hal_allreduce(send[i], recv[i], count, dtype, HAL_REDUCE_SUM, comms[i], streams[i]),
                "hal_allreduce");
        }
      }
      for (uint32_t i = 0; i < n; ++i) check(hal_stream_synchronize(streams[i]), "sync");
      return bench::now_s() - t0;
    };
    const double t = median_seconds_per_call(batch, identity);
    const double busbw = kDtypeBytes / t / 1e9 * 2.0 * (n - 1) / n;
    std::printf("%12s %12.2f %10.3f %10.3f   %-10s %10.3f %10.2f   %6.2fx\n", dtype_name, t * 1e6,
                kDtypeBytes / t / 1e9, busbw, "mem-bound", bound_busbw, bound_t * 1e6,
                busbw / bound_busbw);
  }
  std::printf(
      "\n# alltoallv f32, uneven (3:1 shares), %u ranks in one process; peers: "
      "hal_alltoall (even) and the traffic bound 2nS/B\n",
      n);
  std::printf("%12s %12s %10s %10s   %-10s %10s %10s   %7s   %s\n", "bytes", "time_us", "algbw",
              "busbw", "peer", "peer_busbw", "peer_us", "ratio", "bound_ratio");
  for (size_t bytes = 1024; bytes <= (size_t{64} << 20); bytes *= 4) {
    const size_t total = bytes / 4;
    std::vector<UnevenCounts> layouts;
    for (uint32_t i = 0; i < n; ++i) layouts.push_back(uneven_counts(total, i, n));
    auto uneven = [&](int calls) {
      const double t0 = bench::now_s();
      for (int c = 0; c < calls; ++c) {
        for (uint32_t i = 0; i < n; ++i) {
          check(hal_alltoallv(send[i], layouts[i].send.data(), nullptr, recv[i],
                              layouts[i].recv.data(), nullptr, HAL_DTYPE_F32, comms[i], streams[i]),
                "hal_alltoallv");
        }
      }
      for (uint32_t i = 0; i < n; ++i) check(hal_stream_synchronize(streams[i]), "sync");
      return bench::now_s() - t0;
    };
    auto even = [&](int calls) {
      const double t0 = bench::now_s();
      for (int c = 0; c < calls; ++c) {
        for (uint32_t i = 0; i < n; ++i) {
          check(hal_alltoall(send[i], recv[i], total / n, HAL_DTYPE_F32, comms[i], streams[i]),
                "hal_alltoall");
        }
      }
      for (uint32_t i = 0; i < n; ++i) check(hal_stream_synchronize(streams[i]), "sync");
      return bench::now_s() - t0;
    };
    const double t = median_seconds_per_call(uneven, identity);
    const double t_even = median_seconds_per_call(even, identity);
    print_alltoall_row(bytes, t, n, "alltoall", t_even);
    if (bytes >= (size_t{1} << 20)) {
      const double bound = 2.0 * n * bytes / copy_bandwidth(bytes, n);
      std::printf("%*s%.2fx of the bound (%.2f us)\n", 92, "", bound / t, bound * 1e6);
    }
  }
  for (uint32_t i = 0; i < n; ++i) {
    hal_comm_destroy(comms[i]);
    hal_stream_destroy(streams[i]);
    hal_mem_free(send[i]);
    hal_mem_free(recv[i]);
  }
  hal_shutdown();
  return 0;
}

int run_moe() {
  check(hal_init(nullptr), "hal_init");
  constexpr uint32_t n = 2, kExperts = 8, kTopK = 2;
  constexpr size_t kHidden = 4096;
  hal_device_t devices[n];
  hal_comm_t comms[n];
  hal_stream_t streams[n];
  for (uint32_t i = 0; i < n; ++i) {
    check(hal_device_get(i, &devices[i]), "hal_device_get (set HAL_CPU_DEVICES=2)");
    check(hal_stream_create(devices[i], 0, &streams[i]), "hal_stream_create");
  }
  check(hal_comm_init_all(n, devices, nullptr, comms), "hal_comm_init_all");
  std::printf(
      "# MoE dispatch / combine, %u ranks in one process, %u experts, top_k %u, hidden %zu; "
      "S = T*k*hidden*elem per rank; algbw = S/t, busbw = algbw*(n-1)/n; peer: hal_alltoallv of "
      "the same rows; dispatch unweighted, combine weighted\n",
      n, kExperts, kTopK, kHidden);
  std::printf("%6s %8s %12s %12s %10s %10s   %10s %10s   %7s %12s\n", "dtype", "tokens", "bytes",
              "time_us", "algbw", "busbw", "peer_busbw", "peer_us", "ratio", "routing_us");
  for (const hal_dtype_t dtype : {HAL_DTYPE_F32, HAL_DTYPE_BF16}) {
    const size_t elem = HAL_DTYPE_SIZE(dtype);
    for (size_t tokens = 256; tokens <= 4096; tokens *= 4) {
      const size_t rows = tokens * kTopK;
      // Each rank's buffers; the receive side can hold every row of both ranks.
      void *token_buf[n], *weight_buf[n], *recv_buf[n], *out_buf[n], *index_buf[n], *peer_send[n];
      hal_moe_routing_t routings[n];
      double routing_seconds = 0;
      for (uint32_t i = 0; i < n; ++i) {
        check(
            hal_mem_alloc(devices[i], HAL_MEMORY_DEVICE, tokens * kHidden * elem, 0, &token_buf[i]),
            "hal_mem_alloc");
        check(hal_mem_alloc(devices[i], HAL_MEMORY_DEVICE, rows * elem, 0, &weight_buf[i]),
              "hal_mem_alloc");
        check(hal_mem_alloc(devices[i], HAL_MEMORY_DEVICE, n * rows * kHidden * elem, 0,
                            &recv_buf[i]),
              "hal_mem_alloc");
        check(hal_mem_alloc(devices[i], HAL_MEMORY_DEVICE, tokens * kHidden * elem, 0, &out_buf[i]),
              "hal_mem_alloc");
        check(hal_mem_alloc(devices[i], HAL_MEMORY_DEVICE, rows * 4, 0, &index_buf[i]),
              "hal_mem_alloc");
        check(hal_mem_alloc(devices[i], HAL_MEMORY_DEVICE, rows * kHidden * elem, 0, &peer_send[i]),
              "hal_mem_alloc");
        std::memset(peer_send[i], 0, rows * kHidden * elem);
        std::memset(token_buf[i], 0, tokens * kHidden * elem);
        std::memset(weight_buf[i], 0, rows * elem);
        std::vector<int32_t> indices;
        uint64_t state = 0x9e3779b97f4a7c15ull * (i + 1) + tokens;
        for (size_t t = 0; t < tokens; ++t) {
          state = state * 6364136223846793005ull + 1442695040888963407ull;
          const auto first = static_cast<int32_t>((state >> 33) % kExperts);
          const auto step = static_cast<int32_t>(1 + (state >> 45) % (kExperts - 1));
          indices.push_back(first);
          indices.push_back((first + step) % static_cast<int32_t>(kExperts));
        }
        std::memcpy(index_buf[i], indices.data(), rows * 4);
      }
      {
        std::vector<double> seconds(n);
        std::vector<std::thread> threads;  // every rank at once: create blocks
        for (uint32_t i = 0; i < n; ++i) {
          threads.emplace_back([&, i] {
            hal_moe_routing_desc_t desc = HAL_MOE_ROUTING_DESC_INIT;
            desc.num_experts = kExperts;
            desc.top_k = kTopK;
            desc.num_tokens = tokens;
            desc.recv_capacity = n * rows;
            const double t0 = bench::now_s();
            check(hal_moe_routing_create(comms[i], &desc, static_cast<int32_t*>(index_buf[i]),
                                         streams[i], &routings[i]),
                  "hal_moe_routing_create");
            seconds[i] = bench::now_s() - t0;
          });
        }
        for (auto& t : threads) t.join();
        routing_seconds = std::max(seconds[0], seconds[1]);
      }
      // The peer's counts: the routing's own, as rows of hidden elements.
      std::vector<std::vector<size_t>> send_counts(n, std::vector<size_t>(n)),
          recv_counts(n, std::vector<size_t>(n));
      for (uint32_t from = 0; from < n; ++from) {
        const auto* ids = static_cast<const int32_t*>(index_buf[from]);
        for (size_t p = 0; p < rows; ++p) {
          const uint32_t to = static_cast<uint32_t>(ids[p]) / (kExperts / n);
          send_counts[from][to] += kHidden;
          recv_counts[to][from] += kHidden;
        }
      }
      auto timed = [&](auto one_rank) {
        return [&, one_rank](int calls) {
          const double t0 = bench::now_s();
          for (int c = 0; c < calls; ++c)
            for (uint32_t i = 0; i < n; ++i) one_rank(i);
          for (uint32_t i = 0; i < n; ++i) check(hal_stream_synchronize(streams[i]), "sync");
          return bench::now_s() - t0;
        };
      };
      const double dispatch_t =
          median_seconds_per_call(timed([&](uint32_t i) {
                                    check(hal_moe_dispatch(routings[i], token_buf[i], nullptr,
                                                           kHidden, dtype, recv_buf[i], streams[i]),
                                          "hal_moe_dispatch");
                                  }),
                                  identity);
      const double combine_t =
          median_seconds_per_call(timed([&](uint32_t i) {
                                    check(hal_moe_combine(routings[i], recv_buf[i], weight_buf[i],
                                                          kHidden, dtype, out_buf[i], streams[i]),
                                          "hal_moe_combine");
                                  }),
                                  identity);
      const double peer_t = median_seconds_per_call(
          timed([&](uint32_t i) {
            check(hal_alltoallv(peer_send[i], send_counts[i].data(), nullptr, recv_buf[i],
                                recv_counts[i].data(), nullptr, dtype, comms[i], streams[i]),
                  "hal_alltoallv");
          }),
          identity);
      const size_t bytes = rows * kHidden * elem;
      const double share = (n - 1.0) / n;
      const double peer_busbw = bytes / peer_t / 1e9 * share;
      for (const auto& [name, t] :
           {std::pair{"dispatch", dispatch_t}, std::pair{"combine", combine_t}}) {
        const double algbw = bytes / t / 1e9;
        std::printf("%-6s %8zu %12zu %12.2f %10.3f %10.3f   %10.3f %10.2f   %6.2fx %12.2f  %s\n",
                    dtype == HAL_DTYPE_F32 ? "f32" : "bf16", tokens, bytes, t * 1e6, algbw,
                    algbw * share, peer_busbw, peer_t * 1e6, algbw * share / peer_busbw,
                    routing_seconds * 1e6, name);
      }
      for (uint32_t i = 0; i < n; ++i) {
        hal_moe_routing_destroy(routings[i]);
        for (void* buffer :
             {token_buf[i], weight_buf[i], recv_buf[i], out_buf[i], index_buf[i], peer_send[i]})
          hal_mem_free(buffer);
      }
    }
  }
  for (uint32_t i = 0; i < n; ++i) {
    hal_comm_destroy(comms[i]);
    hal_stream_destroy(streams[i]);
  }
  hal_shutdown();
  return 0;
}

// Over the TCP store: each sample starts after a 4-byte allreduce (the
// barrier) and its time is the slowest rank's (an f64 max allreduce).
hal_comm_t g_store_comm = nullptr;
hal_stream_t g_store_stream = nullptr;
void* g_store_scratch = nullptr;

void store_barrier() {
  check(hal_allreduce(g_store_scratch, g_store_scratch, 1, HAL_DTYPE_F32, HAL_REDUCE_SUM,
                      g_store_comm, g_store_stream),
        "barrier");
  check(hal_stream_synchronize(g_store_stream), "sync");
}

double store_slowest(double t) {
  auto* slot = static_cast<double*>(g_store_scratch);
  *slot = t;
  check(hal_allreduce(slot, slot, 1, HAL_DTYPE_F64, HAL_REDUCE_MAX, g_store_comm, g_store_stream),
        "slowest");
  check(hal_stream_synchronize(g_store_stream), "sync");
  return *slot;
}

// One rank of a store run: the allreduce times, rank 0's written to |out|.
int store_rank(uint32_t rank, const std::string& address, size_t max_bytes, int out) {
  check(hal_init(nullptr), "hal_init");
  hal_device_t device;
  void* send;
  void* recv;
  check(hal_device_get(0, &device), "hal_device_get");
  check(hal_stream_create(device, 0, &g_store_stream), "hal_stream_create");
  check(hal_mem_alloc(device, HAL_MEMORY_DEVICE, max_bytes, 0, &send), "hal_mem_alloc");
  check(hal_mem_alloc(device, HAL_MEMORY_DEVICE, max_bytes, 0, &recv), "hal_mem_alloc");
  check(hal_mem_alloc(device, HAL_MEMORY_DEVICE, 64, 0, &g_store_scratch), "hal_mem_alloc");
  std::memset(send, 0, max_bytes);
  std::memset(recv, 0, max_bytes);
  hal_comm_config_t config = HAL_COMM_CONFIG_INIT;
  config.bootstrap = HAL_COMM_BOOTSTRAP_TCP_STORE;
  config.store_address = address.c_str();
  config.timeout_ms = 60000;
  check(hal_comm_init_rank(device, 2, nullptr, rank, &config, &g_store_comm), "hal_comm_init_rank");
  for (size_t bytes = 8; bytes <= max_bytes; bytes *= 2) {
    auto batch = [&](int calls) {
      store_barrier();
      const double t0 = bench::now_s();
      for (int c = 0; c < calls; ++c) {
        check(hal_allreduce(send, recv, bytes / 4, HAL_DTYPE_F32, HAL_REDUCE_SUM, g_store_comm,
                            g_store_stream),
              "hal_allreduce");
      }
      check(hal_stream_synchronize(g_store_stream), "sync");
      return bench::now_s() - t0;
    };
    const double t = median_seconds_per_call(batch, store_slowest);
    if (rank == 0 && write(out, &t, sizeof t) != sizeof t) return 1;
  }
  hal_comm_destroy(g_store_comm);
  hal_stream_destroy(g_store_stream);
  hal_mem_free(send);
  hal_mem_free(recv);
  hal_mem_free(g_store_scratch);
  hal_shutdown();
  return 0;
}

// A port nobody listens on now, for rank 0's store (the ranks must both
// know it before either starts).
int free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof address;
  int port = 0;
  if (fd >= 0 && bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0) {
    port = ntohs(address.sin_port);
  }
  if (fd >= 0) close(fd);
  return port;
}

// Rank 0's allreduce times of a run of 2 forked processes with HAL_COMM_SHM
// set to |shm|; empty when a rank failed.
std::vector<double> store_run(const char* shm, size_t max_bytes) {
  const std::string address = "127.0.0.1:" + std::to_string(free_port());
  int times[2];
  if (pipe(times) != 0) return {};
  pid_t ranks[2];
  for (uint32_t rank = 0; rank < 2; ++rank) {
    ranks[rank] = fork();
    if (ranks[rank] == 0) {
      close(times[0]);
      setenv("HAL_COMM_SHM", shm, 1);
      // Random bytes, as SPEC §13.6 asks (public here: loopback, a benchmark).
      setenv("HAL_COMM_STORE_SECRET",
             "b3c5316b515e952628cfd7ff3311ac35850584020715e7cd7eb29531517bd127", 0);
      _exit(store_rank(rank, address, max_bytes, times[1]));
    }
  }
  close(times[1]);
  std::vector<double> out;
  double t = 0;
  while (read(times[0], &t, sizeof t) == sizeof t) out.push_back(t);
  close(times[0]);
  bool ok = true;
  for (pid_t pid : ranks) {
    int status = 0;
    ok &=
        pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }
  return ok ? out : std::vector<double>{};
}

int run_store(size_t max_bytes) {
  // The peer first: the loader's host-staged path over the same store.
  const std::vector<double> staged = store_run("0", max_bytes);
  const std::vector<double> shared = store_run("1", max_bytes);
  if (staged.empty() || staged.size() != shared.size()) {
    std::fprintf(stderr, "collective_bandwidth store: a rank failed\n");
    return 1;
  }
  std::printf(
      "# allreduce f32 sum, 2 processes over a TCP store; HAL (cpu plugin, shared memory) vs "
      "HAL_COMM_SHM=0 (loader, host-staged over the store)\n");
  std::printf("%12s %12s %10s %10s   %-10s %10s %10s   %7s\n", "bytes", "time_us", "algbw", "busbw",
              "peer", "peer_busbw", "peer_us", "ratio");
  size_t bytes = 8;
  for (size_t i = 0; i < shared.size(); ++i, bytes *= 2) {
    print_row(bytes, shared[i], 2, "staged", bytes / staged[i] / 1e9, staged[i]);
  }
  return 0;
}

#ifdef HAL_BENCH_HAVE_MPI
double slowest_rank(double t) {
  double worst = 0;
  MPI_Allreduce(&t, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return worst;
}

// A sample under MPI: |calls| calls of |one| after a barrier; HAL's calls
// end with their stream's synchronisation (|stream| NULL for MPI's own).
template <class Call>
auto barrier_batch(Call one, hal_stream_t stream) {
  return [one, stream](int calls) {
    MPI_Barrier(MPI_COMM_WORLD);
    const double t0 = bench::now_s();
    for (int c = 0; c < calls; ++c) one();
    if (stream != nullptr) check(hal_stream_synchronize(stream), "sync");
    return bench::now_s() - t0;
  };
}

// Medians of |a|'s and |b|'s per-call times (slowest rank), their samples
// taken in turn (a, b, a, b, ...) so that a load that comes and goes on a
// shared machine falls on both alike. Both are calibrated first.
template <class BatchA, class BatchB>
std::pair<double, double> interleaved_medians(BatchA a, BatchB b, int samples) {
  const int calls_a = calls_per_sample(a, slowest_rank);
  const int calls_b = calls_per_sample(b, slowest_rank);
  std::vector<double> ta, tb;
  for (int s = 0; s < samples; ++s) {
    ta.push_back(slowest_rank(a(calls_a)) / calls_a);
    tb.push_back(slowest_rank(b(calls_b)) / calls_b);
  }
  std::sort(ta.begin(), ta.end());
  std::sort(tb.begin(), tb.end());
  return {ta[samples / 2], tb[samples / 2]};
}

int run_mpi(size_t max_bytes, bool allreduce) {
  int provided = 0;
  MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
  int rank = 0;
  int size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  check(hal_init(nullptr), "hal_init");
  hal_device_t device;
  hal_stream_t stream;
  hal_comm_t comm;
  void* send;
  void* recv;
  check(hal_device_get(0, &device), "hal_device_get");
  check(hal_stream_create(device, 0, &stream), "hal_stream_create");
  check(hal_mem_alloc(device, HAL_MEMORY_DEVICE, kMaxBytes, 0, &send), "hal_mem_alloc");
  check(hal_mem_alloc(device, HAL_MEMORY_DEVICE, kMaxBytes, 0, &recv), "hal_mem_alloc");
  std::memset(send, 0, kMaxBytes);
  std::memset(recv, 0, kMaxBytes);
  hal_comm_config_t config = HAL_COMM_CONFIG_INIT;
  config.bootstrap = HAL_COMM_BOOTSTRAP_MPI;
  check(hal_comm_init_rank(device, static_cast<uint32_t>(size), nullptr,
                           static_cast<uint32_t>(rank), &config, &comm),
        "hal_comm_init_rank");
  if (rank == 0 && allreduce) {
    std::printf("# allreduce f32 sum, %d processes; HAL (cpu plugin over MPI) vs MPI_Allreduce\n",
                size);
    std::printf("%12s %12s %10s %10s   %-10s %10s %10s   %7s\n", "bytes", "time_us", "algbw",
                "busbw", "peer", "peer_busbw", "peer_us", "ratio");
  }
  for (size_t bytes = 8; allreduce && bytes <= max_bytes; bytes *= 2) {
    const int count = static_cast<int>(bytes / 4);
    auto hal_batch = barrier_batch(
        [&] {
          check(hal_allreduce(send, recv, count, HAL_DTYPE_F32, HAL_REDUCE_SUM, comm, stream),
                "hal_allreduce");
        },
        stream);
    auto mpi_batch = barrier_batch(
        [&] { MPI_Allreduce(send, recv, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); }, nullptr);
    const double t_mpi = median_seconds_per_call(mpi_batch, slowest_rank);
    const double t_hal = median_seconds_per_call(hal_batch, slowest_rank);
    const double mpi_busbw = bytes / t_mpi / 1e9 * 2.0 * (size - 1) / size;
    if (rank == 0) print_row(bytes, t_hal, static_cast<uint32_t>(size), "MPI", mpi_busbw, t_mpi);
  }
  if (rank == 0) {
    std::printf(
        "\n# alltoallv f32, uneven (3:1 shares), %d processes; HAL vs MPI_Alltoallv (samples "
        "interleaved, median of %d)\n",
        size, kAlltoallvSamples);
    std::printf("%12s %12s %10s %10s   %-10s %10s %10s   %7s\n", "bytes", "time_us", "algbw",
                "busbw", "peer", "peer_busbw", "peer_us", "ratio");
  }
  const auto n = static_cast<uint32_t>(size);
  for (size_t bytes = 64; bytes <= std::min(max_bytes, size_t{64} << 20); bytes *= 8) {
    const UnevenCounts counts = uneven_counts(bytes / 4, static_cast<uint32_t>(rank), n);
    std::vector<int> mpi_send(n), mpi_recv(n), mpi_sdispl(n), mpi_rdispl(n);
    for (uint32_t r = 0, s_at = 0, r_at = 0; r < n; ++r) {
      mpi_send[r] = static_cast<int>(counts.send[r]);
      mpi_recv[r] = static_cast<int>(counts.recv[r]);
      mpi_sdispl[r] = static_cast<int>(s_at);
      mpi_rdispl[r] = static_cast<int>(r_at);
      s_at += mpi_send[r];
      r_at += mpi_recv[r];
    }
    auto hal_batch = barrier_batch(
        [&] {
          check(hal_alltoallv(send, counts.send.data(), nullptr, recv, counts.recv.data(), nullptr,
                              HAL_DTYPE_F32, comm, stream),
                "hal_alltoallv");
        },
        stream);
    auto mpi_batch = barrier_batch(
        [&] {
          MPI_Alltoallv(send, mpi_send.data(), mpi_sdispl.data(), MPI_FLOAT, recv, mpi_recv.data(),
                        mpi_rdispl.data(), MPI_FLOAT, MPI_COMM_WORLD);
        },
        nullptr);
    const auto [t_hal, t_mpi] = interleaved_medians(hal_batch, mpi_batch, kAlltoallvSamples);
    if (rank == 0) print_alltoall_row(bytes, t_hal, n, "MPI", t_mpi);
  }
  hal_comm_destroy(comm);
  hal_stream_destroy(stream);
  hal_mem_free(send);
  hal_mem_free(recv);
  hal_shutdown();
  MPI_Finalize();
  return 0;
}

// MoE dispatch and combine with one rank per process (the shape of
// collective_bandwidth moe: 8 experts over the ranks, top_k 2, hidden 4096),
// beside MPI_Alltoallv of the same rows alone: the ratio is the whole MoE
// step against MPI's bare exchange. Samples interleaved (dispatch, combine,
// MPI), medians.
int run_mpi_moe() {
  int provided = 0;
  MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
  int rank_i = 0;
  int size_i = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_i);
  MPI_Comm_size(MPI_COMM_WORLD, &size_i);
  const auto rank = static_cast<uint32_t>(rank_i);
  const auto n = static_cast<uint32_t>(size_i);
  constexpr uint32_t kExperts = 8, kTopK = 2;
  constexpr size_t kHidden = 4096;
  if (kExperts % n != 0) {
    if (rank == 0) std::fprintf(stderr, "mpi-moe: the rank count must divide %u\n", kExperts);
    MPI_Finalize();
    return 2;
  }
  check(hal_init(nullptr), "hal_init");
  hal_device_t device;
  hal_stream_t stream;
  hal_comm_t comm;
  check(hal_device_get(0, &device), "hal_device_get");
  check(hal_stream_create(device, 0, &stream), "hal_stream_create");
  hal_comm_config_t config = HAL_COMM_CONFIG_INIT;
  config.bootstrap = HAL_COMM_BOOTSTRAP_MPI;
  check(hal_comm_init_rank(device, n, nullptr, rank, &config, &comm), "hal_comm_init_rank");
  if (rank == 0) {
    std::printf(
        "# MoE dispatch / combine, %u processes, %u experts, top_k %u, hidden %zu; S = T*k*hidden*"
        "elem per rank; busbw = S/t*(n-1)/n; peer: MPI_Alltoallv of the same rows (samples "
        "interleaved, median of %d)\n",
        n, kExperts, kTopK, kHidden, kAlltoallvSamples);
    std::printf("%6s %8s %12s %12s %10s   %10s %10s   %7s %12s\n", "dtype", "tokens", "bytes",
                "time_us", "busbw", "peer_busbw", "peer_us", "ratio", "routing_us");
  }
  for (const hal_dtype_t dtype : {HAL_DTYPE_F32, HAL_DTYPE_BF16}) {
    const size_t elem = HAL_DTYPE_SIZE(dtype);
    for (size_t tokens = 16; tokens <= 4096; tokens *= 4) {
      const size_t rows = tokens * kTopK;
      void *token_buf, *weight_buf, *recv_buf, *out_buf, *index_buf, *peer_send;
      for (auto [slot, bytes] :
           {std::pair{&token_buf, tokens * kHidden * elem}, std::pair{&weight_buf, rows * elem},
            std::pair{&recv_buf, n * rows * kHidden * elem},
            std::pair{&out_buf, tokens * kHidden * elem}, std::pair{&index_buf, rows * 4},
            std::pair{&peer_send, rows * kHidden * elem}}) {
        check(hal_mem_alloc(device, HAL_MEMORY_DEVICE, bytes, 0, slot), "hal_mem_alloc");
        std::memset(*slot, 0, bytes);
      }
      // Every rank draws every rank's indices (same seeds): the MPI peer's
      // counts come from them.
      std::vector<std::vector<int32_t>> all_indices(n);
      for (uint32_t r = 0; r < n; ++r) {
        uint64_t state = 0x9e3779b97f4a7c15ull * (r + 1) + tokens;
        for (size_t t = 0; t < tokens; ++t) {
          state = state * 6364136223846793005ull + 1442695040888963407ull;
          const auto first = static_cast<int32_t>((state >> 33) % kExperts);
          const auto step = static_cast<int32_t>(1 + (state >> 45) % (kExperts - 1));
          all_indices[r].push_back(first);
          all_indices[r].push_back((first + step) % static_cast<int32_t>(kExperts));
        }
      }
      std::memcpy(index_buf, all_indices[rank].data(), rows * 4);
      hal_moe_routing_desc_t desc = HAL_MOE_ROUTING_DESC_INIT;
      desc.num_experts = kExperts;
      desc.top_k = kTopK;
      desc.num_tokens = tokens;
      desc.recv_capacity = n * rows;
      hal_moe_routing_t routing;
      MPI_Barrier(MPI_COMM_WORLD);
      const double r0 = bench::now_s();
      check(hal_moe_routing_create(comm, &desc, static_cast<int32_t*>(index_buf), stream, &routing),
            "hal_moe_routing_create");
      const double routing_seconds = slowest_rank(bench::now_s() - r0);
      std::vector<int> send_counts(n), recv_counts(n), sdispl(n), rdispl(n);
      for (uint32_t from = 0; from < n; ++from) {
        for (const int32_t id : all_indices[from]) {
          const uint32_t to = static_cast<uint32_t>(id) / (kExperts / n);
          if (from == rank) send_counts[to] += static_cast<int>(kHidden * elem);
          if (to == rank) recv_counts[from] += static_cast<int>(kHidden * elem);
        }
      }
      for (uint32_t r = 1; r < n; ++r) {
        sdispl[r] = sdispl[r - 1] + send_counts[r - 1];
        rdispl[r] = rdispl[r - 1] + recv_counts[r - 1];
      }
      auto dispatch = barrier_batch(
          [&] {
            check(hal_moe_dispatch(routing, token_buf, nullptr, kHidden, dtype, recv_buf, stream),
                  "hal_moe_dispatch");
          },
          stream);
      auto combine = barrier_batch(
          [&] {
            check(hal_moe_combine(routing, recv_buf, weight_buf, kHidden, dtype, out_buf, stream),
                  "hal_moe_combine");
          },
          stream);
      auto mpi = barrier_batch(
          [&] {
            MPI_Alltoallv(peer_send, send_counts.data(), sdispl.data(), MPI_BYTE, recv_buf,
                          recv_counts.data(), rdispl.data(), MPI_BYTE, MPI_COMM_WORLD);
          },
          nullptr);
      const auto [t_dispatch, t_mpi] = interleaved_medians(dispatch, mpi, kAlltoallvSamples);
      const auto [t_combine, t_mpi2] = interleaved_medians(combine, mpi, kAlltoallvSamples);
      const size_t bytes = rows * kHidden * elem;
      const double share = (n - 1.0) / n;
      for (const auto& [name, t, peer] :
           {std::tuple{"dispatch", t_dispatch, t_mpi}, std::tuple{"combine", t_combine, t_mpi2}}) {
        if (rank != 0) continue;
        const double busbw = bytes / t / 1e9 * share;
        const double peer_busbw = bytes / peer / 1e9 * share;
        std::printf("%-6s %8zu %12zu %12.2f %10.3f   %10.3f %10.2f   %6.2fx %12.2f  %s\n",
                    dtype == HAL_DTYPE_F32 ? "f32" : "bf16", tokens, bytes, t * 1e6, busbw,
                    peer_busbw, peer * 1e6, busbw / peer_busbw, routing_seconds * 1e6, name);
      }
      hal_moe_routing_destroy(routing);
      for (void* buffer : {token_buf, weight_buf, recv_buf, out_buf, index_buf, peer_send})
        hal_mem_free(buffer);
    }
  }
  hal_comm_destroy(comm);
  hal_stream_destroy(stream);
  hal_shutdown();
  MPI_Finalize();
  return 0;
}
#endif

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "local";
  if (mode == "local") return run_local();
  if (mode == "moe") return run_moe();
  if (mode == "store") {
    const unsigned long long max_bytes = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 0;
    if (argc <= 2 || (max_bytes >= 8 && max_bytes <= kMaxBytes)) {
      return run_store(argc > 2 ? static_cast<size_t>(max_bytes) : size_t{64} << 20);
    }
    std::fprintf(stderr, "collective_bandwidth store: MAX_BYTES must be from 8 to %zu\n",
                 kMaxBytes);
    return 2;
  }
#ifdef HAL_BENCH_HAVE_MPI
  if (mode == "mpi-moe") return run_mpi_moe();
  if (mode == "mpi" || mode == "mpi-alltoallv") {
    // An optional bound on the sizes, for latency runs that skip the large ones.
    const unsigned long long max_bytes = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 0;
    if (argc <= 2 || (max_bytes >= 8 && max_bytes <= kMaxBytes)) {
      return run_mpi(argc > 2 ? static_cast<size_t>(max_bytes) : kMaxBytes, mode == "mpi");
    }
    std::fprintf(stderr, "collective_bandwidth mpi: MAX_BYTES must be from 8 to %zu\n", kMaxBytes);
    return 2;
  }
#endif
  std::fprintf(stderr,
               "usage: collective_bandwidth local | moe | store [MAX_BYTES] | mpi [MAX_BYTES] | "
               "mpi-alltoallv [MAX_BYTES] | mpi-moe (under mpirun)\n");
  return 2;
}
