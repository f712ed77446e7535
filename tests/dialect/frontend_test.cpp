// The dialect front end on its own: kernel records derived from the source,
// the emitted text for every backend, and the diagnostics of bad sources.
#include <catch2/catch.hpp>

#include <string>

#include "hal_dialect/dialect.hpp"

using namespace hal::dialect;

namespace {

constexpr const char* kSource = R"(#define TILE 16
static float square(float x) { return x * x; }
kernel void vadd(global const float* a, global const float* b, global float* c, int n) {
  int i = global_id(0);
  if (i >= n) return;
  c[i] = a[i] + b[i];
}
kernel max_block(256) void reduce(global const float* x, global float* out, u32 n, double s) {
  shared float partial[TILE * 16];
  shared f16 halves[2][TILE];
  int t = local_id(0);
  partial[t] = square(x[global_id(0)]);
  barrier();
  for (int k = local_size(0) / 2; k > 0; k /= 2) {
    if (t < k) partial[t] += partial[t + k];
    barrier();
  }
  if (t == 0) atomic_add(out, partial[0]);
}
kernel void dyn(global f16* out, i64 a, u64 b) {
  local float* scratch = dynamic_shared(float);
  scratch[local_id(0)] = 1.0f;
  barrier();
  store_f16(&out[global_id(0)], scratch[0]);
}
)";

TranslatedModule translated(Backend backend) {
  TranslatedModule module;
  Diagnostic error;
  INFO(error.to_string());
  REQUIRE(translate(kSource, backend, module, error));
  return module;
}

std::string error_of(const std::string& source) {
  TranslatedModule module;
  Diagnostic error;
  REQUIRE_FALSE(translate(source, Backend::kOpenCL, module, error));
  return error.to_string();
}

bool accepted(const std::string& source) {
  TranslatedModule module;
  Diagnostic error;
  const bool ok = translate(source, Backend::kOpenCL, module, error);
  if (!ok) UNSCOPED_INFO(error.to_string());
  return ok;
}

bool contains(const std::string& text, const std::string& piece) {
  return text.find(piece) != std::string::npos;
}

}  // namespace

TEST_CASE("dialect: kernel records come from the source", "[dialect]") {
  const TranslatedModule module = translated(Backend::kCpp);
  REQUIRE(module.kernels.size() == 3);
  const KernelRecord* vadd = module.find("vadd");
  REQUIRE(vadd != nullptr);
  REQUIRE(signature_text(vadd->arg_types) == "ptr,ptr,ptr,i32");
  REQUIRE(vadd->max_threads_per_block == 0);
  REQUIRE_FALSE(vadd->barriers);
  const KernelRecord* reduce = module.find("reduce");
  REQUIRE(signature_text(reduce->arg_types) == "ptr,ptr,u32,f64");
  REQUIRE(reduce->max_threads_per_block == 256);
  REQUIRE(reduce->static_shared_bytes == 256 * 4 + 2 * 16 * 2);
  REQUIRE(reduce->barriers);
  REQUIRE(reduce->cpu_shape == CpuShape::kRegions);
  REQUIRE(vadd->cpu_shape == CpuShape::kItemLoop);
  const KernelRecord* dyn = module.find("dyn");
  REQUIRE(signature_text(dyn->arg_types) == "ptr,i64,u64");
  REQUIRE(dyn->dynamic_shared);
  REQUIRE(module.find("square") == nullptr);  // a helper, not an entry point
}

TEST_CASE("dialect: C++ text for the cpu plugin", "[dialect]") {
  const std::string text = translated(Backend::kCpp).text;
  CHECK(contains(text, "typedef struct hal_cpu_block_context"));  // cpu_kernel.h embedded
  CHECK(contains(text, "vadd( const hal_cpu_block_context_t* hal_ctx,"));
  CHECK(contains(text, "hal_rt::run_items(hal_block, hal_body);"));
  // reduce's barriers are at the top level and in a uniform loop: regions
  // (the coroutine shape has its own test in regions_test.cpp).
  CHECK(contains(text, "// hal: kernel 'reduce' runs as parallel regions"));
  CHECK(contains(text, "hal_rt::run_region(hal_block, [&](const hal_rt::Item hal_item) {"));
  CHECK_FALSE(contains(text, "co_await"));
  CHECK_FALSE(contains(text, "#include <coroutine>"));
  CHECK(contains(text, "int i = hal_item.global_id(0);"));
  CHECK(contains(text, "((float*)hal_ctx->shared_memory)"));
  CHECK(contains(text, "HAL_CPU_KERNEL_SIGNATURE(vadd, \"ptr,ptr,ptr,i32\");"));
  CHECK(contains(text, "hal_kernel_static_shared_reduce = 1088u;"));
  CHECK(contains(text, "hal_kernel_max_threads_reduce = 256u;"));
  CHECK(contains(text, "static inline\n#line 2 \"hal-dialect\"\nfloat square(float x)"));
}

