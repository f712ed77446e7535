// The cpu plugin's own operators (ops/, oneDNN) driven through its table:
// HAL_OP_MATMUL against a float64 reference written from the definition in
// api/hal/ops.h, d = act(alpha * op(a) @ op(b) + beta * c + bias), over
// seeded random inputs; and the cases it declines, with their reasons.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "float16_bits.hpp"
#include "table_helpers.hpp"

using namespace hal::test;

namespace {

bool has_f16(const hal_op_matmul_desc_t& desc) {
  return desc.a.dtype == HAL_DTYPE_F16 || desc.b.dtype == HAL_DTYPE_F16 ||
         desc.c.dtype == HAL_DTYPE_F16 || desc.d.dtype == HAL_DTYPE_F16 ||
         desc.bias.dtype == HAL_DTYPE_F16;
}

hal_tensor_desc_t dense(hal_dtype_t dtype, std::vector<int64_t> shape) {
  hal_tensor_desc_t tensor{};
  hal_tensor_desc_contiguous(&tensor, dtype, static_cast<uint32_t>(shape.size()), shape.data());
  return tensor;
}

// Elements a tensor's layout spans (max offset + 1).
int64_t span(const hal_tensor_desc_t& tensor) {
  int64_t last = 0;
  for (uint32_t d = 0; d < tensor.rank; ++d) last += (tensor.shape[d] - 1) * tensor.strides[d];
  return last + 1;
}

// One operand in the plugin's memory, with a host view of its elements as
// doubles (the exact values stored).
struct Operand {
  hal_tensor_desc_t tensor{};
  void* memory = nullptr;
  int64_t elements = 0;

