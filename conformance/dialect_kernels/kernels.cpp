// The `kernels` suite: every kernel of kernels.hal on every device, checked
// against a host reference on seeded random inputs. Sizes are chosen not to
// divide the block, so the bounds checks of every kernel run too.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>

#include "kernel_harness.hpp"

using namespace hal_test;

namespace {

std::vector<float> random_floats(size_t n, float low, float high, uint32_t seed) {
  std::mt19937 engine(seed);
  std::uniform_real_distribution<float> distribution(low, high);
  std::vector<float> values(n);
  for (float& v : values) v = distribution(engine);
  return values;
}

std::vector<int> random_int_vector(size_t n, int low, int high, uint32_t seed) {
  std::mt19937 engine(seed);
  std::uniform_int_distribution<int> distribution(low, high);
  std::vector<int> values(n);
  for (int& v : values) v = distribution(engine);
  return values;
}

void check_close(const std::vector<float>& got, const std::vector<float>& expected, float relative,
                 float absolute) {
  REQUIRE(got.size() == expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i);
    REQUIRE(std::fabs(got[i] - expected[i]) <= absolute + relative * std::fabs(expected[i]));
  }
}

}  // namespace

KERNEL_TEST("vadd", "sizes not divisible by the block") {
  const int n = 1000;
  const auto a = random_floats(n, -1, 1, 1), b = random_floats(n, -1, 1, 2);
  DeviceBuffer<float> da(device, a), db(device, b), dc(device, std::vector<float>(n + 1, -7.f));
  run(device, "vadd", {{blocks_for(n, 64), 1, 1}, {64, 1, 1}}, {da, db, dc, n});
  const auto c = dc.download();
  for (int i = 0; i < n; ++i) REQUIRE(c[i] == a[i] + b[i]);
  REQUIRE(c[n] == -7.f);  // past n: untouched
}

KERNEL_TEST("saxpy", "scalar float and unsigned arguments") {
  const unsigned n = 777;
  const auto x = random_floats(n, -2, 2, 3), y = random_floats(n, -2, 2, 4);
  DeviceBuffer<float> dx(device, x), dy(device, y);
  run(device, "saxpy", {{blocks_for(n, 32), 1, 1}, {32, 1, 1}}, {1.5f, dx, dy, n});
  std::vector<float> expected(n);
  for (unsigned i = 0; i < n; ++i) expected[i] = 1.5f * x[i] + y[i];
  check_close(dy.download(), expected, 1e-6f, 1e-6f);
}

KERNEL_TEST("int_ops", "integer arithmetic, min, max, abs, shifts") {
  const int n = 500;
  const auto a = random_int_vector(n, -100000, 100000, 5);
  DeviceBuffer<int> da(device, a), out(device, n);
  run(device, "int_ops", {{blocks_for(n, 64), 1, 1}, {64, 1, 1}}, {da, out, n, 3u});
  const auto got = out.download();
  for (int i = 0; i < n; ++i) {
    const int v = a[i];
    const int rest = static_cast<int>(static_cast<uint32_t>(v) >> 3) + std::min(v, 5) -
                     std::max(v, -5) + std::abs(v % 11);
    REQUIRE(got[i] == ((v * 3 - 7) ^ rest));
  }
}

KERNEL_TEST("wide_args", "i64, u64 and double arguments") {
  const int n = 100;
  DeviceBuffer<int64_t> out(device, n);
  const int64_t a = -(int64_t{1} << 40);
  const uint64_t b = uint64_t{1} << 60;
  run(device, "wide_args", {{2, 1, 1}, {64, 1, 1}}, {out, a, b, 2.5, n});
  const auto got = out.download();
  for (int i = 0; i < n; ++i) {
    REQUIRE(got[i] == a * i + static_cast<int64_t>(b >> 3) + static_cast<int64_t>(2.5 * i));
  }
}

KERNEL_TEST("reduce_sum", "barrier in a loop, float atomics across blocks") {
  const int n = 10000;
  const auto x = random_floats(n, -1, 1, 6);
  DeviceBuffer<float> dx(device, x), total(device, std::vector<float>{0.f});
  run(device, "reduce_sum", {{blocks_for(n, 256), 1, 1}, {256, 1, 1}}, {dx, total, n});
  double expected = 0;
  for (float v : x) expected += double{v} * v;
  REQUIRE(std::fabs(total.download()[0] - expected) <= 1e-4 * expected);
}