TEST_CASE("dialect: OpenCL C text", "[dialect]") {
  const std::string text = translated(Backend::kOpenCL).text;
  CHECK(contains(text, "__kernel void\n#line 3 \"hal-dialect\"\nvadd(__global const float* a,"));
  CHECK(contains(text, "int i = hal_global_id(0);"));
  CHECK(contains(text, "__local float partial[TILE * 16];"));
  CHECK(contains(text, "barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);"));
  CHECK(contains(text, "__local uchar* hal_dynamic_shared"));
  CHECK(contains(text, "((__local float*)hal_dynamic_shared)"));
  CHECK(contains(text, "hal_store_f16(&out[hal_global_id(0)], scratch[0]);"));
  CHECK(contains(text, "#pragma OPENCL EXTENSION cl_khr_fp64 : enable"));
}

TEST_CASE("dialect: CUDA and HIP text", "[dialect]") {
  for (Backend backend : {Backend::kCuda, Backend::kHip}) {
    const std::string text = translated(backend).text;
    INFO(backend_name(backend));
    CHECK(contains(text, "extern \"C\" __global__ void __launch_bounds__(256)\n#line 8"));
    CHECK(contains(text, "__shared__ float partial[TILE * 16];"));
    CHECK(contains(text, "__syncthreads();"));
    CHECK(contains(text, "extern __shared__ __align__(16) unsigned char hal_dynamic_shared[];"));
    CHECK(contains(text, "static __device__ inline\n#line 2 \"hal-dialect\"\nfloat square"));
    CHECK(contains(text, "#define hal_atomic_add(p, v) atomicAdd((p), (v))"));
    CHECK(contains(
        text, backend == Backend::kHip ? "#include <hip/hip_fp16.h>" : "#include <cuda_fp16.h>"));
  }
}

TEST_CASE("dialect: line numbers survive translation", "[dialect]") {
  const std::string text = translated(Backend::kOpenCL).text;
  // Line 13 of the source ("barrier();") follows its #line anchor in order.
  const size_t anchor = text.find("#line 8 \"hal-dialect\"");
  REQUIRE(anchor != std::string::npos);
  const size_t barrier = text.find("barrier(", anchor);
  size_t lines = 0;
  for (size_t i = text.find('\n', anchor) + 1; i < barrier; ++i) lines += text[i] == '\n';
  REQUIRE(8 + lines == 13);
}

TEST_CASE("dialect: diagnostics name the rule and the line", "[dialect]") {
  CHECK(contains(error_of("#include <stdio.h>\nkernel void k() {}"),
                 "line 1:2: #include is not part of the dialect"));
  CHECK(contains(error_of("#ifdef X\n#endif\nkernel void k() {}"), "#ifdef is not part"));
  CHECK(contains(error_of("float f() { barrier(); return 1; }\nkernel void k() {}"),
                 "'barrier' may only be used in a kernel body, not in the helper function 'f'"));
  CHECK(contains(error_of("kernel void k(float* p) {}"),
                 "parameter 'p' must point to global memory"));
  CHECK(contains(error_of("kernel void k(local float* p) {}"), "use dynamic_shared(T)"));
  CHECK(contains(error_of("kernel void k(global float* p, char c) {}"),
                 "parameter 'c' has type 'char'"));
  CHECK(contains(error_of("kernel void k() { if (1) { shared float s[4]; } }"),
                 "shared arrays are declared at the outermost level"));
  CHECK(contains(error_of("kernel void k() { shared float s[N]; }"),
                 "'N' is not an integer constant"));
  CHECK(contains(error_of("kernel void k() { shared float s[4] = {0}; }"), "no initialiser"));
  CHECK(contains(error_of("kernel void k() {}\nkernel void k() {}"), "defined twice"));
  CHECK(contains(error_of("#define T 8\n#define T 16\nkernel void k() {}"),
                 "line 2:9: 'T' is #defined again with another value"));
  CHECK(accepted("#define T 8\n#define T  8\nkernel void k() {}"));
  CHECK(accepted("#define T 8\n#undef T\n#define T 16\nkernel void k() { shared float s[T]; }"));
  CHECK(contains(error_of("float f(float x) { return x; }"), "defines no kernel"));
  CHECK(contains(error_of("kernel int k() {}"), "must return void"));
  CHECK(contains(error_of("kernel void k() { int hal_x = 0; }"), "reserved"));
  CHECK(contains(error_of("kernel void k() { int a = 1 @ 2; }"), "unexpected character '@'"));
  CHECK(contains(error_of("kernel void k() { /* open"), "unterminated /* comment"));
  CHECK(contains(error_of("kernel void k() { barrier(1); }"), "barrier takes no arguments"));
  CHECK(contains(error_of("kernel void k() { int x = 0;"), "does not end"));
  CHECK(contains(error_of("kernel max_block(0) void k() {}"), "outside 1..65536"));
  CHECK(contains(error_of(""), "empty"));
}

