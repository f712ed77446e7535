// HAL_OP_ROPE against a float64 reference written from the definition:
// pair (x1, x2) at position p, frequency index i rotates by p *
// base^(-2i/rotary_dim); the inverse (the backward pass) by minus that.
#include <cmath>

#include "op_harness.hpp"

using namespace halconform;
using namespace halconform::ops;

namespace {

constexpr hal_dtype_t kRopeDtypes[] = {HAL_DTYPE_F32, HAL_DTYPE_F16, HAL_DTYPE_BF16};

struct RopeCase {
  uint32_t rotary_dim;
  bool interleaved;
  bool inverse;
  bool has_positions;
  float base = 10000.0f;
  int32_t position_offset = 0;
};

hal_op_rope_desc_t rope_desc(const RopeCase& c, const hal_tensor_desc_t& x,
                             const hal_tensor_desc_t& out) {
  hal_op_rope_desc_t desc{};
  desc.header.struct_size = sizeof(desc);
  desc.header.kind = HAL_OP_ROPE;
  desc.rotary_dim = c.rotary_dim;
  desc.interleaved = c.interleaved;
  desc.inverse = c.inverse;
  desc.has_positions = c.has_positions;
  desc.base = c.base;
  desc.position_offset = c.position_offset;
  desc.x = x;
  desc.out = out;
  if (c.has_positions) desc.positions = dense(HAL_DTYPE_I32, {x.shape[0], x.shape[1]});
  return desc;
}

// x row-major [batch, seq, heads, dim].
std::vector<double> reference_rope(const RopeCase& c, const std::vector<int64_t>& shape,
                                   const std::vector<double>& x,
                                   const std::vector<double>& positions) {
  const int64_t batch = shape[0], seq = shape[1], heads = shape[2], dim = shape[3];
  const int64_t half = c.rotary_dim / 2;
  std::vector<double> out = x;
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t s = 0; s < seq; ++s) {
      const double p =
          c.has_positions ? positions[b * seq + s] : static_cast<double>(c.position_offset) + s;
      for (int64_t h = 0; h < heads; ++h) {
        const int64_t row = ((b * seq + s) * heads + h) * dim;
        for (int64_t i = 0; i < half; ++i) {
          const double angle =
              (c.inverse ? -p : p) *
              std::pow(static_cast<double>(c.base), -2.0 * static_cast<double>(i) / c.rotary_dim);
          const int64_t d1 = c.interleaved ? 2 * i : i;
          const int64_t d2 = c.interleaved ? 2 * i + 1 : i + half;
          const double x1 = x[row + d1], x2 = x[row + d2];
          out[row + d1] = x1 * std::cos(angle) - x2 * std::sin(angle);
          out[row + d2] = x2 * std::cos(angle) + x1 * std::sin(angle);
        }
      }
    }
  }
  return out;
}

// Runs the op on device and returns out.
std::vector<double> run_rope(TestContext& ctx, const RopeCase& c, const hal_tensor_desc_t& x_layout,
                             const hal_tensor_desc_t& out_layout, const std::vector<double>& x,
                             const std::vector<double>& positions, bool in_place = false) {
  hal_op_rope_desc_t desc = rope_desc(c, x_layout, out_layout);
  Plan plan;
  plan_or_skip(ctx, &desc.header, plan);
  DeviceTensor dx(ctx.device(), x_layout, x);
  DeviceTensor dpos(
      ctx.device(), dense(HAL_DTYPE_I32, {x_layout.shape[0], x_layout.shape[1]}),
      c.has_positions
          ? positions
          : std::vector<double>(static_cast<size_t>(x_layout.shape[0] * x_layout.shape[1])));
  DeviceTensor dout(ctx.device(), out_layout);
  void* out = in_place ? dx.data() : dout.data();
  execute(ctx, plan, {dx.data(), c.has_positions ? dpos.data() : nullptr, out});
  if (in_place) {
    dx.check_untouched("rope in place");
    return dx.download();
  }
  dout.check_untouched("rope out");
  return dout.download();
}

