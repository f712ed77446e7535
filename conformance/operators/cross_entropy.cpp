// HAL_OP_CROSS_ENTROPY against a float64 reference of the loss (log-softmax
// from its definition); the gradient is checked against the closed form on
// larger shapes and against central differences of the float64 loss on
// small ones.
#include <cmath>
#include <limits>

#include "op_harness.hpp"

using namespace halconform;
using namespace halconform::ops;

namespace {

constexpr int64_t kIgnore = -100;

hal_op_cross_entropy_desc_t ce_desc(const hal_tensor_desc_t& logits, hal_dtype_t labels_dtype,
                                    float smoothing, bool row_losses, bool grad,
                                    const hal_tensor_desc_t* grad_layout = nullptr) {
  hal_op_cross_entropy_desc_t desc{};
  desc.header.struct_size = sizeof(desc);
  desc.header.kind = HAL_OP_CROSS_ENTROPY;
  desc.ignore_index = kIgnore;
  desc.label_smoothing = smoothing;
  desc.has_row_losses = row_losses;
  desc.has_grad = grad;
  desc.logits = logits;
  desc.labels = dense(labels_dtype, {logits.shape[0]});
  desc.loss = dense(HAL_DTYPE_F32, {1});
  desc.row_losses = dense(HAL_DTYPE_F32, {logits.shape[0]});
  desc.grad_logits = grad_layout != nullptr ? *grad_layout : logits;
  return desc;
}

struct Reference {
  std::vector<double> row_losses;
  double loss = 0;
  std::vector<double> grad;  // closed form: (softmax - target) / counted * scale
};

bool counted(double label) {
  return static_cast<int64_t>(label) != kIgnore;
}

// The float64 mean loss and its parts.
Reference reference(const std::vector<double>& logits, const std::vector<double>& labels,
                    int64_t rows, int64_t classes, double s, double grad_scale) {
  Reference r;
  r.row_losses.assign(static_cast<size_t>(rows), 0.0);
  r.grad.assign(static_cast<size_t>(rows * classes), 0.0);
  int64_t count = 0;
  std::vector<double> log_p(static_cast<size_t>(classes));
  for (int64_t row = 0; row < rows; ++row) {
    if (!counted(labels[row])) continue;
    ++count;
    const auto label = static_cast<int64_t>(labels[row]);
    const double* x = &logits[row * classes];
    double m = -std::numeric_limits<double>::infinity();
    for (int64_t c = 0; c < classes; ++c) m = std::max(m, x[c]);
    double z = 0;
    for (int64_t c = 0; c < classes; ++c) z += std::exp(x[c] - m);
    double sum_log_p = 0;
    for (int64_t c = 0; c < classes; ++c) {
      log_p[c] = x[c] - m - std::log(z);
      sum_log_p += log_p[c];
    }
    if (label < 0 || label >= classes) {
      r.row_losses[row] = std::numeric_limits<double>::quiet_NaN();
      continue;
    }
    r.row_losses[row] = -(1 - s) * log_p[label] - s / classes * sum_log_p;
  }
  for (int64_t row = 0; row < rows; ++row) {
    if (counted(labels[row])) r.loss += r.row_losses[row];
  }
  r.loss = count > 0 ? r.loss / count : 0.0;
  for (int64_t row = 0; count > 0 && row < rows; ++row) {
    const auto label = static_cast<int64_t>(labels[row]);
    if (!counted(labels[row]) || label < 0 || label >= classes) continue;
    const double* x = &logits[row * classes];
    double m = -std::numeric_limits<double>::infinity();
    for (int64_t c = 0; c < classes; ++c) m = std::max(m, x[c]);
    double z = 0;
    for (int64_t c = 0; c < classes; ++c) z += std::exp(x[c] - m);
    for (int64_t c = 0; c < classes; ++c) {
      const double target = s / classes + (c == label ? 1 - s : 0);
      r.grad[row * classes + c] = (std::exp(x[c] - m) / z - target) / count * grad_scale;
    }
  }
  return r;
}

struct Outputs {
  std::vector<double> loss, row_losses, grad;
};

Outputs run_ce(TestContext& ctx, const hal_op_cross_entropy_desc_t& desc,
               const std::vector<double>& logits, const std::vector<double>& labels,
               double grad_scale, bool grad_in_place = false, hal_op_plan_flags_t flags = 0) {
  Plan plan;
  plan_or_skip(ctx, &desc.header, plan, flags);
  DeviceTensor dlogits(ctx.device(), desc.logits, logits),
      dlabels(ctx.device(), desc.labels, labels), dloss(ctx.device(), desc.loss),
      drows(ctx.device(), desc.row_losses), dgrad(ctx.device(), desc.grad_logits);
  void* grad = desc.has_grad ? (grad_in_place ? dlogits.data() : dgrad.data()) : nullptr;
  hal_op_scalar_t scale{};
  scale.f64 = grad_scale;
  execute(ctx, plan,
          {dlogits.data(), dlabels.data(), dloss.data(),
           desc.has_row_losses ? drows.data() : nullptr, grad},
          {scale});
  Outputs out;
  out.loss = dloss.download();
  dloss.check_untouched("loss");
  if (desc.has_row_losses) {
    out.row_losses = drows.download();
    drows.check_untouched("row_losses");
  }
  if (desc.has_grad) {
    out.grad = grad_in_place ? dlogits.download() : dgrad.download();
    if (!grad_in_place) dgrad.check_untouched("grad_logits");
  }
  return out;
}

// Labels in [0, classes) with about one row in five ignored.
std::vector<double> some_labels(TestContext& ctx, int64_t rows, int64_t classes) {
  auto labels = random_ints(ctx.random(), rows, 0, classes);
  const auto dice = random_ints(ctx.random(), rows, 0, 5);
  for (int64_t r = 0; r < rows; ++r) {
    if (dice[r] == 0) labels[r] = kIgnore;
  }
  return labels;
}

void check_case(TestContext& ctx, const hal_tensor_desc_t& logits_layout, hal_dtype_t labels_dtype,
                float smoothing, double grad_scale,
                const hal_tensor_desc_t* grad_layout = nullptr) {
  const int64_t rows = logits_layout.shape[0], classes = logits_layout.shape[1];
  const hal_op_cross_entropy_desc_t desc =
      ce_desc(logits_layout, labels_dtype, smoothing, true, true, grad_layout);
  const auto logits = random_values(ctx.random(), rows * classes, logits_layout.dtype, -4, 4);
  const auto labels = some_labels(ctx, rows, classes);
  const Outputs got = run_ce(ctx, desc, logits, labels, grad_scale);
  const Reference want = reference(logits, labels, rows, classes, smoothing, grad_scale);
  const std::string what =
      "cross-entropy " + label(logits_layout) + " smoothing=" + std::to_string(smoothing);
  // Losses: f32 log-sum-exp over |classes| terms from inputs already in
  // their dtype (the reference starts from the same rounded values).
  expect_close(got.row_losses, want.row_losses, tolerance_for(HAL_DTYPE_F32, 4.0 * classes),
               what + " row_losses");
  expect_close(got.loss, {want.loss}, tolerance_for(HAL_DTYPE_F32, 4.0 * classes + rows),
               what + " loss");
  const hal_dtype_t grad_dtype = grad_layout != nullptr ? grad_layout->dtype : logits_layout.dtype;
  expect_close(got.grad, want.grad, tolerance_for(grad_dtype, classes), what + " grad");
}

}  // namespace

