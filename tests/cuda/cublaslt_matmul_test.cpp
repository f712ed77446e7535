// The cuda plugin's matmul on cuBLASLt through the public API, over the
// stand-in driver (fake_driver/, host memory) and the stand-in cuBLASLt
// (fake_cublaslt/, which really computes the GEMM it is given). Results are
// compared with a float64 reference written here from the definition in
// api/hal/ops.h, d = act(alpha * op(a) @ op(b) + beta * c + bias), on seeded
// random inputs, across dtypes, transposes, strides, batches and epilogues;
// the descriptors the plugin handed cuBLASLt are checked from the stand-in's
// record; declines fall through to the portable implementation with their
// reasons; and cuBLASLt's failures reach the caller with their status.
#include <catch2/catch.hpp>

#include <dlfcn.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "fake_cublaslt.h"
#include "fake_driver.h"
#include "hal.h"
#include "hal/ops.h"

namespace {

// cuBLASLt's values (cublasLt.h, library_types.h), written out: the test is
// independent of the headers.
constexpr int32_t kCompute32F = 68;  // CUBLAS_COMPUTE_32F
constexpr int32_t kR32F = 0, kR16F = 2, kR16BF = 14;
constexpr int32_t kOpN = 0, kOpT = 1;
constexpr uint32_t kEpilogueDefault = 1, kEpilogueRelu = 2, kEpilogueBias = 4, kEpilogueGelu = 32,
                   kEpilogueAux = 128;

// Every test runs the cuda plugin over the stand-ins (a test may point
// HAL_CUDA_CUBLASLT_PATH elsewhere before its session starts).
[[maybe_unused]] const bool kEnvironment = [] {
  setenv("HAL_PLUGINS", "cuda", 1);
  setenv("HAL_CUDA_DRIVER_PATH", HAL_TEST_FAKE_CUDA, 1);
  // Without NCCL (a machine may have one installed): the loader's collectives.
  setenv("HAL_CUDA_NCCL_PATH", "/nonexistent/libnccl.so.2", 1);
  setenv("HAL_CUDA_CUBLASLT_PATH", HAL_TEST_FAKE_CUBLASLT, 1);
  return true;
}();

// The stand-in cuBLASLt's test queries (the library the plugin opened: the
// same path gives the same handle).
struct FakeLt {
  FakeLt() {
    handle = dlopen(HAL_TEST_FAKE_CUBLASLT, RTLD_NOW);
    REQUIRE(handle != nullptr);
    stats = reinterpret_cast<fake_cublaslt_stats_fn>(dlsym(handle, "fake_cublaslt_stats"));
    last =
        reinterpret_cast<fake_cublaslt_last_matmul_fn>(dlsym(handle, "fake_cublaslt_last_matmul"));
    fail_next =
        reinterpret_cast<fake_cublaslt_fail_next_fn>(dlsym(handle, "fake_cublaslt_fail_next"));
    REQUIRE(stats != nullptr);
    REQUIRE(last != nullptr);
    REQUIRE(fail_next != nullptr);
  }
  ~FakeLt() { dlclose(handle); }
  fake_cublaslt_stats_t now() const {
    fake_cublaslt_stats_t out{};
    stats(&out);
    return out;
  }
  fake_cublaslt_matmul_t last_call() const {
    fake_cublaslt_matmul_t out{};
    REQUIRE(last(&out) == 1);
    return out;
  }
  void* handle = nullptr;
  fake_cublaslt_stats_fn stats = nullptr;
  fake_cublaslt_last_matmul_fn last = nullptr;
  fake_cublaslt_fail_next_fn fail_next = nullptr;
};

class Session {
 public:
  Session() {
    REQUIRE(hal_init(nullptr) == HAL_SUCCESS);
    uint32_t count = 0;
    REQUIRE(hal_device_count(&count) == HAL_SUCCESS);
    REQUIRE(count >= 1);
    REQUIRE(hal_device_get(0, &device_) == HAL_SUCCESS);
    REQUIRE(hal_stream_create(device_, 0, &stream_) == HAL_SUCCESS);
  }
  ~Session() {
    hal_stream_destroy(stream_);
    hal_shutdown();
  }
  hal_device_t device() const { return device_; }
  hal_stream_t stream() const { return stream_; }

