// The elementwise ops of the PyTorch device (issue 33) on the cpu plugin,
// beside a STREAM-like copy of the same bytes, in the same run, interleaved:
// is each op bandwidth-bound, or how far from it?
//
//   exp, abs        HAL_OP_UNARY_MATH, f32 -> f32
//   mul 0.5         HAL_OP_BINARY_SCALAR, f32 -> f32
//   gt 0 (bool)     HAL_OP_BINARY_SCALAR, f32 -> bool
//   masked_fill     HAL_OP_WHERE(mask, -inf, x): bool + f32 -> f32
//   clamp           HAL_OP_CLAMP with two scalar bounds
//   pow             HAL_OP_BINARY POW of two f32 tensors
//   add             HAL_OP_BINARY ADD (the plan the device picks: cpu.native) for scale
//   cumsum          HAL_OP_SCAN along the rows (one work-item per row)
//   cat             HAL_OP_CAT of two [rows, n/2] halves along the last axis
//   fill            HAL_OP_FILL (write only)
//   stream copy     b[i] = a[i] on hardware-concurrency threads, the same byte count
//
// Each op is executed on a stream and synchronized; GB/s counts every tensor
// read once plus the output written once (1 GB = 1e9 bytes).
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "bench_common.h"
#include "hal/ops.h"

