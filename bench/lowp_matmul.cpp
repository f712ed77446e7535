// Low-precision matmul on the cpu plugin (SPEC.md §17.6.12) beside its peers,
// in one run: HAL_OP_SCALED_MATMUL with int8 operands (per-row a, per-channel
// b scales, f32 d) against oneDNN's s8 x s8 -> f32 matmul called directly
// (per-channel output scales, the nearest oneDNN 2.6 has); and the fp8 form
// (e4m3, DeepGEMM's 1x128 / 128x128 blocks, bf16 d) against its
// dequantize-then-bf16 path through HAL (two DEQUANTIZEs to bf16, then
// HAL_OP_MATMUL in bf16). Medians of --repeats runs, GFLOP/s (2mnk).
//   bench/lowp_matmul [--repeats 7]
#include <dnnl.hpp>

#include <cstdio>
#include <cstring>
#include <functional>
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
    std::printf("  %-34s served by %s\n", what, info.implementation);
    return [this, plan, operands] {
      hal_op_exec_args_t args{};
      args.struct_size = sizeof args;
      args.operand_count = static_cast<uint32_t>(operands.size());
      args.operands = operands.data();
      check(hal_op_execute(plan, &args, stream), "hal_op_execute");
    };
  }
  void sync() { check(hal_stream_synchronize(stream), "sync"); }
};

double median_seconds(const std::function<void()>& run, const std::function<void()>& wait,
                      int repeats) {
  run();
  wait();
  std::vector<double> samples;
  for (int r = 0; r < repeats; ++r) {
    const double t0 = bench::now_s();
    run();
    wait();
    samples.push_back(bench::now_s() - t0);
  }
  return bench::summarize(samples).median;
}

}  // namespace

