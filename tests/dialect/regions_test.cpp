// Kernels with barriers on the cpu plugin: the ones the region splitter takes
// (barriers at the top level, in uniform top-level loops; values live across
// barriers; shared memory; return after the last barrier) and the ones that
// keep their coroutines. Each runs on the cpu plugin against a host
// reference with seeded random inputs, and its record says which shape it
// took (SPEC.md, "Work-items and barriers on the cpu plugin").
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "hal.h"
#include "hal_dialect/dialect.hpp"

using hal::dialect::CpuShape;

namespace {

// ---- the kernels -------------------------------------------------------------

// Top-level barriers; a scalar and an array declared in the body live
// across them; `return` after the last barrier, also from inside a loop.
constexpr const char* kNeighbours = R"(
kernel max_block(256) void neighbours(global const float* x, global float* out, int n) {
  shared float tile[256];
  int t = local_id(0), i = global_id(0);
  float mine = i < n ? x[i] : 0.0f;
  float window[3];
  tile[t] = mine;
  barrier();
  int size = local_size(0);
  window[0] = tile[(t + size - 1) % size];
  window[1] = mine;
  window[2] = tile[(t + 1) % size];
  barrier();
  tile[t] = window[0] * 2.0f - window[2];
  barrier();
  if (i >= n) return;
  float total = 0.0f;
  for (int j = 0; j < 3; ++j) {
    if (window[j] < -100.0f) return;
    total += window[j];
  }
  out[i] = total + tile[(t + 2) % size] + mine;
}
)";

// Barriers in uniform loops: a `for` whose bound is a uniform local (read
// from work-item 0's slot) and a `while` counting a uniform local down in its
// body; a scalar carried through both.
constexpr const char* kRounds = R"(
kernel max_block(256) void rounds(global const int* in, global int* out, int passes) {
  shared int ring[256];
  int t = local_id(0), size = local_size(0);
  int total = passes * 2;
  int acc = in[global_id(0)];
  for (int r = 0; r < total; r += 2) {
    ring[t] = acc;
    barrier();
    acc += ring[(t + r + 1) % size];
    barrier();
  }
  int left = group_id(0) % 3;
  while (left > 0) {
    ring[t] = acc;
    barrier();
    acc = acc - ring[(t + 1) % size] / 2;
    left--;
    barrier();
  }
  out[global_id(0)] = acc;
}
)";

// 3-D blocks (an odd y extent), dynamic shared memory through a local
// pointer, a value live across two barriers.
constexpr const char* kMirror = R"(
kernel void mirror(global const float* in, global float* out, float bias) {
  local float* tile = dynamic_shared(float);
  int x = local_id(0), y = local_id(1), z = local_id(2);
  int sx = local_size(0), sy = local_size(1);
  int lin = (z * sy + y) * sx + x;
  int base = group_id(0) * sx * sy * local_size(2);
  tile[lin] = in[base + lin];
  barrier();
  float mirrored = tile[(z * sy + (sy - 1 - y)) * sx + (sx - 1 - x)];
  barrier();
  tile[lin] = mirrored * 0.5f;
  barrier();
  out[base + lin] = tile[lin] + mirrored + bias;
}
)";

// Pointers into locals that outlive their region: an array that decays
// and a scalar whose address is taken both need per-item storage.
constexpr const char* kEscapes = R"(
kernel max_block(64) void escapes(global const int* in, global int* out) {
  shared int s[64];
  int t = local_id(0);
  int pair[2];
  int* p = pair;
  int v = in[global_id(0)];
  int* q = &v;
  pair[0] = v;
  pair[1] = -v;
  s[t] = v;
  barrier();
  int sum = 0;
  for (int j = 0; j < 4; ++j) {
    switch (j) {
      case 1: continue;
      default: sum += p[j & 1] + *q;
    }
  }
  out[global_id(0)] = sum + s[63 - t];
}
)";

// Several per-item sums, each written in every round of a uniform loop with
// barriers: regions copy them into locals and write them back (so the
// work-item loop vectorises), and the blocks' shapes take the odd-row path.
constexpr const char* kMoments = R"(
kernel max_block(256) void moments(global const float* x, global float* out, int rounds) {
  shared float tile[256];
  int items = local_size(0) * local_size(1);
  int t = local_id(1) * local_size(0) + local_id(0);
  int base = group_id(0) * items;
  float s0 = 0.0f, s1 = 1.0f, s2 = -1.0f;
  for (int r = 0; r < rounds; ++r) {
    tile[t] = x[(base + t + r) % (num_groups(0) * items)];
    barrier();
    for (int k = 0; k < 4; ++k) {
      float v = tile[(t + k) % items];
      s0 += v;
      s1 += v * v;
      s2 -= v * v * v;
    }
    barrier();
  }
  out[(base + t) * 3] = s0;
  out[(base + t) * 3 + 1] = s1;
  out[(base + t) * 3 + 2] = s2;
}
)";

// The tiled matmuls bench/dialect measures (bench/kernels/tiled_matmul.hal):
// 'matmul4' has four sums per work-item, 16x64 outputs per 16x16 block.
std::string tiled_matmul_source() {
  std::ifstream file(HAL_TEST_TILED_MATMUL_SOURCE);
  std::stringstream source;
  source << file.rdbuf();
  return source.str();
}

// Declarations of every form the splitter reads, live across a barrier: a
// struct, a const array with an initialiser, unsigned, restrict pointers in
// one declaration.
constexpr const char* kDeclarations = R"(
struct pair { int lo; int hi; };
kernel max_block(64) void declarations(global const int* in, global int* out) {
  shared int s[64];
  const int t = local_id(0);
  unsigned int u = (unsigned)in[global_id(0)];
  struct pair p;
  p.lo = in[global_id(0)] & 255;
  p.hi = in[global_id(0)] >> 8;
  const int weights[2] = {3, 5};
  global const int* restrict row = in + group_id(0) * 64, *other = in;
  s[t] = p.lo;
  barrier();
  out[global_id(0)] = s[63 - t] * weights[0] + p.hi * weights[1] + (int)(u & 1u) + row[t] -
                      other[global_id(0)];
}
)";