KERNEL_TEST("reduce_dynamic", "dynamic shared memory") {
  const int n = 3000, block = 128, blocks = static_cast<int>(blocks_for(n, block));
  const auto x = random_floats(n, -1, 1, 7);
  DeviceBuffer<float> dx(device, x), sums(device, blocks);
  run(device, "reduce_dynamic",
      {{static_cast<uint32_t>(blocks), 1, 1}, {block, 1, 1}, block * sizeof(float)}, {dx, sums, n});
  std::vector<float> expected(blocks, 0.f);
  for (int i = 0; i < n; ++i) expected[i / block] += x[i];
  check_close(sums.download(), expected, 1e-5f, 1e-5f);
}

KERNEL_TEST("histogram", "shared and global int atomics under contention") {
  const int n = 20000;
  std::vector<uint32_t> values(n);
  std::mt19937 engine(8);
  for (auto& v : values) v = engine() % 1000;
  DeviceBuffer<uint32_t> dv(device, values);
  DeviceBuffer<int> bins(device, std::vector<int>(64, 0));
  run(device, "histogram", {{8, 1, 1}, {96, 1, 1}}, {dv, bins, n});
  std::vector<int> expected(64, 0);
  for (uint32_t v : values) ++expected[v % 64];
  REQUIRE(bins.download() == expected);
}

KERNEL_TEST("atomic_counter", "every work-item takes a unique ticket") {
  const int n = 5000;
  DeviceBuffer<uint32_t> counter(device, std::vector<uint32_t>{0}), tickets(device, n);
  run(device, "atomic_counter", {{blocks_for(n, 100), 1, 1}, {100, 1, 1}}, {counter, tickets, n});
  REQUIRE(counter.download()[0] == static_cast<uint32_t>(n));
  auto got = tickets.download();
  std::sort(got.begin(), got.end());
  for (int i = 0; i < n; ++i) REQUIRE(got[i] == static_cast<uint32_t>(i));
}

KERNEL_TEST("atomic_minmax", "atomic_min and atomic_max on i32") {
  const int n = 4099;
  const auto values = random_int_vector(n, -1000000, 1000000, 9);
  DeviceBuffer<int> dv(device, values);
  DeviceBuffer<int> result(device, std::vector<int>{INT32_MAX, INT32_MIN});
  run(device, "atomic_minmax", {{blocks_for(n, 128), 1, 1}, {128, 1, 1}}, {dv, result, n});
  const auto got = result.download();
  REQUIRE(got[0] == *std::min_element(values.begin(), values.end()));
  REQUIRE(got[1] == *std::max_element(values.begin(), values.end()));
}

KERNEL_TEST("atomic_cas_increment", "compare-and-swap loops") {
  const int n = 3001;
  DeviceBuffer<int> counters(device, std::vector<int>(4, 10));
  run(device, "atomic_cas_increment", {{blocks_for(n, 64), 1, 1}, {64, 1, 1}}, {counters, n});
  REQUIRE(counters.download() == std::vector<int>{10 + 751, 10 + 750, 10 + 750, 10 + 750});
}

KERNEL_TEST("atomic_swap", "each value is seen exactly once") {
  const int n = 1000;
  DeviceBuffer<int> slot(device, std::vector<int>{0}), returned(device, n);
  run(device, "atomic_swap", {{blocks_for(n, 64), 1, 1}, {64, 1, 1}}, {slot, returned, n});
  auto seen = returned.download();
  seen.push_back(slot.download()[0]);
  std::sort(seen.begin(), seen.end());
  for (int i = 0; i <= n; ++i) REQUIRE(seen[i] == i);  // 0 (initial) .. n
}

