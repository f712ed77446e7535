// Every scalar of every op at the edges of its rule (SPEC.md §17.2, §17.6).
// Each op computes in f32, so each scalar is checked as the f32 the op
// computes with: a descriptor field breaking its rule is refused by
// hal_op_plan_create with HAL_ERROR_INVALID_ARGUMENT naming the field, and no
// plan is made; a run-time scalar (hal_op_scalar_t) breaking its rule is
// refused by hal_op_execute naming the scalar, and nothing is written. The
// values just inside each edge pass. The run-time rules are checked through
// the cpu plugin's own implementations and through the portable ones
// (HAL_OPS_IMPLEMENTATIONS=portable): both inherit them from the loader.
#include <catch2/catch.hpp>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "hal.h"
#include "op_session.hpp"

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
constexpr float kMax = std::numeric_limits<float>::max();
constexpr float kMinNormal = std::numeric_limits<float>::min();
constexpr float kMinSubnormal = std::numeric_limits<float>::denorm_min();
const float kBelowOne = std::nextafter(1.0f, 0.0f);
const float kBelowMinNormal = std::nextafter(kMinNormal, 0.0f);

// The op tests' session (op_session.hpp), with arrays filled in place (cpu device memory is host
// memory).
class Session : public op_test::Session {
 public:
  // Device memory of |count| elements of 4 bytes, each holding |fill|.
  template <typename T>
  T* array(size_t count, T fill) {
    static_assert(sizeof(T) == 4);
    T* typed = static_cast<T*>(alloc_bytes(count * 4));
    for (size_t i = 0; i < count; ++i) typed[i] = fill;
    return typed;
  }
};

hal_tensor_desc_t dense(std::vector<int64_t> shape, hal_dtype_t dtype = HAL_DTYPE_F32) {
  hal_tensor_desc_t tensor;
  hal_tensor_desc_contiguous(&tensor, dtype, static_cast<uint32_t>(shape.size()), shape.data());
  return tensor;
}

template <typename Desc>
Desc header_of(hal_op_kind_t kind) {
  Desc desc{};
  desc.header.struct_size = sizeof(Desc);
  desc.header.kind = kind;
  return desc;
}

// "1e+30", "-inf", "nan" for the case's name.
std::string text(double value) {
  char buffer[48];
  std::snprintf(buffer, sizeof buffer, "%.9g", value);
  return buffer;
}

// ---- descriptor fields -----------------------------------------------------

// One f32 field of one op: a valid descriptor with the field set to a value.
struct Field {
  const char* op;
  const char* name;  // as the message names it: "desc->alpha"
  hal_op_kind_t kind;
  std::function<void(float value, std::function<void(const hal_op_header_t*)> plan)> with_value;
  std::vector<float> accepted;
  std::vector<float> refused;
};

// The rules' edges (scalars.hpp): a finite number; one >= 0; one in [0, 1);
// a normal number > 0 (an epsilon, RoPE's base).
const std::vector<float> kFiniteAccepted = {0.0f, -0.0f, 1.0f,          -1.0f,
                                            kMax, -kMax, kMinSubnormal, -kMinSubnormal};
const std::vector<float> kFiniteRefused = {kInf, -kInf, kNan};
const std::vector<float> kNonNegativeAccepted = {0.0f, -0.0f, kMinSubnormal, 0.1f, kMax};
const std::vector<float> kNonNegativeRefused = {-kMinSubnormal, -0.1f, -kMax, kInf, -kInf, kNan};
const std::vector<float> kUnitAccepted = {0.0f, -0.0f, kMinSubnormal, 0.5f, kBelowOne};
const std::vector<float> kUnitRefused = {1.0f, -kMinSubnormal, -0.5f, 1.5f,
                                         kMax, kInf,           -kInf, kNan};
const std::vector<float> kPositiveNormalAccepted = {kMinNormal, 1e-12f, 1e-5f, 1.0f, 1e4f, kMax};
const std::vector<float> kPositiveNormalRefused = {
    0.0f, -0.0f, kMinSubnormal, kBelowMinNormal, -kMinNormal, -1e-5f, kInf, -kInf, kNan};

template <typename Desc>
using Setter = std::function<void(Desc&, float)>;

// A Field of op |desc|'s kind whose value |set| writes.
template <typename Desc>
Field field(const char* op, const char* name, Desc desc, Setter<Desc> set,
            std::vector<float> accepted, std::vector<float> refused) {
  Field f;
  f.op = op;
  f.name = name;
  f.kind = desc.header.kind;
  f.with_value = [desc, set](float value, std::function<void(const hal_op_header_t*)> plan) {
    Desc copy = desc;
    set(copy, value);
    plan(&copy.header);
  };
  f.accepted = std::move(accepted);
  f.refused = std::move(refused);
  return f;
}