// A parameter the body writes is each work-item's own copy (OpenCL C's
// rule), on the item loop as on the coroutines.
constexpr const char* kBump = R"(
kernel void bump(global int* out, int base, global const int* in) {
  base += in[global_id(0)];
  out[global_id(0)] = base;
}
)";

// Kernels the splitter leaves to coroutines, each for its own reason.
constexpr const char* kFallbacks = R"(
kernel max_block(64) void param_written(global const int* in, global int* out, int flag) {
  shared int s[64];
  int t = local_id(0);
  flag += t;
  s[t] = in[global_id(0)] + flag;
  barrier();
  out[global_id(0)] = s[63 - t];
}
kernel max_block(64) void switch_continue(global const int* in, global int* out, int flag) {
  shared int s[64];
  int t = local_id(0);
  int acc = in[global_id(0)];
  for (int r = 0; r < 4; ++r) {
    s[t] = acc;
    barrier();
    acc += s[(t + r + 1) % 64];
    barrier();
    switch (r & 1) {
      case 1: continue;
      default: acc += flag;
    }
  }
  out[global_id(0)] = acc;
}
kernel max_block(64) void in_branch(global const int* in, global int* out, int flag) {
  shared int s[64];
  int t = local_id(0);
  s[t] = in[global_id(0)];
  if (flag > 0) {
    barrier();
    int v = s[63 - t];
    barrier();
    s[t] = v + flag;
  }
  barrier();
  out[global_id(0)] = s[(t + 1) % 64];
}
kernel max_block(64) void nested(global const int* in, global int* out, int flag) {
  shared int s[64];
  int t = local_id(0);
  int acc = in[global_id(0)];
  for (int a = 0; a < 2; ++a) {
    for (int b = 0; b < 2; ++b) {
      s[t] = acc;
      barrier();
      acc += s[(t + a + b + 1) % 64] + flag;
      barrier();
    }
  }
  out[global_id(0)] = acc;
}
kernel max_block(64) void early_return(global const int* in, global int* out, int flag) {
  shared int s[64];
  int t = local_id(0);
  if (flag == 0) return;
  s[t] = in[global_id(0)];
  barrier();
  out[global_id(0)] = s[63 - t] * flag;
}
kernel max_block(64) void memory_bound(global const int* in, global int* out, int flag) {
  shared int s[64];
  int t = local_id(0);
  int limit = in[0] & 3;
  int acc = in[global_id(0)];
  for (int r = 0; r < limit; ++r) {
    s[t] = acc;
    barrier();
    acc -= s[(t + 5) % 64] + flag;
    barrier();
  }
  out[global_id(0)] = acc;
}
kernel max_block(64) void stepped_in_body(global const int* in, global int* out, int flag) {
  shared int s[64];
  int t = local_id(0);
  int acc = in[global_id(0)];
  for (int r = 0; r < 6; ++r) {
    s[t] = acc;
    barrier();
    acc ^= s[(t + r) % 64] + flag;
    ++r;
    barrier();
  }
  out[global_id(0)] = acc;
}
)";

// ---- the cpu plugin ------------------------------------------------------------

class Session {
 public:
  Session() {
    setenv("HAL_CPU_DEVICES", "1", 0);
    setenv("HAL_CACHE_DIR", HAL_TEST_CACHE_DIR, 0);  // hermetic: the build tree
    REQUIRE(hal_init(nullptr) == HAL_SUCCESS);
    REQUIRE(hal_device_get(0, &device_) == HAL_SUCCESS);
    REQUIRE(hal_stream_create(device_, 0, &stream_) == HAL_SUCCESS);
  }
  ~Session() {
    for (void* buffer : buffers_) hal_mem_free(buffer);
    if (module_ != nullptr) hal_module_unload(module_);
    hal_stream_destroy(stream_);
    hal_shutdown();
  }
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  hal_result_t load(const std::string& source) {
    hal_module_desc_t desc{};
    desc.struct_size = sizeof(desc);
    desc.format = HAL_MODULE_FORMAT_HAL_DIALECT;
    desc.data = source.c_str();
    desc.size = source.size();
    return hal_module_load(device_, &desc, &module_);
  }
  hal_kernel_t kernel(const char* name) {
    hal_kernel_desc_t desc{};
    desc.struct_size = sizeof(desc);
    desc.name = name;
    hal_kernel_t kernel = nullptr;
    REQUIRE(hal_kernel_get(module_, &desc, &kernel) == HAL_SUCCESS);
    return kernel;
  }
  template <class T>
  void* upload(const std::vector<T>& host) {
    void* buffer = nullptr;
    REQUIRE(hal_mem_alloc(device_, HAL_MEMORY_DEVICE, host.size() * sizeof(T), 0, &buffer) ==
            HAL_SUCCESS);
    buffers_.push_back(buffer);
    REQUIRE(hal_memcpy_async(buffer, host.data(), host.size() * sizeof(T), stream_) == HAL_SUCCESS);
    return buffer;
  }
  template <class T>
  std::vector<T> download(const void* buffer, size_t count) {
    std::vector<T> host(count);
    REQUIRE(hal_memcpy_async(host.data(), buffer, count * sizeof(T), stream_) == HAL_SUCCESS);
    REQUIRE(hal_stream_synchronize(stream_) == HAL_SUCCESS);
    return host;
  }
  void launch(hal_kernel_t kernel, const std::vector<uint32_t>& grid,
              const std::vector<uint32_t>& block, const std::vector<hal_kernel_arg_t>& args,
              uint32_t shared = 0) {
    hal_launch_config_t config{};
    config.struct_size = sizeof(config);
    for (int d = 0; d < 3; ++d) {
      config.grid[d] = d < static_cast<int>(grid.size()) ? grid[d] : 1;
      config.block[d] = d < static_cast<int>(block.size()) ? block[d] : 1;
    }
    config.shared_memory_bytes = shared;
    REQUIRE(hal_launch_kernel(kernel, &config, static_cast<uint32_t>(args.size()), args.data(),
                              stream_) == HAL_SUCCESS);
    REQUIRE(hal_stream_synchronize(stream_) == HAL_SUCCESS);
  }

 private:
  hal_device_t device_ = nullptr;
  hal_stream_t stream_ = nullptr;
  hal_module_t module_ = nullptr;
  std::vector<void*> buffers_;
};

