// Low-precision matmul on the cpu plugin (SPEC.md §17.6.12) beside its peers,
// in one run, on the shapes of LLM layers (m tokens in {1, 16, 128, 512}; n, k
// of a 4096-wide model and its 11008-wide MLP) and a MoE grouped case:
//  - int8, per-row a and per-channel b scales, f32 d: HAL_OP_SCALED_MATMUL
//    against oneDNN's s8 x s8 -> f32 matmul called directly (per-channel
//    output scales: oneDNN 2.6 has no per-row scale of a, so the peer does a
//    little less), and HAL's int8 with DeepGEMM's blocks (1x128 a, 128x128 b)
//    against the same oneDNN figure (oneDNN has no block scales);
//  - fp8 e4m3 with DeepGEMM's blocks, bf16 d, against HAL's
//    dequantize-then-bf16 path (two DEQUANTIZEs to bf16, then HAL_OP_MATMUL
//    in bf16, which the cpu plugin serves on oneDNN);
//  - grouped: 8 experts over 512 rows (one expert empty, uneven segments),
//    int8 per-row / per-channel, against oneDNN's int8 matmul once per expert.
// GOP/s (2mnk) of the best of --repeats runs (the machine is shared), and the
// median; the load average before and after.
//   bench/lowp_matmul [--repeats 5] [--quick] [--no-fp8] [--shape MxNxK] [--cpu-time]
#include <dnnl.hpp>

#include <cstdio>
#include <cstring>
#include <ctime>
#include <functional>
#include <memory>
#include <string>
#include <random>
#include <vector>

#include "bench_common.h"