std::vector<Field> fields() {
  std::vector<Field> out;
  auto matmul = header_of<hal_op_matmul_desc_t>(HAL_OP_MATMUL);
  matmul.alpha = 1.0f;
  matmul.beta = 1.0f;
  matmul.a = dense({4, 3});
  matmul.b = dense({3, 5});
  matmul.c = matmul.d = dense({4, 5});
  out.push_back(field<hal_op_matmul_desc_t>(
      "matmul", "desc->alpha", matmul, [](auto& d, float v) { d.alpha = v; }, kFiniteAccepted,
      kFiniteRefused));
  out.push_back(field<hal_op_matmul_desc_t>(
      "matmul", "desc->beta", matmul, [](auto& d, float v) { d.beta = v; }, kFiniteAccepted,
      kFiniteRefused));

  auto binary = header_of<hal_op_binary_desc_t>(HAL_OP_BINARY);
  binary.op = HAL_BINARY_ADD;
  binary.a = binary.b = binary.out = dense({3, 4});
  out.push_back(field<hal_op_binary_desc_t>(
      "binary", "desc->alpha", binary, [](auto& d, float v) { d.alpha = v; }, kFiniteAccepted,
      kFiniteRefused));

  auto binary_scalar = header_of<hal_op_binary_scalar_desc_t>(HAL_OP_BINARY_SCALAR);
  binary_scalar.op = HAL_BINARY_MUL;
  binary_scalar.scalar_is_float = 1;
  binary_scalar.x = binary_scalar.out = dense({3, 4});
  out.push_back(field<hal_op_binary_scalar_desc_t>(
      "binary_scalar", "desc->alpha", binary_scalar, [](auto& d, float v) { d.alpha = v; },
      kFiniteAccepted, kFiniteRefused));

  for (hal_op_kind_t kind : {HAL_OP_UNARY, HAL_OP_UNARY_BACKWARD}) {
    auto unary = header_of<hal_op_unary_desc_t>(kind);
    unary.activation = HAL_ACTIVATION_GELU_TANH;
    unary.x = unary.out = unary.grad_x = dense({3, 4});
    out.push_back(field<hal_op_unary_desc_t>(
        kind == HAL_OP_UNARY ? "unary" : "unary_backward", "desc->alpha", unary,
        [](auto& d, float v) { d.alpha = v; }, kFiniteAccepted, kFiniteRefused));
  }

  for (hal_norm_kind_t norm : {HAL_NORM_LAYERNORM, HAL_NORM_RMSNORM}) {
    auto forward = header_of<hal_op_norm_desc_t>(HAL_OP_NORM);
    forward.norm = norm;
    forward.x = forward.y = dense({3, 8});
    out.push_back(field<hal_op_norm_desc_t>(
        norm == HAL_NORM_LAYERNORM ? "norm (layernorm)" : "norm (rmsnorm)", "desc->epsilon",
        forward, [](auto& d, float v) { d.epsilon = v; }, kPositiveNormalAccepted,
        kPositiveNormalRefused));
    // The backward reads the saved rstd: epsilon is unused, 0 included.
    auto backward = header_of<hal_op_norm_desc_t>(HAL_OP_NORM_BACKWARD);
    backward.norm = norm;
    backward.x = backward.grad_y = backward.grad_x = dense({3, 8});
    backward.mean = backward.rstd = dense({3});
    out.push_back(field<hal_op_norm_desc_t>(
        "norm_backward", "desc->epsilon", backward, [](auto& d, float v) { d.epsilon = v; },
        kNonNegativeAccepted, kNonNegativeRefused));
  }

  auto rope = header_of<hal_op_rope_desc_t>(HAL_OP_ROPE);
  rope.rotary_dim = 8;
  rope.x = rope.out = dense({1, 4, 2, 8});
  out.push_back(field<hal_op_rope_desc_t>(
      "rope", "desc->base", rope, [](auto& d, float v) { d.base = v; }, kPositiveNormalAccepted,
      kPositiveNormalRefused));

  auto ce = header_of<hal_op_cross_entropy_desc_t>(HAL_OP_CROSS_ENTROPY);
  ce.ignore_index = -100;
  ce.logits = dense({4, 5});
  ce.labels = dense({4}, HAL_DTYPE_I32);
  ce.loss = dense({1});
  out.push_back(field<hal_op_cross_entropy_desc_t>(
      "cross_entropy", "desc->label_smoothing", ce, [](auto& d, float v) { d.label_smoothing = v; },
      kUnitAccepted, kUnitRefused));

  static const int64_t numels[] = {8};
  auto adamw = header_of<hal_op_adamw_desc_t>(HAL_OP_ADAMW);
  adamw.tensor_count = 1;
  adamw.param_dtype = adamw.grad_dtype = HAL_DTYPE_F32;
  adamw.numels = numels;
  adamw.beta1 = 0.9f;
  adamw.beta2 = 0.999f;
  adamw.epsilon = 1e-8f;
  out.push_back(field<hal_op_adamw_desc_t>(
      "adamw", "desc->beta1", adamw, [](auto& d, float v) { d.beta1 = v; }, kUnitAccepted,
      kUnitRefused));
  out.push_back(field<hal_op_adamw_desc_t>(
      "adamw", "desc->beta2", adamw, [](auto& d, float v) { d.beta2 = v; }, kUnitAccepted,
      kUnitRefused));
  out.push_back(field<hal_op_adamw_desc_t>(
      "adamw", "desc->epsilon", adamw, [](auto& d, float v) { d.epsilon = v; },
      kPositiveNormalAccepted, kPositiveNormalRefused));
  out.push_back(field<hal_op_adamw_desc_t>(
      "adamw", "desc->weight_decay", adamw, [](auto& d, float v) { d.weight_decay = v; },
      kNonNegativeAccepted, kNonNegativeRefused));
  out.push_back(field<hal_op_adamw_desc_t>(
      "adamw", "desc->max_grad_norm", adamw, [](auto& d, float v) { d.max_grad_norm = v; },
      kFiniteAccepted, kFiniteRefused));

  auto dropout = header_of<hal_op_dropout_desc_t>(HAL_OP_DROPOUT);
  dropout.x = dropout.out = dense({16});
  out.push_back(field<hal_op_dropout_desc_t>(
      "dropout", "desc->probability", dropout, [](auto& d, float v) { d.probability = v; },
      kUnitAccepted, kUnitRefused));

  // Batch and group norm (§17.6.10): the forward divides by
  // sqrt(var + epsilon); the backward reads the saved (or running) stats.
  for (hal_op_kind_t kind : {HAL_OP_BATCH_NORM, HAL_OP_BATCH_NORM_BACKWARD}) {
    const bool backward = kind == HAL_OP_BATCH_NORM_BACKWARD;
    auto batch_norm = header_of<hal_op_batch_norm_desc_t>(kind);
    batch_norm.layout = HAL_CHANNELS_FIRST;
    batch_norm.flags = HAL_BATCH_NORM_TRAINING;
    batch_norm.x = batch_norm.y = batch_norm.grad_y = batch_norm.grad_x = dense({2, 3, 4});
    batch_norm.saved_mean = batch_norm.saved_rstd = dense({3});
    out.push_back(field<hal_op_batch_norm_desc_t>(
        backward ? "batch_norm_backward" : "batch_norm", "desc->epsilon", batch_norm,
        [](auto& d, float v) { d.epsilon = v; },
        backward ? kNonNegativeAccepted : kPositiveNormalAccepted,
        backward ? kNonNegativeRefused : kPositiveNormalRefused));
  }
  for (hal_op_kind_t kind : {HAL_OP_GROUP_NORM, HAL_OP_GROUP_NORM_BACKWARD}) {
    const bool backward = kind == HAL_OP_GROUP_NORM_BACKWARD;
    auto group_norm = header_of<hal_op_group_norm_desc_t>(kind);
    group_norm.layout = HAL_CHANNELS_FIRST;
    group_norm.groups = 2;
    group_norm.x = group_norm.y = group_norm.grad_y = group_norm.grad_x = dense({2, 4, 3});
    group_norm.mean = group_norm.rstd = dense({2, 2});
    out.push_back(field<hal_op_group_norm_desc_t>(
        backward ? "group_norm_backward" : "group_norm", "desc->epsilon", group_norm,
        [](auto& d, float v) { d.epsilon = v; },
        backward ? kNonNegativeAccepted : kPositiveNormalAccepted,
        backward ? kNonNegativeRefused : kPositiveNormalRefused));
  }

  // The paged KV cache: the append's RoPE base (with rope_dim > 0) and the
  // attention's scale.
  auto append = header_of<hal_op_paged_kv_append_desc_t>(HAL_OP_PAGED_KV_APPEND);
  append.rope_dim = 8;
  append.k_new = append.v_new = dense({1, 1, 2, 8});
  append.k_cache = append.v_cache = dense({4, 4, 2, 8});
  append.block_table = dense({1, 2}, HAL_DTYPE_I32);
  append.seq_lens = dense({1}, HAL_DTYPE_I32);
  out.push_back(field<hal_op_paged_kv_append_desc_t>(
      "paged_kv_append", "desc->rope_base", append, [](auto& d, float v) { d.rope_base = v; },
      kPositiveNormalAccepted, kPositiveNormalRefused));
  auto paged = header_of<hal_op_paged_attention_desc_t>(HAL_OP_PAGED_ATTENTION);
  paged.q = paged.out = dense({1, 1, 4, 8});
  paged.k_cache = paged.v_cache = dense({4, 4, 2, 8});
  paged.block_table = dense({1, 2}, HAL_DTYPE_I32);
  paged.seq_lens = dense({1}, HAL_DTYPE_I32);
  paged.lse = dense({1, 4, 1});
  out.push_back(field<hal_op_paged_attention_desc_t>(
      "paged_attention", "desc->scale", paged, [](auto& d, float v) { d.scale = v; },
      kFiniteAccepted, kFiniteRefused));

  for (hal_op_kind_t kind : {HAL_OP_ATTENTION, HAL_OP_ATTENTION_BACKWARD}) {
    auto attention = header_of<hal_op_attention_desc_t>(kind);
    attention.batch = 1;
    attention.q = attention.k = attention.v = attention.out = dense({1, 4, 2, 8});
    attention.grad_out = attention.grad_q = attention.grad_k = attention.grad_v =
        dense({1, 4, 2, 8});
    attention.lse = dense({1, 2, 4});
    out.push_back(field<hal_op_attention_desc_t>(
        kind == HAL_OP_ATTENTION ? "attention" : "attention_backward", "desc->scale", attention,
        [](auto& d, float v) { d.scale = v; }, kFiniteAccepted, kFiniteRefused));
  }
  // LSQ's gradient factor, read with a learned scale (GRAD_SCALE) only.
  auto fake_quantize = header_of<hal_op_fake_quantize_desc_t>(HAL_OP_FAKE_QUANTIZE_BACKWARD);
  fake_quantize.qdtype = HAL_DTYPE_I8;
  fake_quantize.flags = HAL_FAKE_QUANTIZE_GRAD_SCALE;
  fake_quantize.x = fake_quantize.grad_y = fake_quantize.grad_x = dense({3, 4});
  fake_quantize.scale = fake_quantize.grad_scale = dense({1, 1});
  out.push_back(field<hal_op_fake_quantize_desc_t>(
      "fake_quantize_backward", "desc->grad_scale_factor", fake_quantize,
      [](auto& d, float v) { d.grad_scale_factor = v; }, kFiniteAccepted, kFiniteRefused));
  return out;
}

