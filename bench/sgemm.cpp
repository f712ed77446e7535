// sgemm through HAL (HAL_OP_MATMUL on the cpu plugin, whose own
// implementation is oneDNN: "cpu.onednn") beside the libraries a user would
// otherwise call on the same buffers: oneDNN directly (its matmul primitive
// and dnnl_sgemm), OpenBLAS and BLIS (cblas_sgemm, each dlopened on its own
// so their identical cblas symbols do not clash). Row-major C = A @ B, f32,
// at each thread count in --threads; then bf16 2048^3 through HAL beside
// oneDNN's bf16 matmul.
//
// Processes: every thread count runs in fresh processes (this program
// re-executes itself) with OMP_NUM_THREADS, OPENBLAS_NUM_THREADS and
// BLIS_NUM_THREADS set, since OpenMP reads its thread count once; the
// OpenBLAS and BLIS thread counts are also set through their calls. HAL's
// rows come from one process and the peers' from another, merged into one
// table: HAL runs oneDNN on a thread of its own, and libgomp keeps an
// OpenMP team per thread that starts one, so in one process the teams of
// HAL's thread and of the peers' (the main thread) both live. Measured at
// 2 threads on 2 cores, the idle workers of one team then take cores from
// the other: 256^3 ran at one core's speed, 1024^3 1.6x slower.
//
// HAL's path: hal_op_plan_create + hal_op_execute + hal_stream_synchronize
// per repetition. When the loader in this build has no HAL_OP_MATMUL
// definition yet (hal_op_plan_create says so), the same plugin entries are
// driven directly through the cpu plugin's table (dlopen + hal_plugin_entry)
// and the row says "(table)". Each row also gives the minor page faults a
// timed run took (the process's, all threads). Nothing here asserts on time.
#include <dlfcn.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <dnnl.h>
#include <dnnl.hpp>

#include <immintrin.h>

#include <algorithm>
#include <cerrno>
#include <functional>
#include <memory>
#include <random>

#include "bench_common.h"
#include "hal_plugin.h"

namespace {

struct Shape {
  int64_t m, n, k;
  double flops() const { return 2.0 * static_cast<double>(m) * n * k; }
  std::string text() const {
    if (m == n && n == k) return std::to_string(m) + "^3";
    return std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k);
  }
};

[[noreturn]] void die(const std::string& message) {
  std::fprintf(stderr, "error: %s\n", message.c_str());
  std::exit(1);
}

hal_op_matmul_desc_t matmul_desc(const Shape& s, hal_dtype_t dtype) {
  hal_op_matmul_desc_t desc{};
  desc.header.struct_size = sizeof(desc);
  desc.header.kind = HAL_OP_MATMUL;
  desc.alpha = 1.0f;
  desc.beta = 0.0f;
  const int64_t a[2] = {s.m, s.k}, b[2] = {s.k, s.n}, d[2] = {s.m, s.n};
  hal_tensor_desc_contiguous(&desc.a, dtype, 2, a);
  hal_tensor_desc_contiguous(&desc.b, dtype, 2, b);
  hal_tensor_desc_contiguous(&desc.c, dtype, 2, d);
  hal_tensor_desc_contiguous(&desc.d, dtype, 2, d);
  return desc;
}

// ---- HAL: the public API, or the plugin's table when the loader cannot plan

class HalMatmul {
 public:
  virtual ~HalMatmul() = default;
  virtual void* alloc(size_t bytes) = 0;
  // A runner for |desc| on a, b, d; empty with |why| when no plan.
  virtual std::function<void()> plan(const hal_op_matmul_desc_t& desc, void* a, void* b, void* d,
                                     std::string* why) = 0;
  virtual std::string label() const = 0;
  double peak_per_core = 0;  // the device's declared FP32 peak / compute units
};