KERNEL_TEST("matmul_tiled", "shared-memory tiling, ragged edges") {
  const int m = 37, n = 53, k = 45;
  const auto a = random_floats(size_t{m} * k, -1, 1, 10),
             b = random_floats(size_t{k} * n, -1, 1, 11);
  DeviceBuffer<float> da(device, a), db(device, b), dc(device, size_t{m} * n);
  run(device, "matmul_tiled", {{blocks_for(n, 16), blocks_for(m, 16), 1}, {16, 16, 1}},
      {da, db, dc, m, n, k});
  std::vector<float> expected(size_t{m} * n);
  for (int r = 0; r < m; ++r)
    for (int c = 0; c < n; ++c) {
      double acc = 0;
      for (int i = 0; i < k; ++i) acc += double{a[r * k + i]} * b[i * n + c];
      expected[r * n + c] = static_cast<float>(acc);
    }
  check_close(dc.download(), expected, 1e-4f, 1e-4f);
}

KERNEL_TEST("transpose_tiled", "padded shared tile, 2-D grid") {
  const int rows = 45, cols = 70;
  const auto in = random_int_vector(size_t{rows} * cols, -1000, 1000, 12);
  DeviceBuffer<int> din(device, in), dout(device, size_t{rows} * cols);
  run(device, "transpose_tiled", {{blocks_for(cols, 16), blocks_for(rows, 16), 1}, {16, 16, 1}},
      {din, dout, rows, cols});
  const auto got = dout.download();
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) REQUIRE(got[c * rows + r] == in[r * cols + c]);
}

KERNEL_TEST("softmax_row", "reductions across a block") {
  const int rows = 7, cols = 300;
  const auto x = random_floats(size_t{rows} * cols, -5, 5, 13);
  DeviceBuffer<float> dx(device, x), dy(device, size_t{rows} * cols);
  run(device, "softmax_row", {{rows, 1, 1}, {128, 1, 1}}, {dx, dy, cols});
  std::vector<float> expected(x.size());
  for (int r = 0; r < rows; ++r) {
    double m = -INFINITY, sum = 0;
    for (int c = 0; c < cols; ++c) m = std::max<double>(m, x[r * cols + c]);
    for (int c = 0; c < cols; ++c) sum += std::exp(x[r * cols + c] - m);
    for (int c = 0; c < cols; ++c)
      expected[r * cols + c] = static_cast<float>(std::exp(x[r * cols + c] - m) / sum);
  }
  check_close(dy.download(), expected, 1e-4f, 1e-7f);
}

KERNEL_TEST("grid3d", "ids and sizes in three dimensions") {
  const int nx = 13, ny = 7, nz = 5;
  DeviceBuffer<int> out(device, size_t{nx} * ny * nz);
  run(device, "grid3d", {{blocks_for(nx, 4), blocks_for(ny, 3), blocks_for(nz, 2)}, {4, 3, 2}},
      {out, nx, ny, nz});
  const auto got = out.download();
  for (int z = 0; z < nz; ++z)
    for (int y = 0; y < ny; ++y)
      for (int x = 0; x < nx; ++x) REQUIRE(got[(z * ny + y) * nx + x] == x + 100 * y + 10000 * z);
}

KERNEL_TEST("f16_scale", "f16 loads and stores round to nearest even") {
  const int n = 2049;
  std::vector<uint16_t> in(n);
  std::mt19937 engine(14);
  for (auto& h : in) {
    do h = static_cast<uint16_t>(engine());
    while (((h >> 10) & 0x1f) == 0x1f);  // finite
  }
  DeviceBuffer<uint16_t> din(device, in), dout(device, n);
  run(device, "f16_scale", {{blocks_for(n, 64), 1, 1}, {64, 1, 1}}, {din, dout, 3.3f, n});
  const auto got = dout.download();
  for (int i = 0; i < n; ++i) {
    INFO("input 0x" << std::hex << in[i]);
    REQUIRE(got[i] == reference_f32_to_f16(reference_f16_to_f32(in[i]) * 3.3f));
  }
}

KERNEL_TEST("bf16_axpy", "bf16 loads and stores with f32 arithmetic") {
  const int n = 1500;
  const auto xf = random_floats(n, -100, 100, 15), yf = random_floats(n, -100, 100, 16);
  std::vector<uint16_t> x(n), y(n);
  for (int i = 0; i < n; ++i) {
    x[i] = reference_f32_to_bf16(xf[i]);
    y[i] = reference_f32_to_bf16(yf[i]);
  }
  DeviceBuffer<uint16_t> dx(device, x), dy(device, y);
  run(device, "bf16_axpy", {{blocks_for(n, 64), 1, 1}, {64, 1, 1}}, {dx, dy, 0.7f, n});
  const auto got = dy.download();
  for (int i = 0; i < n; ++i) {
    const float expected = 0.7f * reference_bf16_to_f32(x[i]) + reference_bf16_to_f32(y[i]);
    REQUIRE(got[i] == reference_f32_to_bf16(expected));
  }
}