// The ops whose descriptors have no float field and whose executions take no
// float scalar: nothing to check in f32.
const std::set<hal_op_kind_t> kWithoutFloatScalars = {HAL_OP_BIAS_ACTIVATION_BACKWARD,
                                                      HAL_OP_GROUPED_MATMUL,
                                                      HAL_OP_SOFTMAX,
                                                      HAL_OP_SOFTMAX_BACKWARD,
                                                      HAL_OP_SWIGLU,
                                                      HAL_OP_SWIGLU_BACKWARD,
                                                      HAL_OP_REDUCE,
                                                      HAL_OP_EMBEDDING,
                                                      HAL_OP_EMBEDDING_BACKWARD,
                                                      HAL_OP_CAST,
                                                      HAL_OP_PERMUTE,
                                                      HAL_OP_TOPK_GATING,
                                                      HAL_OP_UNARY_MATH,
                                                      HAL_OP_SCAN,
                                                      HAL_OP_GATHER,
                                                      HAL_OP_SCATTER,
                                                      HAL_OP_CAT,
                                                      HAL_OP_CONVOLUTION,
                                                      HAL_OP_CONVOLUTION_BACKWARD_DATA,
                                                      HAL_OP_CONVOLUTION_BACKWARD_WEIGHTS,
                                                      HAL_OP_POOLING,
                                                      HAL_OP_POOLING_BACKWARD,
                                                      HAL_OP_QUANTIZE,
                                                      HAL_OP_DEQUANTIZE,
                                                      HAL_OP_SCALED_MATMUL,
                                                      HAL_OP_FAKE_QUANTIZE};