HALCONFORM_TEST("operators.cross_entropy.forward_backward",
                "loss, row losses and gradient; dtypes, i32/i64 labels, ignored rows, smoothing",
                {}) {
  for (hal_dtype_t dtype : {HAL_DTYPE_F32, HAL_DTYPE_F16, HAL_DTYPE_BF16}) {
    for (float smoothing : {0.0f, 0.1f}) {
      check_case(ctx, dense(dtype, {37, 101}), HAL_DTYPE_I64, smoothing, 1.0);
      check_case(ctx, dense(dtype, {5, 3}), HAL_DTYPE_I32, smoothing, 0.5);
    }
  }
  // strided logits, f32 gradient of bf16 logits, a transposed gradient
  const hal_tensor_desc_t grad_layout = dense(HAL_DTYPE_F32, {9, 40});
  check_case(ctx, padded(HAL_DTYPE_BF16, {9, 40}, 3), HAL_DTYPE_I32, 0.2f, 2.0, &grad_layout);
  const hal_tensor_desc_t grad_t = transposed(dense(HAL_DTYPE_F32, {17, 11}), 0, 1);
  check_case(ctx, dense(HAL_DTYPE_F32, {11, 17}), HAL_DTYPE_I64, 0.0f, 1.0, &grad_t);
  check_case(ctx, dense(HAL_DTYPE_F32, {4, 1}), HAL_DTYPE_I32, 0.0f, 1.0);  // one class
}