// The record of |entry| in the C++ translation of |source|.
hal::dialect::KernelRecord record_of(const std::string& source, const std::string& entry) {
  hal::dialect::TranslatedModule module;
  hal::dialect::Diagnostic error;
  INFO(error.to_string());
  REQUIRE(hal::dialect::translate(source, hal::dialect::Backend::kCpp, module, error));
  const hal::dialect::KernelRecord* record = module.find(entry);
  REQUIRE(record != nullptr);
  return *record;
}

std::string cpp_text(const std::string& source) {
  hal::dialect::TranslatedModule module;
  hal::dialect::Diagnostic error;
  REQUIRE(hal::dialect::translate(source, hal::dialect::Backend::kCpp, module, error));
  return module.text;
}

bool contains(const std::string& text, const std::string& piece) {
  return text.find(piece) != std::string::npos;
}

std::string error_detail() {
  hal_error_detail_t detail{};
  detail.struct_size = sizeof(detail);
  REQUIRE(hal_error_get_detail(&detail) == HAL_SUCCESS);
  return detail.message;
}

// ---- host references --------------------------------------------------------------

std::vector<float> neighbours_reference(const std::vector<float>& x, std::vector<float> out, int n,
                                        int groups, int size) {
  for (int g = 0; g < groups; ++g) {
    std::vector<float> mine(size), tile(size);
    for (int t = 0; t < size; ++t) {
      const int i = g * size + t;
      mine[t] = i < n ? x[i] : 0.0f;
    }
    for (int t = 0; t < size; ++t) {
      tile[t] = mine[(t + size - 1) % size] * 2.0f - mine[(t + 1) % size];
    }
    for (int t = 0; t < size; ++t) {
      const int i = g * size + t;
      if (i >= n) continue;
      const float window[3] = {mine[(t + size - 1) % size], mine[t], mine[(t + 1) % size]};
      float total = 0.0f;
      bool returned = false;
      for (float value : window) {
        if (value < -100.0f) {
          returned = true;
          break;
        }
        total += value;
      }
      if (!returned) out[i] = total + tile[(t + 2) % size] + mine[t];
    }
  }
  return out;
}

std::vector<int> rounds_reference(const std::vector<int>& in, int passes, int groups, int size) {
  std::vector<int> out(in.size());
  for (int g = 0; g < groups; ++g) {
    std::vector<int> acc(in.begin() + g * size, in.begin() + (g + 1) * size), ring(size);
    for (int r = 0; r < passes * 2; r += 2) {
      ring = acc;
      for (int t = 0; t < size; ++t) acc[t] += ring[(t + r + 1) % size];
    }
    for (int left = g % 3; left > 0; --left) {
      ring = acc;
      for (int t = 0; t < size; ++t) acc[t] = acc[t] - ring[(t + 1) % size] / 2;
    }
    std::copy(acc.begin(), acc.end(), out.begin() + g * size);
  }
  return out;
}

std::vector<float> mirror_reference(const std::vector<float>& in, float bias, int groups, int sx,
                                    int sy, int sz) {
  std::vector<float> out(in.size());
  const int items = sx * sy * sz;
  for (int g = 0; g < groups; ++g) {
    for (int z = 0; z < sz; ++z) {
      for (int y = 0; y < sy; ++y) {
        for (int x = 0; x < sx; ++x) {
          const int lin = (z * sy + y) * sx + x;
          const float mirrored = in[g * items + (z * sy + (sy - 1 - y)) * sx + (sx - 1 - x)];
          out[g * items + lin] = mirrored * 0.5f + mirrored + bias;
        }
      }
    }
  }
  return out;
}

}  // namespace

TEST_CASE("regions: top-level barriers, values and arrays live across them, return after the last",
          "[dialect][regions]") {
  const hal::dialect::KernelRecord record = record_of(kNeighbours, "neighbours");
  INFO(record.cpu_shape_note);
  REQUIRE(record.cpu_shape == CpuShape::kRegions);
  // `mine` (a memory read) and `window` (an array) are kept per work-item;
  // the ids and `size` are recomputed in each region.
  CHECK(contains(record.cpu_shape_note, "per-item values: mine, window"));
  const std::string text = cpp_text(kNeighbours);
  CHECK(contains(text, "auto& window = hal_s_window[hal_lin];"));
  CHECK_FALSE(contains(text, "co_await"));

  Session session;
  REQUIRE(session.load(kNeighbours) == HAL_SUCCESS);
  hal_kernel_t kernel = session.kernel("neighbours");
  std::mt19937 random(1234);
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  for (const int size : {1, 7, 64, 256}) {
    const int groups = 5, n = groups * size - size / 2;
    std::vector<float> x(static_cast<size_t>(groups * size)), out(x.size(), -7.0f);
    for (float& v : x) v = value(random);
    for (int k = 0; k < 4; ++k) x[random() % x.size()] = -1000.0f;  // take the early returns
    void* x_d = session.upload(x);
    void* out_d = session.upload(out);
    session.launch(kernel, {static_cast<uint32_t>(groups)}, {static_cast<uint32_t>(size)},
                   {{&x_d, sizeof(x_d)}, {&out_d, sizeof(out_d)}, {&n, 4}});
    const std::vector<float> expected = neighbours_reference(x, out, n, groups, size);
    const std::vector<float> got = session.download<float>(out_d, out.size());
    INFO("block " << size);
    for (size_t i = 0; i < got.size(); ++i) REQUIRE(got[i] == Approx(expected[i]).margin(1e-5));
  }
}