// The ops whose run-time scalars the TEST_CASEs below check.
const std::set<hal_op_kind_t> kRunTimeScalarsTested = {
    HAL_OP_CROSS_ENTROPY, HAL_OP_ADAMW, HAL_OP_DROPOUT, HAL_OP_BINARY_SCALAR,
    HAL_OP_WHERE,         HAL_OP_CLAMP, HAL_OP_FILL};

}  // namespace

TEST_CASE("every op kind is classified: its float scalars are tested, or it has none") {
  Session session;
  std::set<hal_op_kind_t> covered = kWithoutFloatScalars;
  covered.insert(kRunTimeScalarsTested.begin(), kRunTimeScalarsTested.end());
  for (const Field& f : fields()) covered.insert(f.kind);
  for (uint32_t kind = 1; kind < HAL_OP_KIND_COUNT; ++kind) {
    // The values reserved for ops not in this build are no kind at all. A
    // zero descriptor as large as struct_size says (the loader reads the
    // op's whole v1 struct), larger than any op's.
    std::vector<uint64_t> storage(512, 0);
    auto* header = reinterpret_cast<hal_op_header_t*>(storage.data());
    header->struct_size = storage.size() * sizeof(uint64_t);
    header->kind = static_cast<hal_op_kind_t>(kind);
    hal_op_plan_t plan = nullptr;
    if (hal_op_plan_create(session.device(), header, 0, &plan) == HAL_SUCCESS) {
      hal_op_plan_destroy(plan);
    }
    if (std::string(hal_error_last_message()).find("is not a hal_op_kind_t") != std::string::npos)
      continue;
    INFO("op kind " << kind << ": add its scalars to fields() or to kWithoutFloatScalars");
    CHECK(covered.count(static_cast<hal_op_kind_t>(kind)) == 1);
  }
}

TEST_CASE("a descriptor scalar is refused in f32 at the edge of its rule, naming the field") {
  Session session;
  for (const Field& f : fields()) {
    for (float value : f.accepted) {
      f.with_value(value, [&](const hal_op_header_t* desc) {
        hal_op_plan_t plan = nullptr;
        const hal_result_t result = hal_op_plan_create(session.device(), desc, 0, &plan);
        INFO(f.op << " " << f.name << " = " << text(value) << ": " << hal_error_last_message());
        CHECK(result == HAL_SUCCESS);
        hal_op_plan_destroy(plan);
      });
    }
    for (float value : f.refused) {
      f.with_value(value, [&](const hal_op_header_t* desc) {
        hal_op_plan_t plan = nullptr;
        const hal_result_t result = hal_op_plan_create(session.device(), desc, 0, &plan);
        const std::string message = hal_error_last_message();
        INFO(f.op << " " << f.name << " = " << text(value) << ": " << message);
        CHECK(result == HAL_ERROR_INVALID_ARGUMENT);
        CHECK(plan == nullptr);
        CHECK(message.find(f.name) != std::string::npos);
      });
    }
  }
}

// ---- run-time scalars ------------------------------------------------------