  Operand() = default;
  Operand(const hal_plugin_table_v1_t& t, hal_impl_device_t* device, hal_tensor_desc_t layout,
          std::mt19937& random, int64_t padding = 0)
      : tensor(layout), elements(span(layout) + padding) {
    memory = alloc(t, device, static_cast<size_t>(elements) * HAL_DTYPE_SIZE(tensor.dtype) + 64);
    std::uniform_real_distribution<float> values(-1.0f, 1.0f);
    for (int64_t i = 0; i < elements; ++i) set(i, values(random));
  }
  void set(int64_t i, float value) {
    if (tensor.dtype == HAL_DTYPE_BF16) {
      static_cast<uint16_t*>(memory)[i] = to_bf16(value);
    } else if (tensor.dtype == HAL_DTYPE_F16) {
      static_cast<uint16_t*>(memory)[i] = to_f16(value);
    } else {
      static_cast<float*>(memory)[i] = value;
    }
  }
  double get(int64_t i) const {
    if (tensor.dtype == HAL_DTYPE_BF16) return from_bf16(static_cast<const uint16_t*>(memory)[i]);
    if (tensor.dtype == HAL_DTYPE_F16) return from_f16(static_cast<const uint16_t*>(memory)[i]);
    return static_cast<const float*>(memory)[i];
  }
  std::vector<double> snapshot() const {
    std::vector<double> out(static_cast<size_t>(elements));
    for (int64_t i = 0; i < elements; ++i) out[static_cast<size_t>(i)] = get(i);
    return out;
  }
  // How far one step along dimension |d| moves: its stride, or 0 where an extent of 1
  // broadcasts.
  int64_t step(uint32_t d) const { return tensor.shape[d] == 1 ? 0 : tensor.strides[d]; }
  // Offset of element |index| (index.size() == rank); an extent of 1
  // broadcasts (index 0).
  int64_t offset(const std::vector<int64_t>& index) const {
    int64_t at = 0;
    for (uint32_t d = 0; d < tensor.rank; ++d) {
      at += (tensor.shape[d] == 1 ? 0 : index[d]) * tensor.strides[d];
    }
    return at;
  }
};

double activate(hal_activation_t activation, double x) {
  switch (activation) {
    case HAL_ACTIVATION_RELU:
      return x > 0 ? x : 0;
    case HAL_ACTIVATION_GELU_TANH:
      return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
    case HAL_ACTIVATION_GELU_ERF:
      return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
    default:
      return x;
  }
}

struct Case {
  hal_op_matmul_desc_t desc{};
  Operand a, b, c, d, bias;
  bool c_is_d = false;
};

hal_op_matmul_desc_t matmul_desc(uint32_t flags, hal_activation_t activation, float alpha,
                                 float beta) {
  hal_op_matmul_desc_t desc{};
  desc.header.struct_size = sizeof(desc);
  desc.header.kind = HAL_OP_MATMUL;
  desc.flags = flags;
  desc.activation = activation;
  desc.alpha = alpha;
  desc.beta = beta;
  return desc;
}

// Float64 reference of d (every element of d's span; elements outside d's
// view keep |before|'s values) from the inputs as stored.
std::vector<double> reference(const Case& k, const std::vector<double>& d_before) {
  const hal_op_matmul_desc_t& desc = k.desc;
  const hal_tensor_desc_t& dt = k.d.tensor;
  const uint32_t rank = dt.rank;
  const bool ta = (desc.flags & HAL_MATMUL_TRANSPOSE_A) != 0;
  const bool tb = (desc.flags & HAL_MATMUL_TRANSPOSE_B) != 0;
  const int64_t m = dt.shape[rank - 2], n = dt.shape[rank - 1];
  const int64_t kk = ta ? k.a.tensor.shape[rank - 2] : k.a.tensor.shape[rank - 1];
  std::vector<double> out = d_before;
  const std::vector<double> c_values = k.c_is_d ? d_before : k.c.snapshot();
  int64_t batches = 1;
  for (uint32_t i = 0; i + 2 < rank; ++i) batches *= dt.shape[i];
  std::vector<int64_t> index(rank);
  for (int64_t batch = 0; batch < batches; ++batch) {
    int64_t rest = batch;
    for (uint32_t i = rank - 2; i-- > 0;) {
      index[i] = rest % dt.shape[i];
      rest /= dt.shape[i];
    }
    // The batch's origin in a and b; a row or column step is the stride of its dimension, or
    // 0 where an extent of 1 broadcasts (as offset() reads it). Stepping keeps the float64
    // loop free of allocations: under ASan it was most of this file's 60 s.
    index[rank - 2] = 0;
    index[rank - 1] = 0;
    const int64_t a_origin = k.a.offset(index), b_origin = k.b.offset(index);
    const int64_t a_rows = k.a.step(rank - 2), a_columns = k.a.step(rank - 1);
    const int64_t b_rows = k.b.step(rank - 2), b_columns = k.b.step(rank - 1);
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double sum = 0;
        for (int64_t p = 0; p < kk; ++p) {
          const int64_t a_at =
              a_origin + (ta ? p * a_rows + i * a_columns : i * a_rows + p * a_columns);
          const int64_t b_at =
              b_origin + (tb ? j * b_rows + p * b_columns : p * b_rows + j * b_columns);
          sum += k.a.get(a_at) * k.b.get(b_at);
        }
        std::vector<int64_t> di = index;
        di[rank - 2] = i;
        di[rank - 1] = j;
        double value = desc.alpha * sum;
        if (desc.beta != 0) {
          const Operand& c = k.c_is_d ? k.d : k.c;
          value += desc.beta * c_values[static_cast<size_t>(c.offset(di))];
        }
        if (desc.flags & HAL_MATMUL_BIAS) value += k.bias.get(j * k.bias.tensor.strides[0]);
        out[static_cast<size_t>(k.d.offset(di))] = activate(desc.activation, value);
      }
    }
  }
  return out;
}