TEST_CASE("regions: barriers in uniform for and while loops, a scalar carried through",
          "[dialect][regions]") {
  const hal::dialect::KernelRecord record = record_of(kRounds, "rounds");
  INFO(record.cpu_shape_note);
  REQUIRE(record.cpu_shape == CpuShape::kRegions);
  CHECK(contains(record.cpu_shape_note, "2 uniform loops"));
  const std::string text = cpp_text(kRounds);
  // The headers read the uniform locals from work-item 0's slot.
  CHECK(contains(text, "r < hal_s_total[0]"));
  CHECK(contains(text, "while (hal_s_left[0] > 0)"));

  Session session;
  REQUIRE(session.load(kRounds) == HAL_SUCCESS);
  hal_kernel_t kernel = session.kernel("rounds");
  std::mt19937 random(99);
  for (const int size : {32, 100, 256}) {
    for (const int passes : {0, 1, 3}) {
      const int groups = 4;
      std::vector<int> in(static_cast<size_t>(groups * size)), out(in.size(), 0);
      for (int& v : in) v = static_cast<int>(random() % 2001) - 1000;
      void* in_d = session.upload(in);
      void* out_d = session.upload(out);
      session.launch(kernel, {static_cast<uint32_t>(groups)}, {static_cast<uint32_t>(size)},
                     {{&in_d, sizeof(in_d)}, {&out_d, sizeof(out_d)}, {&passes, 4}});
      INFO("block " << size << ", passes " << passes);
      REQUIRE(session.download<int>(out_d, out.size()) ==
              rounds_reference(in, passes, groups, size));
    }
  }
}

TEST_CASE("regions: 3-D blocks with an odd y extent and dynamic shared memory",
          "[dialect][regions]") {
  REQUIRE(record_of(kMirror, "mirror").cpu_shape == CpuShape::kRegions);
  Session session;
  REQUIRE(session.load(kMirror) == HAL_SUCCESS);
  hal_kernel_t kernel = session.kernel("mirror");
  std::mt19937 random(7);
  std::uniform_real_distribution<float> value(-10.0f, 10.0f);
  struct Shape {
    int x, y, z;
  };
  for (const Shape shape : {Shape{5, 3, 2}, Shape{16, 16, 1}, Shape{1, 7, 3}, Shape{8, 1, 1}}) {
    const int groups = 3, items = shape.x * shape.y * shape.z;
    std::vector<float> in(static_cast<size_t>(groups * items)), out(in.size(), 0.0f);
    for (float& v : in) v = value(random);
    const float bias = value(random);
    void* in_d = session.upload(in);
    void* out_d = session.upload(out);
    session.launch(kernel, {static_cast<uint32_t>(groups)},
                   {static_cast<uint32_t>(shape.x), static_cast<uint32_t>(shape.y),
                    static_cast<uint32_t>(shape.z)},
                   {{&in_d, sizeof(in_d)}, {&out_d, sizeof(out_d)}, {&bias, 4}},
                   static_cast<uint32_t>(items * sizeof(float)));
    const std::vector<float> expected =
        mirror_reference(in, bias, groups, shape.x, shape.y, shape.z);
    const std::vector<float> got = session.download<float>(out_d, out.size());
    INFO("block " << shape.x << "x" << shape.y << "x" << shape.z);
    for (size_t i = 0; i < got.size(); ++i) REQUIRE(got[i] == Approx(expected[i]));
  }
}

TEST_CASE("regions: locals whose address outlives their region are kept per work-item",
          "[dialect][regions]") {
  const hal::dialect::KernelRecord record = record_of(kEscapes, "escapes");
  INFO(record.cpu_shape_note);
  REQUIRE(record.cpu_shape == CpuShape::kRegions);
  CHECK(contains(record.cpu_shape_note, "per-item values: pair, p, v, q"));
  // v's address is kept (q): v stays bound to its slot, not copied.
  const std::string text = cpp_text(kEscapes);
  CHECK(contains(text, "auto& v = hal_s_v[hal_lin];"));
  CHECK_FALSE(contains(text, "hal_T_v v = hal_s_v[hal_lin];"));
  Session session;
  REQUIRE(session.load(kEscapes) == HAL_SUCCESS);
  hal_kernel_t kernel = session.kernel("escapes");
  std::mt19937 random(5);
  const int groups = 4, size = 64;
  std::vector<int> in(groups * size), out(in.size(), 0), expected(in.size());
  for (int& v : in) v = static_cast<int>(random() % 2001) - 1000;
  for (int g = 0; g < groups; ++g) {
    for (int t = 0; t < size; ++t)
      expected[g * size + t] = 4 * in[g * size + t] + in[g * size + 63 - t];
  }
  void* in_d = session.upload(in);
  void* out_d = session.upload(out);
  session.launch(kernel, {groups}, {size}, {{&in_d, sizeof(in_d)}, {&out_d, sizeof(out_d)}});
  REQUIRE(session.download<int>(out_d, out.size()) == expected);
}

TEST_CASE("regions: per-item scalars are copied into each region and written back",
          "[dialect][regions]") {
  const hal::dialect::KernelRecord record = record_of(kMoments, "moments");
  INFO(record.cpu_shape_note);
  REQUIRE(record.cpu_shape == CpuShape::kRegions);
  CHECK(contains(record.cpu_shape_note, "per-item values: s0, s1, s2"));
  const std::string text = cpp_text(kMoments);
  CHECK(contains(text, "hal_T_s1 s1 = hal_s_s1[hal_lin];"));
  CHECK(contains(text, "hal_s_s2[hal_lin] = s2;"));
  CHECK_FALSE(contains(text, "auto& s0 = hal_s_s0[hal_lin];"));
  // Regions that write several back declare their work-items independent.
  CHECK(contains(text, "hal_rt::run_region<true>(hal_block"));

  Session session;
  REQUIRE(session.load(kMoments) == HAL_SUCCESS);
  hal_kernel_t kernel = session.kernel("moments");
  std::mt19937 random(11);
  std::uniform_real_distribution<float> value(-2.0f, 2.0f);
  struct Shape {
    int x, y;
  };
  for (const Shape shape : {Shape{16, 16}, Shape{5, 3}, Shape{1, 7}, Shape{33, 1}}) {
    for (const int rounds : {0, 1, 3}) {
      const int groups = 3, items = shape.x * shape.y;
      std::vector<float> x(static_cast<size_t>(groups * items)), out(x.size() * 3, 0.0f);
      for (float& v : x) v = value(random);
      void* x_d = session.upload(x);
      void* out_d = session.upload(out);
      session.launch(kernel, {static_cast<uint32_t>(groups)},
                     {static_cast<uint32_t>(shape.x), static_cast<uint32_t>(shape.y)},
                     {{&x_d, sizeof(x_d)}, {&out_d, sizeof(out_d)}, {&rounds, 4}});
      std::vector<float> expected(out.size());
      for (int g = 0; g < groups; ++g) {
        for (int t = 0; t < items; ++t) {
          float s0 = 0.0f, s1 = 1.0f, s2 = -1.0f;
          for (int r = 0; r < rounds; ++r) {
            for (int k = 0; k < 4; ++k) {
              const int source = (t + k) % items;
              const float v = x[static_cast<size_t>((g * items + source + r) % (groups * items))];
              s0 += v;
              s1 += v * v;
              s2 -= v * v * v;
            }
          }
          const size_t at = static_cast<size_t>(g * items + t) * 3;
          expected[at] = s0, expected[at + 1] = s1, expected[at + 2] = s2;
        }
      }
      const std::vector<float> got = session.download<float>(out_d, out.size());
      INFO("block " << shape.x << "x" << shape.y << ", rounds " << rounds);
      for (size_t i = 0; i < got.size(); ++i) REQUIRE(got[i] == Approx(expected[i]).margin(1e-4));
    }
  }
}