namespace {

constexpr double kDoubleMax = std::numeric_limits<double>::max();
constexpr double kDoubleInf = std::numeric_limits<double>::infinity();
constexpr double kDoubleNan = std::numeric_limits<double>::quiet_NaN();
// The largest double that rounds to FLT_MAX, and the smallest that rounds to
// inf (the tie between FLT_MAX and 2^128 rounds to even: inf).
constexpr double kLastToFloatMax = 0x1.fffffefffffffp+127;
constexpr double kFirstToInf = 0x1.ffffffp+127;
// Just below FLT_MIN as a double: rounds up to FLT_MIN.
constexpr double kRoundsToMinNormal = 0x1.fffffffffffffp-127;

// The edges of an f64 scalar computed in f32 (any sign); a non-negative one
// drops the negative values from |accepted| and refuses them.
const std::vector<double> kF32Accepted = {0.0,
                                          1.0,
                                          -1.0,
                                          1e-3,
                                          1e38,
                                          -1e38,
                                          kMax,
                                          -double{kMax},
                                          kLastToFloatMax,
                                          kMinNormal,
                                          -double{kMinNormal},
                                          kRoundsToMinNormal};
const std::vector<double> kF32Refused = {
    kFirstToInf, -kFirstToInf,  1e39,        1e300,      -1e300,
    kDoubleMax,  kDoubleInf,    -kDoubleInf, kDoubleNan, 1e-40,
    -1e-40,      kMinSubnormal, 1e-50,       -1e-300,    double{kBelowMinNormal}};

constexpr uint32_t kSentinel = 0x40e00000u;  // 7.0f

// One op with run-time scalars, planned by the default list or only by the
// portable implementation, over small operands of its own.
class RunTimeOp {
 public:
  RunTimeOp(Session& session, const hal_op_header_t* desc, bool portable) : session_(session) {
    if (portable) setenv("HAL_OPS_IMPLEMENTATIONS", "portable", 1);
    const hal_result_t result = hal_op_plan_create(session.device(), desc, 0, &plan_);
    if (portable) unsetenv("HAL_OPS_IMPLEMENTATIONS");
    INFO(hal_error_last_message());
    REQUIRE(result == HAL_SUCCESS);
    hal_op_plan_info_t info{};
    info.struct_size = sizeof info;
    REQUIRE(hal_op_plan_get_info(plan_, &info) == HAL_SUCCESS);
    implementation_ = info.implementation;
    if (portable) REQUIRE(implementation_ == "portable");
    if (info.workspace_bytes > 0) {
      REQUIRE(hal_mem_alloc(session.device(), HAL_MEMORY_DEVICE, info.workspace_bytes, 0,
                            &workspace_) == HAL_SUCCESS);
      workspace_bytes_ = info.workspace_bytes;
    }
  }
  ~RunTimeOp() {
    hal_op_plan_destroy(plan_);
    hal_mem_free(workspace_);
  }
  RunTimeOp(const RunTimeOp&) = delete;
  RunTimeOp& operator=(const RunTimeOp&) = delete;

  const std::string& implementation() const { return implementation_; }
  // An operand of |words| 4-byte elements; written ones are checked for the
  // sentinel after a refused execution.
  void* operand(size_t words, bool written, float fill = 1.0f) {
    void* p = written ? static_cast<void*>(session_.array<uint32_t>(words, kSentinel))
                      : static_cast<void*>(session_.array<float>(words, fill));
    operands_.push_back(p);
    if (written) written_.push_back({p, words});
    return p;
  }
  void absent() { operands_.push_back(nullptr); }

  // Executes with |scalars|; the written operands start from the sentinel.
  // Returns the result, the message, and whether they still hold it.
  hal_result_t execute(const std::vector<hal_op_scalar_t>& scalars, std::string* message,
                       bool* untouched) {
    for (const auto& [data, words] : written_) {
      auto* bits = static_cast<uint32_t*>(data);
      for (size_t i = 0; i < words; ++i) bits[i] = kSentinel;
    }
    hal_op_exec_args_t args{};
    args.struct_size = sizeof args;
    args.operand_count = static_cast<uint32_t>(operands_.size());
    args.operands = operands_.data();
    args.scalar_count = static_cast<uint32_t>(scalars.size());
    args.scalars = scalars.data();
    args.workspace = workspace_;
    args.workspace_bytes = workspace_bytes_;
    const hal_result_t result = hal_op_execute(plan_, &args, session_.stream());
    *message = hal_error_last_message();
    REQUIRE(hal_stream_synchronize(session_.stream()) == HAL_SUCCESS);
    *untouched = true;
    for (const auto& [data, words] : written_) {
      const auto* bits = static_cast<const uint32_t*>(data);
      for (size_t i = 0; i < words; ++i) *untouched = *untouched && bits[i] == kSentinel;
    }
    return result;
  }