// Plans |desc|; |workspace| gets the bytes each execution needs: oneDNN's
// scratchpad, and the f32 copies where an f16 tensor is widened.
hal_result_t plan(const hal_plugin_table_v1_t& t, hal_impl_device_t* device,
                  const hal_op_matmul_desc_t& desc, hal_impl_op_plan_t** out,
                  hal_op_plan_flags_t flags = 0, size_t* workspace = nullptr) {
  size_t bytes = 1;
  const char* name = nullptr;
  const hal_result_t result = t.op_plan_create(device, &desc.header, flags, out, &bytes, &name);
  if (result == HAL_SUCCESS) {
    if (has_f16(desc)) CHECK(bytes > 0);
    CHECK(std::string(name) == "cpu.onednn");
    if (workspace != nullptr) *workspace = bytes;
  }
  return result;
}

void execute(const hal_plugin_table_v1_t& t, hal_impl_op_plan_t* op, hal_impl_stream_t* stream,
             const Case& k, void* workspace = nullptr, size_t workspace_bytes = 0) {
  void* operands[6] = {k.a.memory,
                       k.b.memory,
                       k.desc.beta != 0 ? (k.c_is_d ? k.d.memory : k.c.memory) : nullptr,
                       k.d.memory,
                       (k.desc.flags & HAL_MATMUL_BIAS) ? k.bias.memory : nullptr,
                       nullptr};
  hal_op_exec_args_t args{};
  args.struct_size = sizeof(args);
  args.operand_count = 6;
  args.operands = operands;
  args.workspace = workspace;
  args.workspace_bytes = workspace_bytes;
  REQUIRE(t.op_execute(op, stream, &args) == HAL_SUCCESS);
}

// Plans, runs and checks |k| against the reference: within |relative| of
// the sum of the magnitudes of the terms (plus the output rounding). A
// workspace starts |workspace_shift| bytes into its allocation.
void run_and_check(const hal_plugin_table_v1_t& t, hal_impl_device_t* device, Case& k,
                   double relative, size_t workspace_shift = 0) {
  hal_impl_op_plan_t* op = nullptr;
  size_t workspace_bytes = 0;
  if (const hal_result_t planned = plan(t, device, k.desc, &op, 0, &workspace_bytes);
      planned != HAL_SUCCESS) {
    // oneDNN has bf16 matmul only from AVX-512 on (avx512_core); on an AVX2
    // CPU it declines with its reason and the portable kernel serves.
    const bool bf16 = k.desc.a.dtype == HAL_DTYPE_BF16 || k.desc.d.dtype == HAL_DTYPE_BF16;
    if (planned == HAL_ERROR_UNSUPPORTED && bf16 && !__builtin_cpu_supports("avx512bw")) {
      WARN("no AVX-512 on this CPU: " << last_error().message);
      return;
    }
    FAIL(last_error().message);
  }
  hal_impl_stream_t* stream = make_stream(t, device);
  const std::vector<double> before = k.d.snapshot();
  const std::vector<double> expected = reference(k, before);
  void* workspace = workspace_bytes > 0
                        ? static_cast<char*>(alloc(t, device, workspace_bytes + workspace_shift)) +
                              workspace_shift
                        : nullptr;
  execute(t, op, stream, k, workspace, workspace_bytes);
  REQUIRE(t.stream_synchronize(stream) == HAL_SUCCESS);
  const std::vector<double> got = k.d.snapshot();
  const double output_rounding = k.d.tensor.dtype == HAL_DTYPE_BF16  ? 1.0 / 128
                                 : k.d.tensor.dtype == HAL_DTYPE_F16 ? 1.0 / 1024
                                                                     : 1e-6;
  // Terms are at most 1 in magnitude: |sum| <= k, |c| <= 1, |bias| <= 1.
  const int64_t rank = k.d.tensor.rank;
  const int64_t terms = ((k.desc.flags & HAL_MATMUL_TRANSPOSE_A) ? k.a.tensor.shape[rank - 2]
                                                                 : k.a.tensor.shape[rank - 1]) +
                        2;
  size_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double tolerance = relative * terms + output_rounding * std::fabs(expected[i]);
    if (!(std::fabs(got[i] - expected[i]) <= tolerance)) {
      if (bad++ < 5)
        UNSCOPED_INFO("element " << i << ": got " << got[i] << ", expected " << expected[i]);
    }
  }
  CHECK(bad == 0);
  t.stream_destroy(stream);
  REQUIRE(t.op_plan_destroy(op) == HAL_SUCCESS);
}

