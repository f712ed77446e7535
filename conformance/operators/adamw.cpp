// HAL_OP_ADAMW (multi-tensor) against a float64 reference of the formula in
// hal/ops.h, over several steps, with and without master weights and
// global-norm clipping.
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>

#include "op_harness.hpp"

using namespace halconform;
using namespace halconform::ops;

namespace {

struct Config {
  hal_dtype_t param_dtype = HAL_DTYPE_F32;
  hal_dtype_t grad_dtype = HAL_DTYPE_F32;
  bool master = false;
  bool grad_norm = true;
  float max_grad_norm = 0.0f;  // a fraction of the first step's norm when > 0
};

hal_op_adamw_desc_t adamw_desc(const Config& c, const std::vector<int64_t>& numels) {
  hal_op_adamw_desc_t desc{};
  desc.header.struct_size = sizeof(desc);
  desc.header.kind = HAL_OP_ADAMW;
  desc.tensor_count = static_cast<uint32_t>(numels.size());
  desc.has_master = c.master;
  desc.has_grad_norm = c.grad_norm;
  desc.param_dtype = c.param_dtype;
  desc.grad_dtype = c.grad_dtype;
  desc.numels = numels.data();
  desc.beta1 = 0.9f;
  desc.beta2 = 0.999f;
  desc.epsilon = 1e-8f;
  desc.weight_decay = 0.1f;
  desc.max_grad_norm = c.max_grad_norm;
  return desc;
}

struct HostTensor {
  std::vector<double> w, m, v;  // w: the master weights (or the params without one)
};

void run_case(TestContext& ctx, const Config& c) {
  const std::vector<int64_t> numels = {1, 37, 2049, 300, 0};
  const hal_op_adamw_desc_t desc = adamw_desc(c, numels);
  Plan plan;
  plan_or_skip(ctx, &desc.header, plan);
  const hal_dtype_t w_dtype = c.master ? HAL_DTYPE_F32 : c.param_dtype;
  std::vector<HostTensor> host(numels.size());
  std::vector<std::unique_ptr<DeviceTensor>> params, grads, ms, vs, masters;
  for (size_t t = 0; t < numels.size(); ++t) {
    const int64_t n = numels[t];
    host[t].w = random_values(ctx.random(), n, w_dtype);
    host[t].m = random_values(ctx.random(), n, HAL_DTYPE_F32, -0.1, 0.1);
    host[t].v = random_values(ctx.random(), n, HAL_DTYPE_F32, 0.0, 0.1);
    std::vector<double> p(host[t].w.size());
    for (size_t i = 0; i < p.size(); ++i) p[i] = round_to(c.param_dtype, host[t].w[i]);
    params.push_back(std::make_unique<DeviceTensor>(ctx.device(), dense(c.param_dtype, {n}), p));
    grads.push_back(std::make_unique<DeviceTensor>(ctx.device(), dense(c.grad_dtype, {n})));
    ms.push_back(
        std::make_unique<DeviceTensor>(ctx.device(), dense(HAL_DTYPE_F32, {n}), host[t].m));
    vs.push_back(
        std::make_unique<DeviceTensor>(ctx.device(), dense(HAL_DTYPE_F32, {n}), host[t].v));
    masters.push_back(
        std::make_unique<DeviceTensor>(ctx.device(), dense(HAL_DTYPE_F32, {n}), host[t].w));
  }
  DeviceTensor norm_out(ctx.device(), dense(HAL_DTYPE_F32, {1}));
  const double lr = 1e-2;
  const double b1 = desc.beta1, b2 = desc.beta2, eps = desc.epsilon, wd = desc.weight_decay;
  for (int64_t step = 1; step <= 3; ++step) {
    // new gradients, uploaded through a fresh tensor each step
    std::vector<std::vector<double>> g(numels.size());
    double sum_squares = 0;
    for (size_t t = 0; t < numels.size(); ++t) {
      g[t] = random_values(ctx.random(), numels[t], c.grad_dtype);
      for (double x : g[t]) sum_squares += x * x;
      grads[t] =
          std::make_unique<DeviceTensor>(ctx.device(), dense(c.grad_dtype, {numels[t]}), g[t]);
    }
    const double norm = std::sqrt(sum_squares);
    // max_grad_norm relative to this step's norm: clipping happens
    const float max_norm = c.max_grad_norm > 0 ? static_cast<float>(c.max_grad_norm * norm) : 0.0f;
    hal_op_adamw_desc_t step_desc = desc;
    step_desc.max_grad_norm = max_norm;
    Plan step_plan;
    plan_or_skip(ctx, &step_desc.header, step_plan);
    const double clip = max_norm > 0 ? std::min(1.0, max_norm / (norm + 1e-6)) : 1.0;
    std::vector<void*> operands = {c.grad_norm ? norm_out.data() : nullptr};
    for (size_t t = 0; t < numels.size(); ++t) {
      operands.push_back(params[t]->data());
      operands.push_back(grads[t]->data());
      operands.push_back(ms[t]->data());
      operands.push_back(vs[t]->data());
      operands.push_back(c.master ? masters[t]->data() : nullptr);
    }
    hal_op_scalar_t lr_scalar{}, step_scalar{};
    lr_scalar.f64 = lr;
    step_scalar.i64 = step;
    execute(ctx, step_plan, operands, {lr_scalar, step_scalar});
    for (size_t t = 0; t < numels.size(); ++t) {
      HostTensor& h = host[t];
      for (size_t i = 0; i < h.w.size(); ++i) {
        const double gi = g[t][i] * clip;
        h.m[i] = b1 * h.m[i] + (1 - b1) * gi;
        h.v[i] = b2 * h.v[i] + (1 - b2) * gi * gi;
        const double m_hat = h.m[i] / (1 - std::pow(b1, step));
        const double v_hat = h.v[i] / (1 - std::pow(b2, step));
        h.w[i] -= lr * (m_hat / (std::sqrt(v_hat) + eps) + wd * h.w[i]);
        // without master weights the params are stored (rounded) each step
        if (!c.master) h.w[i] = round_to(c.param_dtype, h.w[i]);
      }
    }
    const std::string what = std::string("adamw param ") + dtype_label(c.param_dtype) + " grad " +
                             dtype_label(c.grad_dtype) + (c.master ? " master" : "") +
                             (max_norm > 0 ? " clipped" : "") + " step " + std::to_string(step);
    if (c.grad_norm) {
      expect_close(norm_out.download(), {norm}, tolerance_for(HAL_DTYPE_F32, 2400),
                   what + " grad_norm");
    }
    for (size_t t = 0; t < numels.size(); ++t) {
      // m and v: f32 recurrences; w: f32 state, an update of at most ~lr.
      expect_close(ms[t]->download(), host[t].m, {1e-6, 1e-5}, what + " m");
      expect_close(vs[t]->download(), host[t].v, {1e-7, 1e-4}, what + " v");
      if (c.master) {
        expect_close(masters[t]->download(), host[t].w, {1e-5, 1e-5}, what + " master");
        std::vector<double> rounded(host[t].w.size());
        for (size_t i = 0; i < rounded.size(); ++i)
          rounded[i] = round_to(c.param_dtype, host[t].w[i]);
        expect_close(params[t]->download(), rounded, tolerance_for(c.param_dtype), what + " param");
      } else {
        const auto got = params[t]->download();
        // the device's w may round to the neighbour of the reference's
        expect_close(got, host[t].w, tolerance_for(c.param_dtype, 2), what + " param");
        host[t].w = got;  // continue from the device's rounding
      }
      params[t]->check_untouched(what);
    }
  }
}

}  // namespace