 private:
  Session& session_;
  hal_op_plan_t plan_ = nullptr;
  std::string implementation_;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  std::vector<void*> operands_;
  std::vector<std::pair<void*, size_t>> written_;
};

hal_op_scalar_t f64(double value) {
  hal_op_scalar_t scalar{};
  scalar.f64 = value;
  return scalar;
}
hal_op_scalar_t i64(int64_t value) {
  hal_op_scalar_t scalar{};
  scalar.i64 = value;
  return scalar;
}
hal_op_scalar_t u64(uint64_t value) {
  hal_op_scalar_t scalar{};
  scalar.u64 = value;
  return scalar;
}

// Scalar |index| named |name| takes each value: the accepted ones execute,
// the refused ones give HAL_ERROR_INVALID_ARGUMENT naming it and write
// nothing. |scalars| holds valid values for the others.
void check_scalar(RunTimeOp& op, std::vector<hal_op_scalar_t> scalars, size_t index,
                  const char* name, const std::vector<hal_op_scalar_t>& accepted,
                  const std::vector<hal_op_scalar_t>& refused, const std::string& shown) {
  for (const hal_op_scalar_t& value : accepted) {
    scalars[index] = value;
    std::string message;
    bool untouched = false;
    const hal_result_t result = op.execute(scalars, &message, &untouched);
    INFO(op.implementation() << " " << name << " = " << text(value.f64) << " / " << value.i64 << " "
                             << shown << ": " << message);
    CHECK(result == HAL_SUCCESS);
    CHECK_FALSE(untouched);  // it ran
  }
  for (const hal_op_scalar_t& value : refused) {
    scalars[index] = value;
    std::string message;
    bool untouched = false;
    const hal_result_t result = op.execute(scalars, &message, &untouched);
    INFO(op.implementation() << " " << name << " = " << text(value.f64) << " / " << value.i64 << " "
                             << shown << ": " << message);
    CHECK(result == HAL_ERROR_INVALID_ARGUMENT);
    CHECK(message.find(name) != std::string::npos);
    CHECK(untouched);
  }
}

std::vector<hal_op_scalar_t> as_f64(const std::vector<double>& values) {
  std::vector<hal_op_scalar_t> out;
  for (double v : values) out.push_back(f64(v));
  return out;
}

// Edges of an f64 scalar the op computes with in f32, by sign rule.
std::vector<double> f32_accepted(bool non_negative) {
  std::vector<double> out;
  for (double v : kF32Accepted) {
    if (!non_negative || !std::signbit(v)) out.push_back(v);
  }
  return out;
}
std::vector<double> f32_refused(bool non_negative) {
  std::vector<double> out = kF32Refused;
  if (non_negative) {
    for (double v : kF32Accepted) {
      if (std::signbit(v) && v != 0.0) out.push_back(v);
    }
  }
  return out;
}

}  // namespace

TEST_CASE("cross-entropy's grad_scale is checked in f32, by every implementation") {
  Session session;
  auto desc = header_of<hal_op_cross_entropy_desc_t>(HAL_OP_CROSS_ENTROPY);
  desc.ignore_index = -100;
  desc.has_grad = 1;
  desc.logits = desc.grad_logits = dense({4, 5});
  desc.labels = dense({4}, HAL_DTYPE_I32);
  desc.loss = dense({1});
  for (bool portable : {false, true}) {
    RunTimeOp op(session, &desc.header, portable);
    op.operand(20, false, 0.25f);
    int32_t* labels = static_cast<int32_t*>(op.operand(4, false));
    for (int32_t r = 0; r < 4; ++r) labels[r] = r;
    op.operand(1, true);
    op.absent();
    op.operand(20, true);
    check_scalar(op, {f64(1.0)}, 0, "grad_scale", as_f64(f32_accepted(false)),
                 as_f64(f32_refused(false)), "(any sign)");
  }
}

TEST_CASE("AdamW's lr is checked in f32 and its step >= 1, by every implementation") {
  Session session;
  static const int64_t numels[] = {8};
  auto desc = header_of<hal_op_adamw_desc_t>(HAL_OP_ADAMW);
  desc.tensor_count = 1;
  desc.param_dtype = desc.grad_dtype = HAL_DTYPE_F32;
  desc.numels = numels;
  desc.beta1 = 0.9f;
  desc.beta2 = 0.999f;
  desc.epsilon = 1e-8f;
  desc.weight_decay = 0.01f;
  for (bool portable : {false, true}) {
    RunTimeOp op(session, &desc.header, portable);
    op.absent();           // grad_norm
    op.operand(8, true);   // param
    op.operand(8, false);  // grad
    op.operand(8, true);   // m
    op.operand(8, true);   // v
    op.absent();           // master
    // The case first: 1e300 is finite in f64, -inf in every
    // parameter once rounded to f32.
    std::vector<double> refused = f32_refused(true);
    refused.insert(refused.begin(), 1e300);
    check_scalar(op, {f64(1e-3), i64(1)}, 0, "lr", as_f64(f32_accepted(true)), as_f64(refused),
                 "(>= 0)");
    check_scalar(op, {f64(1e-3), i64(1)}, 1, "step",
                 {i64(1), i64(2), i64(std::numeric_limits<int64_t>::max())},
                 {i64(0), i64(-1), i64(std::numeric_limits<int64_t>::min())}, "(>= 1)");
  }
}

TEST_CASE("dropout's seed and offset take every u64, by every implementation") {
  Session session;
  auto desc = header_of<hal_op_dropout_desc_t>(HAL_OP_DROPOUT);
  desc.probability = 0.5f;
  desc.x = desc.out = dense({16});
  for (bool portable : {false, true}) {
    RunTimeOp op(session, &desc.header, portable);
    op.operand(16, false);
    op.operand(16, true);
    op.absent();
    const std::vector<hal_op_scalar_t> every = {u64(0), u64(1), u64(UINT64_MAX)};
    check_scalar(op, {u64(1), u64(0)}, 0, "seed", every, {}, "(any u64)");
    check_scalar(op, {u64(1), u64(0)}, 1, "offset", every, {}, "(any u64)");
  }
}