KERNEL_TEST("f32_to_half",
            "f32 stores to f16 and bf16 round to nearest even, bit-exactly: "
            "ties, subnormals, overflow, infinities, NaN") {
  // Exact ties between neighbouring f16 and bf16 values (both ways of the
  // even rule), values just off a tie, subnormal ties, overflow past the
  // largest value, infinities, NaN and signed zeros, then random bit patterns.
  std::vector<float> in;
  std::mt19937 engine(21);
  for (int k = 0; k < 512; ++k) {
    uint16_t h;
    do h = static_cast<uint16_t>(engine());
    while (((h >> 10) & 0x1f) >= 0x1e);  // finite, and h + 1 finite
    const float tie = (reference_f16_to_f32(h) + reference_f16_to_f32(h + 1)) / 2;  // exact
    in.push_back(tie);
    in.push_back(std::nextafter(tie, 0.0f));
    in.push_back(std::nextafter(tie, INFINITY));
    const uint32_t b = static_cast<uint32_t>(engine()) & 0x7f7f0000u;  // a finite bf16
    float bf_tie;
    const uint32_t tie_bits = b | 0x8000u;  // exactly between b and b + 1 ulp
    std::memcpy(&bf_tie, &tie_bits, 4);
    in.push_back(bf_tie);
  }
  for (float special :
       {0.0f, -0.0f, 65504.0f, 65519.99f, 65520.0f, -65520.0f, 1e30f, std::ldexp(1.0f, -25),
        std::ldexp(3.0f, -26), std::ldexp(1.0f, -26), std::ldexp(1.0f, -149), INFINITY, -INFINITY,
        NAN, -NAN, std::numeric_limits<float>::max(), std::numeric_limits<float>::min()}) {
    in.push_back(special);
  }
  while (in.size() < 4096) {
    const uint32_t bits = static_cast<uint32_t>(engine());
    float value;
    std::memcpy(&value, &bits, 4);
    in.push_back(value);
  }
  const int n = static_cast<int>(in.size());
  DeviceBuffer<float> din(device, in);
  DeviceBuffer<uint16_t> dout_f16(device, n), dout_bf16(device, n);
  run(device, "f32_to_half", {{blocks_for(n, 64), 1, 1}, {64, 1, 1}},
      {din, dout_f16, dout_bf16, n});
  const auto got_f16 = dout_f16.download();
  const auto got_bf16 = dout_bf16.download();
  for (int i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, &in[i], 4);
    INFO("store_f16/store_bf16 of f32 0x" << std::hex << bits << " (" << in[i] << "): got f16 0x"
                                          << got_f16[i] << ", bf16 0x" << got_bf16[i]);
    if (std::isnan(in[i])) {
      REQUIRE(((got_f16[i] & 0x7c00) == 0x7c00 && (got_f16[i] & 0x3ff) != 0));
      REQUIRE(((got_bf16[i] & 0x7f80) == 0x7f80 && (got_bf16[i] & 0x7f) != 0));
      continue;
    }
    REQUIRE(got_f16[i] == reference_f32_to_f16(in[i]));
    REQUIRE(got_bf16[i] == reference_f32_to_bf16(in[i]));
  }
}

KERNEL_TEST("f16_to_f32", "every finite f16 value converts exactly") {
  std::vector<uint16_t> in;
  for (uint32_t h = 0; h < 0x10000; ++h) {
    if (((h >> 10) & 0x1f) != 0x1f) in.push_back(static_cast<uint16_t>(h));
  }
  const int n = static_cast<int>(in.size());
  DeviceBuffer<uint16_t> din(device, in);
  DeviceBuffer<float> dout(device, n);
  run(device, "f16_to_f32", {{blocks_for(n, 256), 1, 1}, {256, 1, 1}}, {din, dout, n});
  const auto got = dout.download();
  for (int i = 0; i < n; ++i) REQUIRE(got[i] == reference_f16_to_f32(in[i]));
}

