// The ops issue 33 added, chained the way a PyTorch step chains them, on the
// first device of HAL_PLUGINS, each result against a host computation of the
// same thing (seeded random inputs): a causal attention mask filled with
// -inf, position ids from a padding mask, top-1 accuracy, the label
// log-probabilities of a cross-entropy and their gradient scattered back,
// q/k/v views of a packed projection concatenated; the status word raised by
// a bad label without a byte written outside; and which implementation
// serves what on the cpu plugin.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "hal.h"
#include "op_session.hpp"

namespace {

using op_test::Session;

hal_tensor_desc_t dense(hal_dtype_t dtype, std::vector<int64_t> shape) {
  hal_tensor_desc_t tensor{};
  hal_tensor_desc_contiguous(&tensor, dtype, static_cast<uint32_t>(shape.size()), shape.data());
  return tensor;
}

template <typename Desc>
Desc header_of(hal_op_kind_t kind) {
  Desc desc{};
  desc.header.struct_size = sizeof desc;
  desc.header.kind = kind;
  return desc;
}

hal_op_scalar_t f64(double v) {
  hal_op_scalar_t s{};
  s.f64 = v;
  return s;
}
hal_op_scalar_t i64(int64_t v) {
  hal_op_scalar_t s{};
  s.i64 = v;
  return s;
}

}  // namespace

TEST_CASE("a causal mask from arange and a comparison fills the scores with -inf", "[ops][torch]") {
  Session session;
  constexpr int64_t kT = 37;
  // positions = arange(T) (i64), as a row [1, T] and a column [T, 1] view of one buffer.
  int64_t* positions = session.alloc<int64_t>(kT);
  auto fill = header_of<hal_op_fill_desc_t>(HAL_OP_FILL);
  fill.out = dense(HAL_DTYPE_I64, {kT});
  session.run(&fill.header, {positions}, {i64(0), i64(1)});
  // future = col < row  (key j is in query i's future when j > i): bool [T, T].
  auto compare = header_of<hal_op_binary_desc_t>(HAL_OP_BINARY);
  compare.op = HAL_BINARY_LT;
  compare.alpha = 1.0f;
  compare.a = dense(HAL_DTYPE_I64, {kT, 1});
  compare.b = dense(HAL_DTYPE_I64, {1, kT});
  compare.out = dense(HAL_DTYPE_BOOL, {kT, kT});
  uint8_t* future = session.alloc<uint8_t>(kT * kT);
  session.run(&compare.header, {positions, positions, future});
  // scores = where(future, -inf, scores), in place, bf16.
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> uniform(-4.0f, 4.0f);
  std::vector<uint16_t> scores(kT * kT);
  for (uint16_t& s : scores) {
    const float v = uniform(rng);
    uint32_t bits;
    std::memcpy(&bits, &v, 4);
    s = static_cast<uint16_t>(bits >> 16);  // exact bf16 values: truncation is fine here
  }
  uint16_t* device_scores = session.upload(scores);
  auto where = header_of<hal_op_where_desc_t>(HAL_OP_WHERE);
  where.a_is_scalar = 1;
  where.cond = compare.out;
  where.b = dense(HAL_DTYPE_BF16, {kT, kT});
  where.out = where.b;
  session.run(&where.header, {future, nullptr, device_scores, device_scores},
              {f64(-std::numeric_limits<double>::infinity())});
  bool intact = false;
  const auto got = session.download(device_scores, kT * kT, &intact);
  CHECK(intact);
  for (int64_t i = 0; i < kT; ++i) {
    for (int64_t j = 0; j < kT; ++j) {
      const uint16_t expected = j > i ? uint16_t{0xff80} : scores[i * kT + j];  // bf16 -inf
      INFO("row " << i << " column " << j);
      REQUIRE(got[i * kT + j] == expected);
    }
  }
}