namespace {

struct Shape {
  int64_t m, n, k;
};

void check(hal_result_t r, const char* what) {
  if (r != HAL_SUCCESS) {
    std::fprintf(stderr, "%s: %s\n", what, hal_error_last_message());
    std::exit(1);
  }
}

hal_tensor_desc_t dense(hal_dtype_t dtype, std::vector<int64_t> shape) {
  hal_tensor_desc_t t{};
  hal_tensor_desc_contiguous(&t, dtype, static_cast<uint32_t>(shape.size()), shape.data());
  return t;
}

struct Hal {
  hal_device_t device = nullptr;
  hal_stream_t stream = nullptr;
  std::vector<void*> memory;
  std::vector<hal_op_plan_t> plans;
  Hal() {
    check(hal_init(nullptr), "hal_init");
    check(hal_device_get(0, &device), "hal_device_get");
    check(hal_stream_create(device, 0, &stream), "hal_stream_create");
  }
  ~Hal() {
    for (hal_op_plan_t p : plans) hal_op_plan_destroy(p);
    for (void* p : memory) hal_mem_free(p);
    hal_stream_destroy(stream);
    hal_shutdown();
  }
  void* upload(const void* host, size_t bytes) {
    void* p = nullptr;
    check(hal_mem_alloc(device, HAL_MEMORY_DEVICE, bytes, 0, &p), "hal_mem_alloc");
    memory.push_back(p);
    if (host != nullptr) check(hal_memcpy_async(p, host, bytes, stream), "hal_memcpy_async");
    check(hal_stream_synchronize(stream), "sync");
    return p;
  }
  // A runner of |desc| on |operands|; prints which implementation serves it.
  std::function<void()> op(const hal_op_header_t* desc, std::vector<void*> operands,
                           const char* what) {
    hal_op_plan_t plan = nullptr;
    check(hal_op_plan_create(device, desc, 0, &plan), what);
    plans.push_back(plan);
    hal_op_plan_info_t info{};
    info.struct_size = sizeof info;
    check(hal_op_plan_get_info(plan, &info), "hal_op_plan_get_info");
    if (what != nullptr) std::printf("  %-34s served by %s\n", what, info.implementation);
    return [this, plan, operands] {
      hal_op_exec_args_t args{};
      args.struct_size = sizeof args;
      args.operand_count = static_cast<uint32_t>(operands.size());
      args.operands = operands.data();
      check(hal_op_execute(plan, &args, stream), "hal_op_execute");
    };
  }
  void sync() { check(hal_stream_synchronize(stream), "sync"); }
  // Frees every plan and buffer (between shapes: the large ones add up).
  void release() {
    for (hal_op_plan_t p : plans) hal_op_plan_destroy(p);
    for (void* p : memory) hal_mem_free(p);
    plans.clear();
    memory.clear();
  }
};

struct Timing {
  double best = 0, median = 0;
};

// With --cpu-time, the process's CPU time (every thread's) instead of the
// wall clock: on a machine shared with other jobs, pinned to one core
// (taskset -c N), the time the product had the core, whatever else ran there.
bool use_cpu_time = false;

double clock_s() {
  if (!use_cpu_time) return bench::now_s();
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

Timing time_it(const std::function<void()>& run, const std::function<void()>& wait, int repeats) {
  run();
  wait();
  std::vector<double> samples;
  for (int r = 0; r < repeats; ++r) {
    const double t0 = clock_s();
    run();
    wait();
    samples.push_back(clock_s() - t0);
  }
  const bench::Stats stats = bench::summarize(samples);
  return {stats.min, stats.median};
}

std::string load_average() {
  char text[128] = {};
  if (FILE* f = std::fopen("/proc/loadavg", "r")) {
    if (std::fgets(text, sizeof text, f) == nullptr) text[0] = 0;
    std::fclose(f);
  }
  std::string s = text;
  while (!s.empty() && s.back() == '\n') s.pop_back();
  return s;
}

// oneDNN's s8 x s8 -> f32 matmul of a [m, k] by b [n, k] (read as k x n,
// tag ba) with per-channel output scales, its memories made once.
struct OnednnInt8 {
  dnnl::engine& engine;
  dnnl::stream& stream;
  dnnl::matmul primitive;
  dnnl::memory a, b, d;
  OnednnInt8(dnnl::engine& e, dnnl::stream& s, int64_t m, int64_t n, int64_t k, const int8_t* a8,
             const int8_t* b8, float* d_host, float scale)
      : engine(e), stream(s) {
    using dnnl::memory;
    const memory::desc a_md({m, k}, memory::data_type::s8, memory::format_tag::ab);
    const memory::desc b_md({k, n}, memory::data_type::s8, memory::format_tag::ba);
    const memory::desc d_md({m, n}, memory::data_type::f32, memory::format_tag::ab);
    dnnl::primitive_attr attr;
    attr.set_output_scales(1 << 1, std::vector<float>(static_cast<size_t>(n), scale));
    primitive = dnnl::matmul(
        dnnl::matmul::primitive_desc(dnnl::matmul::desc(a_md, b_md, d_md), attr, engine));
    a = memory(a_md, engine, const_cast<int8_t*>(a8));
    b = memory(b_md, engine, const_cast<int8_t*>(b8));
    d = memory(d_md, engine, d_host);
  }
  void run() {
    primitive.execute(stream, {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, d}});
  }
};

double gops(double ops, double seconds) {
  return ops / seconds * 1e-9;
}

std::vector<int8_t> random_i8(size_t count, std::mt19937& rng) {
  std::vector<int8_t> v(count);
  for (auto& x : v) x = static_cast<int8_t>(static_cast<int>(rng() % 256) - 128);
  return v;
}

hal_op_scaled_matmul_desc_t scaled_matmul(hal_dtype_t dtype, hal_dtype_t d_dtype, int64_t m,
                                          int64_t n, int64_t k, bool blocks, int64_t groups) {
  auto mm = hal_op_scaled_matmul_desc_t{};
  mm.header.struct_size = sizeof mm;
  mm.header.kind = HAL_OP_SCALED_MATMUL;
  mm.groups = static_cast<uint32_t>(groups);
  mm.a_blocks = blocks ? hal_quant_blocks_t{1, 128} : hal_quant_blocks_t{1, 0};
  mm.b_blocks = blocks ? hal_quant_blocks_t{128, 128} : hal_quant_blocks_t{1, 0};
  const int64_t kb = blocks ? k / 128 : 1, nb = blocks ? n / 128 : n;
  mm.a = dense(dtype, {m, k});
  mm.a_scale = dense(HAL_DTYPE_F32, {m, kb});
  if (groups > 0) {
    mm.b = dense(dtype, {groups, n, k});
    mm.b_scale = dense(HAL_DTYPE_F32, {groups, nb, kb});
    mm.offsets = dense(HAL_DTYPE_I32, {groups + 1});
  } else {
    mm.b = dense(dtype, {n, k});
    mm.b_scale = dense(HAL_DTYPE_F32, {nb, kb});
  }
  mm.d = dense(d_dtype, {m, n});
  return mm;
}

}  // namespace