Case make_case(hal_op_matmul_desc_t desc, hal_dtype_t in, hal_dtype_t out,
               std::vector<int64_t> batch, int64_t m, int64_t n, int64_t k) {
  Case c;
  c.desc = desc;
  auto shape = [&](int64_t rows, int64_t cols) {
    std::vector<int64_t> s = batch;
    s.push_back(rows);
    s.push_back(cols);
    return s;
  };
  const bool ta = desc.flags & HAL_MATMUL_TRANSPOSE_A, tb = desc.flags & HAL_MATMUL_TRANSPOSE_B;
  c.desc.a = dense(in, ta ? shape(k, m) : shape(m, k));
  c.desc.b = dense(in, tb ? shape(n, k) : shape(k, n));
  c.desc.c = dense(out, shape(m, n));
  c.desc.d = dense(out, shape(m, n));
  c.desc.bias = dense(in, {n});
  return c;
}

void allocate(const hal_plugin_table_v1_t& t, hal_impl_device_t* device, std::mt19937& random,
              Case& c) {
  c.a = Operand(t, device, c.desc.a, random);
  c.b = Operand(t, device, c.desc.b, random);
  c.d = Operand(t, device, c.desc.d, random, 8);
  if (c.desc.beta != 0 && !c.c_is_d) c.c = Operand(t, device, c.desc.c, random);
  if (c.desc.flags & HAL_MATMUL_BIAS) c.bias = Operand(t, device, c.desc.bias, random);
}

}  // namespace

TEST_CASE("onednn matmul: f32 with every epilogue matches the float64 reference",
          "[cpu][table][ops]") {
  PluginInstance plugin;
  const auto& t = plugin.table();
  hal_impl_device_t* device = plugin.device(0);
  if (t.op_plan_create == nullptr) {
    WARN("built without oneDNN: the plugin has no operators");
    return;
  }
  std::mt19937 random(20261201);
  struct Variant {
    uint32_t flags;
    hal_activation_t activation;
    float alpha, beta;
    bool c_is_d;
  };
  const Variant variants[] = {
      {0, HAL_ACTIVATION_NONE, 1.0f, 0.0f, false},
      {HAL_MATMUL_BIAS, HAL_ACTIVATION_RELU, 1.0f, 0.0f, false},
      {HAL_MATMUL_BIAS, HAL_ACTIVATION_GELU_TANH, 0.5f, 0.25f, false},
      {HAL_MATMUL_BIAS, HAL_ACTIVATION_GELU_ERF, -1.5f, 1.0f, true},
      {HAL_MATMUL_TRANSPOSE_A, HAL_ACTIVATION_NONE, 2.0f, 0.0f, false},
      {HAL_MATMUL_TRANSPOSE_B | HAL_MATMUL_BIAS, HAL_ACTIVATION_RELU, 1.0f, -0.5f, true},
      {HAL_MATMUL_TRANSPOSE_A | HAL_MATMUL_TRANSPOSE_B, HAL_ACTIVATION_GELU_ERF, 1.0f, 0.5f, false},
  };
  for (const Variant& v : variants) {
    for (const auto& [m, n, k] : {std::tuple{37, 53, 29}, std::tuple{1, 17, 64}}) {
      CAPTURE(v.flags, v.activation, v.alpha, v.beta, v.c_is_d, m, n, k);
      Case c = make_case(matmul_desc(v.flags, v.activation, v.alpha, v.beta), HAL_DTYPE_F32,
                         HAL_DTYPE_F32, {}, m, n, k);
      c.c_is_d = v.c_is_d;
      allocate(t, device, random, c);
      run_and_check(t, device, c, 1e-6);
    }
  }
}