class ApiMatmul final : public HalMatmul {
 public:
  ApiMatmul() {
    hal_device_properties_t props{};
    device_ = bench::hal_open_device("cpu", "cpu", 0, &props);
    peak_per_core = props.peak_fp32_flops / std::max(1u, props.compute_units);
    BENCH_HAL_CHECK(hal_stream_create(device_, 0, &stream_));
  }
  ~ApiMatmul() override {
    for (hal_op_plan_t plan : plans_) hal_op_plan_destroy(plan);
    for (void* p : memory_) hal_mem_free(p);
    hal_stream_destroy(stream_);
    hal_shutdown();
  }
  void* alloc(size_t bytes) override {
    void* p = nullptr;
    BENCH_HAL_CHECK(hal_mem_alloc(device_, HAL_MEMORY_DEVICE, bytes, 0, &p));
    memory_.push_back(p);
    return p;
  }
  std::function<void()> plan(const hal_op_matmul_desc_t& desc, void* a, void* b, void* d,
                             std::string* why) override {
    hal_op_plan_t plan = nullptr;
    if (hal_op_plan_create(device_, &desc.header, 0, &plan) != HAL_SUCCESS) {
      *why = hal_error_last_message();
      return {};
    }
    plans_.push_back(plan);
    hal_op_plan_info_t info{};
    info.struct_size = sizeof(info);
    BENCH_HAL_CHECK(hal_op_plan_get_info(plan, &info));
    implementation_ = info.implementation;
    auto operands = std::make_shared<std::array<void*, 6>>(std::array<void*, 6>{a, b, nullptr, d});
    // The plan's workspace (f16 widened to f32), allocated once like the operands.
    const size_t workspace_bytes = info.workspace_bytes;
    void* workspace = workspace_bytes > 0 ? alloc(workspace_bytes) : nullptr;
    return [this, plan, operands, workspace, workspace_bytes] {
      hal_op_exec_args_t args{};
      args.struct_size = sizeof(args);
      args.operand_count = 6;
      args.operands = operands->data();
      args.workspace = workspace;
      args.workspace_bytes = workspace_bytes;
      BENCH_HAL_CHECK(hal_op_execute(plan, &args, stream_));
      BENCH_HAL_CHECK(hal_stream_synchronize(stream_));
    };
  }
  std::string label() const override { return "hal " + implementation_; }

 private:
  hal_device_t device_ = nullptr;
  hal_stream_t stream_ = nullptr;
  std::vector<void*> memory_;
  std::vector<hal_op_plan_t> plans_;
  std::string implementation_ = "?";
};

std::string table_error;  // the plugin's last set_error
void table_set_error(void*, hal_result_t, int64_t, const char* message) {
  table_error = message != nullptr ? message : "";
}
void table_log(void*, hal_log_level_t, const char*) {}

// A private copy of the plugin: libhal may still hold the original, and an
// entry runs once per loaded plugin.
std::string copy_to_temp(const std::string& path) {
  const char* dir = std::getenv("TMPDIR");
  std::string tmpl = std::string(dir && *dir ? dir : "/tmp") + "/hal_bench_sgemm_XXXXXX.so";
  std::vector<char> name(tmpl.begin(), tmpl.end());
  name.push_back('\0');
  const int out = mkstemps(name.data(), 3);
  if (out < 0) return "";
  const int in = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  bool ok = in >= 0;
  char buf[1 << 16];
  while (ok) {
    const ssize_t n = read(in, buf, sizeof buf);
    if (n == 0) break;
    if (n < 0 || write(out, buf, static_cast<size_t>(n)) != n) ok = false;
  }
  if (in >= 0) ::close(in);
  ::close(out);
  if (!ok) {
    unlink(name.data());
    return "";
  }
  return name.data();
}