 private:
  hal_device_t device_ = nullptr;
  hal_stream_t stream_ = nullptr;
};

hal_error_detail_t last_detail() {
  hal_error_detail_t detail{};
  detail.struct_size = sizeof(detail);
  REQUIRE(hal_error_get_detail(&detail) == HAL_SUCCESS);
  return detail;
}

// ---- element encodings, written independently of the stand-in's ----

// The inputs are multiples of 1/64 in [-1, 1): exact in f16, bf16 and f32,
// so the encoders below never round.
double decode(hal_dtype_t dtype, const unsigned char* bytes) {
  if (dtype == HAL_DTYPE_F32) {
    float value;
    std::memcpy(&value, bytes, 4);
    return value;
  }
  uint16_t bits;
  std::memcpy(&bits, bytes, 2);
  if (dtype == HAL_DTYPE_BF16) {
    const uint32_t wide = static_cast<uint32_t>(bits) << 16;
    float value;
    std::memcpy(&value, &wide, 4);
    return value;
  }
  const int exponent = (bits >> 10) & 0x1f;
  const int mantissa = bits & 0x3ff;
  const double sign = (bits & 0x8000) != 0 ? -1.0 : 1.0;
  if (exponent == 31) return mantissa != 0 ? NAN : sign * INFINITY;
  if (exponent == 0) return sign * std::ldexp(mantissa, -24);
  return sign * std::ldexp(1024 + mantissa, exponent - 25);
}

void encode_exact(hal_dtype_t dtype, double value, unsigned char* bytes) {
  const float single = static_cast<float>(value);
  if (dtype == HAL_DTYPE_F32) {
    std::memcpy(bytes, &single, 4);
    return;
  }
  uint16_t bits = 0;
  if (dtype == HAL_DTYPE_BF16) {
    uint32_t wide;
    std::memcpy(&wide, &single, 4);
    bits = static_cast<uint16_t>(wide >> 16);  // exact: the low half is zero
  } else if (value != 0.0) {
    int exponent = 0;
    const double fraction = std::frexp(std::fabs(value), &exponent);  // [0.5, 1)
    bits = static_cast<uint16_t>(((exponent + 14) << 10) |
                                 static_cast<int>(std::lround((fraction * 2.0 - 1.0) * 1024.0)));
    if (value < 0) bits |= 0x8000;
  }
  std::memcpy(bytes, &bits, 2);
}

// ---- tensors in device memory with a host copy ----

// Elements a layout spans (the last element's offset + 1).
int64_t span(const hal_tensor_desc_t& tensor) {
  int64_t last = 0;
  for (uint32_t d = 0; d < tensor.rank; ++d) last += (tensor.shape[d] - 1) * tensor.strides[d];
  return last + 1;
}

// A row-major tensor whose last dimension's rows are |pad| elements longer
// than needed; |column_major| swaps the order of the last two dimensions in
// memory (the logical shape stays).
hal_tensor_desc_t layout(hal_dtype_t dtype, std::vector<int64_t> shape, int64_t pad = 0,
                         bool column_major = false) {
  hal_tensor_desc_t t{};
  t.dtype = dtype;
  t.rank = static_cast<uint32_t>(shape.size());
  const uint32_t r = t.rank;
  for (uint32_t d = 0; d < r; ++d) t.shape[d] = shape[d];
  int64_t stride = 1;
  auto place = [&](uint32_t d, int64_t extra) {
    t.strides[d] = stride;
    stride *= t.shape[d] + extra;
  };
  if (r == 1) {
    place(0, 0);
    return t;
  }
  if (column_major) {
    place(r - 2, pad);
    place(r - 1, 0);
  } else {
    place(r - 1, pad);
    place(r - 2, 0);
  }
  for (uint32_t d = r - 2; d-- > 0;) place(d, 0);
  return t;
}

struct Tensor {
  hal_tensor_desc_t desc{};
  std::vector<unsigned char> host;
  void* base = nullptr;    // the allocation
  void* device = nullptr;  // the tensor's first element (base + offset elements)

  Tensor(hal_device_t dev, const hal_tensor_desc_t& t, std::mt19937& random, int64_t offset = 0)
      : desc(t) {
    const size_t element = HAL_DTYPE_SIZE(t.dtype);
    const int64_t elements = span(t);
    host.assign(static_cast<size_t>(elements) * element, 0);
    std::uniform_int_distribution<int> steps(-64, 63);
    for (int64_t i = 0; i < elements; ++i) {
      encode_exact(t.dtype, steps(random) / 64.0, host.data() + i * element);
    }
    const size_t bytes = host.size() + static_cast<size_t>(offset) * element;
    REQUIRE(hal_mem_alloc(dev, HAL_MEMORY_DEVICE, bytes, 0, &base) == HAL_SUCCESS);
    device = static_cast<unsigned char*>(base) + offset * static_cast<int64_t>(element);
  }
  ~Tensor() { hal_mem_free(base); }
  Tensor(const Tensor&) = delete;
  Tensor& operator=(const Tensor&) = delete;