int main(int argc, char** argv) {
  bench::Args args(argc, argv);
  const int repeats = static_cast<int>(args.integer("--repeats", 5));
  const bool quick = args.flag("--quick"), fp8 = !args.flag("--no-fp8");
  use_cpu_time = args.flag("--cpu-time");
  Hal hal;
  std::mt19937 rng(1);
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  static dnnl::stream stream(engine);
  std::vector<Shape> shapes;
  const std::string only = args.str("--shape", "");  // MxNxK: that shape alone, no MoE case
  long long om = 0, on = 0, ok = 0;
  if (!only.empty() && std::sscanf(only.c_str(), "%lldx%lldx%lld", &om, &on, &ok) == 3)
    shapes.push_back({om, on, ok});
  for (int64_t m : {1, 16, 128, 512}) {
    if (!only.empty()) break;
    if (quick) {
      shapes.push_back({m, 1024, 1024});
      continue;
    }
    shapes.push_back({m, 4096, 4096});
    shapes.push_back({m, 11008, 4096});
    shapes.push_back({m, 4096, 11008});
  }
  std::printf("# lowp_matmul: GOP/s (2mnk / %s seconds), best of %d runs (median in brackets)\n",
              use_cpu_time ? "process CPU" : "wall", repeats);
  std::printf("# load average before: %s\n", load_average().c_str());
  const auto cell = [](double ops, const Timing& t) {
    char text[64];
    std::snprintf(text, sizeof text, "%7.1f (%6.1f)", gops(ops, t.best), gops(ops, t.median));
    return std::string(text);
  };
  std::printf("%-22s | %-16s | %-16s | %-6s | %-16s | %-16s | %-16s | %-6s | %-16s\n", "m x n x k",
              "HAL i8 row/chan", "oneDNN s8", "ratio", "HAL i8 blocks", "HAL e4m3 blocks",
              "deq+bf16 matmul", "ratio", "bf16 matmul alone");
  for (const Shape& s : shapes) {
    const double ops = 2.0 * static_cast<double>(s.m * s.n * s.k);
    const auto a8 = random_i8(static_cast<size_t>(s.m * s.k), rng);
    const auto b8 = random_i8(static_cast<size_t>(s.n * s.k), rng);
    void* da = hal.upload(a8.data(), a8.size());
    void* db = hal.upload(b8.data(), b8.size());
    void* dd = hal.upload(nullptr, static_cast<size_t>(s.m * s.n) * 4);
    // ---- int8 per-row / per-channel: HAL, then oneDNN
    auto mm = scaled_matmul(HAL_DTYPE_I8, HAL_DTYPE_F32, s.m, s.n, s.k, false, 0);
    std::vector<float> sa(static_cast<size_t>(s.m), 0.01f), sb(static_cast<size_t>(s.n), 0.02f);
    void* dsa = hal.upload(sa.data(), sa.size() * 4);
    void* dsb = hal.upload(sb.data(), sb.size() * 4);
    const auto hal_i8 = hal.op(&mm.header, {da, dsa, db, dsb, nullptr, dd}, nullptr);
    const Timing t_i8 = time_it(
        hal_i8, [&] { hal.sync(); }, repeats);
    std::vector<float> d_host(static_cast<size_t>(s.m * s.n));
    OnednnInt8 onednn(engine, stream, s.m, s.n, s.k, a8.data(), b8.data(), d_host.data(),
                      0.01f * 0.02f);
    const Timing t_dnnl = time_it([&] { onednn.run(); }, [&] { stream.wait(); }, repeats);
    // ---- int8 with DeepGEMM's blocks (no peer: oneDNN has none)
    auto bl = scaled_matmul(HAL_DTYPE_I8, HAL_DTYPE_F32, s.m, s.n, s.k, true, 0);
    std::vector<float> sa_blocks(static_cast<size_t>(s.m * (s.k / 128)), 0.01f);
    std::vector<float> sb_blocks(static_cast<size_t>((s.n / 128) * (s.k / 128)), 0.02f);
    void* dsab = hal.upload(sa_blocks.data(), sa_blocks.size() * 4);
    void* dsbb = hal.upload(sb_blocks.data(), sb_blocks.size() * 4);
    const auto hal_blocks = hal.op(&bl.header, {da, dsab, db, dsbb, nullptr, dd}, nullptr);
    const Timing t_blocks = time_it(
        hal_blocks, [&] { hal.sync(); }, repeats);
    std::string f8_cell = "-", path_cell = "-", f8_ratio = "-", bf16_cell = "-";
    if (fp8) {
      // e4m3 codes: finite, both signs; DeepGEMM's blocks; bf16 d
      std::vector<uint8_t> a_f8(a8.size()), b_f8(b8.size());
      for (auto& v : a_f8) v = static_cast<uint8_t>(rng() % 0x7e) | (rng() % 2 ? 0x80 : 0);
      for (auto& v : b_f8) v = static_cast<uint8_t>(rng() % 0x7e) | (rng() % 2 ? 0x80 : 0);
      auto f8 = scaled_matmul(HAL_DTYPE_F8_E4M3, HAL_DTYPE_BF16, s.m, s.n, s.k, true, 0);
      void* fa = hal.upload(a_f8.data(), a_f8.size());
      void* fb = hal.upload(b_f8.data(), b_f8.size());
      const auto hal_f8 = hal.op(&f8.header, {fa, dsab, fb, dsbb, nullptr, dd}, nullptr);
      const Timing t_f8 = time_it(
          hal_f8, [&] { hal.sync(); }, repeats);
      // dequantize both to bf16, then a bf16 matmul (b transposed)
      auto deq = hal_op_quantize_desc_t{};
      deq.header.struct_size = sizeof deq;
      deq.header.kind = HAL_OP_DEQUANTIZE;
      deq.blocks = {1, 128};
      deq.q = f8.a;
      deq.scale = f8.a_scale;
      deq.x = dense(HAL_DTYPE_BF16, {s.m, s.k});
      void* abf = hal.upload(nullptr, static_cast<size_t>(s.m * s.k) * 2);
      void* bbf = hal.upload(nullptr, static_cast<size_t>(s.n * s.k) * 2);
      const auto deq_a = hal.op(&deq.header, {fa, dsab, abf}, nullptr);
      deq.blocks = {128, 128};
      deq.q = f8.b;
      deq.scale = f8.b_scale;
      deq.x = dense(HAL_DTYPE_BF16, {s.n, s.k});
      const auto deq_b = hal.op(&deq.header, {fb, dsbb, bbf}, nullptr);
      auto bf = hal_op_matmul_desc_t{};
      bf.header.struct_size = sizeof bf;
      bf.header.kind = HAL_OP_MATMUL;
      bf.flags = HAL_MATMUL_TRANSPOSE_B;
      bf.alpha = 1.0f;
      bf.a = dense(HAL_DTYPE_BF16, {s.m, s.k});
      bf.b = dense(HAL_DTYPE_BF16, {s.n, s.k});
      bf.d = dense(HAL_DTYPE_BF16, {s.m, s.n});
      const auto matmul = hal.op(&bf.header, {abf, bbf, nullptr, dd, nullptr, nullptr}, nullptr);
      const Timing t_path = time_it(
          [&] {
            deq_a();
            deq_b();
            matmul();
          },
          [&] { hal.sync(); }, repeats);
      // the bf16 matmul of the path alone: the path's bound were the
      // dequantizes (portable kernels on the cpu plugin) free
      const Timing t_bf16 = time_it(
          matmul, [&] { hal.sync(); }, repeats);
      bf16_cell = cell(ops, t_bf16);
      f8_cell = cell(ops, t_f8);
      path_cell = cell(ops, t_path);
      f8_ratio = bench::fmt(t_path.best / t_f8.best, 2);
    }
    char name[64];
    std::snprintf(name, sizeof name, "%lld x %lld x %lld", static_cast<long long>(s.m),
                  static_cast<long long>(s.n), static_cast<long long>(s.k));
    std::printf("%-22s | %-16s | %-16s | %6.2f | %-16s | %-16s | %-16s | %6s | %-16s\n", name,
                cell(ops, t_i8).c_str(), cell(ops, t_dnnl).c_str(), t_dnnl.best / t_i8.best,
                cell(ops, t_blocks).c_str(), f8_cell.c_str(), path_cell.c_str(), f8_ratio.c_str(),
                bf16_cell.c_str());
    std::fflush(stdout);
    hal.release();
  }
  // ---- MoE: 8 experts over 512 rows, uneven, expert 5 empty
  if (only.empty()) {
    const int64_t groups = 8, m = 512, n = quick ? 1024 : 2048, k = quick ? 1024 : 4096;
    const std::vector<int32_t> offsets = {0, 100, 164, 300, 316, 420, 420, 480, 512};
    const double ops = 2.0 * static_cast<double>(m * n * k);
    const auto a8 = random_i8(static_cast<size_t>(m * k), rng);
    const auto b8 = random_i8(static_cast<size_t>(groups * n * k), rng);
    auto mm = scaled_matmul(HAL_DTYPE_I8, HAL_DTYPE_F32, m, n, k, false, groups);
    std::vector<float> sa(static_cast<size_t>(m), 0.01f),
        sb(static_cast<size_t>(groups * n), 0.02f);
    void* da = hal.upload(a8.data(), a8.size());
    void* db = hal.upload(b8.data(), b8.size());
    void* dsa = hal.upload(sa.data(), sa.size() * 4);
    void* dsb = hal.upload(sb.data(), sb.size() * 4);
    void* doff = hal.upload(offsets.data(), offsets.size() * 4);
    void* dd = hal.upload(nullptr, static_cast<size_t>(m * n) * 4);
    const auto hal_grouped = hal.op(&mm.header, {da, dsa, db, dsb, doff, dd}, nullptr);
    const Timing t_hal = time_it(
        hal_grouped, [&] { hal.sync(); }, repeats);
    std::vector<float> d_host(static_cast<size_t>(m * n));
    std::vector<std::unique_ptr<OnednnInt8>> experts;
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t rows = offsets[g + 1] - offsets[g];
      if (rows == 0) continue;
      experts.push_back(std::make_unique<OnednnInt8>(
          engine, stream, rows, n, k, a8.data() + offsets[g] * k, b8.data() + g * n * k,
          d_host.data() + offsets[g] * n, 0.01f * 0.02f));
    }
    const Timing t_dnnl = time_it(
        [&] {
          for (auto& e : experts) e->run();
        },
        [&] { stream.wait(); }, repeats);
    std::printf(
        "grouped 8 experts (one empty), 512 rows, n=%lld k=%lld: HAL i8 %s  oneDNN s8 per "
        "expert %s  ratio %.2f\n",
        static_cast<long long>(n), static_cast<long long>(k), cell(ops, t_hal).c_str(),
        cell(ops, t_dnnl).c_str(), t_dnnl.best / t_hal.best);
  }
  std::printf("# load average after: %s\n", load_average().c_str());
  return 0;
}
