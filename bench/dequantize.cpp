// HAL_OP_DEQUANTIZE (SPEC.md §17.6.12) on the cpu plugin beside a STREAM-like
// copy of the same bytes, in the same run, interleaved: is it bound by memory?
//
//   q (i8, e4m3, e5m2) [rows, n] times its scales (per tensor, per row,
//   DeepGEMM's 1x128 activations and 128x128 weights) into x (f32 or bf16),
//   served by the implementation the device picks (cpu.native) and by the
//   portable one (HAL_OPS_IMPLEMENTATIONS=portable, set per plan);
//   stream copy: b[i] = a[i] in 8-byte words on hardware-concurrency threads
//   (plain stores, as the op's: glibc's memcpy of these sizes streams with
//   non-temporal stores, at 0.4x of this loop on the shared EPYC VM), as
//   many bytes read and written as the op (q's bytes read, x's written).
// The default 8192 x 8192 codes (64 MiB of q, 256 MiB of f32 x) are well
// past the last-level cache.
//
// GB/s counts q read once plus x written once (the scales are rows/128 or
// fewer per row: left out); 1 GB = 1e9 bytes.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "bench_common.h"
#include "hal/ops.h"

namespace {

void usage() {
  std::printf(
      "usage: dequantize [options]\n"
      "\n"
      "GB/s (q read + x written) of HAL_OP_DEQUANTIZE of rows x n codes on the cpu plugin,\n"
      "cpu.native and the portable implementation, beside a threaded copy of the same\n"
      "bytes, interleaved in every repetition.\n"
      "\n"
      "  --rows N    rows, a multiple of 128 (default 8192)\n"
      "  --n N       row length, a multiple of 128 (default 8192)\n"
      "  --reps N    repetitions (default 7)\n"
      "  --no-portable  leave the portable implementation out\n"
      "  --help      this text\n");
}

struct Op {
  std::string name;
  hal_op_plan_t plan = nullptr;
  std::string implementation;
  std::vector<void*> operands;
  double bytes = 0;  // read plus written
};

double run_op(hal_stream_t stream, const Op& op) {
  hal_op_exec_args_t args{};
  args.struct_size = sizeof(args);
  args.operand_count = static_cast<uint32_t>(op.operands.size());
  args.operands = op.operands.data();
  const double start = bench::now_s();
  BENCH_HAL_CHECK(hal_op_execute(op.plan, &args, stream));
  BENCH_HAL_CHECK(hal_stream_synchronize(stream));
  return bench::now_s() - start;
}

// Copies |bytes| bytes from a to b, a slice per thread.
double stream_copy(const unsigned char* a, unsigned char* b, size_t bytes, unsigned threads) {
  const double start = bench::now_s();
  std::vector<std::thread> workers;
  const size_t slice = (bytes / threads + 63) / 64 * 64;  // whole 8-byte words
  for (unsigned t = 0; t < threads; ++t) {
    workers.emplace_back([=] {
      const size_t begin = std::min(bytes, t * slice);
      const size_t end = std::min(bytes, begin + slice);
      auto* to = reinterpret_cast<uint64_t*>(b + begin);
      const auto* from = reinterpret_cast<const uint64_t*>(a + begin);
      for (size_t i = 0; i < (end - begin) / 8; ++i) to[i] = from[i];
      bench::clobber_memory();
    });
  }
  for (std::thread& worker : workers) worker.join();
  return bench::now_s() - start;
}

hal_tensor_desc_t dense(hal_dtype_t dtype, int64_t rows, int64_t cols) {
  hal_tensor_desc_t t{};
  const int64_t shape[2] = {rows, cols};
  hal_tensor_desc_contiguous(&t, dtype, 2, shape);
  return t;
}

const char* dtype_label(hal_dtype_t dtype) {
  switch (dtype) {
    case HAL_DTYPE_I8:
      return "i8";
    case HAL_DTYPE_F8_E4M3:
      return "e4m3";
    case HAL_DTYPE_F8_E5M2:
      return "e5m2";
    case HAL_DTYPE_BF16:
      return "bf16";
    default:
      return "f32";
  }
}

}  // namespace