class TableMatmul final : public HalMatmul {
 public:
  TableMatmul() {
    const std::string copy = copy_to_temp(HAL_BENCH_CPU_PLUGIN_PATH);
    if (copy.empty()) die("cannot copy the cpu plugin to a temporary file");
    void* dl = dlopen(copy.c_str(), RTLD_NOW | RTLD_LOCAL);
    unlink(copy.c_str());
    if (dl == nullptr) die(dlerror());
    auto entry = reinterpret_cast<hal_plugin_entry_fn_t>(dlsym(dl, HAL_PLUGIN_ENTRY_NAME));
    host_ =
        hal_plugin_host_t{sizeof(host_), HAL_ABI_VERSION, 0, nullptr, table_set_error, table_log};
    plugin_.struct_size = sizeof(plugin_);
    if (entry(&host_, &plugin_) != HAL_SUCCESS) die("hal_plugin_entry: " + table_error);
    t_ = plugin_.table;
    if (t_->op_plan_create == nullptr)
      die("the cpu plugin has no operators (built without oneDNN)");
    if (t_->device_open(plugin_.context, 0, &device_) != HAL_SUCCESS) die(table_error);
    if (t_->stream_create(device_, 0, &stream_) != HAL_SUCCESS) die(table_error);
    hal_device_properties_t props{};
    props.struct_size = sizeof(props);
    if (t_->device_get_properties(device_, &props) == HAL_SUCCESS) {
      peak_per_core = props.peak_fp32_flops / std::max(1u, props.compute_units);
    }
  }
  ~TableMatmul() override {
    for (hal_impl_op_plan_t* plan : plans_) t_->op_plan_destroy(plan);
    for (void* p : memory_) t_->mem_free(device_, p);
    t_->stream_destroy(stream_);
    t_->device_close(device_);
    t_->plugin_shutdown(plugin_.context);
  }
  void* alloc(size_t bytes) override {
    void* p = nullptr;
    if (t_->mem_alloc(device_, HAL_MEMORY_DEVICE, bytes, 64, &p) != HAL_SUCCESS) die(table_error);
    memory_.push_back(p);
    return p;
  }
  std::function<void()> plan(const hal_op_matmul_desc_t& desc, void* a, void* b, void* d,
                             std::string* why) override {
    hal_impl_op_plan_t* plan = nullptr;
    size_t workspace = 0;
    const char* name = nullptr;
    if (t_->op_plan_create(device_, &desc.header, 0, &plan, &workspace, &name) != HAL_SUCCESS) {
      *why = table_error;
      return {};
    }
    plans_.push_back(plan);
    implementation_ = name;
    auto operands = std::make_shared<std::array<void*, 6>>(std::array<void*, 6>{a, b, nullptr, d});
    void* memory = workspace > 0 ? alloc(workspace) : nullptr;
    return [this, plan, operands, memory, workspace] {
      hal_op_exec_args_t args{};
      args.struct_size = sizeof(args);
      args.operand_count = 6;
      args.operands = operands->data();
      args.workspace = memory;
      args.workspace_bytes = workspace;
      if (t_->op_execute(plan, stream_, &args) != HAL_SUCCESS ||
          t_->stream_synchronize(stream_) != HAL_SUCCESS) {
        die("op_execute: " + table_error);
      }
    };
  }
  std::string label() const override { return "hal " + implementation_ + " (table)"; }

 private:
  hal_plugin_host_t host_{};
  hal_plugin_v1_t plugin_{};
  const hal_plugin_table_v1_t* t_ = nullptr;
  hal_impl_device_t* device_ = nullptr;
  hal_impl_stream_t* stream_ = nullptr;
  std::vector<void*> memory_;
  std::vector<hal_impl_op_plan_t*> plans_;
  std::string implementation_ = "?";
};

// The public API when the loader plans matmul; else the plugin's table.
std::unique_ptr<HalMatmul> open_hal() {
  auto api = std::make_unique<ApiMatmul>();
  const Shape probe{64, 64, 64};
  void* a = api->alloc(64 * 64 * 4);
  void* b = api->alloc(64 * 64 * 4);
  void* d = api->alloc(64 * 64 * 4);
  std::string why;
  if (api->plan(matmul_desc(probe, HAL_DTYPE_F32), a, b, d, &why)) return api;
  std::printf(
      "note: hal_op_plan_create(HAL_OP_MATMUL) failed in this build (%s); HAL is driven "
      "through the cpu plugin's table instead\n",
      why.c_str());
  api.reset();
  return std::make_unique<TableMatmul>();
}

// ---- oneDNN directly --------------------------------------------------------