std::string case_label(const RopeCase& c, const hal_tensor_desc_t& x) {
  return "rope " + label(x) + " rotary_dim=" + std::to_string(c.rotary_dim) +
         (c.interleaved ? " interleaved" : " half-split") + (c.inverse ? " inverse" : "") +
         (c.has_positions ? " positions" : " offset=" + std::to_string(c.position_offset));
}

// Positions up to |max_position|: the f32 output of an angle computed in
// double is within a few ulp; the float64 reference's own sin/cos are exact.
void check_case(TestContext& ctx, const RopeCase& c, const hal_tensor_desc_t& x_layout,
                const hal_tensor_desc_t& out_layout, bool in_place = false) {
  const std::vector<int64_t> shape = shape_of(x_layout);
  const auto x = random_values(ctx.random(), numel(x_layout), x_layout.dtype, -2, 2);
  const auto positions = random_ints(ctx.random(), shape[0] * shape[1], 0, 4096);
  const auto got = run_rope(ctx, c, x_layout, out_layout, x, positions, in_place);
  expect_close(got, reference_rope(c, shape, x, positions), tolerance_for(out_layout.dtype, 2),
               case_label(c, x_layout));
}

}  // namespace

HALCONFORM_TEST("operators.rope.forward",
                "interleaved and half-split, partial rotary_dim, positions or offset, dtypes", {}) {
  for (hal_dtype_t dtype : kRopeDtypes) {
    check_case(ctx, {16, true, false, false}, dense(dtype, {2, 5, 3, 16}),
               dense(dtype, {2, 5, 3, 16}));
    check_case(ctx, {6, false, false, true}, dense(dtype, {3, 7, 2, 10}),
               dense(dtype, {3, 7, 2, 10}));
    RopeCase offset{8, false, false, false, 500.0f, 1000};
    check_case(ctx, offset, dense(dtype, {1, 9, 4, 8}), dense(HAL_DTYPE_F32, {1, 9, 4, 8}));
    check_case(ctx, {4, true, true, true}, dense(dtype, {2, 3, 5, 6}), dense(dtype, {2, 3, 5, 6}));
  }
}

HALCONFORM_TEST("operators.rope.views_and_in_place", "strided x and out, and out = x", {}) {
  // x as a [batch, heads, seq, dim] buffer viewed as [batch, seq, heads, dim]
  check_case(ctx, {12, false, false, true}, transposed(dense(HAL_DTYPE_F32, {2, 3, 11, 12}), 1, 2),
             padded(HAL_DTYPE_F32, {2, 11, 3, 12}, 5));
  check_case(ctx, {10, true, false, false}, dense(HAL_DTYPE_BF16, {2, 4, 3, 14}),
             dense(HAL_DTYPE_BF16, {2, 4, 3, 14}), true);
  check_case(ctx, {10, false, true, true}, dense(HAL_DTYPE_F32, {1, 6, 2, 10}),
             dense(HAL_DTYPE_F32, {1, 6, 2, 10}), true);
}

HALCONFORM_TEST("operators.rope.empty", "an empty batch writes nothing", {}) {
  check_case(ctx, {4, false, false, false}, dense(HAL_DTYPE_F32, {0, 3, 2, 4}),
             dense(HAL_DTYPE_F32, {0, 3, 2, 4}));
}

HALCONFORM_TEST("operators.rope.inverse_round_trip", "inverse(forward(x)) == x", {}) {
  for (bool interleaved : {false, true}) {
    const hal_tensor_desc_t layout = dense(HAL_DTYPE_F32, {2, 6, 3, 20});
    const auto x = random_values(ctx.random(), numel(layout), HAL_DTYPE_F32, -2, 2);
    const auto positions = random_ints(ctx.random(), 12, 0, 2048);
    RopeCase forward{16, interleaved, false, true};
    RopeCase inverse{16, interleaved, true, true};
    const auto y = run_rope(ctx, forward, layout, layout, x, positions);
    const auto back = run_rope(ctx, inverse, layout, layout, y, positions);
    expect_close(back, x, tolerance_for(HAL_DTYPE_F32, 4),
                 std::string("inverse(forward(x)) ") + (interleaved ? "interleaved" : "half"));
  }
}