  void upload(hal_stream_t stream) const {
    REQUIRE(hal_memcpy_async(device, host.data(), host.size(), stream) == HAL_SUCCESS);
  }
  void download(hal_stream_t stream) {
    REQUIRE(hal_memcpy_async(host.data(), device, host.size(), stream) == HAL_SUCCESS);
    REQUIRE(hal_stream_synchronize(stream) == HAL_SUCCESS);
  }
  // The element at |index| (one per dimension).
  double at(const std::vector<int64_t>& index) const {
    int64_t offset = 0;
    for (uint32_t d = 0; d < desc.rank; ++d) offset += index[d] * desc.strides[d];
    return decode(desc.dtype,
                  host.data() + offset * static_cast<int64_t>(HAL_DTYPE_SIZE(desc.dtype)));
  }
};

struct Case {
  const char* name = "";
  hal_dtype_t ab = HAL_DTYPE_F32;
  hal_dtype_t out = HAL_DTYPE_F32;  // c, d and bias
  std::vector<int64_t> batch;
  int64_t m = 5, n = 7, k = 9;
  uint32_t flags = 0;
  hal_activation_t activation = HAL_ACTIVATION_NONE;
  float alpha = 1.0f, beta = 0.0f;
  int64_t pad = 0;  // extra elements per row of a, b, c, d
  bool d_column_major = false;
  bool broadcast_b = false;  // b's batch strides 0
  int64_t offset = 0;        // elements between each allocation and its tensor
};

template <class Edit>
Case make(const char* name, Edit edit) {
  Case c;
  c.name = name;
  edit(c);
  return c;
}
Case make(const char* name) {
  return make(name, [](Case&) {});
}

std::vector<int64_t> with(std::vector<int64_t> batch, int64_t rows, int64_t cols) {
  batch.push_back(rows);
  batch.push_back(cols);
  return batch;
}

double activate(hal_activation_t activation, double x) {
  switch (activation) {
    case HAL_ACTIVATION_RELU:
      return x > 0 ? x : 0;
    case HAL_ACTIVATION_GELU_TANH:
      return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
    default:
      return x;
  }
}

double tolerance_unit(hal_dtype_t dtype) {
  switch (dtype) {
    case HAL_DTYPE_F16:
      return 2e-3;
    case HAL_DTYPE_BF16:
      return 1.6e-2;
    default:
      return 1e-5;
  }
}

hal_op_matmul_desc_t describe(const Case& c, hal_tensor_desc_t* a, hal_tensor_desc_t* b,
                              hal_tensor_desc_t* cd, hal_tensor_desc_t* d,
                              hal_tensor_desc_t* bias) {
  const bool ta = (c.flags & HAL_MATMUL_TRANSPOSE_A) != 0;
  const bool tb = (c.flags & HAL_MATMUL_TRANSPOSE_B) != 0;
  *a = layout(c.ab, ta ? with(c.batch, c.k, c.m) : with(c.batch, c.m, c.k), c.pad);
  *b = layout(c.ab, tb ? with(c.batch, c.n, c.k) : with(c.batch, c.k, c.n), c.pad);
  if (c.broadcast_b) {
    for (size_t i = 0; i < c.batch.size(); ++i) b->strides[i] = 0;
  }
  *cd = layout(c.out, with(c.batch, c.m, c.n), c.pad, c.d_column_major);
  *d = layout(c.out, with(c.batch, c.m, c.n), c.pad, c.d_column_major);
  *bias = layout(c.out, {c.n});
  hal_op_matmul_desc_t desc{};
  desc.header.struct_size = sizeof(desc);
  desc.header.kind = HAL_OP_MATMUL;
  desc.flags = c.flags;
  desc.activation = c.activation;
  desc.alpha = c.alpha;
  desc.beta = c.beta;
  desc.a = *a, desc.b = *b, desc.c = *cd, desc.d = *d, desc.bias = *bias;
  desc.aux = *d;  // aux has d's shape; here its layout too
  return desc;
}

hal_op_plan_info_t info_of(hal_op_plan_t plan) {
  hal_op_plan_info_t info{};
  info.struct_size = sizeof(info);
  REQUIRE(hal_op_plan_get_info(plan, &info) == HAL_SUCCESS);
  return info;
}

// Plans, runs and checks one case against the float64 reference; returns
// the call cuBLASLt saw.
fake_cublaslt_matmul_t run_case(const Session& session, const FakeLt& lt, const Case& c,
                                uint32_t seed) {
  CAPTURE(c.name, seed);
  hal_tensor_desc_t ta, tb, tc, td, tbias;
  const hal_op_matmul_desc_t desc = describe(c, &ta, &tb, &tc, &td, &tbias);
  hal_op_plan_t plan = nullptr;
  REQUIRE(hal_op_plan_create(session.device(), &desc.header, 0, &plan) == HAL_SUCCESS);
  const hal_op_plan_info_t info = info_of(plan);
  CAPTURE(info.declines);
  REQUIRE(std::string(info.implementation) == "cuda.cublaslt");

  std::mt19937 random(seed);
  Tensor a(session.device(), ta, random, c.offset);
  Tensor b(session.device(), tb, random, c.offset);
  Tensor d(session.device(), td, random, c.offset);
  const bool reads_c = c.beta != 0.0f;
  const bool has_bias = (c.flags & HAL_MATMUL_BIAS) != 0;
  const bool has_aux = (c.flags & HAL_MATMUL_SAVE_AUX) != 0;
  std::unique_ptr<Tensor> cin, bias, aux;
  if (reads_c) cin = std::make_unique<Tensor>(session.device(), tc, random, c.offset);
  if (has_bias) bias = std::make_unique<Tensor>(session.device(), tbias, random, c.offset);
  if (has_aux) aux = std::make_unique<Tensor>(session.device(), desc.aux, random, c.offset);
  void* workspace = nullptr;
  if (info.workspace_bytes > 0) {
    REQUIRE(hal_mem_alloc(session.device(), HAL_MEMORY_DEVICE, info.workspace_bytes, 0,
                          &workspace) == HAL_SUCCESS);
  }
  a.upload(session.stream());
  b.upload(session.stream());
  d.upload(session.stream());
  if (cin) cin->upload(session.stream());
  if (bias) bias->upload(session.stream());
  if (aux) aux->upload(session.stream());

  void* operands[6] = {a.device,
                       b.device,
                       reads_c ? cin->device : nullptr,
                       d.device,
                       has_bias ? bias->device : nullptr,
                       has_aux ? aux->device : nullptr};
  hal_op_exec_args_t args{};
  args.struct_size = sizeof(args);
  args.operand_count = info.operand_count;
  args.operands = operands;
  args.workspace = workspace;
  args.workspace_bytes = info.workspace_bytes;
  REQUIRE(hal_op_execute(plan, &args, session.stream()) == HAL_SUCCESS);
  d.download(session.stream());
  if (aux) aux->download(session.stream());
  const fake_cublaslt_matmul_t call = lt.last_call();
  if (aux) CHECK(call.aux == aux->device);
  CHECK(call.workspace == workspace);
  CHECK(call.workspace_bytes == info.workspace_bytes);

  // The reference, from the definition.
  const bool t_a = (c.flags & HAL_MATMUL_TRANSPOSE_A) != 0;
  const bool t_b = (c.flags & HAL_MATMUL_TRANSPOSE_B) != 0;
  int64_t batches = 1;
  for (int64_t extent : c.batch) batches *= extent;
  const double e = tolerance_unit(c.out);
  const double atol = e * std::sqrt(static_cast<double>(c.k + 2));
  size_t mismatches = 0;
  for (int64_t z = 0; z < batches; ++z) {
    std::vector<int64_t> index(c.batch.size());
    for (int64_t rest = z, dim = static_cast<int64_t>(c.batch.size()) - 1; dim >= 0; --dim) {
      index[dim] = rest % c.batch[dim];
      rest /= c.batch[dim];
    }
    auto at2 = [&](const Tensor& t, int64_t row, int64_t col) {
      std::vector<int64_t> full = index;
      full.push_back(row);
      full.push_back(col);
      return t.at(full);
    };
    for (int64_t i = 0; i < c.m; ++i) {
      for (int64_t j = 0; j < c.n; ++j) {
        double sum = 0;
        for (int64_t p = 0; p < c.k; ++p) {
          sum += (t_a ? at2(a, p, i) : at2(a, i, p)) * (t_b ? at2(b, j, p) : at2(b, p, j));
        }
        double pre = c.alpha * sum;
        if (reads_c) pre += c.beta * at2(*cin, i, j);
        if (has_bias) pre += bias->at({j});
        const double expected = activate(c.activation, pre);
        const double got = at2(d, i, j);
        if (!(std::fabs(got - expected) <= atol + e * std::fabs(expected))) {
          if (++mismatches <= 5) {
            UNSCOPED_INFO("d[" << z << ", " << i << ", " << j << "] = " << got << ", expected "
                               << expected);
          }
        }
        if (aux) {
          const double saved = at2(*aux, i, j);
          if (!(std::fabs(saved - pre) <= atol + e * std::fabs(pre))) {
            if (++mismatches <= 5) {
              UNSCOPED_INFO("aux[" << z << ", " << i << ", " << j << "] = " << saved
                                   << ", expected " << pre);
            }
          }
        }
      }
    }
  }
  CHECK(mismatches == 0);
  if (workspace != nullptr) hal_mem_free(workspace);
  REQUIRE(hal_op_plan_destroy(plan) == HAL_SUCCESS);
  return call;
}

int32_t cuda_type(hal_dtype_t dtype) {
  return dtype == HAL_DTYPE_F16 ? kR16F : dtype == HAL_DTYPE_BF16 ? kR16BF : kR32F;
}

}  // namespace