TEST_CASE("regions: the register-blocked tiled matmul keeps four sums per work-item",
          "[dialect][regions]") {
  const hal::dialect::KernelRecord record = record_of(tiled_matmul_source(), "matmul4");
  INFO(record.cpu_shape_note);
  REQUIRE(record.cpu_shape == CpuShape::kRegions);
  CHECK(contains(record.cpu_shape_note, "per-item values: acc0, acc1, acc2, acc3"));
  Session session;
  REQUIRE(session.load(tiled_matmul_source()) == HAL_SUCCESS);
  hal_kernel_t kernel = session.kernel("matmul4");
  std::mt19937 random(21);
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  for (const int n : {64, 128}) {
    std::vector<float> a(static_cast<size_t>(n * n)), b(a.size()), c(a.size(), 0.0f);
    for (float& v : a) v = value(random);
    for (float& v : b) v = value(random);
    void* a_d = session.upload(a);
    void* b_d = session.upload(b);
    void* c_d = session.upload(c);
    session.launch(kernel, {static_cast<uint32_t>(n / 64), static_cast<uint32_t>(n / 16)}, {16, 16},
                   {{&a_d, sizeof(a_d)}, {&b_d, sizeof(b_d)}, {&c_d, sizeof(c_d)}, {&n, 4}});
    const std::vector<float> got = session.download<float>(c_d, c.size());
    INFO("n " << n);
    for (int i = 0; i < n; ++i) {
      for (int j = 0; j < n; ++j) {
        double sum = 0;
        for (int k = 0; k < n; ++k) sum += double(a[size_t(i * n + k)]) * b[size_t(k * n + j)];
        REQUIRE(got[size_t(i * n + j)] == Approx(sum).margin(1e-4));
      }
    }
  }
}

TEST_CASE(
    "regions: structs, const arrays with initialisers and pointer declarators live across "
    "a barrier",
    "[dialect][regions]") {
  const hal::dialect::KernelRecord record = record_of(kDeclarations, "declarations");
  INFO(record.cpu_shape_note);
  REQUIRE(record.cpu_shape == CpuShape::kRegions);
  CHECK(contains(record.cpu_shape_note, "per-item values: u, p, weights"));
  Session session;
  REQUIRE(session.load(kDeclarations) == HAL_SUCCESS);
  std::mt19937 random(3);
  const int groups = 3, size = 64;
  std::vector<int> in(groups * size), out(in.size(), 0), expected(in.size());
  for (int& v : in) v = static_cast<int>(random() % 100000);
  for (int g = 0; g < groups; ++g) {
    for (int t = 0; t < size; ++t) {
      const int mine = in[g * size + t];
      expected[g * size + t] = (in[g * size + 63 - t] & 255) * 3 + (mine >> 8) * 5 + (mine & 1);
    }
  }
  void* in_d = session.upload(in);
  void* out_d = session.upload(out);
  session.launch(session.kernel("declarations"), {groups}, {size},
                 {{&in_d, sizeof(in_d)}, {&out_d, sizeof(out_d)}});
  REQUIRE(session.download<int>(out_d, out.size()) == expected);
}

TEST_CASE("regions: a written parameter is each work-item's own on the item loop",
          "[dialect][regions]") {
  REQUIRE(record_of(kBump, "bump").cpu_shape == CpuShape::kItemLoop);
  Session session;
  REQUIRE(session.load(kBump) == HAL_SUCCESS);
  std::mt19937 random(11);
  std::vector<int> in(3 * 32), out(in.size(), 0), expected(in.size());
  for (int& v : in) v = static_cast<int>(random() % 100);
  const int base = 1000;
  for (size_t i = 0; i < in.size(); ++i) expected[i] = base + in[i];
  void* in_d = session.upload(in);
  void* out_d = session.upload(out);
  session.launch(session.kernel("bump"), {3}, {32},
                 {{&out_d, sizeof(out_d)}, {&base, 4}, {&in_d, sizeof(in_d)}});
  REQUIRE(session.download<int>(out_d, out.size()) == expected);
}