std::function<void()> onednn_matmul(const Shape& s, dnnl::memory::data_type type, void* a, void* b,
                                    void* d) {
  using dnnl::memory;
  static const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  static dnnl::stream stream(engine);
  const memory::desc a_md({s.m, s.k}, type, memory::format_tag::ab);
  const memory::desc b_md({s.k, s.n}, type, memory::format_tag::ab);
  const memory::desc d_md({s.m, s.n}, type, memory::format_tag::ab);
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, d_md), engine);
  auto primitive = std::make_shared<dnnl::matmul>(pd);
  return [=] {
    primitive->execute(stream, {{DNNL_ARG_SRC, memory(a_md, engine, a)},
                                {DNNL_ARG_WEIGHTS, memory(b_md, engine, b)},
                                {DNNL_ARG_DST, memory(d_md, engine, d)}});
    stream.wait();
  };
}

// ---- BLAS libraries, each dlopened privately -------------------------------

using cblas_sgemm_fn = void (*)(int, int, int, int, int, int, float, const float*, int,
                                const float*, int, float, float*, int);
constexpr int kRowMajor = 101, kNoTrans = 111;

struct Blas {
  std::string name;
  cblas_sgemm_fn sgemm = nullptr;
};

Blas open_blas(const char* name, const char* soname, const char* set_threads_symbol, int threads) {
  Blas blas{name};
  void* dl = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
  if (dl == nullptr) {
    std::printf("note: %s not found (%s): its rows are skipped\n", name, dlerror());
    return blas;
  }
  blas.sgemm = reinterpret_cast<cblas_sgemm_fn>(dlsym(dl, "cblas_sgemm"));
  if (auto set = reinterpret_cast<void (*)(int)>(dlsym(dl, set_threads_symbol))) set(threads);
  return blas;
}

// ---- measurement ------------------------------------------------------------

// One core's FP32 FMA throughput, measured: 12 independent chains of 16-lane
// FMAs (enough to cover the FMA latency on two pipes), 2 flops per lane.
// The clock a busy core really runs at is what the libraries get too, so
// this is the peak their figures are held against. 0 without AVX-512.
__attribute__((target("avx512f"))) double measure_fma_peak_per_core() {
  if (!__builtin_cpu_supports("avx512f")) return 0;
  constexpr int kChains = 12;
  constexpr int64_t kIterations = 20'000'000;
  __m512 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm512_set1_ps(0.001f * c);
  const __m512 x = _mm512_set1_ps(0.999999f);
  const __m512 y = _mm512_set1_ps(1e-7f);
  double best = 0;
  for (int trial = 0; trial < 5; ++trial) {
    const double start = bench::now_s();
    for (int64_t i = 0; i < kIterations; ++i) {
      for (int c = 0; c < kChains; ++c) acc[c] = _mm512_fmadd_ps(acc[c], x, y);
    }
    const double seconds = bench::now_s() - start;
    for (int c = 0; c < kChains; ++c) bench::do_not_optimize(acc[c]);
    best = std::max(best, kIterations * kChains * 16.0 * 2.0 / seconds);
  }
  float sink[16];
  _mm512_storeu_ps(sink, acc[0]);
  bench::do_not_optimize(sink[0]);
  return best;
}

// The process's minor page faults so far (every thread's).
long minor_faults() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_minflt;
}

struct Timing {
  bench::Stats stats;
  double faults_per_run = 0;  // minor page faults a timed run, on average
  double efficiency = 1;      // bench::core_efficiency around the run
  int attempts = 1;           // how often the row was timed (time_on_own_cores)
};

// Fresh pages fault in at 2-11 us each on this project's VMs, so the faults
// a run takes (a library's per-call buffers coming back as new memory) are
// reported beside its time.
Timing time_runs(const std::function<void()>& run, int reps) {
  // Warm-up: first touch, JIT, thread start. Twice: glibc serves a large
  // block (a library's packing buffer) with mmap until the first such block
  // is freed, then raises its mmap threshold process-wide and serves the
  // next from the calling thread's heap, on fresh pages once. Whichever
  // library ran first at a size used to pay for that in its timed runs.
  run();
  run();
  std::vector<double> seconds;
  const long faults_before = minor_faults();
  for (int r = 0; r < reps; ++r) {
    const double start = bench::now_s();
    run();
    seconds.push_back(bench::now_s() - start);
  }
  return {bench::summarize(seconds), static_cast<double>(minor_faults() - faults_before) / reps};
}