TEST_CASE("onednn matmul: bf16 inputs with f32 accumulation, bf16 or f32 output",
          "[cpu][table][ops]") {
  PluginInstance plugin;
  const auto& t = plugin.table();
  hal_impl_device_t* device = plugin.device(0);
  if (t.op_plan_create == nullptr) return;
  std::mt19937 random(7);
  for (hal_dtype_t out : {HAL_DTYPE_BF16, HAL_DTYPE_F32}) {
    for (const auto& [flags, activation, alpha] :
         {std::tuple{0u, HAL_ACTIVATION_NONE, 1.0f},
          std::tuple{uint32_t{HAL_MATMUL_BIAS}, HAL_ACTIVATION_GELU_TANH, 1.0f},
          std::tuple{uint32_t{HAL_MATMUL_BIAS | HAL_MATMUL_TRANSPOSE_B}, HAL_ACTIVATION_RELU,
                     0.75f}}) {
      CAPTURE(out, flags, activation, alpha);
      Case c = make_case(matmul_desc(flags, activation, alpha, 0.0f), HAL_DTYPE_BF16, out, {2}, 33,
                         47, 70);
      allocate(t, device, random, c);
      run_and_check(t, device, c, 1e-5);
    }
  }
}

TEST_CASE(
    "onednn matmul: f16 tensors (a, b, c, d, bias, with f32 and bf16 beside them) widened to f32 "
    "in the workspace, over transposes, epilogues, broadcast batches and strided views",
    "[cpu][table][ops]") {
  PluginInstance plugin;
  const auto& t = plugin.table();
  hal_impl_device_t* device = plugin.device(0);
  if (t.op_plan_create == nullptr) return;
  std::mt19937 random(16);
  struct Variant {
    uint32_t flags;
    hal_activation_t activation;
    float alpha, beta;
    bool c_is_d;
    hal_dtype_t in, out;
  };
  const Variant variants[] = {
      // The plain product (dnnl_sgemm inside), into f16 and into f32 and bf16.
      {0, HAL_ACTIVATION_NONE, 1.0f, 0.0f, false, HAL_DTYPE_F16, HAL_DTYPE_F16},
      {0, HAL_ACTIVATION_NONE, 1.0f, 0.0f, false, HAL_DTYPE_F16, HAL_DTYPE_F32},
      {HAL_MATMUL_TRANSPOSE_A, HAL_ACTIVATION_NONE, -0.5f, 0.75f, true, HAL_DTYPE_F16,
       HAL_DTYPE_BF16},
      // f32 inputs into an f16 d, c read from d.
      {HAL_MATMUL_TRANSPOSE_B, HAL_ACTIVATION_NONE, 2.0f, -1.0f, true, HAL_DTYPE_F32,
       HAL_DTYPE_F16},
      // Epilogues on the primitive.
      {HAL_MATMUL_BIAS, HAL_ACTIVATION_GELU_TANH, 1.0f, 0.25f, false, HAL_DTYPE_F16, HAL_DTYPE_F16},
      {HAL_MATMUL_BIAS | HAL_MATMUL_TRANSPOSE_A | HAL_MATMUL_TRANSPOSE_B, HAL_ACTIVATION_RELU, 1.5f,
       0.0f, false, HAL_DTYPE_F16, HAL_DTYPE_F32},
  };
  for (const Variant& v : variants) {
    for (const auto& [m, n, k] : {std::tuple{37, 53, 29}, std::tuple{300, 70, 130}}) {
      CAPTURE(v.flags, v.activation, v.alpha, v.beta, v.c_is_d, v.in, v.out, m, n, k);
      Case c =
          make_case(matmul_desc(v.flags, v.activation, v.alpha, v.beta), v.in, v.out, {}, m, n, k);
      c.c_is_d = v.c_is_d;
      allocate(t, device, random, c);
      run_and_check(t, device, c, 1e-6);
    }
  }
  // Batches: a broadcasts with stride 0, b with extent 1, c with stride 0;
  // rows of a and d padded, a column slice of b, an f16 bias every 2nd.
  Case c = make_case(matmul_desc(HAL_MATMUL_BIAS, HAL_ACTIVATION_NONE, 1.25f, 0.5f), HAL_DTYPE_F16,
                     HAL_DTYPE_F16, {3, 2}, 9, 11, 13);
  c.desc.a.strides[3] = 1;
  c.desc.a.strides[2] = 20;
  c.desc.a.strides[1] = 20 * 9;
  c.desc.a.strides[0] = 0;
  c.desc.b.shape[1] = 1;
  c.desc.b.strides[2] = 30;
  c.desc.b.strides[1] = 30 * 13;
  c.desc.b.strides[0] = 30 * 13;
  c.desc.d.strides[2] = 16;
  c.desc.d.strides[1] = 16 * 9;
  c.desc.d.strides[0] = 2 * 16 * 9;
  c.desc.c.strides[0] = 0;
  c.desc.bias.strides[0] = 2;
  allocate(t, device, random, c);
  run_and_check(t, device, c, 1e-6);
  // The same at an odd workspace address (SPEC asks no alignment of it).
  allocate(t, device, random, c);
  run_and_check(t, device, c, 1e-6, 3);
}

