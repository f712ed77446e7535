// Row-wise operators (HAL_OP_NORM layernorm, HAL_OP_SOFTMAX) on the cpu
// plugin against a STREAM-like copy on the same machine, in the same run,
// interleaved.
//
//   layernorm    HAL_OP_NORM over rows x n f32, with gamma, beta, mean, rstd
//   rmsnorm      HAL_OP_NORM, rmsnorm with gamma and rstd
//   softmax      HAL_OP_SOFTMAX over rows x n f32 (and log-softmax)
//   gelu, silu   HAL_OP_UNARY (tanh GELU, SiLU), elementwise over the same
//   add          HAL_OP_BINARY add of two such tensors
//   stream copy  b[i] = a[i] on hardware-concurrency threads (each a slice),
//                pre-touched host buffers of the same size as x
//   libc memcpy  one thread
//
// Each op is executed on a stream and synchronized. Bandwidth counts x read
// once plus y written once (rows x n x 4 bytes each; gamma, beta and the
// statistics are under 0.1% at the default size), and for add its second
// input read once too, 1 GB = 1e9 bytes; a copy counts its read plus its
// write the same way.
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "bench_common.h"
#include "hal/ops.h"

namespace {

void usage() {
  std::printf(
      "usage: normalization [options]\n"
      "\n"
      "GB/s (read + write) of HAL_OP_NORM (layernorm, rmsnorm), HAL_OP_SOFTMAX and the\n"
      "elementwise HAL_OP_UNARY (gelu, silu) and HAL_OP_BINARY (add) on f32 rows x n on\n"
      "the cpu plugin, beside a STREAM-like threaded copy and memcpy of the same bytes,\n"
      "interleaved in every repetition.\n"
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
  int arrays = 2;  // full-size tensors read or written once
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

double libc_copy(const float* a, float* b, size_t count) {
  const double start = bench::now_s();
  std::memcpy(b, a, count * sizeof(float));
  bench::clobber_memory();
  return bench::now_s() - start;
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
  void *x = nullptr, *y = nullptr, *z = nullptr, *gamma = nullptr, *beta = nullptr, *mean = nullptr,
       *rstd = nullptr;
  BENCH_HAL_CHECK(hal_mem_alloc(device, HAL_MEMORY_DEVICE, bytes, 0, &x));
  BENCH_HAL_CHECK(hal_mem_alloc(device, HAL_MEMORY_DEVICE, bytes, 0, &y));
  BENCH_HAL_CHECK(hal_mem_alloc(device, HAL_MEMORY_DEVICE, bytes, 0, &z));
  BENCH_HAL_CHECK(hal_mem_alloc(device, HAL_MEMORY_DEVICE, n * sizeof(float), 0, &gamma));
  BENCH_HAL_CHECK(hal_mem_alloc(device, HAL_MEMORY_DEVICE, n * sizeof(float), 0, &beta));
  BENCH_HAL_CHECK(hal_mem_alloc(device, HAL_MEMORY_DEVICE, rows * sizeof(float), 0, &mean));
  BENCH_HAL_CHECK(hal_mem_alloc(device, HAL_MEMORY_DEVICE, rows * sizeof(float), 0, &rstd));
  {
    // Data in [-4, 4) (the ops' speed does not depend on it), written once.
    std::vector<float> host(count);
    uint32_t state = 12345;
    for (float& v : host) {
      state = state * 1664525u + 1013904223u;
      v = static_cast<float>(state >> 8) * (8.0f / 16777216.0f) - 4.0f;
    }
    BENCH_HAL_CHECK(hal_memcpy_async(x, host.data(), bytes, stream));
    BENCH_HAL_CHECK(hal_memcpy_async(y, host.data(), bytes, stream));
    BENCH_HAL_CHECK(hal_memcpy_async(z, host.data(), bytes, stream));
    const std::vector<float> ones(static_cast<size_t>(n), 1.0f);
    BENCH_HAL_CHECK(hal_memcpy_async(gamma, ones.data(), n * sizeof(float), stream));
    BENCH_HAL_CHECK(hal_memcpy_async(beta, ones.data(), n * sizeof(float), stream));
    BENCH_HAL_CHECK(hal_stream_synchronize(stream));
  }

  hal_tensor_desc_t matrix{}, vector_n{}, vector_rows{};
  const int64_t shape[2] = {rows, n};
  hal_tensor_desc_contiguous(&matrix, HAL_DTYPE_F32, 2, shape);
  hal_tensor_desc_contiguous(&vector_n, HAL_DTYPE_F32, 1, &n);
  hal_tensor_desc_contiguous(&vector_rows, HAL_DTYPE_F32, 1, &rows);

  std::vector<Op> ops;
  {
    hal_op_norm_desc_t desc{};
    desc.header.struct_size = sizeof(desc);
    desc.header.kind = HAL_OP_NORM;
    desc.norm = HAL_NORM_LAYERNORM;
    desc.epsilon = 1e-5f;
    desc.has_gamma = desc.has_beta = desc.has_mean = desc.has_rstd = 1;
    desc.x = desc.y = matrix;
    desc.gamma = desc.beta = vector_n;
    desc.mean = desc.rstd = vector_rows;
    Op op{"layernorm", nullptr, {x, gamma, beta, y, mean, rstd}};
    BENCH_HAL_CHECK(hal_op_plan_create(device, &desc.header, 0, &op.plan));
    ops.push_back(op);
    desc.norm = HAL_NORM_RMSNORM;
    desc.has_beta = desc.has_mean = 0;
    Op rms{"rmsnorm", nullptr, {x, gamma, nullptr, y, nullptr, rstd}};
    BENCH_HAL_CHECK(hal_op_plan_create(device, &desc.header, 0, &rms.plan));
    ops.push_back(rms);
  }
  {
    hal_op_softmax_desc_t desc{};
    desc.header.struct_size = sizeof(desc);
    desc.header.kind = HAL_OP_SOFTMAX;
    desc.x = desc.y = matrix;
    Op op{"softmax", nullptr, {x, y}};
    BENCH_HAL_CHECK(hal_op_plan_create(device, &desc.header, 0, &op.plan));
    ops.push_back(op);
    desc.log = 1;
    Op log_op{"log_softmax", nullptr, {x, y}};
    BENCH_HAL_CHECK(hal_op_plan_create(device, &desc.header, 0, &log_op.plan));
    ops.push_back(log_op);
  }
  for (const hal_activation_t activation : {HAL_ACTIVATION_GELU_TANH, HAL_ACTIVATION_SILU}) {
    hal_op_unary_desc_t desc{};
    desc.header.struct_size = sizeof(desc);
    desc.header.kind = HAL_OP_UNARY;
    desc.activation = activation;
    desc.alpha = 1.0f;
    desc.x = desc.out = matrix;
    Op op{activation == HAL_ACTIVATION_SILU ? "silu" : "gelu", nullptr, {x, y}};
    BENCH_HAL_CHECK(hal_op_plan_create(device, &desc.header, 0, &op.plan));
    ops.push_back(op);
  }
  {
    hal_op_binary_desc_t desc{};
    desc.header.struct_size = sizeof(desc);
    desc.header.kind = HAL_OP_BINARY;
    desc.op = HAL_BINARY_ADD;
    desc.alpha = 1.0f;
    desc.a = desc.b = desc.out = matrix;
    Op op{"add", nullptr, {x, z, y}, 3};
    BENCH_HAL_CHECK(hal_op_plan_create(device, &desc.header, 0, &op.plan));
    ops.push_back(op);
  }
  for (const Op& op : ops) {
    hal_op_plan_info_t info{};
    info.struct_size = sizeof(info);
    BENCH_HAL_CHECK(hal_op_plan_get_info(op.plan, &info));
    std::printf("%-12s implementation %s\n", op.name.c_str(), info.implementation);
    run_op(stream, op);  // warm: the first run compiles nothing (planning did) but touches pages
  }

  const unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  std::vector<float> a(count, 1.0f), b(count, 0.0f);
  stream_copy(a.data(), b.data(), count, threads);

  std::vector<std::vector<double>> seconds(ops.size() + 2);
  for (int rep = 0; rep < reps; ++rep) {
    for (size_t o = 0; o < ops.size(); ++o) seconds[o].push_back(run_op(stream, ops[o]));
    seconds[ops.size()].push_back(stream_copy(a.data(), b.data(), count, threads));
    seconds[ops.size() + 1].push_back(libc_copy(a.data(), b.data(), count));
  }

  const auto gbs = [&](const std::vector<double>& s, int arrays = 2) {
    const double traffic = arrays * static_cast<double>(bytes);
    std::vector<double> rates;
    for (double t : s) rates.push_back(traffic / t / 1e9);
    return bench::summarize(rates);
  };
  const bench::Stats copy = gbs(seconds[ops.size()]);
  std::printf(
      "\nrows %lld x n %lld f32, %d reps, %u threads for the copy; GB/s of read + write, "
      "median [min-max]\n",
      static_cast<long long>(rows), static_cast<long long>(n), reps, threads);
  for (size_t o = 0; o < ops.size(); ++o) {
    const bench::Stats s = gbs(seconds[o], ops[o].arrays);
    std::printf("%-14s %s GB/s  (%.0f%% of the stream copy)\n", ops[o].name.c_str(),
                bench::fmt_stats(s).c_str(), 100.0 * s.median / copy.median);
  }
  std::printf("%-14s %s GB/s\n", "stream copy", bench::fmt_stats(copy).c_str());
  std::printf("%-14s %s GB/s\n", "libc memcpy",
              bench::fmt_stats(gbs(seconds[ops.size() + 1])).c_str());

  for (Op& op : ops) hal_op_plan_destroy(op.plan);
  for (void* p : {x, y, z, gamma, beta, mean, rstd}) hal_mem_free(p);
  hal_stream_destroy(stream);
  hal_shutdown();
  return 0;
}