int main(int argc, char** argv) {
  int64_t rows = 8192, n = 8192;
  int reps = 7;
  bool portable = true;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help") {
      usage();
      return 0;
    }
    if (arg == "--no-portable") {
      portable = false;
      continue;
    }
    if (i + 1 >= argc) {
      usage();
      return 2;
    }
    const long long value = std::atoll(argv[++i]);
    if (value <= 0) {
      std::fprintf(stderr, "error: %s needs a positive number\n", arg.c_str());
      return 2;
    }
    if (arg == "--rows") {
      rows = value;
    } else if (arg == "--n") {
      n = value;
    } else if (arg == "--reps") {
      reps = static_cast<int>(value);
    } else {
      usage();
      return 2;
    }
  }
  if (n % 128 != 0 || rows % 128 != 0) {
    std::fprintf(stderr, "error: --rows and --n must be multiples of 128 (the 128x128 blocks)\n");
    return 2;
  }
  const size_t count = static_cast<size_t>(rows * n);

  hal_device_t device = bench::hal_open_device("cpu", "cpu", HAL_DEVICE_CAP_KERNELS, nullptr);
  hal_stream_t stream = nullptr;
  BENCH_HAL_CHECK(hal_stream_create(device, 0, &stream));
  void *q = nullptr, *x = nullptr, *scale = nullptr;
  BENCH_HAL_CHECK(hal_mem_alloc(device, HAL_MEMORY_DEVICE, count, 0, &q));
  BENCH_HAL_CHECK(hal_mem_alloc(device, HAL_MEMORY_DEVICE, count * 4, 0, &x));
  const size_t scale_count = static_cast<size_t>(rows * (n / 128));  // the largest grid
  BENCH_HAL_CHECK(hal_mem_alloc(device, HAL_MEMORY_DEVICE, scale_count * 4, 0, &scale));
  {
    // Finite codes of every format (no e4m3 NaN, no e5m2 inf: the values
    // do not change the work), scales near 1.
    std::vector<unsigned char> codes(count);
    uint32_t state = 38;
    for (unsigned char& c : codes) {
      state = state * 1664525u + 1013904223u;
      c = static_cast<unsigned char>((state >> 24) % 0x7b) | ((state >> 8) & 0x80);
    }
    std::vector<float> scales(scale_count, 0.75f);
    BENCH_HAL_CHECK(hal_memcpy_async(q, codes.data(), count, stream));
    BENCH_HAL_CHECK(hal_memcpy_async(scale, scales.data(), scale_count * 4, stream));
    BENCH_HAL_CHECK(hal_stream_synchronize(stream));
  }

  struct Layout {
    const char* name;
    hal_quant_blocks_t blocks;
  };
  const Layout layouts[] = {
      {"tensor", {0, 0}}, {"row", {1, 0}}, {"1x128", {1, 128}}, {"128x128", {128, 128}}};
  std::vector<Op> ops;
  const auto add_op = [&](hal_dtype_t qdtype, hal_dtype_t xdtype, const Layout& layout,
                          bool use_portable) {
    hal_op_quantize_desc_t desc{};
    desc.header.struct_size = sizeof(desc);
    desc.header.kind = HAL_OP_DEQUANTIZE;
    desc.blocks = layout.blocks;
    desc.q = dense(qdtype, rows, n);
    desc.x = dense(xdtype, rows, n);
    desc.scale = dense(HAL_DTYPE_F32, layout.blocks.rows == 0 ? 1 : rows / layout.blocks.rows,
                       layout.blocks.cols == 0 ? 1 : n / layout.blocks.cols);
    if (use_portable) setenv("HAL_OPS_IMPLEMENTATIONS", "portable", 1);
    Op op;
    const hal_result_t planned = hal_op_plan_create(device, &desc.header, 0, &op.plan);
    if (use_portable) unsetenv("HAL_OPS_IMPLEMENTATIONS");
    BENCH_HAL_CHECK(planned);
    hal_op_plan_info_t info{};
    info.struct_size = sizeof(info);
    BENCH_HAL_CHECK(hal_op_plan_get_info(op.plan, &info));
    op.implementation = info.implementation;
    op.name = std::string(dtype_label(qdtype)) + "->" + dtype_label(xdtype) + " " + layout.name;
    op.operands = {q, scale, x};
    op.bytes = static_cast<double>(count) * (1 + (xdtype == HAL_DTYPE_F32 ? 4 : 2));
    ops.push_back(op);
  };
  for (hal_dtype_t qdtype : {HAL_DTYPE_I8, HAL_DTYPE_F8_E4M3, HAL_DTYPE_F8_E5M2})
    for (hal_dtype_t xdtype : {HAL_DTYPE_F32, HAL_DTYPE_BF16})
      for (const Layout& layout : layouts) {
        add_op(qdtype, xdtype, layout, false);
        // The portable peer where the fp8 matmul's dequantize-then-bf16
        // path and an int8 weight load use it (it takes seconds a run).
        const bool peer =
            (qdtype == HAL_DTYPE_I8 && xdtype == HAL_DTYPE_F32 && layout.blocks.rows == 1 &&
             layout.blocks.cols == 0) ||
            (qdtype == HAL_DTYPE_F8_E4M3 && xdtype == HAL_DTYPE_BF16 && layout.blocks.rows == 128);
        if (portable && peer) add_op(qdtype, xdtype, layout, true);
      }
  for (const Op& op : ops) run_op(stream, op);  // warm

  const unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  // The copy moves what an f32 and a bf16 dequantize move: 5 and 3 bytes
  // per element, half read and half written.
  const size_t copy_f32 = count * 5 / 2, copy_bf16 = count * 3 / 2;
  std::vector<unsigned char> a(copy_f32, 1), b(copy_f32, 0);
  stream_copy(a.data(), b.data(), copy_f32, threads);
  std::vector<std::vector<double>> seconds(ops.size() + 2);
  for (int rep = 0; rep < reps; ++rep) {
    for (size_t o = 0; o < ops.size(); ++o) seconds[o].push_back(run_op(stream, ops[o]));
    seconds[ops.size()].push_back(stream_copy(a.data(), b.data(), copy_f32, threads));
    seconds[ops.size() + 1].push_back(stream_copy(a.data(), b.data(), copy_bf16, threads));
  }
  const auto gbs = [&](const std::vector<double>& s, double bytes) {
    std::vector<double> rates;
    for (double t : s) rates.push_back(bytes / t / 1e9);
    return bench::summarize(rates);
  };
  const bench::Stats copy5 = gbs(seconds[ops.size()], 2.0 * static_cast<double>(copy_f32));
  const bench::Stats copy3 = gbs(seconds[ops.size() + 1], 2.0 * static_cast<double>(copy_bf16));
  std::printf(
      "rows %lld x n %lld, %d reps, %u threads for the copy; GB/s of q read + x written, "
      "median [min-max]\n",
      static_cast<long long>(rows), static_cast<long long>(n), reps, threads);
  for (size_t o = 0; o < ops.size(); ++o) {
    const bench::Stats s = gbs(seconds[o], ops[o].bytes);
    const bool f32 = ops[o].bytes > 4.0 * static_cast<double>(count);
    std::printf("%-18s %-10s %s GB/s  (%3.0f%% of the copy)\n", ops[o].name.c_str(),
                ops[o].implementation.c_str(), bench::fmt_stats(s).c_str(),
                100.0 * s.median / (f32 ? copy5.median : copy3.median));
  }
  std::printf("%-29s %s GB/s\n", "copy (5 bytes an element)", bench::fmt_stats(copy5).c_str());
  std::printf("%-29s %s GB/s\n", "copy (3 bytes an element)", bench::fmt_stats(copy3).c_str());
  for (Op& op : ops) hal_op_plan_destroy(op.plan);
  for (void* p : {q, x, scale}) hal_mem_free(p);
  hal_stream_destroy(stream);
  hal_shutdown();
  return 0;
}