TEST_CASE("onednn matmul: batches broadcast with stride 0 or extent 1", "[cpu][table][ops]") {
  PluginInstance plugin;
  const auto& t = plugin.table();
  hal_impl_device_t* device = plugin.device(0);
  if (t.op_plan_create == nullptr) return;
  std::mt19937 random(99);
  Case c = make_case(matmul_desc(HAL_MATMUL_BIAS, HAL_ACTIVATION_NONE, 1, 0.5f), HAL_DTYPE_F32,
                     HAL_DTYPE_F32, {3, 2}, 9, 11, 13);
  // a: extent 1 in dimension 0; b: stride 0 in dimension 1; c: stride 0 in
  // dimension 0.
  c.desc.a.shape[0] = 1;
  c.desc.a.strides[0] = 0;
  c.desc.b.strides[1] = 0;
  c.desc.b.strides[0] = 13 * 11;
  c.desc.c.strides[0] = 0;
  allocate(t, device, random, c);
  run_and_check(t, device, c, 1e-6);
}

TEST_CASE("onednn matmul: strided views leave the gaps untouched", "[cpu][table][ops]") {
  PluginInstance plugin;
  const auto& t = plugin.table();
  hal_impl_device_t* device = plugin.device(0);
  if (t.op_plan_create == nullptr) return;
  std::mt19937 random(5);
  // alpha 1: oneDNN's bias argument; else a binary post-op.
  for (const auto& [dtype, alpha] :
       {std::pair{HAL_DTYPE_F32, 1.25f}, std::pair{HAL_DTYPE_F32, 1.0f},
        std::pair{HAL_DTYPE_BF16, 1.25f}, std::pair{HAL_DTYPE_BF16, 1.0f}}) {
    CAPTURE(dtype, alpha);
    Case c = make_case(matmul_desc(HAL_MATMUL_BIAS, HAL_ACTIVATION_RELU, alpha, 0.75f), dtype,
                       dtype, {2}, 19, 23, 31);
    // Rows of a padded to 40, b a column slice of a [2, 31, 50] tensor
    // starting at column 0, d with rows of 30 and a column stride of 1,
    // c read transposed-in-memory (column-major rows), bias every 2nd.
    c.desc.a.strides[1] = 40;
    c.desc.a.strides[0] = 40 * 19;
    c.desc.b.strides[1] = 50;
    c.desc.b.strides[0] = 50 * 31;
    c.desc.d.strides[1] = 30;
    c.desc.d.strides[0] = 30 * 19;
    c.desc.c.strides[2] = 19;
    c.desc.c.strides[1] = 1;
    c.desc.c.strides[0] = 19 * 23;
    c.desc.bias.strides[0] = 2;
    allocate(t, device, random, c);
    run_and_check(t, device, c, dtype == HAL_DTYPE_F32 ? 1e-6 : 1e-5);
  }
}