TEST_CASE("position ids are cumsum(mask) - 1 clamped at 0", "[ops][torch]") {
  Session session;
  constexpr int64_t kB = 3, kT = 50;
  std::mt19937 rng(11);
  std::vector<uint8_t> mask(kB * kT);
  for (int64_t b = 0; b < kB; ++b) {
    const int64_t padding = static_cast<int64_t>(rng() % 20);  // left padding, as HF batches
    for (int64_t t = 0; t < kT; ++t) mask[b * kT + t] = t >= padding ? 1 : 0;
  }
  uint8_t* device_mask = session.upload(mask);
  int64_t* ids = session.alloc<int64_t>(kB * kT);
  auto scan = header_of<hal_op_scan_desc_t>(HAL_OP_SCAN);
  scan.scan = HAL_SCAN_SUM;
  scan.axis = 1;
  scan.x = dense(HAL_DTYPE_BOOL, {kB, kT});
  scan.out = dense(HAL_DTYPE_I64, {kB, kT});
  session.run(&scan.header, {device_mask, ids});
  auto minus_one = header_of<hal_op_binary_scalar_desc_t>(HAL_OP_BINARY_SCALAR);
  minus_one.op = HAL_BINARY_SUB;
  minus_one.alpha = 1.0f;
  minus_one.x = scan.out;
  minus_one.out = scan.out;
  session.run(&minus_one.header, {ids, ids}, {i64(1)});
  auto clamp = header_of<hal_op_clamp_desc_t>(HAL_OP_CLAMP);
  clamp.min_kind = HAL_CLAMP_BOUND_SCALAR;
  clamp.x = scan.out;
  clamp.out = scan.out;
  session.run(&clamp.header, {ids, nullptr, nullptr, ids}, {i64(0)});
  const auto got = session.download(ids, kB * kT);
  for (int64_t b = 0; b < kB; ++b) {
    int64_t count = 0;
    for (int64_t t = 0; t < kT; ++t) {
      count += mask[b * kT + t];
      INFO("batch " << b << " position " << t);
      REQUIRE(got[b * kT + t] == std::max<int64_t>(count - 1, 0));
    }
  }
}

TEST_CASE("top-1 accuracy: argmax, eq against the labels, a bool sum", "[ops][torch]") {
  Session session;
  constexpr int64_t kN = 300, kC = 17;
  std::mt19937 rng(3);
  std::vector<float> logits(kN * kC);
  for (float& v : logits) v = static_cast<float>(static_cast<int>(rng() % 9));  // ties
  std::vector<int64_t> labels(kN);
  for (int64_t& l : labels) l = static_cast<int64_t>(rng() % kC);
  float* device_logits = session.upload(logits);
  int64_t* device_labels = session.upload(labels);
  int64_t* predicted = session.alloc<int64_t>(kN);
  auto argmax = header_of<hal_op_reduce_desc_t>(HAL_OP_REDUCE);
  argmax.reduce = HAL_REDUCE_KIND_ARGMAX;
  argmax.axes_mask = 0x2;
  argmax.x = dense(HAL_DTYPE_F32, {kN, kC});
  argmax.out = dense(HAL_DTYPE_I64, {kN, 1});
  session.run(&argmax.header, {device_logits, predicted});
  uint8_t* correct = session.alloc<uint8_t>(kN);
  auto eq = header_of<hal_op_binary_desc_t>(HAL_OP_BINARY);
  eq.op = HAL_BINARY_EQ;
  eq.alpha = 1.0f;
  eq.a = dense(HAL_DTYPE_I64, {kN, 1});
  eq.b = eq.a;
  eq.out = dense(HAL_DTYPE_BOOL, {kN, 1});
  session.run(&eq.header, {predicted, device_labels, correct});
  int64_t* total = session.alloc<int64_t>(1);
  auto sum = header_of<hal_op_reduce_desc_t>(HAL_OP_REDUCE);
  sum.reduce = HAL_REDUCE_KIND_SUM;
  sum.axes_mask = 0x3;
  sum.x = eq.out;
  sum.out = dense(HAL_DTYPE_I64, {1, 1});
  session.run(&sum.header, {correct, total});
  int64_t expected = 0;
  const auto got_predicted = session.download(predicted, kN);
  for (int64_t n = 0; n < kN; ++n) {
    int64_t best = 0;
    for (int64_t c = 1; c < kC; ++c) {
      if (logits[n * kC + c] > logits[n * kC + best]) best = c;  // the first of ties
    }
    REQUIRE(got_predicted[n] == best);
    expected += best == labels[n];
  }
  REQUIRE(session.download(total, 1)[0] == expected);
}

