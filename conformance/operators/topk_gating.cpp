// HAL_OP_TOPK_GATING against a float64 reference: experts sorted by (logit
// descending, index ascending), weights the softmax over all experts taken
// at the chosen ones (renormalised to sum 1 when asked).
#include <algorithm>
#include <cmath>
#include <numeric>

#include "op_harness.hpp"

using namespace halconform;
using namespace halconform::ops;

namespace {

hal_op_topk_gating_desc_t topk_desc(const hal_tensor_desc_t& logits, uint32_t k, bool renormalize) {
  hal_op_topk_gating_desc_t desc{};
  desc.header.struct_size = sizeof(desc);
  desc.header.kind = HAL_OP_TOPK_GATING;
  desc.k = k;
  desc.renormalize = renormalize;
  desc.logits = logits;
  desc.weights = dense(HAL_DTYPE_F32, {logits.shape[0], static_cast<int64_t>(k)});
  desc.indices = dense(HAL_DTYPE_I32, {logits.shape[0], static_cast<int64_t>(k)});
  return desc;
}

void check_case(TestContext& ctx, const hal_tensor_desc_t& layout, uint32_t k, bool renormalize,
                bool ties) {
  const int64_t tokens = layout.shape[0], experts = layout.shape[1];
  const hal_op_topk_gating_desc_t desc = topk_desc(layout, k, renormalize);
  Plan plan;
  plan_or_skip(ctx, &desc.header, plan);
  // With ties: small integers, so most rows hold equal logits.
  const auto logits = ties ? random_ints(ctx.random(), tokens * experts, -2, 3)
                           : random_values(ctx.random(), tokens * experts, layout.dtype, -4, 4);
  DeviceTensor dlogits(ctx.device(), layout, logits), dweights(ctx.device(), desc.weights),
      dindices(ctx.device(), desc.indices);
  execute(ctx, plan, {dlogits.data(), dweights.data(), dindices.data()});
  std::vector<double> want_weights, want_indices;
  for (int64_t t = 0; t < tokens; ++t) {
    const double* x = &logits[t * experts];
    std::vector<int64_t> order(static_cast<size_t>(experts));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return x[a] > x[b]; });
    const double m = *std::max_element(x, x + experts);
    double z = 0;
    for (int64_t e = 0; e < experts; ++e) z += std::exp(x[e] - m);
    double total = 0;
    for (uint32_t j = 0; j < k; ++j) total += std::exp(x[order[j]] - m) / z;
    for (uint32_t j = 0; j < k; ++j) {
      want_indices.push_back(static_cast<double>(order[j]));
      const double p = std::exp(x[order[j]] - m) / z;
      want_weights.push_back(renormalize ? p / total : p);
    }
  }
  const std::string what = "topk " + label(layout) + " k=" + std::to_string(k) +
                           (renormalize ? " renormalized" : "") + (ties ? " ties" : "");
  expect_identical(dindices.download(), want_indices, what + " indices");
  expect_close(dweights.download(), want_weights, tolerance_for(HAL_DTYPE_F32, experts),
               what + " weights");
  dweights.check_untouched(what);
  dindices.check_untouched(what);
}

}  // namespace

HALCONFORM_TEST("operators.topk_gating.select",
                "top-k with ties to the lower index, k = 1..experts, renormalize, dtypes", {}) {
  for (hal_dtype_t dtype : {HAL_DTYPE_F32, HAL_DTYPE_F16, HAL_DTYPE_BF16}) {
    for (bool renormalize : {false, true}) {
      check_case(ctx, dense(dtype, {33, 8}), 2, renormalize, false);
      check_case(ctx, dense(dtype, {17, 7}), 3, renormalize, true);
      check_case(ctx, dense(dtype, {5, 6}), 6, renormalize, true);  // k = experts
      check_case(ctx, dense(dtype, {9, 64}), 1, renormalize, false);
    }
  }
  check_case(ctx, transposed(dense(HAL_DTYPE_F32, {12, 21}), 0, 1), 4, true, true);
  check_case(ctx, padded(HAL_DTYPE_BF16, {13, 10}, 3), 5, false, false);
  check_case(ctx, dense(HAL_DTYPE_F32, {0, 10}), 2, true, false);
}

HALCONFORM_TEST("operators.topk_gating.errors", "each rule of the descriptor", {}) {
  const auto refused = [&](hal_op_topk_gating_desc_t desc, const char* rule) {
    hal_op_plan_t plan = nullptr;
    const hal_result_t result = hal_op_plan_create(ctx.device(), &desc.header, 0, &plan);
    if (plan != nullptr) hal_op_plan_destroy(plan);
    HC_REQUIRE(result == HAL_ERROR_INVALID_ARGUMENT,
               std::string("topk descriptor accepted: ") + rule);
  };
  const hal_op_topk_gating_desc_t good = topk_desc(dense(HAL_DTYPE_F32, {4, 8}), 2, false);
  hal_op_topk_gating_desc_t d = good;
  d.k = 0;
  refused(d, "k 0");
  d = topk_desc(dense(HAL_DTYPE_F32, {4, 8}), 9, false);
  refused(d, "k > experts");
  d = good;
  d.weights = dense(HAL_DTYPE_F16, {4, 2});
  refused(d, "f16 weights");
  d = good;
  d.indices = dense(HAL_DTYPE_I64, {4, 2});
  refused(d, "i64 indices");
  d = good;
  d.indices = dense(HAL_DTYPE_I32, {4, 3});
  refused(d, "indices' shape");
  d = good;
  d.weights = dense(HAL_DTYPE_F32, {5, 2});
  refused(d, "weights' shape");
  d = good;
  d.logits = dense(HAL_DTYPE_I32, {4, 8});
  refused(d, "i32 logits");
  d = good;
  d.renormalize = 2;
  refused(d, "renormalize 2");
}