TEST_CASE("onednn matmul: plain f32 products (dnnl_sgemm) over every layout it addresses",
          "[cpu][table][ops]") {
  PluginInstance plugin;
  const auto& t = plugin.table();
  hal_impl_device_t* device = plugin.device(0);
  if (t.op_plan_create == nullptr) return;
  std::mt19937 random(20261203);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const uint32_t transposes[] = {0, HAL_MATMUL_TRANSPOSE_A, HAL_MATMUL_TRANSPOSE_B,
                                 HAL_MATMUL_TRANSPOSE_A | HAL_MATMUL_TRANSPOSE_B};
  struct Scaling {
    float alpha, beta;
    bool c_is_d;
  };
  const Scaling scalings[] = {{1.0f, 0.0f, false}, {-0.5f, 0.75f, false}, {2.0f, -1.0f, true}};
  for (size_t flags_index = 0; flags_index < std::size(transposes); ++flags_index) {
    const uint32_t flags = transposes[flags_index];
    for (size_t scaling_index = 0; scaling_index < std::size(scalings); ++scaling_index) {
      const Scaling& scaling = scalings[scaling_index];
      // The last two are split over the plugin's pool (above 128^3 multiply-
      // adds): by rows, and by columns, each with a shorter last piece.
      for (const auto& [m, n, k] :
           {std::tuple{37, 53, 29}, std::tuple{1, 17, 64}, std::tuple{33, 1, 5},
            std::tuple{64, 64, 1}, std::tuple{300, 70, 130}, std::tuple{40, 333, 200}}) {
        for (const bool padded : {false, true}) {
          // The split shapes meet one scaling per (transpose, padding), rotating so that every
          // scaling meets both splits: the float64 reference of all 48 took 86 s under ASan, and
          // the pool's split does not depend on alpha, beta or c == d (the small shapes cross
          // every combination).
          const bool split = static_cast<int64_t>(m) * n * k > 128 * 128 * 128;
          if (split &&
              scaling_index != (flags_index * 2 + (padded ? 1 : 0)) % std::size(scalings)) {
            continue;
          }
          CAPTURE(flags, scaling.alpha, scaling.beta, scaling.c_is_d, m, n, k, padded);
          // A leading batch of 1 with a stride of its own: still one product.
          Case c = make_case(matmul_desc(flags, HAL_ACTIVATION_NONE, scaling.alpha, scaling.beta),
                             HAL_DTYPE_F32, HAL_DTYPE_F32, {1}, m, n, k);
          c.c_is_d = scaling.c_is_d;
          if (padded) {
            // Leading dimensions wider than the matrices: rows (or, stored
            // transposed, columns) 7 elements apart more than dense.
            for (hal_tensor_desc_t* tensor : {&c.desc.a, &c.desc.b, &c.desc.d}) {
              tensor->strides[1] = tensor->shape[2] + 7;
              tensor->strides[0] = 3 * tensor->strides[1] * tensor->shape[1];
            }
          }
          allocate(t, device, random, c);
          if (scaling.beta == 0.0f) {
            // beta 0 must not read d: NaNs there stay out of the result.
            // (Only the matrix's own elements: the gaps are checked untouched.)
            for (int64_t i = 0; i < m; ++i) {
              for (int64_t j = 0; j < n; ++j) c.d.set(i * c.desc.d.strides[1] + j, nan);
            }
          }
          run_and_check(t, device, c, 1e-6);
        }
      }
    }
  }
}