TEST_CASE("dialect: every exclusion of SPEC 8 is rejected alike for every backend", "[dialect]") {
  struct Bad {
    const char* source;
    const char* message;  // includes the "line L:C" the diagnostic must point at
  };
  const Bad cases[] = {
      // global variables, plain, initialised, constant, arrays, after a struct
      {"int counter;\nkernel void k() {}", "line 1:5: global variable 'counter' at file scope"},
      {"kernel void k() {}\nfloat table[4] = {1, 2, 3, 4};", "line 2:7: global variable 'table'"},
      {"const int N = 4;\nkernel void k() {}", "line 1:11: global variable 'N'"},
      {"static float scale = 2.0f;\nkernel void k() {}", "line 1:14: global variable 'scale'"},
      {"struct P { int a; } origin;\nkernel void k() {}", "line 1:21: global variable 'origin'"},
      {"global float* buffer;\nkernel void k() {}", "line 1:15: global variable 'buffer'"},
      // recursion: direct, mutual (through a prototype), and through a kernel
      {"int f(int n) { return n ? f(n - 1) : 0; }\nkernel void k() {}",
       "line 1:27: 'f' calls itself: the dialect has no recursion"},
      {"int b(int n);\nint a(int n) { return b(n); }\nint b(int n) { return a(n); }\n"
       "kernel void k() { a(1); }",
       "line 3:23: recursion: 'a' calls 'b' calls 'a'"},
      {"kernel void k(global int* p) {\n  if (p[0]) k(p);\n}", "line 2:13: 'k' calls itself"},
      // function pointers: a variable, a typedef, a parameter, a call through one
      {"kernel void k() {\n  int (*op)(int) = 0;\n}", "line 2:7: function pointers are not"},
      {"typedef float (*unary)(float);\nkernel void k() {}", "line 1:15: function pointers"},
      {"float apply(float (*f)(float), float x) { return x; }\nkernel void k() {}",
       "line 1:19: function pointers"},
      // builtin and backend names as kernel or function names
      {"kernel void barrier() {}",
       "line 1:13: 'barrier' is a builtin name of the dialect or "
       "of a backend and cannot name a kernel"},
      {"kernel void global_id() {}", "line 1:13: 'global_id' is a builtin name"},
      {"kernel void atomic_add() {}", "line 1:13: 'atomic_add' is a builtin name"},
      {"kernel void atomic_exchange() {}", "line 1:13: 'atomic_exchange' is a builtin name"},
      {"kernel void get_global_id() {}", "line 1:13: 'get_global_id' is a builtin name"},
      {"kernel void __syncthreads() {}", "line 1:13: '__syncthreads' is a builtin name"},
      {"float sqrt(float x) { return x; }\nkernel void k() {}",
       "line 1:7: 'sqrt' is a builtin name of the dialect or of a backend and cannot name a "
       "function"},
      {"kernel void max() {}", "line 1:13: 'max' is a builtin name"},
      // sub-group operations
      {"kernel void k(global int* p) {\n  p[0] = sub_group_reduce_add(p[0]);\n}",
       "line 2:10: 'sub_group_reduce_add' is a sub-group operation"},
      {"kernel void k(global int* p) {\n  p[0] = __shfl_sync(0, p[0], 1);\n}",
       "line 2:10: '__shfl_sync' is a sub-group operation"},
  };
  for (const Bad& bad : cases) {
    for (Backend backend : {Backend::kCpp, Backend::kOpenCL, Backend::kCuda, Backend::kHip}) {
      INFO(bad.source << "\n(backend " << static_cast<int>(backend) << ")");
      TranslatedModule module;
      Diagnostic error;
      REQUIRE_FALSE(translate(bad.source, backend, module, error));
      const std::string text = error.to_string();
      INFO(text);
      CHECK(contains(text, bad.message));
    }
  }
}

TEST_CASE("dialect: what the exclusions leave allowed", "[dialect]") {
  // Types, prototypes, helpers calling helpers (a DAG), parenthesised
  // dereferences and #define constants stay legal.
  const char* source = R"(#define N 4
struct Pair { float a; float b; };
typedef struct Pair pair_t;
enum Mode { kAdd, kMul };
static float twice(float x);
static float twice(float x) { return 2.0f * x; }
static float quad(float x) { return twice(twice(x)); }
kernel void k(global float* p) {
  float v = (*p) * N;
  p[global_id(0)] = quad(v) + (*p);
}
)";
  for (Backend backend : {Backend::kCpp, Backend::kOpenCL, Backend::kCuda, Backend::kHip}) {
    TranslatedModule module;
    Diagnostic error;
    INFO(error.to_string());
    CHECK(translate(source, backend, module, error));
  }
}