// ---- run-time scalars that are values of the data ---------------------------
// Converted to the dtype the op converts them to: NaN and +-inf are values,
// a finite value a float target cannot hold (it would become inf) is
// refused; integers keep HAL_OP_CAST's saturating conversion.

namespace {

constexpr double kF16Max = 65504.0;
constexpr double kF16FirstToInf = 65520.0;  // the tie above 65504 rounds to inf

// Accepted and refused values of a scalar converted to a float dtype whose
// largest value is |max| and from |to_inf| on rounds to inf.
// bf16's largest finite value from its bits (0x7f7f: the upper half of an
// f32), and the first double that rounds past it to infinity: half its ulp
// (2^120 at 2^127 with 7 stored mantissa bits) above it, the tie going to the
// even infinity. (A bf16 tensor's lowest value, -kBf16Max, is a fill value.)
const double kBf16Max = std::bit_cast<float>(uint32_t{0x7f7f0000u});
const double kBf16FirstToInf = kBf16Max + std::ldexp(1.0, 119);

std::vector<hal_op_scalar_t> float_values_accepted(double max) {
  return as_f64(
      {0.0, -0.0, 1.0, -1.5, 1e-50, -1e-300, max, -max, kDoubleInf, -kDoubleInf, kDoubleNan});
}
std::vector<hal_op_scalar_t> float_values_refused(double to_inf) {
  return as_f64({to_inf, -to_inf, to_inf * 2, 1e300, -1e300, kDoubleMax});
}

std::vector<hal_op_scalar_t> as_i64(const std::vector<int64_t>& values) {
  std::vector<hal_op_scalar_t> out;
  for (int64_t v : values) out.push_back(i64(v));
  return out;
}

}  // namespace

TEST_CASE("binary_scalar's float s is checked as the f32 operand it becomes") {
  Session session;
  for (bool portable : {false, true}) {
    auto desc = header_of<hal_op_binary_scalar_desc_t>(HAL_OP_BINARY_SCALAR);
    desc.op = HAL_BINARY_ADD;
    desc.alpha = 1.0f;
    desc.scalar_is_float = 1;
    desc.x = desc.out = dense({16});
    RunTimeOp op(session, &desc.header, portable);
    op.operand(16, false, 0.5f);
    op.operand(16, true);
    check_scalar(op, {f64(1.0)}, 0, "(s)", float_values_accepted(kMax),
                 float_values_refused(kFirstToInf), "(f32 operand)");
  }
  // An integer s is an i64 operand: every value is taken as it is.
  auto desc = header_of<hal_op_binary_scalar_desc_t>(HAL_OP_BINARY_SCALAR);
  desc.op = HAL_BINARY_ADD;
  desc.alpha = 1.0f;
  desc.x = desc.out = dense({16}, HAL_DTYPE_I32);
  RunTimeOp op(session, &desc.header, false);
  op.operand(16, false, 0.0f);
  op.operand(16, true);
  check_scalar(op, {i64(1)}, 0, "(s)", as_i64({0, INT64_MIN, INT64_MAX}), {}, "(i64 operand)");
}

TEST_CASE("where's scalar values are checked against out's dtype") {
  Session session;
  struct Target {
    hal_dtype_t dtype;
    bool float_field;
    std::vector<hal_op_scalar_t> accepted, refused;
  };
  const Target targets[] = {
      {HAL_DTYPE_F32, true, float_values_accepted(kMax), float_values_refused(kFirstToInf)},
      {HAL_DTYPE_F16, true, float_values_accepted(kF16Max), float_values_refused(kF16FirstToInf)},
      {HAL_DTYPE_BF16, true, float_values_accepted(kBf16Max),
       float_values_refused(kBf16FirstToInf)},
      {HAL_DTYPE_F64, true, as_f64({1e300, kDoubleMax, kDoubleInf, kDoubleNan}), {}},
      // saturated as HAL_OP_CAST converts (SPEC §17.6.6), not refused
      {HAL_DTYPE_U8, false, as_i64({0, 255, -1, 256, INT64_MAX, INT64_MIN}), {}},
      {HAL_DTYPE_I8, false, as_i64({-128, 127, -129, 128}), {}},
      {HAL_DTYPE_I32, false, as_i64({INT32_MIN, INT32_MAX, int64_t{INT32_MAX} + 1}), {}},
      {HAL_DTYPE_I64, false, as_i64({INT64_MIN, INT64_MAX}), {}},
      {HAL_DTYPE_BOOL, false, as_i64({0, 2, INT64_MIN}), {}},
  };
  for (const Target& target : targets) {
    for (bool b_is_scalar : {false, true}) {
      auto desc = header_of<hal_op_where_desc_t>(HAL_OP_WHERE);
      desc.a_is_scalar = 1;
      desc.b_is_scalar = b_is_scalar ? 1 : 0;
      desc.cond = dense({16}, HAL_DTYPE_BOOL);
      desc.b = dense({16}, target.dtype);
      desc.out = dense({16}, target.dtype);
      RunTimeOp op(session, &desc.header, false);
      // cond: alternating bytes, so a and b both reach out
      auto* cond = static_cast<unsigned char*>(op.operand(4, false));
      for (int i = 0; i < 16; ++i) cond[i] = static_cast<unsigned char>(i % 2);
      op.absent();
      if (b_is_scalar) {
        op.absent();
      } else {
        op.operand(32, false, 0.0f);
      }
      op.operand(32, true);
      const hal_op_scalar_t valid = target.float_field ? f64(2.0) : i64(2);
      std::vector<hal_op_scalar_t> scalars = {valid};
      if (b_is_scalar) scalars.push_back(valid);
      const std::string shown = std::string("(into ") + std::to_string(target.dtype) + ")";
      check_scalar(op, scalars, 0, "(a)", target.accepted, target.refused, shown);
      if (b_is_scalar) check_scalar(op, scalars, 1, "(b)", target.accepted, target.refused, shown);
    }
  }
}