TEST_CASE(
    "label log-probabilities by gather, their gradient by scatter_add, a bad label raises "
    "the status",
    "[ops][torch]") {
  Session session;
  constexpr int64_t kN = 64, kC = 50;
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> uniform(-5.0f, 0.0f);
  std::vector<float> log_probs(kN * kC);
  for (float& v : log_probs) v = uniform(rng);
  std::vector<int32_t> labels(kN);
  for (int32_t& l : labels) l = static_cast<int32_t>(rng() % kC);
  float* device_log_probs = session.upload(log_probs);
  int32_t* device_labels = session.upload(labels);
  int32_t* status = session.upload(std::vector<int32_t>{0});
  float* picked = session.alloc<float>(kN);
  auto gather = header_of<hal_op_gather_desc_t>(HAL_OP_GATHER);
  gather.axis = 1;
  gather.x = dense(HAL_DTYPE_F32, {kN, kC});
  gather.index = dense(HAL_DTYPE_I32, {kN, 1});
  gather.out = dense(HAL_DTYPE_F32, {kN, 1});
  session.run(&gather.header, {device_log_probs, device_labels, picked, status});
  const auto got = session.download(picked, kN);
  for (int64_t n = 0; n < kN; ++n) REQUIRE(got[n] == log_probs[n * kC + labels[n]]);
  REQUIRE(session.download(status, 1)[0] == 0);
  // d loss / d log_probs: -1/N at each label, scattered into zeros.
  float* grad = session.alloc<float>(kN * kC);
  float* minus = session.upload(std::vector<float>(kN, -1.0f / kN));
  auto scatter = header_of<hal_op_scatter_desc_t>(HAL_OP_SCATTER);
  scatter.mode = HAL_SCATTER_ADD;
  scatter.axis = 1;
  scatter.index = gather.index;
  scatter.src = gather.out;
  scatter.out = gather.x;
  session.run(&scatter.header, {device_labels, minus, grad, status});
  bool intact = false;
  const auto gradient = session.download(grad, kN * kC, &intact);
  CHECK(intact);
  for (int64_t n = 0; n < kN; ++n) {
    for (int64_t c = 0; c < kC; ++c) {
      REQUIRE(gradient[n * kC + c] == (c == labels[n] ? -1.0f / kN : 0.0f));
    }
  }
  REQUIRE(session.download(status, 1)[0] == 0);
  // A label past the classes: no write, zero read, the status raised.
  labels[9] = kC;
  labels[20] = -1;
  int32_t* bad_labels = session.upload(labels);
  session.run(&gather.header, {device_log_probs, bad_labels, picked, status});
  const auto with_bad = session.download(picked, kN, &intact);
  CHECK(intact);
  CHECK(with_bad[9] == 0.0f);
  CHECK(with_bad[20] == 0.0f);
  CHECK(with_bad[10] == log_probs[10 * kC + labels[10]]);
  REQUIRE(session.download(status, 1)[0] == 1);
  float* clean = session.alloc<float>(kN * kC);
  session.run(&scatter.header, {bad_labels, minus, clean, status});
  const auto scattered = session.download(clean, kN * kC, &intact);
  CHECK(intact);
  for (int64_t c = 0; c < kC; ++c) CHECK(scattered[9 * kC + c] == 0.0f);
}