TEST_CASE("regions: kernels the splitter cannot prove keep their coroutines and still run",
          "[dialect][regions]") {
  struct Case {
    const char* entry;
    const char* reason;  // a piece of the note saying why
    std::function<std::vector<int>(const std::vector<int>&, int)> reference;
  };
  const int size = 64, groups = 3;
  auto per_block = [&](const std::vector<int>& in,
                       const std::function<void(std::vector<int>&)>& block) {
    std::vector<int> out;
    for (int g = 0; g < groups; ++g) {
      std::vector<int> values(in.begin() + g * size, in.begin() + (g + 1) * size);
      block(values);
      out.insert(out.end(), values.begin(), values.end());
    }
    return out;
  };
  const std::vector<Case> cases = {
      {"param_written", "the parameter 'flag' is written in the body",
       [&](const std::vector<int>& in, int flag) {
         return per_block(in, [&](std::vector<int>& s) {
           const std::vector<int> old = s;
           for (int t = 0; t < size; ++t) s[t] = old[63 - t] + flag + 63 - t;
         });
       }},
      {"switch_continue", "'break' or 'continue' of a loop with barriers",
       [&](const std::vector<int>& in, int flag) {
         return per_block(in, [&](std::vector<int>& acc) {
           for (int r = 0; r < 4; ++r) {
             const std::vector<int> s = acc;
             for (int t = 0; t < size; ++t) {
               acc[t] += s[(t + r + 1) % 64];
               if ((r & 1) == 0) acc[t] += flag;
             }
           }
         });
       }},
      {"in_branch", "a barrier inside 'if'",
       [&](const std::vector<int>& in, int flag) {
         return per_block(in, [&](std::vector<int>& s) {
           if (flag > 0) {
             const std::vector<int> old = s;
             for (int t = 0; t < size; ++t) s[t] = old[63 - t] + flag;
           }
           const std::vector<int> old = s;
           for (int t = 0; t < size; ++t) s[t] = old[(t + 1) % 64];
         });
       }},
      {"nested", "a barrier nested inside a statement of the loop",
       [&](const std::vector<int>& in, int flag) {
         return per_block(in, [&](std::vector<int>& acc) {
           for (int a = 0; a < 2; ++a) {
             for (int b = 0; b < 2; ++b) {
               const std::vector<int> s = acc;
               for (int t = 0; t < size; ++t) acc[t] += s[(t + a + b + 1) % 64] + flag;
             }
           }
         });
       }},
      {"early_return", "'return' before a barrier",
       [&](const std::vector<int>& in, int flag) {
         if (flag == 0) return std::vector<int>(in.size(), -1);  // out untouched
         return per_block(in, [&](std::vector<int>& s) {
           const std::vector<int> old = s;
           for (int t = 0; t < size; ++t) s[t] = old[63 - t] * flag;
         });
       }},
      {"memory_bound", "may differ between work-items",
       [&](const std::vector<int>& in, int flag) {
         const int limit = in[0] & 3;
         return per_block(in, [&](std::vector<int>& acc) {
           for (int r = 0; r < limit; ++r) {
             const std::vector<int> s = acc;
             for (int t = 0; t < size; ++t) acc[t] -= s[(t + 5) % 64] + flag;
           }
         });
       }},
      {"stepped_in_body", "the loop variable 'r' is written in a loop body",
       [&](const std::vector<int>& in, int flag) {
         return per_block(in, [&](std::vector<int>& acc) {
           for (int r = 0; r < 6; r += 2) {
             const std::vector<int> s = acc;
             for (int t = 0; t < size; ++t) acc[t] ^= s[(t + r) % 64] + flag;
           }
         });
       }},
  };
  Session session;
  REQUIRE(session.load(kFallbacks) == HAL_SUCCESS);
  std::mt19937 random(2024);
  for (const Case& c : cases) {
    const hal::dialect::KernelRecord record = record_of(kFallbacks, c.entry);
    INFO(c.entry << ": " << record.cpu_shape_note);
    REQUIRE(record.cpu_shape == CpuShape::kCoroutines);
    CHECK(contains(record.cpu_shape_note, c.reason));
    hal_kernel_t kernel = session.kernel(c.entry);
    for (const int flag : {0, 3}) {
      std::vector<int> in(static_cast<size_t>(groups * size)), out(in.size(), -1);
      for (int& v : in) v = static_cast<int>(random() % 1000);
      void* in_d = session.upload(in);
      void* out_d = session.upload(out);
      session.launch(kernel, {static_cast<uint32_t>(groups)}, {static_cast<uint32_t>(size)},
                     {{&in_d, sizeof(in_d)}, {&out_d, sizeof(out_d)}, {&flag, 4}});
      INFO("flag " << flag);
      REQUIRE(session.download<int>(out_d, out.size()) == c.reference(in, flag));
    }
  }
  CHECK(contains(cpp_text(kFallbacks), "co_await hal_rt::Barrier{}"));
  CHECK(contains(cpp_text(kFallbacks), "static hal_rt::ItemTask hal_items_nested("));
}

TEST_CASE("regions: the conformance kernels with barriers split, except a barrier in a branch",
          "[dialect][regions]") {
  std::ifstream file(HAL_TEST_KERNELS_SOURCE);
  REQUIRE(file.good());
  std::stringstream source;
  source << file.rdbuf();
  for (const char* entry : {"reduce_sum", "reduce_dynamic", "histogram", "matmul_tiled",
                            "transpose_tiled", "softmax_row", "scan_block", "stencil_1d"}) {
    const hal::dialect::KernelRecord record = record_of(source.str(), entry);
    INFO(entry << ": " << record.cpu_shape_note);
    CHECK(record.cpu_shape == CpuShape::kRegions);
  }
  CHECK(record_of(source.str(), "barrier_rounds").cpu_shape == CpuShape::kCoroutines);
  CHECK(record_of(source.str(), "vadd").cpu_shape == CpuShape::kItemLoop);
  // The tiled matmul keeps only its sum per work-item; its ids are recomputed.
  CHECK(contains(record_of(source.str(), "matmul_tiled").cpu_shape_note, "per-item values: acc"));
}

TEST_CASE(
    "regions: errors in a split kernel name the line the user wrote, and scoping is unchanged",
    "[dialect][regions]") {
  Session session;
  SECTION("an undeclared name in a later region") {
    const std::string source = R"(kernel void broken(global int* out) {
  shared int s[64];
  int t = local_id(0);
  s[t] = t;
  barrier();
  out[t] = s[t] + undeclared_name;
}
)";
    REQUIRE(record_of(source, "broken").cpu_shape == CpuShape::kRegions);
    REQUIRE(session.load(source) == HAL_ERROR_INVALID_MODULE);
    const std::string message = error_detail();
    INFO(message);
    CHECK(contains(message, "hal-dialect:6:"));
    CHECK(contains(message, "undeclared_name"));
  }
  SECTION("a name used before the region that declares it") {
    const std::string source = R"(kernel void early(global int* out) {
  shared int s[64];
  int t = local_id(0);
  s[t] = later;
  barrier();
  int later = s[t];
  out[t] = later;
}
)";
    REQUIRE(session.load(source) == HAL_ERROR_INVALID_MODULE);
    const std::string message = error_detail();
    INFO(message);
    CHECK(contains(message, "hal-dialect:4:"));
  }
}

// ---- interleaved regions -------------------------------------------------------

