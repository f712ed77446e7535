// Every activation at the edges of its input range, through every op that
// applies one (UNARY and its backward, the matmul epilogue with aux, and
// BIAS_ACTIVATION_BACKWARD), against the float64 reference: far left and
// right of zero (+-1e30, +-FLT_MAX), where tanh and the logistic saturate in
// f32 (+-5 .. +-20), +-inf, NaN, tiny and subnormal values and zeros. An
// implementation that relies on tanh reaching +-1 exactly (PoCL's f32 tanh
// stops at +-0.99999994) gives -1e31, -6380 or -inf here where the answer is
// 0 (SPEC.md §17.6.3: GELU at -inf is NaN, its derivative NaN at +-inf).
#include "op_harness.hpp"
#include "reference.hpp"

#include <cmath>
#include <limits>

using namespace halconform;
using namespace halconform::ops;

namespace {

constexpr hal_dtype_t kActivationEdgesDtypes[] = {HAL_DTYPE_F32, HAL_DTYPE_F16, HAL_DTYPE_BF16};
constexpr hal_activation_t kActivations[] = {HAL_ACTIVATION_RELU, HAL_ACTIVATION_GELU_TANH,
                                             HAL_ACTIVATION_GELU_ERF, HAL_ACTIVATION_SILU};
constexpr hal_activation_t kEpilogues[] = {HAL_ACTIVATION_RELU, HAL_ACTIVATION_GELU_TANH,
                                           HAL_ACTIVATION_GELU_ERF};

const char* activation_name(hal_activation_t act) {
  switch (act) {
    case HAL_ACTIVATION_RELU:
      return "relu";
    case HAL_ACTIVATION_GELU_TANH:
      return "gelu_tanh";
    case HAL_ACTIVATION_GELU_ERF:
      return "gelu_erf";
    case HAL_ACTIVATION_SILU:
      return "silu";
    default:
      return "none";
  }
}

// The edges, each with its negation, rounded to |dtype| (f16 turns the
// large ones into infinities, which are edges too).
std::vector<double> edges(hal_dtype_t dtype) {
  const double inf = std::numeric_limits<double>::infinity();
  const double magnitudes[] = {0.0,  1e-40, 1e-30,
                               1e-7, 0.5,   1.0,
                               2.0,  3.0,   4.0,
                               5.0,  6.0,   7.0,
                               8.0,  9.0,   10.0,
                               11.0, 12.0,  13.0,
                               14.0, 15.0,  17.0,
                               20.0, 30.0,  88.0,
                               89.0, 100.0, 1e4,
                               1e10, 1e13,  1e19,
                               1e20, 1e30,  std::numeric_limits<float>::max(),
                               inf};
  std::vector<double> values;
  for (double magnitude : magnitudes) {
    values.push_back(round_to(dtype, magnitude));
    values.push_back(round_to(dtype, -magnitude));
  }
  values.push_back(std::numeric_limits<double>::quiet_NaN());
  return values;
}

// The reference's activation of an input, rounded to the output's dtype as a
// store would (a finite f32 value past f16's range is inf there).
double expected_activation(hal_activation_t act, double x, hal_dtype_t out_dtype) {
  return round_to(out_dtype, reference::activation(act, x));
}

hal_op_unary_desc_t unary_desc(hal_op_kind_t kind, hal_activation_t act,
                               const hal_tensor_desc_t& layout) {
  hal_op_unary_desc_t desc{};
  desc.header.struct_size = sizeof(desc);
  desc.header.kind = kind;
  desc.activation = act;
  desc.alpha = 1.0f;
  desc.x = desc.out = desc.grad_x = layout;
  return desc;
}

std::string what(const char* op, hal_activation_t act, hal_dtype_t dtype) {
  return std::string(op) + " " + activation_name(act) + " " + dtype_label(dtype) + " at the edges";
}

}  // namespace

HALCONFORM_TEST("operators.unary.edges",
                "every activation at +-1e30, +-FLT_MAX, +-inf, NaN, where tanh saturates, tiny",
                {}) {
  for (hal_dtype_t dtype : kActivationEdgesDtypes) {
    const std::vector<double> x = edges(dtype);
    const hal_tensor_desc_t layout = dense(dtype, {static_cast<int64_t>(x.size())});
    for (hal_activation_t act : kActivations) {
      hal_op_unary_desc_t desc = unary_desc(HAL_OP_UNARY, act, layout);
      Plan plan;
      plan_or_skip(ctx, &desc.header, plan);
      DeviceTensor dx(ctx.device(), layout, x), dout(ctx.device(), layout);
      execute(ctx, plan, {dx.data(), dout.data()});
      std::vector<double> expected(x.size());
      for (size_t i = 0; i < x.size(); ++i) expected[i] = expected_activation(act, x[i], dtype);
      expect_close(dout.download(), expected, tolerance_for(dtype), what("unary", act, dtype));
    }
  }
}