TEST_CASE("onednn matmul: deterministic run to run, and a plan destroyed with work queued",
          "[cpu][table][ops]") {
  PluginInstance plugin;
  const auto& t = plugin.table();
  hal_impl_device_t* device = plugin.device(1);
  if (t.op_plan_create == nullptr) return;
  std::mt19937 random(11);
  Case c = make_case(matmul_desc(0, HAL_ACTIVATION_GELU_ERF, 1, 0), HAL_DTYPE_F32, HAL_DTYPE_F32,
                     {}, 64, 96, 300);
  allocate(t, device, random, c);
  hal_impl_op_plan_t* op = nullptr;
  size_t workspace_bytes = 0;
  REQUIRE(plan(t, device, c.desc, &op, HAL_OP_PLAN_DETERMINISTIC, &workspace_bytes) == HAL_SUCCESS);
  void* workspace = workspace_bytes > 0 ? alloc(t, device, workspace_bytes) : nullptr;
  hal_impl_stream_t* stream = make_stream(t, device);
  execute(t, op, stream, c, workspace, workspace_bytes);
  REQUIRE(t.stream_synchronize(stream) == HAL_SUCCESS);
  std::vector<float> first(static_cast<float*>(c.d.memory),
                           static_cast<float*>(c.d.memory) + 64 * 96);
  std::memset(c.d.memory, 0, 64 * 96 * 4);
  execute(t, op, stream, c, workspace, workspace_bytes);
  REQUIRE(t.op_plan_destroy(op) == HAL_SUCCESS);  // the queued execution keeps its state
  REQUIRE(t.stream_synchronize(stream) == HAL_SUCCESS);
  CHECK(std::memcmp(first.data(), c.d.memory, first.size() * 4) == 0);
  t.stream_destroy(stream);
}

TEST_CASE("onednn matmul: declines what it does not serve, saying why", "[cpu][table][ops]") {
  PluginInstance plugin;
  const auto& t = plugin.table();
  hal_impl_device_t* device = plugin.device(0);
  if (t.op_plan_create == nullptr) return;
  std::mt19937 random(3);
  auto declined = [&](const hal_op_header_t* header, const char* reason) {
    hal_impl_op_plan_t* op = nullptr;
    size_t workspace = 0;
    const char* name = nullptr;
    last_error() = {};
    CHECK(t.op_plan_create(device, header, 0, &op, &workspace, &name) == HAL_ERROR_UNSUPPORTED);
    CHECK(last_error().result == HAL_ERROR_UNSUPPORTED);
    CHECK_THAT(last_error().message, Catch::Contains(reason));
    CHECK(op == nullptr);
  };
  Case base = make_case(matmul_desc(0, HAL_ACTIVATION_NONE, 1, 0), HAL_DTYPE_F32, HAL_DTYPE_F32, {},
                        8, 8, 8);
  hal_op_matmul_desc_t desc = base.desc;
  desc.flags = HAL_MATMUL_SAVE_AUX;
  desc.aux = desc.d;
  declined(&desc.header, "SAVE_AUX");
  desc = base.desc;
  desc.flags = HAL_MATMUL_SAVE_AUX;
  desc.aux = desc.d;
  desc.a.dtype = desc.b.dtype = desc.d.dtype = desc.aux.dtype = HAL_DTYPE_F16;
  declined(&desc.header, "widened to f32: SAVE_AUX");
  desc = base.desc;
  desc.a.shape[0] = desc.d.shape[0] = 0;
  declined(&desc.header, "empty");
  desc = base.desc;
  desc.activation = HAL_ACTIVATION_SILU;
  declined(&desc.header, "activation");
  desc = base.desc;
  desc.beta = 1;
  desc.c.dtype = HAL_DTYPE_BF16;
  declined(&desc.header, "c's dtype");

  hal_op_swiglu_desc_t swiglu{};
  swiglu.header.struct_size = sizeof(swiglu);
  swiglu.header.kind = HAL_OP_SWIGLU;
  swiglu.x = dense(HAL_DTYPE_F32, {4, 16});
  swiglu.out = dense(HAL_DTYPE_F32, {4, 8});
  // Other kinds go to cpu.native, whose decline lists what it serves.
  declined(&swiglu.header, "cpu.native serves");
}