namespace {

// A loop-carried sum per work-item in a uniform loop: the region runs
// 8 work-items at once (kInterleaveChains in dialect/regions.hpp). The work-items diverge inside
// the loop (the branch), and fma() makes each step one exactly rounded
// operation, so the host reference in the same order must match bit for bit.
constexpr const char* kChains = R"(
kernel max_block(256) void chains(global const float* x, global const float* w,
                                  global float* out, int steps) {
  shared float tile[256];
  int items = local_size(0) * local_size(1) * local_size(2);
  int t = (local_id(2) * local_size(1) + local_id(1)) * local_size(0) + local_id(0);
  int base = group_id(0) * items;
  tile[t] = x[base + t];
  barrier();
  float acc = 0.0f;
  float scale = w[t % 7];
  for (int k = 0; k < steps; k += 1) {
    float v = tile[(t + k) % items];
    if (v > 0.25f) {
      acc = fma(v, scale, acc);
    } else {
      acc = fma(acc, 0.5f, v);
    }
  }
  out[base + t] = acc + scale;
}
)";

// Two sums carried across barriers by value: two registers per copy, so the
// region runs 4 work-items at once (8 chains).
constexpr const char* kTwoSums = R"(
kernel max_block(256) void two_sums(global const float* x, global float* out, int rounds) {
  shared float tile[256];
  int items = local_size(0);
  int t = local_id(0);
  float s0 = 0.0f, s1 = 1.0f;
  for (int r = 0; r < rounds; ++r) {
    tile[t] = x[(group_id(0) * items + t + r) % (num_groups(0) * items)];
    barrier();
    for (int k = 0; k < 5; ++k) {
      s0 = fma(tile[(t + k) % items], 0.75f, s0);
      s1 = fma(s1, tile[(t + 2 * k) % items], 0.125f);
    }
    barrier();
  }
  out[group_id(0) * items + t] = s0 - s1;
}
)";

float chains_reference(const std::vector<float>& x, const std::vector<float>& w, int items,
                       int group, int t, int steps) {
  float acc = 0.0f;
  const float scale = w[static_cast<size_t>(t % 7)];
  for (int k = 0; k < steps; ++k) {
    const float v = x[static_cast<size_t>(group * items + (t + k) % items)];
    acc = v > 0.25f ? std::fma(v, scale, acc) : std::fma(acc, 0.5f, v);
  }
  return acc + scale;
}

// Uniform-looking loops that must not interleave: a copy's `break` would
// end the other copies' loop, a bound read from a work-item's id differs
// between the copies, and a macro that reads the id would see work-item 0.
constexpr const char* kNotInterleaved = R"(
#define MY_ID local_id(0)
kernel max_block(64) void breaks(global const int* in, global int* out, int steps) {
  shared int tile[64];
  int t = local_id(0);
  tile[t] = in[global_id(0)];
  barrier();
  int acc = 0;
  for (int k = 0; k < steps; ++k) {
    if (tile[(t + k) % 64] % 5 == 0) break;
    acc += tile[(t + k) % 64];
  }
  out[global_id(0)] = acc;
}
kernel max_block(64) void item_bound(global const int* in, global int* out, int steps) {
  shared int tile[64];
  int t = local_id(0);
  tile[t] = in[global_id(0)];
  barrier();
  int acc = 0;
  for (int k = 0; k < t % steps; ++k) acc += tile[(t + k) % 64];
  out[global_id(0)] = acc;
}
kernel max_block(64) void id_macro(global const int* in, global int* out, int steps) {
  shared int tile[64];
  int t = local_id(0);
  tile[t] = in[global_id(0)];
  barrier();
  int acc = 0;
  for (int k = 0; k < steps; ++k) acc += tile[(MY_ID + k) % 64];
  out[global_id(0)] = acc;
}
)";

}  // namespace

TEST_CASE("regions: a uniform loop runs several work-items at once, each in its own order",
          "[dialect][regions]") {
  const hal::dialect::KernelRecord record = record_of(kChains, "chains");
  INFO(record.cpu_shape_note);
  REQUIRE(record.cpu_shape == CpuShape::kRegions);
  CHECK(contains(record.cpu_shape_note, "1 interleaved 8 work-items at a time"));
  const std::string text = cpp_text(kChains);
  CHECK(contains(text, "hal_rt::run_region_interleaved<"));
  // Each copy has its own names and its own work-item.
  CHECK(contains(text, "acc_7"));
  CHECK(contains(text, "hal_item_7.local_id(2)"));

  Session session;
  REQUIRE(session.load(kChains) == HAL_SUCCESS);
  hal_kernel_t kernel = session.kernel("chains");
  std::mt19937 random(31);
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  struct Shape {
    uint32_t x, y, z;
  };
  // Blocks whose rows or items are not multiples of the interleave: fewer
  // rows than copies, a row shorter than the copies, 3-D, and exact fits.
  for (const Shape shape :
       {Shape{16, 16, 1}, Shape{256, 1, 1}, Shape{5, 3, 1}, Shape{1, 7, 1}, Shape{33, 1, 1},
        Shape{7, 9, 1}, Shape{3, 4, 5}, Shape{1, 1, 1}, Shape{8, 8, 2}, Shape{17, 1, 3}}) {
    for (const int steps : {0, 1, 9, 40}) {
      const int groups = 3, items = static_cast<int>(shape.x * shape.y * shape.z);
      std::vector<float> x(static_cast<size_t>(groups * items)), w(7), out(x.size(), std::nanf(""));
      for (float& v : x) v = value(random);
      for (float& v : w) v = value(random);
      void* x_d = session.upload(x);
      void* w_d = session.upload(w);
      void* out_d = session.upload(out);
      session.launch(
          kernel, {static_cast<uint32_t>(groups)}, {shape.x, shape.y, shape.z},
          {{&x_d, sizeof(x_d)}, {&w_d, sizeof(w_d)}, {&out_d, sizeof(out_d)}, {&steps, 4}});
      const std::vector<float> got = session.download<float>(out_d, out.size());
      INFO("block " << shape.x << "x" << shape.y << "x" << shape.z << ", steps " << steps);
      for (int g = 0; g < groups; ++g) {
        for (int t = 0; t < items; ++t) {
          INFO("group " << g << ", item " << t);
          REQUIRE(got[static_cast<size_t>(g * items + t)] ==
                  chains_reference(x, w, items, g, t, steps));
        }
      }
    }
  }
}