// A row timed while its threads shared physical cores (bench::core_efficiency)
// measures the host, not the library: every library went to about half its
// 2-thread speed for whole rows at a time on the project's VMs. Such a row is
// timed again, up to kAttempts in all, and the try whose worse probe (just
// before or just after it) was best is kept; the probe is reported beside it.
constexpr int kAttempts = 4;
constexpr double kOwnCores = 0.8;  // efficiency from which the threads had cores of their own

Timing time_on_own_cores(const std::function<void()>& run, int reps, int threads) {
  Timing best;
  best.efficiency = -1;
  for (int attempt = 1; attempt <= kAttempts; ++attempt) {
    // Let the previous library's spinning threads go to sleep first.
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    const double before = bench::core_efficiency(static_cast<unsigned>(threads));
    Timing timing = time_runs(run, reps);
    timing.efficiency = std::min(before, bench::core_efficiency(static_cast<unsigned>(threads)));
    timing.attempts = attempt;
    if (timing.efficiency > best.efficiency) best = timing;
    best.attempts = attempt;
    if (best.efficiency >= kOwnCores) break;
  }
  return best;
}

void fill(void* memory, size_t count, std::mt19937& random) {
  std::uniform_real_distribution<float> values(-1.0f, 1.0f);
  auto* f = static_cast<float*>(memory);
  for (size_t i = 0; i < count; ++i) f[i] = values(random);
}

void fill_bf16(void* memory, size_t count, std::mt19937& random) {
  std::uniform_real_distribution<float> values(-1.0f, 1.0f);
  auto* h = static_cast<uint16_t*>(memory);
  for (size_t i = 0; i < count; ++i) {
    const float v = values(random);
    uint32_t bits;
    std::memcpy(&bits, &v, 4);
    h[i] = static_cast<uint16_t>(bits >> 16);
  }
}

void fill_f16(void* memory, size_t count, std::mt19937& random) {
  std::uniform_real_distribution<float> values(-1.0f, 1.0f);
  auto* h = static_cast<_Float16*>(memory);
  for (size_t i = 0; i < count; ++i) h[i] = static_cast<_Float16>(values(random));
}

// a, b and d of |s| in 16-bit elements from HAL's allocator, a and b filled.
struct SixteenBitOperands {
  void *a, *b, *d;
};
SixteenBitOperands sixteen_bit_operands(HalMatmul& hal, const Shape& s,
                                        void (*fill)(void*, size_t, std::mt19937&),
                                        std::mt19937& random) {
  SixteenBitOperands operands{hal.alloc(s.m * s.k * 2), hal.alloc(s.k * s.n * 2),
                              hal.alloc(s.m * s.n * 2)};
  fill(operands.a, s.m * s.k, random);
  fill(operands.b, s.k * s.n, random);
  return operands;
}

// Which libraries a child process measures.
enum class Part { kHal, kPeers };

// A table row as a child prints it for the parent: a marker, then the cells
// separated by tabs.
constexpr char kRowMarker[] = "\x1frow";

void emit_row(const std::vector<std::string>& cells) {
  std::string line = kRowMarker;
  for (const std::string& cell : cells) line += "\t" + cell;
  std::printf("%s\n", line.c_str());
}

std::vector<std::string> result_cells(const std::string& shape, const std::string& label,
                                      const Timing& timing, double flops, double peak,
                                      const std::string& peak_note) {
  const bench::Stats& stats = timing.stats;
  const double gflops = flops / stats.median / 1e9;
  return {
      shape,
      label,
      bench::fmt_stats(bench::Stats{stats.median * 1e3, stats.min * 1e3, stats.max * 1e3, stats.n}),
      bench::fmt(gflops, 1),
      bench::fmt(100 * gflops * 1e9 / peak, 1) + peak_note,
      bench::fmt(timing.faults_per_run, 0),
      bench::fmt(timing.efficiency, 2) +
          (timing.attempts > 1 ? " (" + std::to_string(timing.attempts) + " tries)" : "")};
}

