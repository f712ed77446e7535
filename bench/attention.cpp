// Times HAL_OP_ATTENTION and HAL_OP_ATTENTION_BACKWARD through the public
// API and shows their memory behaviour (plan workspace, the process's peak
// resident set before and after the runs).
//   _build-rel/bench/attention 512 1024 [f16|bf16] [batch=1] [heads=4] [kv=H] [dim=64]
//                              [sparse=25]
// Shape: batch 1, heads 4 (kv heads as many, or kv=H: grouped-query), head dim 64, causal
// bottom-right, f32 unless told otherwise. vCPU eff: bench::core_efficiency on every vCPU, the
// worse of before and after the row. GFLOP/s counts the causal half: forward 2 matmuls, backward 5
// (FlashAttention's accounting). sparse=P times, per length, dense attention without a causal mask
// beside block-sparse attention (64x64 blocks, a seeded u8 block mask with P% of each query block's
// key blocks) on the same plugin; GFLOP/s then counts the computed blocks.
#include <hal.h>

#include "bench_common.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

namespace {

#define CHECK(call)                                                      \
  do {                                                                   \
    hal_result_t r_ = (call);                                            \
    if (r_ != HAL_SUCCESS) {                                             \
      std::fprintf(stderr, "%s: %s: %s\n", #call, hal_result_string(r_), \
                   hal_error_last_message());                            \
      std::exit(1);                                                      \
    }                                                                    \
  } while (0)

long peak_rss_kib() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::strtol(line.c_str() + 6, nullptr, 10);
  }
  return -1;
}

hal_tensor_desc_t dense(hal_dtype_t dtype, std::vector<int64_t> shape) {
  hal_tensor_desc_t t{};
  hal_tensor_desc_contiguous(&t, dtype, static_cast<uint32_t>(shape.size()), shape.data());
  return t;
}

void* alloc_filled(hal_device_t device, hal_stream_t stream, size_t bytes) {
  void* p = nullptr;
  CHECK(hal_mem_alloc(device, HAL_MEMORY_DEVICE, bytes, 0, &p));
  std::vector<unsigned char> host(bytes);
  // Small values of any 16- or 32-bit float type: low mantissa bits vary.
  for (size_t i = 0; i < bytes; ++i)
    host[i] = (i % 2 == 1) ? 0x3c : static_cast<unsigned char>(i * 37);
  CHECK(hal_memcpy_async(p, host.data(), bytes, stream));
  CHECK(hal_stream_synchronize(stream));
  return p;
}

double run(hal_op_plan_t plan, std::vector<void*> operands, hal_device_t device,
           hal_stream_t stream, int reps) {
  hal_op_plan_info_t info{};
  info.struct_size = sizeof(info);
  CHECK(hal_op_plan_get_info(plan, &info));
  void* workspace = nullptr;
  if (info.workspace_bytes > 0) {
    CHECK(hal_mem_alloc(device, HAL_MEMORY_DEVICE, info.workspace_bytes, 0, &workspace));
  }
  hal_op_exec_args_t args{};
  args.struct_size = sizeof(args);
  args.operand_count = static_cast<uint32_t>(operands.size());
  args.operands = operands.data();
  args.workspace = workspace;
  args.workspace_bytes = info.workspace_bytes;
  CHECK(hal_op_execute(plan, &args, stream));  // warm-up (kernel compile is at planning)
  CHECK(hal_stream_synchronize(stream));
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const auto start = std::chrono::steady_clock::now();
    CHECK(hal_op_execute(plan, &args, stream));
    CHECK(hal_stream_synchronize(stream));
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    if (ms < best) best = ms;
  }
  if (workspace != nullptr) hal_mem_free(workspace);
  return best;
}

// A u8 block mask [batch, heads, q_blocks, k_blocks] with round(density *
// k_blocks) (at least 1) distinct key blocks on per query block, seeded.
std::vector<uint8_t> block_mask(int64_t rows, int64_t k_blocks, double density) {
  std::vector<uint8_t> mask(static_cast<size_t>(rows * k_blocks), 0);
  std::mt19937 rng(2026);
  const int64_t on = std::max<int64_t>(1, static_cast<int64_t>(density * k_blocks + 0.5));
  std::vector<int64_t> order(static_cast<size_t>(k_blocks));
  for (int64_t row = 0; row < rows; ++row) {
    for (int64_t i = 0; i < k_blocks; ++i) order[static_cast<size_t>(i)] = i;
    std::shuffle(order.begin(), order.end(), rng);
    for (int64_t i = 0; i < on; ++i)
      mask[static_cast<size_t>(row * k_blocks + order[static_cast<size_t>(i)])] = 1;
  }
  return mask;
}

}  // namespace