TEST_CASE("cuBLASLt is opened at the first matmul plan, never at plugin load", "[cublaslt]") {
  {
    Session session;
    // The plugin loaded, found its devices and has streams: no cuBLASLt yet.
    CHECK(dlopen(HAL_TEST_FAKE_CUBLASLT, RTLD_NOW | RTLD_NOLOAD) == nullptr);
    const Case c = make("plain");
    FakeLt lt;  // opens it now, from the test
    run_case(session, lt, c, 1);
  }
  // Everything the plans and the device made of cuBLASLt was given back.
  FakeLt lt;
  const fake_cublaslt_stats_t after = lt.now();
  CHECK(after.live_handles == 0);
  CHECK(after.live_descs == 0);
  CHECK(after.live_layouts == 0);
  CHECK(after.live_preferences == 0);
}

TEST_CASE("matmul on cuBLASLt matches a float64 reference", "[cublaslt]") {
  Session session;
  FakeLt lt;
  const std::vector<Case> cases = {
      make("plain f32"),
      make("TRANSPOSE_A", [](Case& c) { c.flags = HAL_MATMUL_TRANSPOSE_A; }),
      make("TRANSPOSE_B", [](Case& c) { c.flags = HAL_MATMUL_TRANSPOSE_B; }),
      make("both transposed",
           [](Case& c) { c.flags = HAL_MATMUL_TRANSPOSE_A | HAL_MATMUL_TRANSPOSE_B; }),
      make("padded rows", [](Case& c) { c.pad = 3; }),
      make("alpha, beta and c",
           [](Case& c) {
             c.alpha = 0.5f;
             c.beta = -1.25f;
           }),
      make("bias", [](Case& c) { c.flags = HAL_MATMUL_BIAS; }),
      make("relu", [](Case& c) { c.activation = HAL_ACTIVATION_RELU; }),
      make("bias + relu",
           [](Case& c) {
             c.flags = HAL_MATMUL_BIAS;
             c.activation = HAL_ACTIVATION_RELU;
           }),
      make("gelu_tanh", [](Case& c) { c.activation = HAL_ACTIVATION_GELU_TANH; }),
      make("bias + gelu_tanh, alpha, beta",
           [](Case& c) {
             c.flags = HAL_MATMUL_BIAS | HAL_MATMUL_TRANSPOSE_B;
             c.activation = HAL_ACTIVATION_GELU_TANH;
             c.alpha = 2.0f;
             c.beta = 0.5f;
           }),
      make("batched [3]", [](Case& c) { c.batch = {3}; }),
      make("batched [2, 3] (merged)",
           [](Case& c) {
             c.batch = {2, 3};
             c.flags = HAL_MATMUL_TRANSPOSE_A;
           }),
      make("batched, b broadcast",
           [](Case& c) {
             c.batch = {4};
             c.broadcast_b = true;
           }),
      make("column-major d",
           [](Case& c) {
             c.beta = 1.0f;
             c.d_column_major = true;
           }),
      make("column-major d, transposes",
           [](Case& c) {
             c.flags = HAL_MATMUL_TRANSPOSE_A | HAL_MATMUL_TRANSPOSE_B;
             c.d_column_major = true;
           }),
      make("f16",
           [](Case& c) {
             c.ab = HAL_DTYPE_F16;
             c.out = HAL_DTYPE_F16;
             c.flags = HAL_MATMUL_BIAS;
           }),
      make("f16 -> f32",
           [](Case& c) {
             c.ab = HAL_DTYPE_F16;
             c.out = HAL_DTYPE_F32;
             c.beta = 1.0f;
           }),
      make("bf16",
           [](Case& c) {
             c.ab = HAL_DTYPE_BF16;
             c.out = HAL_DTYPE_BF16;
             c.activation = HAL_ACTIVATION_RELU;
           }),
      make("bf16 -> f32, batched, transposed",
           [](Case& c) {
             c.ab = HAL_DTYPE_BF16;
             c.out = HAL_DTYPE_F32;
             c.batch = {2};
             c.flags = HAL_MATMUL_TRANSPOSE_A | HAL_MATMUL_BIAS;
           }),
      make("bias + gelu_tanh + SAVE_AUX",
           [](Case& c) {
             c.n = 8;  // cuBLASLt's aux leading dimension is a multiple of 8
             c.flags = HAL_MATMUL_BIAS | HAL_MATMUL_SAVE_AUX;
             c.activation = HAL_ACTIVATION_GELU_TANH;
           }),
      make("SAVE_AUX, batched, bf16",
           [](Case& c) {
             c.ab = HAL_DTYPE_BF16;
             c.out = HAL_DTYPE_BF16;
             c.batch = {2};
             c.n = 16;
             c.flags = HAL_MATMUL_SAVE_AUX | HAL_MATMUL_TRANSPOSE_B;
             c.activation = HAL_ACTIVATION_GELU_TANH;
           }),
      make("large k",
           [](Case& c) {
             c.m = 3;
             c.n = 4;
             c.k = 300;
           }),
      make("m = 1, n = 1",
           [](Case& c) {
             c.m = 1;
             c.n = 1;
           }),
  };
  uint32_t seed = 100;
  for (const Case& c : cases) {
    const fake_cublaslt_matmul_t call = run_case(session, lt, c, ++seed);
    CAPTURE(c.name);
    CHECK(call.compute_type == kCompute32F);  // f32, never TF32
    CHECK(call.scale_type == kR32F);
    CHECK(call.a.type == cuda_type(c.ab));
    CHECK(call.d.type == cuda_type(c.out));
    int64_t batches = 1;
    for (int64_t extent : c.batch) batches *= extent;
    CHECK(call.d.batch_count == batches);
    uint32_t epilogue = (c.flags & HAL_MATMUL_BIAS) != 0 ? kEpilogueBias : 0;
    if (c.activation == HAL_ACTIVATION_RELU) epilogue |= kEpilogueRelu;
    if (c.activation == HAL_ACTIVATION_GELU_TANH) epilogue |= kEpilogueGelu;
    if ((c.flags & HAL_MATMUL_SAVE_AUX) != 0) {
      epilogue |= kEpilogueAux;
      CHECK(call.aux_ld == c.n);
      if (batches > 1) CHECK(call.aux_batch_stride == c.m * c.n);
    }
    CHECK(call.epilogue == (epilogue == 0 ? kEpilogueDefault : epilogue));
    if (!c.d_column_major && c.m > 1 && c.n > 1) {
      // d^T = op(b)^T op(a)^T: cuBLASLt's D is [n, m], its A is HAL's b.
      CHECK(call.d.rows == static_cast<uint64_t>(c.n));
      CHECK(call.d.ld == c.n + c.pad);
      CHECK(call.transa == ((c.flags & HAL_MATMUL_TRANSPOSE_B) != 0 ? kOpT : kOpN));
      CHECK(call.transb == ((c.flags & HAL_MATMUL_TRANSPOSE_A) != 0 ? kOpT : kOpN));
    }
    if (c.d_column_major) CHECK(call.d.rows == static_cast<uint64_t>(c.m));
    if (c.broadcast_b) CHECK(call.a.batch_stride == 0);
  }
}