int child(int threads, Part part, bool quick, double peak_override) {
  std::vector<Shape> shapes = {{256, 256, 256},    {512, 512, 512},    {1024, 1024, 1024},
                               {2048, 2048, 2048}, {4096, 4096, 4096}, {4096, 4096, 1024}};
  if (quick) shapes = {{256, 256, 256}, {512, 512, 512}, {1024, 1024, 1024}};
  // Both processes take their buffers from HAL's allocator (2 MiB-aligned,
  // MADV_HUGEPAGE, resident), so every library reads the same kind of
  // memory; the peers' process runs no HAL operator.
  const bool run_hal = part == Part::kHal;
  std::unique_ptr<HalMatmul> hal = run_hal ? open_hal() : std::make_unique<ApiMatmul>();
  const double measured = measure_fma_peak_per_core();
  const double declared = hal->peak_per_core;
  const double peak_core =
      peak_override > 0 ? peak_override * 1e9 : (measured > 0 ? measured : declared);
  const double peak = peak_core * threads;
  if (run_hal) {
    std::printf(
        "\n== %d thread%s (OMP_NUM_THREADS=%s); FP32 FMA peak per core: measured %.1f GFLOP/s "
        "in HAL's process, declared by the cpu device %.1f GFLOP/s; %% of peak uses %.1f "
        "GFLOP/s (--peak-per-core, else measured once by the parent process for every row) x "
        "%d\n",
        threads, threads == 1 ? "" : "s", std::getenv("OMP_NUM_THREADS"), measured / 1e9,
        declared / 1e9, peak_core / 1e9, threads);
  } else {
    std::printf("   FP32 FMA peak per core measured in the peers' process: %.1f GFLOP/s\n",
                measured / 1e9);
  }
  std::vector<Blas> blases;
  if (part == Part::kPeers) {
    blases.push_back(
        open_blas("openblas", "libopenblas.so.0", "openblas_set_num_threads", threads));
    blases.push_back(open_blas("blis", "libblis.so.4", "bli_thread_set_num_threads", threads));
  }
  std::mt19937 random(42);
  for (const Shape& s : shapes) {
    const int reps = static_cast<int>(std::clamp(2e10 / s.flops(), 3.0, 20.0));
    const size_t a_count = s.m * s.k, b_count = s.k * s.n, d_count = s.m * s.n;
    void* a = hal->alloc(a_count * 4);
    void* b = hal->alloc(b_count * 4);
    void* d = hal->alloc(d_count * 4);
    fill(a, a_count, random);
    fill(b, b_count, random);
    std::vector<std::pair<std::string, std::function<void()>>> runs;
    if (run_hal) {
      std::string why;
      if (auto run = hal->plan(matmul_desc(s, HAL_DTYPE_F32), a, b, d, &why)) {
        runs.emplace_back(hal->label(), run);
      } else {
        std::printf("note: HAL declined %s: %s\n", s.text().c_str(), why.c_str());
      }
    } else {
      runs.emplace_back("onednn matmul", onednn_matmul(s, dnnl::memory::data_type::f32, a, b, d));
      runs.emplace_back("dnnl_sgemm", [&, a, b, d] {
        dnnl_sgemm('N', 'N', s.m, s.n, s.k, 1.0f, static_cast<const float*>(a), s.k,
                   static_cast<const float*>(b), s.n, 0.0f, static_cast<float*>(d), s.n);
      });
      for (const Blas& blas : blases) {
        if (blas.sgemm == nullptr) continue;
        runs.emplace_back(blas.name + " cblas_sgemm", [&, a, b, d, fn = blas.sgemm] {
          fn(kRowMajor, kNoTrans, kNoTrans, static_cast<int>(s.m), static_cast<int>(s.n),
             static_cast<int>(s.k), 1.0f, static_cast<const float*>(a), static_cast<int>(s.k),
             static_cast<const float*>(b), static_cast<int>(s.n), 0.0f, static_cast<float*>(d),
             static_cast<int>(s.n));
        });
      }
    }
    for (const auto& [label, run] : runs) {
      emit_row(result_cells(s.text(), label, time_on_own_cores(run, reps, threads), s.flops(), peak,
                            ""));
    }
    std::fflush(stdout);
  }
  // f16 2048^3: HAL only (oneDNN has no f16 matmul without AVX512-FP16):
  // the f32 rows of 2048^3 above are what it is widened to.
  if (run_hal) {
    const Shape s{2048, 2048, 2048};
    const auto [a, b, d] = sixteen_bit_operands(*hal, s, fill_f16, random);
    std::string why;
    if (auto run = hal->plan(matmul_desc(s, HAL_DTYPE_F16), a, b, d, &why)) {
      emit_row(result_cells(s.text() + " f16", hal->label() + " f16",
                            time_on_own_cores(run, 5, threads), s.flops(), peak, ""));
    } else {
      std::printf("note: HAL declined f16 %s: %s\n", s.text().c_str(), why.c_str());
    }
  }
  // bf16 2048^3: HAL beside oneDNN's bf16 matmul.
  {
    const Shape s{2048, 2048, 2048};
    const auto [a, b, d] = sixteen_bit_operands(*hal, s, fill_bf16, random);
    std::vector<std::pair<std::string, std::function<void()>>> runs;
    if (run_hal) {
      std::string why;
      if (auto run = hal->plan(matmul_desc(s, HAL_DTYPE_BF16), a, b, d, &why)) {
        runs.emplace_back(hal->label() + " bf16", run);
      } else {
        std::printf("note: HAL declined bf16 %s: %s\n", s.text().c_str(), why.c_str());
      }
    } else {
      runs.emplace_back("onednn matmul bf16",
                        onednn_matmul(s, dnnl::memory::data_type::bf16, a, b, d));
    }
    for (const auto& [label, run] : runs) {
      emit_row(result_cells(s.text() + " bf16", label, time_on_own_cores(run, 5, threads),
                            s.flops(), peak, " (f32 peak)"));
    }
  }
  std::fflush(stdout);
  return 0;
}