HALCONFORM_TEST("operators.cross_entropy.finite_differences",
                "the gradient against central differences of the float64 loss", {}) {
  for (float smoothing : {0.0f, 0.3f}) {
    const int64_t rows = 4, classes = 5;
    const hal_tensor_desc_t layout = dense(HAL_DTYPE_F32, {rows, classes});
    const auto logits = random_values(ctx.random(), rows * classes, HAL_DTYPE_F32, -3, 3);
    const std::vector<double> labels = {1, kIgnore, 4, 0};
    const double grad_scale = 1.5;
    const Outputs got = run_ce(ctx, ce_desc(layout, HAL_DTYPE_I32, smoothing, false, true), logits,
                               labels, grad_scale);
    std::vector<double> expected(logits.size());
    const double h = 1e-6;
    for (size_t i = 0; i < logits.size(); ++i) {
      auto plus = logits, minus = logits;
      plus[i] += h;
      minus[i] -= h;
      expected[i] = (reference(plus, labels, rows, classes, smoothing, 1).loss -
                     reference(minus, labels, rows, classes, smoothing, 1).loss) /
                    (2 * h) * grad_scale;
    }
    expect_close(got.grad, expected, {2e-6, 1e-5}, "cross-entropy grad vs finite differences");
  }
}

HALCONFORM_TEST("operators.cross_entropy.edge_cases",
                "all rows ignored, no rows, an out-of-range label, grad in place", {}) {
  const hal_tensor_desc_t layout = dense(HAL_DTYPE_F32, {6, 10});
  const auto logits = random_values(ctx.random(), 60, HAL_DTYPE_F32, -2, 2);
  // every row ignored: loss 0, zero gradient
  Outputs got = run_ce(ctx, ce_desc(layout, HAL_DTYPE_I32, 0.1f, true, true), logits,
                       std::vector<double>(6, static_cast<double>(kIgnore)), 1.0);
  expect_close(got.loss, {0.0}, {0, 0}, "all ignored: loss");
  expect_close(got.row_losses, std::vector<double>(6, 0.0), {0, 0}, "all ignored: row_losses");
  expect_close(got.grad, std::vector<double>(60, 0.0), {0, 0}, "all ignored: grad");
  // no rows at all
  const hal_tensor_desc_t empty = dense(HAL_DTYPE_F32, {0, 10});
  got = run_ce(ctx, ce_desc(empty, HAL_DTYPE_I64, 0.0f, true, true), {}, {}, 1.0);
  expect_close(got.loss, {0.0}, {0, 0}, "no rows: loss");
  // a label outside [0, classes) that is not ignore_index: NaN loss, zero grad row
  const std::vector<double> labels = {3, 10, kIgnore, 0, -1, 9};
  got = run_ce(ctx, ce_desc(layout, HAL_DTYPE_I64, 0.0f, true, true), logits, labels, 1.0);
  const Reference want = reference(logits, labels, 6, 10, 0.0, 1.0);
  HC_REQUIRE(std::isnan(got.loss[0]),
             "an out-of-range label gives a NaN loss, got " + std::to_string(got.loss[0]));
  expect_close(got.row_losses, want.row_losses, tolerance_for(HAL_DTYPE_F32, 40),
               "out-of-range labels: row_losses");
  expect_close(got.grad, want.grad, tolerance_for(HAL_DTYPE_F32, 10), "out-of-range labels: grad");
  // the gradient written over the logits, f16
  const hal_tensor_desc_t half = dense(HAL_DTYPE_F16, {7, 33});
  const auto half_logits = random_values(ctx.random(), 7 * 33, HAL_DTYPE_F16, -3, 3);
  const auto half_labels = some_labels(ctx, 7, 33);
  got = run_ce(ctx, ce_desc(half, HAL_DTYPE_I32, 0.05f, false, true), half_logits, half_labels, 1.0,
               true);
  expect_close(got.grad, reference(half_logits, half_labels, 7, 33, 0.05, 1.0).grad,
               tolerance_for(HAL_DTYPE_F16, 33), "grad in place");
  // loss only
  got = run_ce(ctx, ce_desc(layout, HAL_DTYPE_I32, 0.0f, false, false), logits, {1, 2, 3, 4, 5, 6},
               1.0);
  expect_close(got.loss, {reference(logits, {1, 2, 3, 4, 5, 6}, 6, 10, 0, 1).loss},
               tolerance_for(HAL_DTYPE_F32, 50), "loss only");
}