namespace {

void usage() {
  std::printf(
      "usage: elementwise_ops [options]\n"
      "\n"
      "GB/s (read + write) of the elementwise ops of issue 33 on rows x n f32 on the cpu\n"
      "plugin beside a threaded copy, interleaved in every repetition; prints which\n"
      "implementation serves each.\n"
      "\n"
      "  --rows N    rows (default 4096)\n"
      "  --n N       row length (default 4096)\n"
      "  --reps N    repetitions (default 7)\n"
      "  --help      this text\n");
}

struct Op {
  std::string name;
  hal_op_plan_t plan = nullptr;
  std::vector<void*> operands;
  std::vector<hal_op_scalar_t> scalars;
  double bytes_per_element = 8;  // reads plus writes
};

double run_op(hal_stream_t stream, const Op& op) {
  hal_op_exec_args_t args{};
  args.struct_size = sizeof(args);
  args.operand_count = static_cast<uint32_t>(op.operands.size());
  args.operands = op.operands.data();
  args.scalar_count = static_cast<uint32_t>(op.scalars.size());
  args.scalars = op.scalars.data();
  const double start = bench::now_s();
  BENCH_HAL_CHECK(hal_op_execute(op.plan, &args, stream));
  BENCH_HAL_CHECK(hal_stream_synchronize(stream));
  return bench::now_s() - start;
}

double stream_copy(const float* a, float* b, size_t count, unsigned threads) {
  const double start = bench::now_s();
  std::vector<std::thread> workers;
  const size_t slice = (count + threads - 1) / threads;
  for (unsigned t = 0; t < threads; ++t) {
    workers.emplace_back([=] {
      const size_t begin = std::min(count, t * slice);
      const size_t end = std::min(count, begin + slice);
      for (size_t i = begin; i < end; ++i) b[i] = a[i];
      bench::clobber_memory();
    });
  }
  for (std::thread& worker : workers) worker.join();
  return bench::now_s() - start;
}

hal_op_scalar_t f64(double v) {
  hal_op_scalar_t s{};
  s.f64 = v;
  s.i64 = static_cast<int64_t>(v);
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t rows = 4096, n = 4096;
  int reps = 7;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help") {
      usage();
      return 0;
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
  const size_t count = static_cast<size_t>(rows * n);
  const size_t bytes = count * sizeof(float);

  hal_device_properties_t props{};
  hal_device_t device = bench::hal_open_device("cpu", "cpu", HAL_DEVICE_CAP_KERNELS, &props);
  hal_stream_t stream = nullptr;
  BENCH_HAL_CHECK(hal_stream_create(device, 0, &stream));
  void *x = nullptr, *y = nullptr, *z = nullptr, *mask = nullptr;
  BENCH_HAL_CHECK(hal_mem_alloc(device, HAL_MEMORY_DEVICE, bytes, 0, &x));
  BENCH_HAL_CHECK(hal_mem_alloc(device, HAL_MEMORY_DEVICE, bytes, 0, &y));
  BENCH_HAL_CHECK(hal_mem_alloc(device, HAL_MEMORY_DEVICE, bytes, 0, &z));
  BENCH_HAL_CHECK(hal_mem_alloc(device, HAL_MEMORY_DEVICE, count, 0, &mask));
  {
    std::vector<float> host(count);
    std::vector<uint8_t> bits(count);
    uint32_t state = 12345;
    for (size_t i = 0; i < count; ++i) {
      state = state * 1664525u + 1013904223u;
      host[i] = static_cast<float>(state >> 8) * (8.0f / 16777216.0f) - 4.0f;
      bits[i] = (state >> 3) & 1u;
    }
    BENCH_HAL_CHECK(hal_memcpy_async(x, host.data(), bytes, stream));
    BENCH_HAL_CHECK(hal_memcpy_async(y, host.data(), bytes, stream));
    BENCH_HAL_CHECK(hal_memcpy_async(z, host.data(), bytes, stream));
    BENCH_HAL_CHECK(hal_memcpy_async(mask, bits.data(), count, stream));
    BENCH_HAL_CHECK(hal_stream_synchronize(stream));
  }
  hal_tensor_desc_t matrix{}, bools{};
  const int64_t shape[2] = {rows, n};
  hal_tensor_desc_contiguous(&matrix, HAL_DTYPE_F32, 2, shape);
  hal_tensor_desc_contiguous(&bools, HAL_DTYPE_BOOL, 2, shape);

  std::vector<Op> ops;
  const auto add_op = [&](const std::string& name, const hal_op_header_t* desc,
                          std::vector<void*> operands, std::vector<hal_op_scalar_t> scalars,
                          double bytes_per_element) {
    Op op{name, nullptr, std::move(operands), std::move(scalars), bytes_per_element};
    BENCH_HAL_CHECK(hal_op_plan_create(device, desc, 0, &op.plan));
    ops.push_back(std::move(op));
  };
  for (hal_unary_math_t which : {HAL_UNARY_MATH_EXP, HAL_UNARY_MATH_ABS}) {
    hal_op_unary_math_desc_t desc{};
    desc.header.struct_size = sizeof(desc);
    desc.header.kind = HAL_OP_UNARY_MATH;
    desc.op = which;
    desc.x = desc.out = matrix;
    add_op(which == HAL_UNARY_MATH_EXP ? "exp" : "abs", &desc.header, {x, y}, {}, 8);
  }
  {
    hal_op_binary_scalar_desc_t desc{};
    desc.header.struct_size = sizeof(desc);
    desc.header.kind = HAL_OP_BINARY_SCALAR;
    desc.op = HAL_BINARY_MUL;
    desc.alpha = 1.0f;
    desc.scalar_is_float = 1;
    desc.x = desc.out = matrix;
    add_op("mul 0.5", &desc.header, {x, y}, {f64(0.5)}, 8);
    desc.op = HAL_BINARY_GT;
    desc.out = bools;
    add_op("gt 0 (bool)", &desc.header, {x, mask}, {f64(0.0)}, 5);
  }
  {
    hal_op_where_desc_t desc{};
    desc.header.struct_size = sizeof(desc);
    desc.header.kind = HAL_OP_WHERE;
    desc.a_is_scalar = 1;
    desc.cond = bools;
    desc.b = desc.out = matrix;
    add_op("masked_fill", &desc.header, {mask, nullptr, x, y},
           {f64(-std::numeric_limits<double>::infinity())}, 9);
  }
  {
    hal_op_clamp_desc_t desc{};
    desc.header.struct_size = sizeof(desc);
    desc.header.kind = HAL_OP_CLAMP;
    desc.min_kind = desc.max_kind = HAL_CLAMP_BOUND_SCALAR;
    desc.x = desc.out = matrix;
    add_op("clamp", &desc.header, {x, nullptr, nullptr, y}, {f64(-1), f64(1)}, 8);
  }
  for (hal_binary_op_t which : {HAL_BINARY_POW, HAL_BINARY_ADD}) {
    hal_op_binary_desc_t desc{};
    desc.header.struct_size = sizeof(desc);
    desc.header.kind = HAL_OP_BINARY;
    desc.op = which;
    desc.alpha = 1.0f;
    desc.a = desc.b = desc.out = matrix;
    add_op(which == HAL_BINARY_POW ? "pow" : "add", &desc.header, {x, z, y}, {}, 12);
  }
  {
    hal_op_scan_desc_t desc{};
    desc.header.struct_size = sizeof(desc);
    desc.header.kind = HAL_OP_SCAN;
    desc.scan = HAL_SCAN_SUM;
    desc.axis = 1;
    desc.x = desc.out = matrix;
    add_op("cumsum", &desc.header, {x, y}, {}, 8);
  }
  {
    // Two halves [rows, n/2] joined along the rows' axis: torch.cat's common shape.
    const int64_t half_shape[2] = {rows, n / 2};
    hal_tensor_desc_t half{};
    hal_tensor_desc_contiguous(&half, HAL_DTYPE_F32, 2, half_shape);
    const hal_tensor_desc_t inputs[2] = {half, half};
    hal_op_cat_desc_t desc{};
    desc.header.struct_size = sizeof(desc);
    desc.header.kind = HAL_OP_CAT;
    desc.axis = 1;
    desc.input_count = 2;
    desc.inputs = inputs;
    desc.out = matrix;
    desc.out.shape[1] = 2 * (n / 2);
    add_op("cat", &desc.header, {x, static_cast<float*>(x) + rows * (n / 2), y}, {}, 8);
  }
  {
    hal_op_fill_desc_t desc{};
    desc.header.struct_size = sizeof(desc);
    desc.header.kind = HAL_OP_FILL;
    desc.out = matrix;
    add_op("fill", &desc.header, {y}, {f64(1.5), f64(0)}, 4);
  }
  for (const Op& op : ops) {
    hal_op_plan_info_t info{};
    info.struct_size = sizeof(info);
    BENCH_HAL_CHECK(hal_op_plan_get_info(op.plan, &info));
    std::printf("%-14s implementation %s\n", op.name.c_str(), info.implementation);
    run_op(stream, op);  // warm
  }

  const unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  std::vector<float> a(count, 1.0f), b(count, 0.0f);
  stream_copy(a.data(), b.data(), count, threads);
  std::vector<std::vector<double>> seconds(ops.size() + 1);
  for (int rep = 0; rep < reps; ++rep) {
    for (size_t o = 0; o < ops.size(); ++o) seconds[o].push_back(run_op(stream, ops[o]));
    seconds[ops.size()].push_back(stream_copy(a.data(), b.data(), count, threads));
  }
  const auto gbs = [&](const std::vector<double>& s, double bytes_per_element) {
    std::vector<double> rates;
    for (double t : s) rates.push_back(bytes_per_element * static_cast<double>(count) / t / 1e9);
    return bench::summarize(rates);
  };
  const bench::Stats copy = gbs(seconds[ops.size()], 8);
  std::printf(
      "\nrows %lld x n %lld f32, %d reps, %u threads for the copy; GB/s of read + write, "
      "median [min-max]\n",
      static_cast<long long>(rows), static_cast<long long>(n), reps, threads);
  for (size_t o = 0; o < ops.size(); ++o) {
    const bench::Stats s = gbs(seconds[o], ops[o].bytes_per_element);
    std::printf("%-14s %s GB/s  (%.0f%% of the stream copy)\n", ops[o].name.c_str(),
                bench::fmt_stats(s).c_str(), 100.0 * s.median / copy.median);
  }
  std::printf("%-14s %s GB/s\n", "stream copy", bench::fmt_stats(copy).c_str());
  for (Op& op : ops) hal_op_plan_destroy(op.plan);
  for (void* p : {x, y, z, mask}) hal_mem_free(p);
  hal_stream_destroy(stream);
  hal_shutdown();
  return 0;
}