HALCONFORM_TEST("operators.unary_backward.edges",
                "every derivative at +-1e30, +-FLT_MAX, +-inf, NaN, where tanh saturates, tiny",
                {}) {
  for (hal_dtype_t dtype : kActivationEdgesDtypes) {
    const std::vector<double> x = edges(dtype);
    const hal_tensor_desc_t layout = dense(dtype, {static_cast<int64_t>(x.size())});
    const std::vector<double> grad_out =
        random_values(ctx.random(), static_cast<int64_t>(x.size()), dtype, 0.5, 2.0);
    for (hal_activation_t act : kActivations) {
      hal_op_unary_desc_t desc = unary_desc(HAL_OP_UNARY_BACKWARD, act, layout);
      Plan plan;
      plan_or_skip(ctx, &desc.header, plan);
      DeviceTensor dx(ctx.device(), layout, x), dgy(ctx.device(), layout, grad_out),
          dgx(ctx.device(), layout);
      execute(ctx, plan, {dx.data(), dgy.data(), dgx.data()});
      std::vector<double> expected(x.size());
      for (size_t i = 0; i < x.size(); ++i) {
        expected[i] = round_to(dtype, grad_out[i] * reference::activation_derivative(act, x[i]));
      }
      expect_close(dgx.download(), expected, tolerance_for(dtype, 4),
                   what("unary backward", act, dtype));
    }
  }
}

// The epilogue sees pre = x * 1 and x * -1 (a [E, 1] times b [1, 2] = [1, -1]:
// one exact product each), saves it to aux, and the backward op takes aux.
HALCONFORM_TEST("operators.matmul.epilogue_edges",
                "each epilogue activation (and aux) at the edges of its input range", {}) {
  for (hal_dtype_t dtype : kActivationEdgesDtypes) {
    const std::vector<double> x = edges(dtype);
    const int64_t rows = static_cast<int64_t>(x.size());
    for (hal_activation_t act : kEpilogues) {
      hal_op_matmul_desc_t desc{};
      desc.header.struct_size = sizeof(desc);
      desc.header.kind = HAL_OP_MATMUL;
      desc.flags = HAL_MATMUL_SAVE_AUX;
      desc.activation = act;
      desc.alpha = 1.0f;
      desc.a = dense(dtype, {rows, 1});
      desc.b = dense(dtype, {1, 2});
      desc.d = dense(dtype, {rows, 2});
      desc.aux = dense(HAL_DTYPE_F32, {rows, 2});
      Plan plan;
      plan_or_skip(ctx, &desc.header, plan);
      DeviceTensor da(ctx.device(), desc.a, x), db(ctx.device(), desc.b, {1.0, -1.0}),
          dd(ctx.device(), desc.d), daux(ctx.device(), desc.aux);
      execute(ctx, plan, {da.data(), db.data(), nullptr, dd.data(), nullptr, daux.data()});
      std::vector<double> pre(2 * x.size()), expected(2 * x.size());
      for (size_t i = 0; i < x.size(); ++i) {
        pre[2 * i] = x[i];
        pre[2 * i + 1] = -x[i];
      }
      for (size_t i = 0; i < pre.size(); ++i) expected[i] = expected_activation(act, pre[i], dtype);
      expect_close(daux.download(), pre, tolerance_for(HAL_DTYPE_F32),
                   what("matmul aux", act, dtype));
      expect_close(dd.download(), expected, tolerance_for(dtype), what("matmul", act, dtype));
    }
  }
}