TEST_CASE("matmul on cuBLASLt is planned once and executed many times", "[cublaslt]") {
  Session session;
  FakeLt lt;
  const Case c = make("bias, three executions", [](Case& c) { c.flags = HAL_MATMUL_BIAS; });
  hal_tensor_desc_t ta, tb, tc, td, tbias;
  const hal_op_matmul_desc_t desc = describe(c, &ta, &tb, &tc, &td, &tbias);
  const fake_cublaslt_stats_t before = lt.now();
  hal_op_plan_t plan = nullptr;
  REQUIRE(hal_op_plan_create(session.device(), &desc.header, 0, &plan) == HAL_SUCCESS);
  const fake_cublaslt_stats_t planned = lt.now();
  // Two algorithms: for 16-byte aligned operands and for any others.
  CHECK(planned.heuristic_calls - before.heuristic_calls == 2);
  const hal_op_plan_info_t info = info_of(plan);
  CHECK(info.workspace_bytes == FAKE_CUBLASLT_WORKSPACE_BYTES);

  std::mt19937 random(7);
  Tensor a(session.device(), ta, random), b(session.device(), tb, random);
  Tensor d(session.device(), td, random), bias(session.device(), tbias, random);
  void* workspace = nullptr;
  REQUIRE(hal_mem_alloc(session.device(), HAL_MEMORY_DEVICE, info.workspace_bytes, 0, &workspace) ==
          HAL_SUCCESS);
  void* operands[6] = {a.device, b.device, nullptr, d.device, bias.device, nullptr};
  hal_op_exec_args_t args{};
  args.struct_size = sizeof(args);
  args.operand_count = info.operand_count;
  args.operands = operands;
  args.workspace = workspace;
  args.workspace_bytes = info.workspace_bytes;
  for (int i = 0; i < 3; ++i) REQUIRE(hal_op_execute(plan, &args, session.stream()) == HAL_SUCCESS);
  REQUIRE(hal_stream_synchronize(session.stream()) == HAL_SUCCESS);
  const fake_cublaslt_stats_t ran = lt.now();
  CHECK(ran.heuristic_calls == planned.heuristic_calls);
  CHECK(ran.matmul_calls - planned.matmul_calls == 3);
  const fake_cublaslt_matmul_t call = lt.last_call();
  CHECK(call.bias == bias.device);  // bound at execution
  CHECK(call.algo_id == 2);         // HAL allocations are 256-byte aligned

  // Without the workspace the plan asked for, the loader refuses the call.
  args.workspace = nullptr;
  args.workspace_bytes = 0;
  CHECK(hal_op_execute(plan, &args, session.stream()) != HAL_SUCCESS);
  CHECK(lt.now().matmul_calls == ran.matmul_calls);

  // Concurrent executions of one plan on two streams (each binds its own
  // bias pointer to the shared descriptor under the plan's lock).
  hal_stream_t second = nullptr;
  REQUIRE(hal_stream_create(session.device(), 0, &second) == HAL_SUCCESS);
  args.workspace = workspace;
  args.workspace_bytes = info.workspace_bytes;
  Tensor d2(session.device(), td, random);
  void* operands2[6] = {a.device, b.device, nullptr, d2.device, bias.device, nullptr};
  hal_op_exec_args_t args2 = args;
  args2.operands = operands2;
  void* workspace2 = nullptr;
  REQUIRE(hal_mem_alloc(session.device(), HAL_MEMORY_DEVICE, info.workspace_bytes, 0,
                        &workspace2) == HAL_SUCCESS);
  args2.workspace = workspace2;
  hal_result_t first_result = HAL_SUCCESS, second_result = HAL_SUCCESS;
  std::thread other([&] {
    for (int i = 0; i < 20 && second_result == HAL_SUCCESS; ++i) {
      second_result = hal_op_execute(plan, &args2, second);
    }
  });
  for (int i = 0; i < 20 && first_result == HAL_SUCCESS; ++i) {
    first_result = hal_op_execute(plan, &args, session.stream());
  }
  other.join();
  CHECK(first_result == HAL_SUCCESS);
  CHECK(second_result == HAL_SUCCESS);
  REQUIRE(hal_stream_synchronize(second) == HAL_SUCCESS);
  d.download(session.stream());
  d2.download(session.stream());
  CHECK(d.host == d2.host);  // the same inputs, the same results
  REQUIRE(hal_stream_destroy(second) == HAL_SUCCESS);
  hal_mem_free(workspace2);
  hal_mem_free(workspace);
  REQUIRE(hal_op_plan_destroy(plan) == HAL_SUCCESS);
}