HALCONFORM_TEST("operators.adamw.steps",
                "several steps over tensors of odd sizes: f32 params, bf16/f16 params with f32 "
                "master weights, clipping on and off, the grad norm",
                {}) {
  run_case(ctx, {HAL_DTYPE_F32, HAL_DTYPE_F32, false, true, 0.0f});
  run_case(ctx, {HAL_DTYPE_F32, HAL_DTYPE_F32, false, true, 0.5f});
  run_case(ctx, {HAL_DTYPE_BF16, HAL_DTYPE_BF16, true, false, 0.0f});
  run_case(ctx, {HAL_DTYPE_BF16, HAL_DTYPE_F32, true, true, 0.25f});
  run_case(ctx, {HAL_DTYPE_F16, HAL_DTYPE_F16, true, false, 0.5f});
  run_case(ctx, {HAL_DTYPE_BF16, HAL_DTYPE_BF16, false, false, 0.0f});
}

HALCONFORM_TEST("operators.adamw.errors", "each rule of the descriptor and the scalars", {}) {
  const std::vector<int64_t> numels = {4, 5};
  const auto refused = [&](hal_op_adamw_desc_t desc, const char* rule) {
    hal_op_plan_t plan = nullptr;
    const hal_result_t result = hal_op_plan_create(ctx.device(), &desc.header, 0, &plan);
    if (plan != nullptr) hal_op_plan_destroy(plan);
    HC_REQUIRE(result == HAL_ERROR_INVALID_ARGUMENT,
               std::string("adamw descriptor accepted: ") + rule);
  };
  const hal_op_adamw_desc_t good =
      adamw_desc({HAL_DTYPE_F32, HAL_DTYPE_F32, false, false, 0.0f}, numels);
  hal_op_adamw_desc_t d = good;
  d.tensor_count = 0;
  refused(d, "tensor_count 0");
  d.tensor_count = 5000;
  refused(d, "tensor_count > 4096");
  d = good;
  d.param_dtype = HAL_DTYPE_I32;
  refused(d, "i32 params");
  d = good;
  d.grad_dtype = HAL_DTYPE_F64;
  refused(d, "f64 grads");
  d = good;
  d.beta1 = 1.0f;
  refused(d, "beta1 1");
  d = good;
  d.beta2 = -0.5f;
  refused(d, "beta2 < 0");
  d = good;
  d.epsilon = -1.0f;
  refused(d, "epsilon < 0");
  d = good;
  d.weight_decay = std::nanf("");
  refused(d, "weight_decay NaN");
  d = good;
  d.max_grad_norm = std::numeric_limits<float>::infinity();
  refused(d, "max_grad_norm inf");
  d = good;
  d.has_master = 2;
  refused(d, "has_master 2");
  d = good;
  d.has_grad_norm = 2;
  refused(d, "has_grad_norm 2");
  const std::vector<int64_t> negative = {4, -1};
  d = good;
  d.numels = negative.data();
  refused(d, "a negative numel");
  d = good;
  d.numels = nullptr;
  hal_op_plan_t plan = nullptr;
  HC_REQUIRE(hal_op_plan_create(ctx.device(), &d.header, 0, &plan) != HAL_SUCCESS,
             std::string("numels NULL accepted"));
  // step 0 and a non-finite lr at execution
  Plan good_plan;
  plan_or_skip(ctx, &good.header, good_plan);
  std::vector<std::unique_ptr<DeviceTensor>> tensors;
  std::vector<void*> operands = {nullptr};
  for (int64_t n : numels) {
    for (int k = 0; k < 4; ++k) {
      tensors.push_back(std::make_unique<DeviceTensor>(ctx.device(), dense(HAL_DTYPE_F32, {n}),
                                                       std::vector<double>(n, 0.5)));
      operands.push_back(tensors.back()->data());
    }
    operands.push_back(nullptr);
  }
  hal_op_scalar_t lr{}, step{};
  lr.f64 = 1e-3;
  step.i64 = 0;
  HC_EXPECT_RESULT(try_execute(ctx, good_plan, operands, {lr, step}), HAL_ERROR_INVALID_ARGUMENT);
  step.i64 = 1;
  lr.f64 = std::nan("");
  HC_EXPECT_RESULT(try_execute(ctx, good_plan, operands, {lr, step}), HAL_ERROR_INVALID_ARGUMENT);
  for (const auto& t : tensors) {
    for (double v : t->download()) HC_REQUIRE(v == 0.5, std::string("a refused step wrote"));
  }
  // master given without has_master
  lr.f64 = 1e-3;
  DeviceTensor extra(ctx.device(), dense(HAL_DTYPE_F32, {4}));
  operands[5] = extra.data();
  HC_EXPECT_RESULT(try_execute(ctx, good_plan, operands, {lr, step}), HAL_ERROR_INVALID_ARGUMENT);
}