HALCONFORM_TEST("operators.rope.backward_finite_differences",
                "the inverse applied to grad_out is d(sum grad_out * rope(x))/dx", {}) {
  for (bool interleaved : {false, true}) {
    const hal_tensor_desc_t layout = dense(HAL_DTYPE_F32, {1, 3, 2, 8});
    const std::vector<int64_t> shape = shape_of(layout);
    RopeCase forward{6, interleaved, false, false, 10000.0f, 7};
    RopeCase inverse = forward;
    inverse.inverse = true;
    const auto x = random_values(ctx.random(), numel(layout), HAL_DTYPE_F64, -1, 1);
    const auto grad_out = random_values(ctx.random(), numel(layout), HAL_DTYPE_F32, -1, 1);
    const auto got = run_rope(ctx, inverse, layout, layout, grad_out, {});
    std::vector<double> expected(x.size());
    const auto loss = [&](const std::vector<double>& at) {
      const auto y = reference_rope(forward, shape, at, {});
      double sum = 0;
      for (size_t i = 0; i < y.size(); ++i) sum += grad_out[i] * y[i];
      return sum;
    };
    const double h = 1e-6;
    for (size_t i = 0; i < x.size(); ++i) {
      auto plus = x, minus = x;
      plus[i] += h;
      minus[i] -= h;
      expected[i] = (loss(plus) - loss(minus)) / (2 * h);
    }
    expect_close(got, expected, {1e-5, 1e-5}, "rope backward vs finite differences");
  }
}

HALCONFORM_TEST("operators.rope.descriptor_errors", "each rule of the descriptor", {}) {
  const hal_tensor_desc_t x = dense(HAL_DTYPE_F32, {2, 3, 4, 8});
  const auto refused = [&](hal_op_rope_desc_t desc, const char* rule) {
    hal_op_plan_t plan = nullptr;
    const hal_result_t result = hal_op_plan_create(ctx.device(), &desc.header, 0, &plan);
    if (plan != nullptr) hal_op_plan_destroy(plan);
    HC_REQUIRE(result == HAL_ERROR_INVALID_ARGUMENT,
               std::string("rope descriptor accepted: ") + rule);
  };
  const hal_op_rope_desc_t good = rope_desc({8, false, false, true}, x, x);
  hal_op_rope_desc_t d = good;
  d.rotary_dim = 7;
  refused(d, "odd rotary_dim");
  d.rotary_dim = 10;
  refused(d, "rotary_dim > dim");
  d.rotary_dim = 0;
  refused(d, "rotary_dim 0");
  d = good;
  d.interleaved = 2;
  refused(d, "interleaved 2");
  d = good;
  d.inverse = 3;
  refused(d, "inverse 3");
  d = good;
  d.base = 0.0f;
  refused(d, "base 0");
  d.base = -1.0f;
  refused(d, "base < 0");
  d = good;
  d.x = dense(HAL_DTYPE_F32, {2, 3, 32});
  refused(d, "x of rank 3");
  d = good;
  d.x = dense(HAL_DTYPE_I32, {2, 3, 4, 8});
  refused(d, "x of i32");
  d = good;
  d.out = dense(HAL_DTYPE_F32, {2, 3, 4, 9});
  refused(d, "out's shape");
  d = good;
  d.positions = dense(HAL_DTYPE_I64, {2, 3});
  refused(d, "positions i64");
  d = good;
  d.positions = dense(HAL_DTYPE_I32, {3, 2});
  refused(d, "positions shape");
  d = good;
  d.has_positions = 2;
  refused(d, "has_positions 2");
  d = good;
  d.out.strides[2] = 0;
  refused(d, "out reaching an element twice");
}