KERNEL_TEST("scan_block", "double-buffered scan, barriers in a loop") {
  const int n = 1000, block = 256;
  const auto in = random_int_vector(n, -50, 50, 17);
  DeviceBuffer<int> din(device, in), dout(device, n);
  run(device, "scan_block", {{blocks_for(n, block), 1, 1}, {block, 1, 1}}, {din, dout, n});
  const auto got = dout.download();
  int running = 0;
  for (int i = 0; i < n; ++i) {
    running = (i % block == 0 ? 0 : running) + in[i];
    REQUIRE(got[i] == running);
  }
}

KERNEL_TEST("barrier_rounds", "group-dependent loop and branch with barriers") {
  const int groups = 5, block = 64;
  DeviceBuffer<int> out(device, groups * block);
  run(device, "barrier_rounds", {{groups, 1, 1}, {block, 1, 1}}, {out});
  const auto got = out.download();
  for (int g = 0; g < groups; ++g) {
    std::vector<int> value(block);
    std::iota(value.begin(), value.end(), 0);
    for (int r = 0; r <= g; ++r) {
      std::vector<int> next(block);
      for (int t = 0; t < block; ++t) next[t] = value[t] + value[(t + 1) % block];
      value = next;
    }
    if (g % 2 == 0)
      for (int& v : value) v *= 2;
    for (int t = 0; t < block; ++t) REQUIRE(got[g * block + t] == value[(t + 3) % block]);
  }
}

KERNEL_TEST("math_funcs", "the prelude's math functions") {
  const int n = 300;
  const auto x = random_floats(n, 0, 4, 18);
  DeviceBuffer<float> dx(device, x), out(device, size_t{n} * 8);
  run(device, "math_funcs", {{blocks_for(n, 64), 1, 1}, {64, 1, 1}}, {dx, out, n});
  std::vector<float> expected(size_t{n} * 8);
  for (int i = 0; i < n; ++i) {
    const double v = x[i];
    const double row[8] = {std::sqrt(v),
                           std::exp(-v),
                           std::log(v + 1),
                           std::sin(v) + std::cos(v),
                           std::tanh(v - 2),
                           1 / std::sqrt(v + 0.5),
                           std::min(v, 1.5) + std::max(v, 2.5) + std::floor(v) + v,
                           std::pow(v + 1, 1.5) + (v * 2 + 1)};
    for (int j = 0; j < 8; ++j) expected[i * 8 + j] = static_cast<float>(row[j]);
  }
  check_close(out.download(), expected, 1e-5f, 1e-6f);
}

KERNEL_TEST("double_math", "f64 arguments and arithmetic") {
  const int n = 200;
  std::vector<double> x(n);
  std::mt19937 engine(19);
  for (double& v : x) v = std::uniform_real_distribution<double>(0, 10)(engine);
  DeviceBuffer<double> dx(device, x), out(device, n);
  run(device, "double_math", {{blocks_for(n, 64), 1, 1}, {64, 1, 1}}, {dx, out, 3.0, n});
  const auto got = out.download();
  for (int i = 0; i < n; ++i) {
    const double expected = std::sqrt(x[i]) * 3.0 + std::exp(x[i] / 10.0);
    REQUIRE(std::fabs(got[i] - expected) <= 1e-12 * std::fabs(expected));
  }
}

KERNEL_TEST("stencil_1d", "halo exchange through shared memory") {
  const int n = 1001;
  const auto in = random_floats(n, -1, 1, 20);
  DeviceBuffer<float> din(device, in), dout(device, n);
  run(device, "stencil_1d", {{blocks_for(n, 128), 1, 1}, {128, 1, 1}}, {din, dout, n});
  std::vector<float> expected(n);
  for (int i = 0; i < n; ++i) {
    const float left = i > 0 ? in[i - 1] : 0.f, right = i + 1 < n ? in[i + 1] : 0.f;
    expected[i] = 0.25f * left + 0.5f * in[i] + 0.25f * right;
  }
  check_close(dout.download(), expected, 1e-6f, 1e-6f);
}