// SwiGLU's gate (x's first half) takes the edges, up and grad_out random:
// out = silu(gate) up; grad_gate = grad_out up silu'(gate), grad_up =
// grad_out silu(gate).
HALCONFORM_TEST("operators.swiglu.edges", "SiLU of the gate at the edges, forward and backward",
                {}) {
  for (hal_dtype_t dtype : kActivationEdgesDtypes) {
    const std::vector<double> gate = edges(dtype);
    const int64_t n = static_cast<int64_t>(gate.size());
    std::vector<double> x = gate;
    const std::vector<double> up = random_values(ctx.random(), n, dtype, 0.5, 2.0);
    x.insert(x.end(), up.begin(), up.end());
    const std::vector<double> grad_out = random_values(ctx.random(), n, dtype, 0.5, 2.0);
    hal_op_swiglu_desc_t desc{};
    desc.header.struct_size = sizeof(desc);
    desc.header.kind = HAL_OP_SWIGLU;
    desc.x = desc.grad_x = dense(dtype, {1, 2 * n});
    desc.out = dense(dtype, {1, n});
    Plan forward;
    plan_or_skip(ctx, &desc.header, forward);
    desc.header.kind = HAL_OP_SWIGLU_BACKWARD;
    Plan backward;
    plan_or_skip(ctx, &desc.header, backward);
    DeviceTensor dx(ctx.device(), desc.x, x), dout(ctx.device(), desc.out),
        dgy(ctx.device(), desc.out, grad_out), dgx(ctx.device(), desc.grad_x);
    execute(ctx, forward, {dx.data(), dout.data()});
    execute(ctx, backward, {dx.data(), dgy.data(), dgx.data()});
    std::vector<double> out(gate.size()), grad_x(2 * gate.size());
    for (size_t j = 0; j < gate.size(); ++j) {
      const double silu = reference::activation(HAL_ACTIVATION_SILU, gate[j]);
      out[j] = round_to(dtype, silu * up[j]);
      grad_x[j] =
          round_to(dtype, grad_out[j] * up[j] *
                              reference::activation_derivative(HAL_ACTIVATION_SILU, gate[j]));
      grad_x[gate.size() + j] = round_to(dtype, grad_out[j] * silu);
    }
    expect_close(dout.download(), out, tolerance_for(dtype, 2),
                 what("swiglu", HAL_ACTIVATION_SILU, dtype));
    expect_close(dgx.download(), grad_x, tolerance_for(dtype, 4),
                 what("swiglu backward", HAL_ACTIVATION_SILU, dtype));
  }
}

// grad_pre = grad_out * act'(aux) at the edges; with the bias gradient, aux
// is [2, E] (each column x and -x), so each column's sum holds one edge.
HALCONFORM_TEST("operators.bias_activation_backward.edges",
                "each epilogue derivative and the bias gradient at the edges", {}) {
  for (hal_dtype_t dtype : kActivationEdgesDtypes) {
    const std::vector<double> x = edges(dtype);
    const int64_t n = static_cast<int64_t>(x.size());
    std::vector<double> aux(2 * x.size());
    for (size_t j = 0; j < x.size(); ++j) {
      aux[j] = x[j];
      aux[x.size() + j] = -x[j];
    }
    const std::vector<double> grad_out = random_values(ctx.random(), 2 * n, dtype, 0.5, 2.0);
    for (hal_activation_t act : kEpilogues) {
      hal_op_bias_activation_backward_desc_t desc{};
      desc.header.struct_size = sizeof(desc);
      desc.header.kind = HAL_OP_BIAS_ACTIVATION_BACKWARD;
      desc.activation = act;
      desc.compute_bias_grad = 1;
      desc.grad_out = desc.aux = desc.grad_pre = dense(dtype, {2, n});
      desc.grad_bias = dense(HAL_DTYPE_F32, {n});
      Plan plan;
      plan_or_skip(ctx, &desc.header, plan);
      DeviceTensor dgy(ctx.device(), desc.grad_out, grad_out), daux(ctx.device(), desc.aux, aux),
          dgp(ctx.device(), desc.grad_pre), dgb(ctx.device(), desc.grad_bias);
      execute(ctx, plan, {dgy.data(), daux.data(), dgp.data(), dgb.data()});
      std::vector<double> grad_pre(aux.size()), grad_bias(x.size(), 0.0);
      for (size_t i = 0; i < aux.size(); ++i) {
        grad_pre[i] = grad_out[i] * reference::activation_derivative(act, aux[i]);
        grad_bias[i % x.size()] += grad_pre[i];
      }
      std::vector<double> stored(grad_pre.size());
      for (size_t i = 0; i < grad_pre.size(); ++i) stored[i] = round_to(dtype, grad_pre[i]);
      expect_close(dgp.download(), stored, tolerance_for(dtype, 4),
                   what("bias_activation_backward", act, dtype));
      expect_close(dgb.download(), grad_bias, tolerance_for(HAL_DTYPE_F32, 8),
                   what("bias_activation_backward grad_bias", act, dtype));
    }
  }
}