HALCONFORM_TEST("operators.cross_entropy.deterministic",
                "deterministic plans give bitwise-identical loss and gradient", {}) {
  const hal_tensor_desc_t layout = dense(HAL_DTYPE_BF16, {300, 50});
  const auto logits = random_values(ctx.random(), 300 * 50, HAL_DTYPE_BF16, -5, 5);
  const auto labels = some_labels(ctx, 300, 50);
  const auto desc = ce_desc(layout, HAL_DTYPE_I32, 0.1f, true, true);
  const Outputs a = run_ce(ctx, desc, logits, labels, 1.0, false, HAL_OP_PLAN_DETERMINISTIC);
  const Outputs b = run_ce(ctx, desc, logits, labels, 1.0, false, HAL_OP_PLAN_DETERMINISTIC);
  expect_identical(a.loss, b.loss, "cross-entropy loss run twice");
  expect_identical(a.row_losses, b.row_losses, "cross-entropy row_losses run twice");
  expect_identical(a.grad, b.grad, "cross-entropy grad run twice");
}

HALCONFORM_TEST("operators.cross_entropy.errors", "each rule of the descriptor and scalars", {}) {
  const auto refused = [&](hal_op_cross_entropy_desc_t desc, const char* rule) {
    hal_op_plan_t plan = nullptr;
    const hal_result_t result = hal_op_plan_create(ctx.device(), &desc.header, 0, &plan);
    if (plan != nullptr) hal_op_plan_destroy(plan);
    HC_REQUIRE(result == HAL_ERROR_INVALID_ARGUMENT,
               std::string("cross-entropy descriptor accepted: ") + rule);
  };
  const hal_tensor_desc_t layout = dense(HAL_DTYPE_F32, {4, 6});
  const hal_op_cross_entropy_desc_t good = ce_desc(layout, HAL_DTYPE_I32, 0.0f, true, true);
  hal_op_cross_entropy_desc_t d = good;
  d.label_smoothing = 1.0f;
  refused(d, "label_smoothing 1");
  d.label_smoothing = -0.1f;
  refused(d, "label_smoothing < 0");
  d = good;
  d.labels = dense(HAL_DTYPE_F32, {4});
  refused(d, "float labels");
  d = good;
  d.labels = dense(HAL_DTYPE_I32, {5});
  refused(d, "labels' length");
  d = good;
  d.loss = dense(HAL_DTYPE_F32, {2});
  refused(d, "loss of 2 elements");
  d = good;
  d.loss = dense(HAL_DTYPE_F16, {1});
  refused(d, "loss of f16");
  d = good;
  d.row_losses = dense(HAL_DTYPE_F32, {3});
  refused(d, "row_losses' length");
  d = good;
  d.grad_logits = dense(HAL_DTYPE_F32, {4, 7});
  refused(d, "grad_logits' shape");
  d = good;
  d.logits = dense(HAL_DTYPE_F32, {4, 0});
  d.grad_logits = d.logits;
  refused(d, "no classes");
  d = good;
  d.logits = dense(HAL_DTYPE_F32, {4, 6, 1});
  refused(d, "logits of rank 3");
  d = good;
  d.has_grad = 2;
  refused(d, "has_grad 2");
  d = good;
  d.reserved = 1;
  refused(d, "reserved");
  // a grad_scale that is not finite
  Plan plan;
  plan_or_skip(ctx, &good.header, plan);
  DeviceTensor dlogits(ctx.device(), layout, std::vector<double>(24, 0.0)),
      dlabels(ctx.device(), good.labels, {0, 1, 2, 3}), dloss(ctx.device(), good.loss, {7.0}),
      drows(ctx.device(), good.row_losses), dgrad(ctx.device(), layout);
  // The workspace is the serving implementation's (the portable one needs one; a tuned one
  // may need none).
  const size_t workspace_bytes = plan.info().workspace_bytes;
  void* workspace = nullptr;
  if (workspace_bytes > 0)
    HC_OK(hal_mem_alloc(ctx.device(), HAL_MEMORY_DEVICE, workspace_bytes, 0, &workspace));
  hal_op_scalar_t scale{};
  scale.f64 = std::numeric_limits<double>::infinity();
  const hal_result_t result = try_execute(
      ctx, plan, {dlogits.data(), dlabels.data(), dloss.data(), drows.data(), dgrad.data()},
      {scale}, workspace, workspace_bytes);
  HC_EXPECT_RESULT(result, HAL_ERROR_INVALID_ARGUMENT);
  if (workspace_bytes > 0) {  // and too little workspace
    scale.f64 = 1.0;
    const hal_result_t small = try_execute(
        ctx, plan, {dlogits.data(), dlabels.data(), dloss.data(), drows.data(), dgrad.data()},
        {scale}, workspace, workspace_bytes - 1);
    HC_EXPECT_RESULT(small, HAL_ERROR_INVALID_ARGUMENT);
  }
  hal_mem_free(workspace);
  HC_REQUIRE(dloss.download()[0] == 7.0, std::string("a refused execution wrote the loss"));
}