TEST_CASE("q, k and v views of a packed projection concatenate along the batch", "[ops][torch]") {
  Session session;
  constexpr int64_t kRows = 6, kD = 8;
  std::vector<float> qkv(kRows * 3 * kD);
  for (size_t i = 0; i < qkv.size(); ++i) qkv[i] = static_cast<float>(i) * 0.5f - 7.0f;
  float* device_qkv = session.upload(qkv);
  // q, k, v: [rows, d] views with row stride 3d, at offsets 0, d, 2d.
  hal_tensor_desc_t view = dense(HAL_DTYPE_F32, {kRows, kD});
  view.strides[0] = 3 * kD;
  const std::vector<hal_tensor_desc_t> inputs = {view, view, view};
  auto cat = header_of<hal_op_cat_desc_t>(HAL_OP_CAT);
  cat.axis = 0;
  cat.input_count = 3;
  cat.inputs = inputs.data();
  cat.out = dense(HAL_DTYPE_F16, {3 * kRows, kD});
  uint16_t* out = session.alloc<uint16_t>(3 * kRows * kD);
  session.run(&cat.header, {device_qkv, device_qkv + kD, device_qkv + 2 * kD, out});
  const auto got = session.download(out, 3 * kRows * kD);
  for (int64_t part = 0; part < 3; ++part) {
    for (int64_t r = 0; r < kRows; ++r) {
      for (int64_t c = 0; c < kD; ++c) {
        const float expected = qkv[r * 3 * kD + part * kD + c];  // multiples of 0.5: exact in f16
        const uint16_t h = got[(part * kRows + r) * kD + c];
        // f16 to float (normal numbers and 0 only here).
        const int exponent = (h >> 10) & 0x1f;
        const float magnitude =
            exponent == 0 ? 0.0f : std::ldexp(1.0f + (h & 0x3ff) / 1024.0f, exponent - 15);
        REQUIRE(((h & 0x8000) ? -magnitude : magnitude) == expected);
      }
    }
  }
}

TEST_CASE("the cpu plugin's native binary keeps the original ops, the appended ones go portable",
          "[ops][torch]") {
  Session session;
  hal_device_properties_t properties{};
  properties.struct_size = sizeof properties;
  REQUIRE(hal_device_get_properties(session.device(), &properties) == HAL_SUCCESS);
  const char* list = std::getenv("HAL_OPS_IMPLEMENTATIONS");
  if (std::string(properties.plugin) != "cpu" || (list != nullptr && list[0] != '\0')) {
    SUCCEED("not the cpu plugin with its own implementations: nothing to check");
    return;
  }
  auto binary = header_of<hal_op_binary_desc_t>(HAL_OP_BINARY);
  binary.alpha = 1.0f;
  binary.a = dense(HAL_DTYPE_F32, {4, 8});
  binary.b = binary.a;
  binary.out = binary.a;
  hal_op_plan_info_t info{};
  info.struct_size = sizeof info;
  binary.op = HAL_BINARY_MUL;
  REQUIRE(hal_op_plan_get_info(session.plan(&binary.header), &info) == HAL_SUCCESS);
  CHECK(std::string(info.implementation) == "cpu.native");
  binary.op = HAL_BINARY_POW;
  REQUIRE(hal_op_plan_get_info(session.plan(&binary.header), &info) == HAL_SUCCESS);
  CHECK(std::string(info.implementation) == "portable");
  CHECK(std::string(info.declines).find("cpu.native serves ADD") != std::string::npos);
  auto reduce = header_of<hal_op_reduce_desc_t>(HAL_OP_REDUCE);
  reduce.reduce = HAL_REDUCE_KIND_MIN;
  reduce.axes_mask = 0x1;
  reduce.x = dense(HAL_DTYPE_F32, {4, 8});
  reduce.out = dense(HAL_DTYPE_F32, {1, 8});
  REQUIRE(hal_op_plan_get_info(session.plan(&reduce.header), &info) == HAL_SUCCESS);
  CHECK(std::string(info.implementation) == "portable");
}