TEST_CASE("regions: a region carrying two sums runs 4 work-items at once", "[dialect][regions]") {
  const hal::dialect::KernelRecord record = record_of(kTwoSums, "two_sums");
  INFO(record.cpu_shape_note);
  REQUIRE(record.cpu_shape == CpuShape::kRegions);
  CHECK(contains(record.cpu_shape_note, "per-item values: s0, s1; 1 interleaved 4 work-items"));
  // Four sums per work-item would need 32 registers at 8 copies: the
  // register-blocked matmul's sums stay one work-item at a time, and so does
  // its tile copy loop, which carries nothing from one iteration to the next.
  CHECK_FALSE(contains(record_of(tiled_matmul_source(), "matmul4").cpu_shape_note, "interleaved"));
  Session session;
  REQUIRE(session.load(kTwoSums) == HAL_SUCCESS);
  hal_kernel_t kernel = session.kernel("two_sums");
  std::mt19937 random(41);
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  for (const uint32_t size : {256u, 13u, 4u, 3u, 1u}) {
    for (const int rounds : {0, 1, 3}) {
      const int groups = 3, items = static_cast<int>(size);
      std::vector<float> x(static_cast<size_t>(groups * items)), out(x.size(), std::nanf(""));
      for (float& v : x) v = value(random);
      void* x_d = session.upload(x);
      void* out_d = session.upload(out);
      session.launch(kernel, {static_cast<uint32_t>(groups)}, {size},
                     {{&x_d, sizeof(x_d)}, {&out_d, sizeof(out_d)}, {&rounds, 4}});
      const std::vector<float> got = session.download<float>(out_d, out.size());
      INFO("block " << size << ", rounds " << rounds);
      for (int g = 0; g < groups; ++g) {
        for (int t = 0; t < items; ++t) {
          float s0 = 0.0f, s1 = 1.0f;
          for (int r = 0; r < rounds; ++r) {
            const auto tile = [&](int i) {
              return x[static_cast<size_t>((g * items + i + r) % (groups * items))];
            };
            for (int k = 0; k < 5; ++k) {
              s0 = std::fma(tile((t + k) % items), 0.75f, s0);
              s1 = std::fma(s1, tile((t + 2 * k) % items), 0.125f);
            }
          }
          INFO("group " << g << ", item " << t);
          REQUIRE(got[static_cast<size_t>(g * items + t)] == s0 - s1);
        }
      }
    }
  }
}

TEST_CASE("regions: the one-output tiled matmul interleaves and matches the host",
          "[dialect][regions]") {
  const hal::dialect::KernelRecord record = record_of(tiled_matmul_source(), "matmul");
  INFO(record.cpu_shape_note);
  REQUIRE(record.cpu_shape == CpuShape::kRegions);
  CHECK(contains(record.cpu_shape_note, "1 interleaved"));
  Session session;
  REQUIRE(session.load(tiled_matmul_source()) == HAL_SUCCESS);
  hal_kernel_t kernel = session.kernel("matmul");
  std::mt19937 random(23);
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  for (const int n : {16, 48, 128}) {
    std::vector<float> a(static_cast<size_t>(n * n)), b(a.size()), c(a.size(), 0.0f);
    for (float& v : a) v = value(random);
    for (float& v : b) v = value(random);
    void* a_d = session.upload(a);
    void* b_d = session.upload(b);
    void* c_d = session.upload(c);
    session.launch(kernel, {static_cast<uint32_t>(n / 16), static_cast<uint32_t>(n / 16)}, {16, 16},
                   {{&a_d, sizeof(a_d)}, {&b_d, sizeof(b_d)}, {&c_d, sizeof(c_d)}, {&n, 4}});
    const std::vector<float> got = session.download<float>(c_d, c.size());
    INFO("n " << n);
    for (int i = 0; i < n; ++i) {
      for (int j = 0; j < n; ++j) {
        double sum = 0;
        for (int k = 0; k < n; ++k) sum += double(a[size_t(i * n + k)]) * b[size_t(k * n + j)];
        REQUIRE(got[size_t(i * n + j)] == Approx(sum).margin(1e-4));
      }
    }
  }
}

TEST_CASE("regions: loops a copy could leave early or whose bound differs stay one at a time",
          "[dialect][regions]") {
  for (const char* entry : {"breaks", "item_bound", "id_macro"}) {
    const hal::dialect::KernelRecord record = record_of(kNotInterleaved, entry);
    INFO(entry << ": " << record.cpu_shape_note);
    CHECK(record.cpu_shape == CpuShape::kRegions);
    CHECK_FALSE(contains(record.cpu_shape_note, "interleaved"));
  }
  CHECK_FALSE(contains(cpp_text(kNotInterleaved), "hal_rt::run_region_interleaved<"));
  Session session;
  REQUIRE(session.load(kNotInterleaved) == HAL_SUCCESS);
  std::mt19937 random(37);
  const int groups = 3, size = 64, steps = 11;
  std::vector<int> in(static_cast<size_t>(groups * size));
  for (int& v : in) v = static_cast<int>(random() % 100);
  void* in_d = session.upload(in);
  for (const char* entry : {"breaks", "item_bound", "id_macro"}) {
    hal_kernel_t kernel = session.kernel(entry);
    std::vector<int> out(in.size(), -1), expected(in.size());
    void* out_d = session.upload(out);
    session.launch(kernel, {groups}, {size},
                   {{&in_d, sizeof(in_d)}, {&out_d, sizeof(out_d)}, {&steps, 4}});
    const std::string name = entry;
    for (int g = 0; g < groups; ++g) {
      for (int t = 0; t < size; ++t) {
        const int bound = name == "item_bound" ? t % steps : steps;
        int acc = 0;
        for (int k = 0; k < bound; ++k) {
          const int v = in[static_cast<size_t>(g * size + (t + k) % size)];
          if (name == "breaks" && v % 5 == 0) break;
          acc += v;
        }
        expected[static_cast<size_t>(g * size + t)] = acc;
      }
    }
    INFO(entry);
    REQUIRE(session.download<int>(out_d, out.size()) == expected);
  }
}