// Runs this program as a child for |threads| and |part|; passes on the
// lines it prints and collects its rows. False when the child failed.
bool run_child(const char* self, const std::string& threads, const char* part, bool quick,
               const std::string& peak_text, std::vector<std::vector<std::string>>* rows) {
  int channel[2];
  if (pipe(channel) != 0) die("pipe failed");
  std::fflush(stdout);
  const pid_t pid = fork();
  if (pid < 0) die("fork failed");
  if (pid == 0) {
    dup2(channel[1], STDOUT_FILENO);
    close(channel[0]);
    close(channel[1]);
    setenv("OMP_NUM_THREADS", threads.c_str(), 1);
    setenv("OPENBLAS_NUM_THREADS", threads.c_str(), 1);
    setenv("BLIS_NUM_THREADS", threads.c_str(), 1);
    std::vector<std::string> words = {self, "--child",         threads,  "--part",
                                      part, "--peak-per-core", peak_text};
    if (quick) words.push_back("--quick");
    std::vector<char*> child_argv;
    for (std::string& w : words) child_argv.push_back(w.data());
    child_argv.push_back(nullptr);
    execv("/proc/self/exe", child_argv.data());
    _exit(127);
  }
  close(channel[1]);
  std::string output;
  char buffer[4096];
  for (ssize_t got; (got = read(channel[0], buffer, sizeof(buffer))) != 0;) {
    if (got < 0) {
      if (errno == EINTR) continue;
      break;
    }
    output.append(buffer, static_cast<size_t>(got));
  }
  close(channel[0]);
  int wstatus = 0;
  waitpid(pid, &wstatus, 0);
  for (size_t begin = 0; begin < output.size();) {
    size_t end = output.find('\n', begin);
    if (end == std::string::npos) end = output.size();
    const std::string line = output.substr(begin, end - begin);
    begin = end + 1;
    if (line.rfind(kRowMarker, 0) != 0) {
      std::printf("%s\n", line.c_str());
      continue;
    }
    std::vector<std::string> cells;
    for (size_t at = sizeof(kRowMarker) - 1; at < line.size();) {
      size_t next = line.find('\t', at + 1);
      if (next == std::string::npos) next = line.size();
      cells.push_back(line.substr(at + 1, next - at - 1));
      at = next;
    }
    rows->push_back(std::move(cells));
  }
  return WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0;
}

}  // namespace