int main(int argc, char** argv) {
  bench::Args args(argc, argv);
  const int repeats = static_cast<int>(args.integer("--repeats", 7));
  Hal hal;
  std::mt19937 rng(1);
  const Shape shapes[] = {{128, 1024, 1024}, {512, 2048, 2048}, {2048, 2048, 2048}};
  std::printf("# lowp_matmul: GFLOP/s (2mnk / median seconds), %d repeats\n", repeats);
  for (const Shape& s : shapes) {
    const double flops = 2.0 * static_cast<double>(s.m * s.n * s.k);
    std::vector<int8_t> a8(static_cast<size_t>(s.m * s.k)), b8(static_cast<size_t>(s.n * s.k));
    for (auto& v : a8) v = static_cast<int8_t>(static_cast<int>(rng() % 255) - 127);
    for (auto& v : b8) v = static_cast<int8_t>(static_cast<int>(rng() % 255) - 127);
    std::vector<float> sa(static_cast<size_t>(s.m), 0.01f), sb(static_cast<size_t>(s.n), 0.02f);
    std::printf("m=%lld n=%lld k=%lld\n", static_cast<long long>(s.m), static_cast<long long>(s.n),
                static_cast<long long>(s.k));
    // ---- int8: HAL
    auto mm = hal_op_scaled_matmul_desc_t{};
    mm.header.struct_size = sizeof mm;
    mm.header.kind = HAL_OP_SCALED_MATMUL;
    mm.a_blocks = {1, 0};
    mm.b_blocks = {1, 0};
    mm.a = dense(HAL_DTYPE_I8, {s.m, s.k});
    mm.a_scale = dense(HAL_DTYPE_F32, {s.m, 1});
    mm.b = dense(HAL_DTYPE_I8, {s.n, s.k});
    mm.b_scale = dense(HAL_DTYPE_F32, {s.n, 1});
    mm.d = dense(HAL_DTYPE_F32, {s.m, s.n});
    void* da = hal.upload(a8.data(), a8.size());
    void* db = hal.upload(b8.data(), b8.size());
    void* dsa = hal.upload(sa.data(), sa.size() * 4);
    void* dsb = hal.upload(sb.data(), sb.size() * 4);
    void* dd = hal.upload(nullptr, static_cast<size_t>(s.m * s.n) * 4);
    auto hal_i8 = hal.op(&mm.header, {da, dsa, db, dsb, nullptr, dd}, "int8 scaled_matmul");
    const double t_hal_i8 = median_seconds(
        hal_i8, [&] { hal.sync(); }, repeats);
    // ---- int8: oneDNN directly (weights [n, k] read as k x n, tag ba)
    using dnnl::memory;
    static const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
    static dnnl::stream stream(engine);
    const memory::desc a_md({s.m, s.k}, memory::data_type::s8, memory::format_tag::ab);
    const memory::desc b_md({s.k, s.n}, memory::data_type::s8, memory::format_tag::ba);
    const memory::desc d_md({s.m, s.n}, memory::data_type::f32, memory::format_tag::ab);
    dnnl::primitive_attr attr;
    std::vector<float> output_scales(static_cast<size_t>(s.n), 0.01f * 0.02f);
    attr.set_output_scales(1 << 1, output_scales);
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, d_md), attr, engine);
    dnnl::matmul onednn(pd);
    std::vector<float> d_host(static_cast<size_t>(s.m * s.n));
    const auto run_onednn = [&] {
      onednn.execute(stream, {{DNNL_ARG_SRC, memory(a_md, engine, a8.data())},
                              {DNNL_ARG_WEIGHTS, memory(b_md, engine, b8.data())},
                              {DNNL_ARG_DST, memory(d_md, engine, d_host.data())}});
    };
    const double t_dnnl = median_seconds(
        run_onednn, [&] { stream.wait(); }, repeats);
    std::printf("  int8  HAL %8.1f GFLOP/s   oneDNN s8 matmul %8.1f GFLOP/s   ratio %.3f\n",
                flops / t_hal_i8 * 1e-9, flops / t_dnnl * 1e-9, t_dnnl / t_hal_i8);
    // ---- fp8 e4m3 with DeepGEMM's blocks, bf16 d
    if (s.k % 128 == 0 && s.n % 128 == 0) {
      std::vector<uint8_t> a_f8(a8.size()), b_f8(b8.size());
      for (auto& v : a_f8) v = static_cast<uint8_t>(rng() % 0x7e);  // finite, positive
      for (auto& v : b_f8) v = static_cast<uint8_t>(rng() % 0x7e) | (rng() % 2 ? 0x80 : 0);
      std::vector<float> a_scale(static_cast<size_t>(s.m * (s.k / 128)), 0.001f);
      std::vector<float> b_scale(static_cast<size_t>((s.n / 128) * (s.k / 128)), 0.001f);
      auto f8 = mm;
      f8.a_blocks = {1, 128};
      f8.b_blocks = {128, 128};
      f8.a = dense(HAL_DTYPE_F8_E4M3, {s.m, s.k});
      f8.b = dense(HAL_DTYPE_F8_E4M3, {s.n, s.k});
      f8.a_scale = dense(HAL_DTYPE_F32, {s.m, s.k / 128});
      f8.b_scale = dense(HAL_DTYPE_F32, {s.n / 128, s.k / 128});
      f8.d = dense(HAL_DTYPE_BF16, {s.m, s.n});
      void* fa = hal.upload(a_f8.data(), a_f8.size());
      void* fb = hal.upload(b_f8.data(), b_f8.size());
      void* fsa = hal.upload(a_scale.data(), a_scale.size() * 4);
      void* fsb = hal.upload(b_scale.data(), b_scale.size() * 4);
      void* fd = hal.upload(nullptr, static_cast<size_t>(s.m * s.n) * 2);
      auto hal_f8 = hal.op(&f8.header, {fa, fsa, fb, fsb, nullptr, fd}, "fp8 scaled_matmul");
      const double t_f8 = median_seconds(
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
      auto deq_a = hal.op(&deq.header, {fa, fsa, abf}, "dequantize a -> bf16");
      deq.blocks = {128, 128};
      deq.q = f8.b;
      deq.scale = f8.b_scale;
      deq.x = dense(HAL_DTYPE_BF16, {s.n, s.k});
      auto deq_b = hal.op(&deq.header, {fb, fsb, bbf}, "dequantize b -> bf16");
      auto bf = hal_op_matmul_desc_t{};
      bf.header.struct_size = sizeof bf;
      bf.header.kind = HAL_OP_MATMUL;
      bf.flags = HAL_MATMUL_TRANSPOSE_B;
      bf.alpha = 1.0f;
      bf.a = dense(HAL_DTYPE_BF16, {s.m, s.k});
      bf.b = dense(HAL_DTYPE_BF16, {s.n, s.k});
      bf.d = dense(HAL_DTYPE_BF16, {s.m, s.n});
      auto matmul = hal.op(&bf.header, {abf, bbf, nullptr, fd, nullptr, nullptr}, "bf16 matmul");
      const double t_path = median_seconds(
          [&] {
            deq_a();
            deq_b();
            matmul();
          },
          [&] { hal.sync(); }, repeats);
      std::printf("  fp8   HAL %8.1f GFLOP/s   dequantize+bf16 matmul %8.1f GFLOP/s   ratio %.3f\n",
                  flops / t_f8 * 1e-9, flops / t_path * 1e-9, t_path / t_f8);
    }
  }
  return 0;
}