int main(int argc, char** argv) {
  hal_dtype_t dtype = HAL_DTYPE_F32;
  std::vector<int64_t> lengths;
  int64_t batch = 1, heads = 4, kv_heads = 0, dim = 64;  // kv_heads 0: heads
  double density = 0.0;                                  // 0: dense causal only
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "sparse=", 7) == 0) {
      density = std::atof(argv[i] + 7) / 100.0;
    } else if (std::strncmp(argv[i], "batch=", 6) == 0) {
      batch = std::atoll(argv[i] + 6);
    } else if (std::strncmp(argv[i], "heads=", 6) == 0) {
      heads = std::atoll(argv[i] + 6);
    } else if (std::strncmp(argv[i], "kv=", 3) == 0) {
      kv_heads = std::atoll(argv[i] + 3);
    } else if (std::strncmp(argv[i], "dim=", 4) == 0) {
      dim = std::atoll(argv[i] + 4);
    } else if (std::strcmp(argv[i], "f16") == 0) {
      dtype = HAL_DTYPE_F16;
    } else if (std::strcmp(argv[i], "bf16") == 0) {
      dtype = HAL_DTYPE_BF16;
    } else {
      lengths.push_back(std::atoll(argv[i]));
    }
  }
  if (lengths.empty()) lengths = {512, 1024};
  if (kv_heads <= 0) kv_heads = heads;
  if (heads % kv_heads != 0) {
    std::fprintf(stderr, "kv=%lld must divide heads=%lld\n", static_cast<long long>(kv_heads),
                 static_cast<long long>(heads));
    return 2;
  }
  CHECK(hal_init(nullptr));
  hal_device_t device = nullptr;
  CHECK(hal_device_get(0, &device));
  hal_stream_t stream = nullptr;
  CHECK(hal_stream_create(device, 0, &stream));
  const size_t element = dtype == HAL_DTYPE_F32 ? 4 : 2;
  std::printf("batch %lld, heads %lld, kv heads %lld, head dim %lld\n",
              static_cast<long long>(batch), static_cast<long long>(heads),
              static_cast<long long>(kv_heads), static_cast<long long>(dim));
  std::printf("%6s %10s %10s %10s %10s %14s %14s %12s %12s %9s\n", "seq", "fwd ms", "bwd ms",
              "fwd GF/s", "bwd GF/s", "fwd workspace", "bwd workspace", "rss before", "rss after",
              "vCPU eff");
  // One row: forward and backward of one length; |mask| empty = dense.
  const auto measure = [&](int64_t s, hal_causal_alignment_t causal,
                           const std::vector<uint8_t>& mask, double computed, const char* label) {
    hal_op_attention_desc_t desc{};
    desc.header.struct_size = sizeof(desc);
    desc.header.kind = HAL_OP_ATTENTION;
    desc.causal = causal;
    desc.batch = static_cast<uint32_t>(batch);
    if (!mask.empty()) {
      desc.sparsity = HAL_ATTENTION_BLOCK_MASK;
      desc.block_q = desc.block_k = 64;
    }
    desc.q = desc.out = desc.grad_out = desc.grad_q = dense(dtype, {batch, s, heads, dim});
    desc.k = desc.v = desc.grad_k = desc.grad_v = dense(dtype, {batch, s, kv_heads, dim});
    desc.lse = dense(HAL_DTYPE_F32, {batch, heads, s});
    const size_t bytes = static_cast<size_t>(batch * s * heads * dim) * element;
    const size_t kv_bytes = static_cast<size_t>(batch * s * kv_heads * dim) * element;
    void* q = alloc_filled(device, stream, bytes);
    void* k = alloc_filled(device, stream, kv_bytes);
    void* v = alloc_filled(device, stream, kv_bytes);
    void* dout = alloc_filled(device, stream, bytes);
    void* out = alloc_filled(device, stream, bytes);
    void* dq = alloc_filled(device, stream, bytes);
    void* dk = alloc_filled(device, stream, kv_bytes);
    void* dv = alloc_filled(device, stream, kv_bytes);
    void* lse = alloc_filled(device, stream, static_cast<size_t>(batch * heads * s) * 4);
    void* sparse = nullptr;
    if (!mask.empty()) {
      CHECK(hal_mem_alloc(device, HAL_MEMORY_DEVICE, mask.size(), 0, &sparse));
      CHECK(hal_memcpy_async(sparse, mask.data(), mask.size(), stream));
      CHECK(hal_stream_synchronize(stream));
    }
    hal_op_plan_t forward = nullptr, backward = nullptr;
    CHECK(hal_op_plan_create(device, &desc.header, HAL_OP_PLAN_DETERMINISTIC, &forward));
    desc.header.kind = HAL_OP_ATTENTION_BACKWARD;
    CHECK(hal_op_plan_create(device, &desc.header, HAL_OP_PLAN_DETERMINISTIC, &backward));
    hal_op_plan_info_t fi{}, bi{};
    fi.struct_size = bi.struct_size = sizeof(fi);
    CHECK(hal_op_plan_get_info(forward, &fi));
    CHECK(hal_op_plan_get_info(backward, &bi));
    const long rss_before = peak_rss_kib();
    // The plugin runs on every vCPU; a row taken while they shared physical
    // cores on the host reads up to 2x slow (bench_common.h).
    const double efficiency_before = bench::core_efficiency(bench::online_cpus());
    const int reps = s <= 512 ? 5 : 3;
    const double fwd =
        run(forward, {q, k, v, out, lse, nullptr, nullptr, sparse}, device, stream, reps);
    const double bwd =
        run(backward, {q, k, v, out, lse, nullptr, nullptr, sparse, dout, dq, dk, dv}, device,
            stream, reps);
    const long rss_after = peak_rss_kib();
    const double efficiency =
        std::min(efficiency_before, bench::core_efficiency(bench::online_cpus()));
    // One QK^T over the computed part: batch * heads * s^2 * computed dot
    // products of length dim.
    const double matmul_flops = 2.0 * static_cast<double>(batch * heads * dim) *
                                static_cast<double>(s) * static_cast<double>(s) * computed;
    std::printf(
        "%6lld %10.2f %10.2f %10.1f %10.1f %12zu B %12zu B %9ld KiB %9ld KiB %9.2f  [%s] %s\n",
        static_cast<long long>(s), fwd, bwd, 2 * matmul_flops / fwd / 1e6,
        5 * matmul_flops / bwd / 1e6, fi.workspace_bytes, bi.workspace_bytes, rss_before, rss_after,
        efficiency, fi.implementation, label);
    hal_op_plan_destroy(forward);
    hal_op_plan_destroy(backward);
    for (void* p : {q, k, v, dout, out, dq, dk, dv, lse, sparse}) hal_mem_free(p);
    return fwd + bwd;
  };
  for (int64_t s : lengths) {
    if (density <= 0.0) {
      measure(s, HAL_CAUSAL_BOTTOM_RIGHT, {}, 0.5, "causal");
      continue;
    }
    const int64_t blocks = (s + 63) / 64;
    const std::vector<uint8_t> mask = block_mask(batch * heads * blocks, blocks, density);
    size_t on = 0;
    for (uint8_t m : mask) on += m;
    const double computed = static_cast<double>(on) / static_cast<double>(mask.size());
    const double dense_ms = measure(s, HAL_CAUSAL_NONE, {}, 1.0, "dense, no mask");
    char label[64];
    std::snprintf(label, sizeof label, "block-sparse %.1f%%", 100.0 * computed);
    const double sparse_ms = measure(s, HAL_CAUSAL_NONE, mask, computed, label);
    std::printf("# seq %lld: block-sparse at %.1f%% of the blocks is %.2fx the dense fwd+bwd\n",
                static_cast<long long>(s), 100.0 * computed, dense_ms / sparse_ms);
  }
  hal_stream_destroy(stream);
  hal_shutdown();
  return 0;
}