TEST_CASE("clamp's float bounds are checked as f32, integer bounds are taken as i64") {
  Session session;
  for (bool portable : {false, true}) {
    auto desc = header_of<hal_op_clamp_desc_t>(HAL_OP_CLAMP);
    desc.min_kind = desc.max_kind = HAL_CLAMP_BOUND_SCALAR;
    desc.x = desc.out = dense({16});
    RunTimeOp op(session, &desc.header, portable);
    op.operand(16, false, 0.25f);
    op.absent();
    op.absent();
    op.operand(16, true);
    check_scalar(op, {f64(-1.0), f64(1.0)}, 0, "(min)", float_values_accepted(kMax),
                 float_values_refused(kFirstToInf), "(f32)");
    check_scalar(op, {f64(-1.0), f64(1.0)}, 1, "(max)", float_values_accepted(kMax),
                 float_values_refused(kFirstToInf), "(f32)");
  }
  auto desc = header_of<hal_op_clamp_desc_t>(HAL_OP_CLAMP);
  desc.min_kind = desc.max_kind = HAL_CLAMP_BOUND_SCALAR;
  desc.x = desc.out = dense({16}, HAL_DTYPE_I32);
  RunTimeOp op(session, &desc.header, false);
  op.operand(16, false, 0.0f);
  op.absent();
  op.absent();
  op.operand(16, true);
  check_scalar(op, {i64(-1), i64(1)}, 0, "(min)", as_i64({INT64_MIN, 0}), {}, "(i64)");
  check_scalar(op, {i64(-1), i64(1)}, 1, "(max)", as_i64({INT64_MAX, 1}), {}, "(i64)");
}

TEST_CASE("fill's start and its last element start + (n - 1) step fit a float out's dtype") {
  Session session;
  const auto fill_op = [&](hal_dtype_t dtype, bool portable) {
    auto desc = header_of<hal_op_fill_desc_t>(HAL_OP_FILL);
    desc.out = dense({16}, dtype);
    auto op = std::make_unique<RunTimeOp>(session, &desc.header, portable);
    op->operand(32, true);
    return op;
  };
  for (bool portable : {false, true}) {
    // f32: 16 elements, so the last is start + 15 step.
    auto op = fill_op(HAL_DTYPE_F32, portable);
    check_scalar(*op, {f64(1.0), f64(0.0)}, 0, "(start)", float_values_accepted(kMax),
                 float_values_refused(kFirstToInf), "(f32, step 0)");
    check_scalar(*op, {f64(0.0), f64(1.0)}, 1, "step", as_f64({0.5, -2.0, 2e37, -2e37, 1e-50}),
                 as_f64({3e37, -3e37, 1e300, kDoubleInf, -kDoubleInf, kDoubleNan}),
                 "(f32, start 0)");
    // f16: 65504 is its largest value; 16 elements from 0 by 4367 reach 65505 (to 65504).
    auto halves = fill_op(HAL_DTYPE_F16, portable);
    check_scalar(*halves, {f64(0.0), f64(0.0)}, 0, "(start)", float_values_accepted(kF16Max),
                 float_values_refused(kF16FirstToInf), "(f16, step 0)");
    check_scalar(*halves, {f64(0.0), f64(1.0)}, 1, "step", as_f64({4367.0, -4367.0}),
                 as_f64({4368.0, -4368.0}), "(f16, start 0)");
    // u8: integers keep the documented i64 arithmetic and saturating conversion.
    auto bytes = fill_op(HAL_DTYPE_U8, portable);
    check_scalar(*bytes, {i64(250), i64(0)}, 1, "step", as_i64({0, 1, -17, INT64_MAX}), {},
                 "(u8, start 250)");
  }
  // f64: finite values are held; the last element must not overflow f64.
  auto doubles = fill_op(HAL_DTYPE_F64, false);
  check_scalar(*doubles, {f64(0.0), f64(0.0)}, 0, "(start)",
               as_f64({1e300, kDoubleMax, kDoubleInf, kDoubleNan}), {}, "(f64)");
  check_scalar(*doubles, {f64(0.0), f64(1.0)}, 1, "step", as_f64({1e300, -1e300}),
               as_f64({kDoubleMax, kDoubleInf, kDoubleNan}), "(f64, start 0)");
  auto flags = fill_op(HAL_DTYPE_BOOL, false);
  check_scalar(*flags, {i64(1), i64(0)}, 0, "(start)", as_i64({INT64_MIN, 2}), {}, "(bool)");
}