TEST_CASE("matmul on cuBLASLt picks the element-aligned algorithm for unaligned operands",
          "[cublaslt]") {
  Session session;
  FakeLt lt;
  // One element past a 256-byte aligned allocation: 4 bytes for f32.
  const Case c = make("offset by one element", [](Case& c) {
    c.flags = HAL_MATMUL_BIAS;
    c.offset = 1;
  });
  const fake_cublaslt_matmul_t call = run_case(session, lt, c, 11);
  CHECK(call.algo_id == 1);
}

TEST_CASE("matmul cases cuBLASLt cannot express fall through to the portable implementation",
          "[cublaslt]") {
  Session session;
  struct Declined {
    const char* name;
    Case c;
    const char* reason;  // what the decline line says
    void (*edit)(hal_op_matmul_desc_t&);
  };
  const std::vector<Declined> declined = {
      {"SAVE_AUX", make("", [](Case& c) { c.flags = HAL_MATMUL_SAVE_AUX; }),
       "SAVE_AUX without GELU_TANH", [](hal_op_matmul_desc_t& desc) { desc.aux = desc.d; }},
      {"SAVE_AUX with an aux leading dimension of 7",
       make("",
            [](Case& c) {
              c.flags = HAL_MATMUL_SAVE_AUX;
              c.activation = HAL_ACTIVATION_GELU_TANH;
            }),
       "is not a multiple of 8", nullptr},
      {"GELU_ERF", make("", [](Case& c) { c.activation = HAL_ACTIVATION_GELU_ERF; }), "GELU_ERF",
       nullptr},
      {"empty", make("", [](Case& c) { c.k = 0; }), "empty problems", nullptr},
      {"d without a unit stride", make(""), "no unit stride in its last two dimensions",
       [](hal_op_matmul_desc_t& desc) {
         desc.d.strides[1] = 2;
         desc.d.strides[0] = 2 * desc.d.shape[1];
       }},
      {"bias with a column-major d",
       make("",
            [](Case& c) {
              c.flags = HAL_MATMUL_BIAS;
              c.d_column_major = true;
            }),
       "a bias with a column-major d", nullptr},
      {"c of another dtype", make("", [](Case& c) { c.beta = 1.0f; }),
       "cuBLASLt reads c as d's type",
       [](hal_op_matmul_desc_t& desc) { desc.c.dtype = HAL_DTYPE_F16; }},
      {"c in another orientation than d", make("", [](Case& c) { c.beta = 1.0f; }),
       "is not laid out as d",
       [](hal_op_matmul_desc_t& desc) {
         desc.c.strides[0] = 1;
         desc.c.strides[1] = desc.c.shape[0];
       }},
      {"f16 inputs to a bf16 d",
       make("",
            [](Case& c) {
              c.ab = HAL_DTYPE_F16;
              c.out = HAL_DTYPE_BF16;
            }),
       "cuBLASLt's output is the inputs' type or f32", nullptr},
      {"batches that do not merge",
       make("",
            [](Case& c) {
              c.batch = {2, 3};
            }),
       "do not merge into one strided batch",
       [](hal_op_matmul_desc_t& desc) {
         // b's outer batch dimension skips a matrix: not dense within it.
         desc.b.strides[0] = desc.b.strides[1] * 4;
       }},
  };
  for (const Declined& entry : declined) {
    CAPTURE(entry.name);
    hal_tensor_desc_t ta, tb, tc, td, tbias;
    hal_op_matmul_desc_t desc = describe(entry.c, &ta, &tb, &tc, &td, &tbias);
    if (entry.edit != nullptr) entry.edit(desc);
    hal_op_plan_t plan = nullptr;
    const hal_result_t result = hal_op_plan_create(session.device(), &desc.header, 0, &plan);
    const std::string expected = std::string("cuda.cublaslt: cuBLASLt: ");
    if (result == HAL_SUCCESS) {
      // The fake driver lists the HAL dialect (NVRTC is here), so the
      // portable kernels plan; the fake runs no kernels, so their numbers
      // are left to conformance on a GPU.
      const hal_op_plan_info_t info = info_of(plan);
      CHECK(std::string(info.implementation) == "portable");
      const std::string declines = info.declines;
      CAPTURE(declines);
      CHECK(declines.find(expected + "") != std::string::npos);
      CHECK(declines.find(entry.reason) != std::string::npos);
      REQUIRE(hal_op_plan_destroy(plan) == HAL_SUCCESS);
    } else {
      // Without NVRTC no implementation serves it: the error lists the decline.
      CHECK(result == HAL_ERROR_UNSUPPORTED);
      const std::string message = last_detail().message;
      CAPTURE(message);
      CHECK(message.find(entry.reason) != std::string::npos);
    }
  }
}