int main(int argc, char** argv) {
  bench::Args args(argc, argv);
  if (args.flag("--help") || args.flag("-h")) {
    std::printf(
        "usage: %s [--threads 1,2] [--quick] [--peak-per-core GFLOPS]\n"
        "sgemm (row-major f32 C = A @ B) through HAL's HAL_OP_MATMUL on the cpu plugin beside\n"
        "oneDNN (matmul primitive, dnnl_sgemm), OpenBLAS and BLIS; squares 256..4096 and\n"
        "4096x4096x1024 (--quick: up to 1024), then f16 2048^3 through HAL, bf16 2048^3 through "
        "HAL and oneDNN.\n"
        "Each thread count runs in its own processes, HAL's and the peers'. %% of peak: one core's "
        "FP32 FMA peak,\n"
        "measured (16 lanes x FMAs x 2 flops at the clock the core really runs), times the\n"
        "threads; or --peak-per-core GFLOPS. vCPU efficiency: the slowest thread's FMA rate\n"
        "with all threads running over the best one-thread rate seen, probed just before and\n"
        "after a row (the worse of the two); a row under 0.8 (its vCPUs sharing physical cores\n"
        "on the host) is timed again, up to 4 tries, and the try with the best probe is kept.\n",
        argv[0]);
    return 0;
  }
  const std::string child_threads = args.str("--child", "");
  const std::string part = args.str("--part", "hal");
  const bool quick = args.flag("--quick");
  const std::string peak_text = args.str("--peak-per-core", "0");
  const double peak_override = std::atof(peak_text.c_str());
  if (!child_threads.empty()) {
    if (part != "hal" && part != "peers") die("--part takes hal or peers");
    return child(std::atoi(child_threads.c_str()), part == "hal" ? Part::kHal : Part::kPeers, quick,
                 peak_override);
  }

  // One peak for every row of every table, HAL's and the peers': measured
  // here once (best of its trials) unless given. A child's own measurement
  // is printed beside it; one taken while the host shared the core reads low.
  std::string peak_for_children = peak_text;
  if (peak_override <= 0) {
    const double measured = measure_fma_peak_per_core();
    if (measured > 0) peak_for_children = bench::fmt(measured / 1e9, 1);
  }
  std::string list = args.str("--threads", "1,2");
  int status = 0;
  for (size_t begin = 0; begin < list.size();) {
    size_t end = list.find(',', begin);
    if (end == std::string::npos) end = list.size();
    const std::string threads = list.substr(begin, end - begin);
    begin = end + 1;
    if (std::atoi(threads.c_str()) < 1) die("--threads takes positive counts, e.g. 1,2");
    std::vector<std::vector<std::string>> hal_rows, peer_rows;
    if (!run_child(argv[0], threads, "hal", quick, peak_for_children, &hal_rows)) status = 1;
    if (!run_child(argv[0], threads, "peers", quick, peak_for_children, &peer_rows)) status = 1;
    // One table, each shape's HAL row first.
    bench::Table table({"shape", "library", "ms median [min-max]", "GFLOP/s", "% of peak",
                        "faults/run", "vCPU efficiency"});
    std::vector<std::string> shapes;
    for (const auto* rows : {&hal_rows, &peer_rows}) {
      for (const auto& row : *rows) {
        if (std::find(shapes.begin(), shapes.end(), row[0]) == shapes.end()) {
          shapes.push_back(row[0]);
        }
      }
    }
    for (const std::string& shape : shapes) {
      double hal = 0, best_peer = 0;
      for (const auto* rows : {&hal_rows, &peer_rows}) {
        for (const auto& row : *rows) {
          if (row[0] != shape) continue;
          table.row(row);
          const double gflops = row.size() > 3 ? std::atof(row[3].c_str()) : 0;
          if (rows == &hal_rows) {
            hal = std::max(hal, gflops);
          } else {
            best_peer = std::max(best_peer, gflops);
          }
        }
      }
      if (hal > 0 && best_peer > 0) {
        table.row({shape, "hal / best peer", "", bench::fmt(hal / best_peer, 2) + "x"});
      }
    }
    table.print();
    std::fflush(stdout);
  }
  return status;
}