// A GPU gets the portable matmul's group-shared tiled kernel (SPEC.md
// §17.6.1), CPUs the register-blocked one: the launch the stand-in driver
// records (it runs no kernel; the kernel's results are checked on the cpu
// plugin and PoCL by ops.portable_matmul, its NVRTC compile by
// cuda.ptxas_report).
TEST_CASE("the portable matmul on a GPU launches matmul_tiled, one 16x16 block per 64x64 tile",
          "[cublaslt]") {
  setenv("HAL_OPS_IMPLEMENTATIONS", "portable", 1);
  const char* forced = GENERATE(static_cast<const char*>(nullptr), "blocked");
  if (forced != nullptr) setenv("HAL_OPS_PORTABLE_MATMUL", forced, 1);
  Session session;
  void* driver = dlopen(HAL_TEST_FAKE_CUDA, RTLD_NOW);
  REQUIRE(driver != nullptr);
  const auto launch_count =
      reinterpret_cast<fake_cuda_launch_count_fn>(dlsym(driver, "fake_cuda_launch_count"));
  const auto launch_get =
      reinterpret_cast<fake_cuda_launch_get_fn>(dlsym(driver, "fake_cuda_launch_get"));
  REQUIRE(launch_count != nullptr);
  REQUIRE(launch_get != nullptr);
  // 3 batches of [130 x 20] @ [20 x 70]: 2 column tiles, 3 row tiles of 64.
  hal_op_matmul_desc_t desc{};
  desc.header.struct_size = sizeof desc;
  desc.header.kind = HAL_OP_MATMUL;
  desc.activation = HAL_ACTIVATION_NONE;
  desc.alpha = 1.0f;
  const int64_t a_shape[3] = {3, 130, 20}, b_shape[3] = {3, 20, 70}, d_shape[3] = {3, 130, 70};
  hal_tensor_desc_contiguous(&desc.a, HAL_DTYPE_BF16, 3, a_shape);
  hal_tensor_desc_contiguous(&desc.b, HAL_DTYPE_BF16, 3, b_shape);
  hal_tensor_desc_contiguous(&desc.d, HAL_DTYPE_F32, 3, d_shape);
  hal_op_plan_t plan = nullptr;
  const hal_result_t planned = hal_op_plan_create(session.device(), &desc.header, 0, &plan);
  INFO(hal_error_last_message());
  REQUIRE(planned == HAL_SUCCESS);
  CHECK(std::string(info_of(plan).implementation) == "portable");
  void *a = nullptr, *b = nullptr, *d = nullptr;
  REQUIRE(hal_mem_alloc(session.device(), HAL_MEMORY_DEVICE, 3 * 130 * 20 * 2, 0, &a) ==
          HAL_SUCCESS);
  REQUIRE(hal_mem_alloc(session.device(), HAL_MEMORY_DEVICE, 3 * 20 * 70 * 2, 0, &b) ==
          HAL_SUCCESS);
  REQUIRE(hal_mem_alloc(session.device(), HAL_MEMORY_DEVICE, 3 * 130 * 70 * 4, 0, &d) ==
          HAL_SUCCESS);
  void* operands[HAL_MATMUL_OPERAND_COUNT] = {a, b, nullptr, d, nullptr, nullptr};
  hal_op_exec_args_t args{};
  args.struct_size = sizeof args;
  args.operand_count = HAL_MATMUL_OPERAND_COUNT;
  args.operands = operands;
  const size_t before = launch_count();
  REQUIRE(hal_op_execute(plan, &args, session.stream()) == HAL_SUCCESS);
  REQUIRE(hal_stream_synchronize(session.stream()) == HAL_SUCCESS);
  REQUIRE(launch_count() == before + 1);
  fake_cuda_launch_t seen{};
  REQUIRE(launch_get(before, &seen) == 1);
  if (forced == nullptr) {
    CHECK(std::string(seen.name) == "matmul_tiled");
    CHECK(seen.block[0] == 16);
    CHECK(seen.block[1] == 16);
    CHECK(seen.block[2] == 1);
    CHECK(seen.grid[0] == 2);
    CHECK(seen.grid[1] == 3);
    CHECK(seen.grid[2] == 3);
    CHECK(seen.shared_bytes == 0);  // its tiles are static shared memory
    // The trailing dtype (bf16) and tile offsets (0: one launch covers it).
    REQUIRE(seen.param_count >= 4);
    size_t offset = 0;
    for (uint32_t i = 0; i + 4 < seen.param_count; ++i) offset += seen.param_sizes[i];
    REQUIRE(seen.param_sizes[seen.param_count - 4] == 4);
    int32_t dtype = -1;
    int64_t bases[3] = {-1, -1, -1};
    std::memcpy(&dtype, seen.params + offset, 4);
    std::memcpy(bases, seen.params + offset + 4, 24);
    CHECK(dtype == HAL_DTYPE_BF16);
    CHECK(bases[0] == 0);
    CHECK(bases[1] == 0);
    CHECK(bases[2] == 0);
  } else {
    CHECK(std::string(seen.name) == "matmul_bf16");
  }
  REQUIRE(hal_op_plan_destroy(plan) == HAL_SUCCESS);
  hal_mem_free(a);
  hal_mem_free(b);
  hal_mem_free(d);
  dlclose(driver);
  unsetenv("HAL_OPS_PORTABLE_MATMUL");
  unsetenv("HAL_OPS_IMPLEMENTATIONS");
}

TEST_CASE("matmul declines with the dlerror when cuBLASLt is absent", "[cublaslt]") {
  setenv("HAL_CUDA_CUBLASLT_PATH", "/nonexistent/libcublasLt.so.13", 1);
  Session session;
  hal_tensor_desc_t ta, tb, tc, td, tbias;
  const hal_op_matmul_desc_t desc = describe(make("absent"), &ta, &tb, &tc, &td, &tbias);
  hal_op_plan_t plan = nullptr;
  const hal_result_t result = hal_op_plan_create(session.device(), &desc.header, 0, &plan);
  const std::string expected =
      "cuda.cublaslt: cuBLASLt: /nonexistent/libcublasLt.so.13 not found: "
      "/nonexistent/libcublasLt.so.13: "
      "cannot open shared object file";
  if (result == HAL_SUCCESS) {
    const std::string declines = info_of(plan).declines;
    CAPTURE(declines);
    CHECK(declines.find(expected) != std::string::npos);
    CHECK(std::string(info_of(plan).implementation) == "portable");
    REQUIRE(hal_op_plan_destroy(plan) == HAL_SUCCESS);
  } else {
    CHECK(result == HAL_ERROR_UNSUPPORTED);
    CHECK(std::string(last_detail().message).find(expected) != std::string::npos);
  }
  setenv("HAL_CUDA_CUBLASLT_PATH", HAL_TEST_FAKE_CUBLASLT, 1);
}

TEST_CASE("cuBLASLt's failures carry the cublasStatus_t and its name", "[cublaslt]") {
  Session session;
  FakeLt lt;
  hal_tensor_desc_t ta, tb, tc, td, tbias;
  const hal_op_matmul_desc_t desc = describe(make("errors"), &ta, &tb, &tc, &td, &tbias);

  SECTION("cublasLtCreate fails: the plan declines with the status") {
    lt.fail_next("create", 1, 1);  // CUBLAS_STATUS_NOT_INITIALIZED
    hal_op_plan_t plan = nullptr;
    const hal_result_t result = hal_op_plan_create(session.device(), &desc.header, 0, &plan);
    const std::string text = result == HAL_SUCCESS ? std::string(info_of(plan).declines)
                                                   : std::string(last_detail().message);
    CAPTURE(text);
    CHECK(
        text.find(
            "cuda.cublaslt: cuBLASLt: cublasLtCreate failed: CUBLAS_STATUS_NOT_INITIALIZED (1)") !=
        std::string::npos);
    if (result == HAL_SUCCESS) hal_op_plan_destroy(plan);
  }
  SECTION("no algorithm: the plan declines with the heuristic's status") {
    lt.fail_next("heuristic", 15, 2);  // CUBLAS_STATUS_NOT_SUPPORTED, for both algorithms
    hal_op_plan_t plan = nullptr;
    const hal_result_t result = hal_op_plan_create(session.device(), &desc.header, 0, &plan);
    const std::string text = result == HAL_SUCCESS ? std::string(info_of(plan).declines)
                                                   : std::string(last_detail().message);
    CAPTURE(text);
    CHECK(text.find("cublasLtMatmulAlgoGetHeuristic has no algorithm for a/b=f32 d=f32 m=5 n=7 "
                    "k=9 batch=1: CUBLAS_STATUS_NOT_SUPPORTED (15)") != std::string::npos);
    if (result == HAL_SUCCESS) hal_op_plan_destroy(plan);
  }
  SECTION("cublasLtMatmul fails: the execution's error names the status") {
    hal_op_plan_t plan = nullptr;
    REQUIRE(hal_op_plan_create(session.device(), &desc.header, 0, &plan) == HAL_SUCCESS);
    const hal_op_plan_info_t info = info_of(plan);
    REQUIRE(std::string(info.implementation) == "cuda.cublaslt");
    std::mt19937 random(3);
    Tensor a(session.device(), ta, random), b(session.device(), tb, random);
    Tensor d(session.device(), td, random);
    void* workspace = nullptr;
    REQUIRE(hal_mem_alloc(session.device(), HAL_MEMORY_DEVICE, info.workspace_bytes, 0,
                          &workspace) == HAL_SUCCESS);
    void* operands[6] = {a.device, b.device, nullptr, d.device, nullptr, nullptr};
    hal_op_exec_args_t args{};
    args.struct_size = sizeof(args);
    args.operand_count = info.operand_count;
    args.operands = operands;
    args.workspace = workspace;
    args.workspace_bytes = info.workspace_bytes;
    struct Expected {
      int status;
      hal_result_t result;
      const char* name;
    };
    auto expect_failure = [&](const Expected& e) {
      CAPTURE(e.name);
      lt.fail_next("matmul", e.status, 1);
      CHECK(hal_op_execute(plan, &args, session.stream()) == e.result);
      const hal_error_detail_t detail = last_detail();
      CHECK(detail.native_code == e.status);
      CHECK(std::string(detail.plugin) == "cuda");
      CHECK(std::string(detail.message).find(std::string("cublasLtMatmul failed: ") + e.name) !=
            std::string::npos);
    };
    // Refusals at the call leave the stream usable.
    expect_failure({7, HAL_ERROR_INVALID_ARGUMENT, "CUBLAS_STATUS_INVALID_VALUE (7)"});
    expect_failure({3, HAL_ERROR_OUT_OF_MEMORY, "CUBLAS_STATUS_ALLOC_FAILED (3)"});
    CHECK(hal_op_execute(plan, &args, session.stream()) == HAL_SUCCESS);
    REQUIRE(hal_stream_synchronize(session.stream()) == HAL_SUCCESS);
    // A kernel that failed is lost work: the stream is unusable afterwards
    // (HAL_ERROR_DEVICE_LOST, as the loader keeps it).
    expect_failure({13, HAL_ERROR_DEVICE_LOST, "CUBLAS_STATUS_EXECUTION_FAILED (13)"});
    CHECK(hal_op_execute(plan, &args, session.stream()) == HAL_ERROR_DEVICE_LOST);
    hal_mem_free(workspace);
    REQUIRE(hal_op_plan_destroy(plan) == HAL_SUCCESS);
  }
}

TEST_CASE("other ops are declined by the cuda plugin with a reason", "[cublaslt]") {
  Session session;
  hal_op_softmax_desc_t desc{};
  desc.header.struct_size = sizeof(desc);
  desc.header.kind = HAL_OP_SOFTMAX;
  const int64_t shape[2] = {4, 8};
  hal_tensor_desc_contiguous(&desc.x, HAL_DTYPE_F32, 2, shape);
  hal_tensor_desc_contiguous(&desc.y, HAL_DTYPE_F32, 2, shape);
  hal_op_plan_t plan = nullptr;
  const hal_result_t result = hal_op_plan_create(session.device(), &desc.header, 0, &plan);
  const std::string text = result == HAL_SUCCESS ? std::string(info_of(plan).declines)
                                                 : std::string(last_detail().message);
  CAPTURE(text);
  CHECK(text.find("cuda: ") != std::string::npos);
  CHECK(text.find("the plugin has no implementation of its own for softmax") != std::string::npos);
  if (result == HAL_SUCCESS) hal_op_plan_destroy(plan);
}
