// HAL_OP_GATHER and HAL_OP_SCATTER against host references: gather along
// each axis with i32 and i64 indices, index_select as a stride-0 index view,
// every dtype; scatter (replace: the last index in row-major order wins)
// and scatter_add (in row-major order) with duplicates, index_add and
// index_copy as stride-0 index views; out-of-range indices (negative, past
// the end, huge) read zeros, write nothing outside the tensors and raise the
// status word, which nothing clears; determinism; each descriptor rule.
#include <cmath>
#include <cstdint>
#include <limits>

#include "op_harness.hpp"

using namespace halconform;
using namespace halconform::ops;

namespace {

hal_op_gather_desc_t gather_desc(uint32_t axis, const hal_tensor_desc_t& x,
                                 const hal_tensor_desc_t& index, const hal_tensor_desc_t& out) {
  hal_op_gather_desc_t desc{};
  desc.header.struct_size = sizeof(desc);
  desc.header.kind = HAL_OP_GATHER;
  desc.axis = axis;
  desc.x = x;
  desc.index = index;
  desc.out = out;
  return desc;
}

hal_op_scatter_desc_t scatter_desc(hal_scatter_mode_t mode, uint32_t axis,
                                   const hal_tensor_desc_t& index, const hal_tensor_desc_t& src,
                                   const hal_tensor_desc_t& out) {
  hal_op_scatter_desc_t desc{};
  desc.header.struct_size = sizeof(desc);
  desc.header.kind = HAL_OP_SCATTER;
  desc.mode = mode;
  desc.axis = axis;
  desc.index = index;
  desc.src = src;
  desc.out = out;
  return desc;
}

hal_tensor_desc_t status_layout() {
  return dense(HAL_DTYPE_I32, {1});
}

// An index tensor viewed with stride 0 in every dimension but |axis| (a
// 1-D index of |shape[axis]| elements: index_select, index_add, index_copy).
hal_tensor_desc_t spread(hal_dtype_t dtype, const std::vector<int64_t>& shape, uint32_t axis) {
  hal_tensor_desc_t view = dense(dtype, shape);
  for (uint32_t d = 0; d < view.rank; ++d) view.strides[d] = d == axis ? 1 : 0;
  return view;
}

struct GatherResult {
  std::vector<double> out;
  int64_t status;
};

GatherResult run_gather(TestContext& ctx, uint32_t axis, const hal_tensor_desc_t& x_layout,
                        const std::vector<double>& x, const hal_tensor_desc_t& index_layout,
                        const std::vector<int64_t>& index, const hal_tensor_desc_t& out_layout) {
  hal_op_gather_desc_t desc = gather_desc(axis, x_layout, index_layout, out_layout);
  Plan plan;
  plan_or_skip(ctx, &desc.header, plan);
  DeviceTensor dx(ctx.device(), x_layout, x), di(ctx.device(), index_layout),
      dout(ctx.device(), out_layout), dstatus(ctx.device(), status_layout(), {0});
  di.upload_integers(index);
  execute(ctx, plan, {dx.data(), di.data(), dout.data(), dstatus.data()});
  const std::string what = "gather axis " + std::to_string(axis) + " " + label(x_layout);
  dout.check_untouched(what);
  dstatus.check_untouched(what + " status");
  return {dout.download(), dstatus.download_integers()[0]};
}

std::vector<double> gather_reference(uint32_t axis, const hal_tensor_desc_t& x_layout,
                                     const std::vector<double>& x,
                                     const std::vector<int64_t>& index,
                                     const hal_tensor_desc_t& out_layout, bool* bad) {
  std::vector<double> expected(static_cast<size_t>(numel(out_layout)));
  *bad = false;
  for (size_t i = 0; i < expected.size(); ++i) {
    std::vector<int64_t> c = coordinates(out_layout, static_cast<int64_t>(i));
    const int64_t at = index[i];
    if (at < 0 || at >= x_layout.shape[axis]) {
      expected[i] = 0;
      *bad = true;
      continue;
    }
    c[axis] = at;
    expected[i] = x[static_cast<size_t>(row_major(x_layout, c))];
  }
  return expected;
}

}  // namespace

HALCONFORM_TEST("operators.gather.axes_and_dtypes",
                "gather along each axis, i32 and i64 indices, every dtype, x larger than out", {}) {
  for (hal_dtype_t dtype :
       {HAL_DTYPE_F32, HAL_DTYPE_F16, HAL_DTYPE_BF16, HAL_DTYPE_F64, HAL_DTYPE_I32, HAL_DTYPE_I64,
        HAL_DTYPE_I8, HAL_DTYPE_U8, HAL_DTYPE_BOOL}) {
    for (uint32_t axis = 0; axis < 3; ++axis) {
      const hal_tensor_desc_t x_layout = dense(dtype, {6, 7, 8});
      const hal_tensor_desc_t out_layout = dense(dtype, {5, 4, 6});
      const hal_dtype_t index_dtype = axis % 2 == 0 ? HAL_DTYPE_I64 : HAL_DTYPE_I32;
      const hal_tensor_desc_t index_layout = dense(index_dtype, {5, 4, 6});
      const auto x = dtype == HAL_DTYPE_BOOL ? random_ints(ctx.random(), numel(x_layout), 0, 1)
                                             : random_ints(ctx.random(), numel(x_layout), 0, 100);
      std::vector<int64_t> index;
      for (int64_t i = 0; i < numel(index_layout); ++i) {
        index.push_back(static_cast<int64_t>(ctx.random()() % x_layout.shape[axis]));
      }
      const auto result = run_gather(ctx, axis, x_layout, x, index_layout, index, out_layout);
      bool bad = false;
      const auto expected = gather_reference(axis, x_layout, x, index, out_layout, &bad);
      expect_close(result.out, expected, {0, 0},
                   "gather axis " + std::to_string(axis) + " of " + label(x_layout));
      HC_REQUIRE(result.status == 0, "gather with every index in range raised the status");
    }
  }
}

HALCONFORM_TEST("operators.gather.index_select_and_views",
                "index_select (a stride-0 index view), transposed x, padded out", {}) {
  const hal_tensor_desc_t x_layout =
      transposed(padded(HAL_DTYPE_F32, {9, 10}, 3), 0, 1);  // [10, 9]
  const auto x = random_values(ctx.random(), 90, HAL_DTYPE_F32);
  // index_select(x, 0, [7 indices]) -> out [7, 9].
  const std::vector<int64_t> picks = {9, 0, 3, 3, 8, 1, 0};
  const hal_tensor_desc_t index_layout = spread(HAL_DTYPE_I64, {7, 9}, 0);
  std::vector<int64_t> index(63);
  for (size_t i = 0; i < 63; ++i) index[i] = picks[i / 9];
  const hal_tensor_desc_t out_layout = padded(HAL_DTYPE_F32, {7, 9}, 2);
  hal_op_gather_desc_t desc = gather_desc(0, x_layout, index_layout, out_layout);
  Plan plan;
  plan_or_skip(ctx, &desc.header, plan);
  DeviceTensor dx(ctx.device(), x_layout, x), di(ctx.device(), dense(HAL_DTYPE_I64, {7})),
      dout(ctx.device(), out_layout), dstatus(ctx.device(), status_layout(), {0});
  di.upload_integers(picks);
  execute(ctx, plan, {dx.data(), di.data(), dout.data(), dstatus.data()});
  bool bad = false;
  expect_close(dout.download(), gather_reference(0, x_layout, x, index, out_layout, &bad), {0, 0},
               "index_select");
  dout.check_untouched("index_select");
}

HALCONFORM_TEST("operators.gather.out_of_range",
                "negative, past-the-end and huge indices give zeros and raise the status; "
                "a raised status stays raised",
                {}) {
  const hal_tensor_desc_t x_layout = dense(HAL_DTYPE_F32, {4, 6});
  const auto x = random_values(ctx.random(), 24, HAL_DTYPE_F32, 1, 2);
  const hal_tensor_desc_t layout = dense(HAL_DTYPE_I64, {4, 3});
  const std::vector<int64_t> index = {0,      -1,
                                      5,      6,
                                      2,      std::numeric_limits<int64_t>::min(),
                                      3,      std::numeric_limits<int64_t>::max(),
                                      1,      4,
                                      100000, 5};
  hal_op_gather_desc_t desc = gather_desc(1, x_layout, layout, dense(HAL_DTYPE_F32, {4, 3}));
  Plan plan;
  plan_or_skip(ctx, &desc.header, plan);
  DeviceTensor dx(ctx.device(), x_layout, x), di(ctx.device(), layout),
      dout(ctx.device(), dense(HAL_DTYPE_F32, {4, 3})), dstatus(ctx.device(), status_layout(), {0});
  di.upload_integers(index);
  execute(ctx, plan, {dx.data(), di.data(), dout.data(), dstatus.data()});
  bool bad = false;
  const auto expected = gather_reference(1, x_layout, x, index, desc.out, &bad);
  expect_close(dout.download(), expected, {0, 0}, "gather with out-of-range indices");
  HC_REQUIRE(dstatus.download_integers()[0] == 1, "out-of-range gather: status not raised");
  dout.check_untouched("gather out of range");
  dstatus.check_untouched("gather status");
  // A second, clean execution leaves the raised status alone.
  const std::vector<int64_t> clean(12, 2);
  di.upload_integers(clean);
  execute(ctx, plan, {dx.data(), di.data(), dout.data(), dstatus.data()});
  HC_REQUIRE(dstatus.download_integers()[0] == 1, "a clean execution cleared the status");
}

namespace {

// Applies scatter in row-major order of index (the SPEC's order), on doubles
// for floats (each sum rounded to out's dtype) or on exact integers.
void scatter_reference(hal_scatter_mode_t mode, uint32_t axis,
                       const hal_tensor_desc_t& index_layout, const std::vector<int64_t>& index,
                       const hal_tensor_desc_t& src_layout, const std::vector<double>& src,
                       const hal_tensor_desc_t& out_layout, std::vector<double>& out, bool* bad) {
  *bad = false;
  for (int64_t i = 0; i < numel(index_layout); ++i) {
    std::vector<int64_t> c = coordinates(index_layout, i);
    const double value = src[static_cast<size_t>(row_major(src_layout, c))];
    const int64_t at = index[static_cast<size_t>(i)];
    if (at < 0 || at >= out_layout.shape[axis]) {
      *bad = true;
      continue;
    }
    c[axis] = at;
    double& target = out[static_cast<size_t>(row_major(out_layout, c))];
    target = mode == HAL_SCATTER_ADD ? round_to(out_layout.dtype, target + value) : value;
  }
}

void run_scatter(TestContext& ctx, hal_scatter_mode_t mode, uint32_t axis,
                 const hal_tensor_desc_t& index_layout, const std::vector<int64_t>& index,
                 const hal_tensor_desc_t& index_storage, const hal_tensor_desc_t& src_layout,
                 const hal_tensor_desc_t& out_layout, bool expect_bad, Tolerance tolerance) {
  hal_op_scatter_desc_t desc = scatter_desc(mode, axis, index_layout, src_layout, out_layout);
  Plan plan;
  plan_or_skip(ctx, &desc.header, plan);
  const bool integers = out_layout.dtype == HAL_DTYPE_I32 || out_layout.dtype == HAL_DTYPE_I64 ||
                        out_layout.dtype == HAL_DTYPE_I8 || out_layout.dtype == HAL_DTYPE_U8 ||
                        out_layout.dtype == HAL_DTYPE_BOOL;
  // Integer sums stay inside every width (at most 5 terms of at most 3 onto 20).
  const auto src = integers ? random_ints(ctx.random(), numel(src_layout), 0,
                                          out_layout.dtype == HAL_DTYPE_BOOL ? 1 : 3)
                            : random_values(ctx.random(), numel(src_layout), src_layout.dtype);
  std::vector<double> out = integers
                                ? random_ints(ctx.random(), numel(out_layout), 0,
                                              out_layout.dtype == HAL_DTYPE_BOOL ? 1 : 20)
                                : random_values(ctx.random(), numel(out_layout), out_layout.dtype);
  DeviceTensor di(ctx.device(), index_storage), ds(ctx.device(), src_layout, src),
      dout(ctx.device(), out_layout, out), dstatus(ctx.device(), status_layout(), {0});
  // The index values as stored (a spread view reads its 1-D storage).
  std::vector<int64_t> stored(static_cast<size_t>(numel(index_storage)));
  for (int64_t i = 0; i < numel(index_layout); ++i) {
    const auto c = coordinates(index_layout, i);
    int64_t offset = 0;
    for (uint32_t d = 0; d < index_layout.rank; ++d) offset += c[d] * index_layout.strides[d];
    stored[static_cast<size_t>(offset)] = index[static_cast<size_t>(i)];
  }
  di.upload_integers(stored);
  execute(ctx, plan, {di.data(), ds.data(), dout.data(), dstatus.data()});
  bool bad = false;
  scatter_reference(mode, axis, index_layout, index, src_layout, src, out_layout, out, &bad);
  const std::string what = std::string(mode == HAL_SCATTER_ADD ? "scatter_add" : "scatter") +
                           " axis " + std::to_string(axis) + " " + label(out_layout);
  expect_close(dout.download(), out, tolerance, what);
  HC_REQUIRE(dstatus.download_integers()[0] == (expect_bad ? 1 : 0),
             what + ": status " + (expect_bad ? "not raised" : "raised"));
  HC_REQUIRE(bad == expect_bad, what + ": the test's own indices");
  dout.check_untouched(what);
}

}  // namespace

HALCONFORM_TEST("operators.scatter.replace_and_add",
                "scatter and scatter_add along each axis with duplicate indices (the last wins; "
                "sums in row-major order), every dtype",
                {}) {
  for (hal_dtype_t dtype :
       {HAL_DTYPE_F32, HAL_DTYPE_F16, HAL_DTYPE_BF16, HAL_DTYPE_F64, HAL_DTYPE_I32, HAL_DTYPE_I64,
        HAL_DTYPE_I8, HAL_DTYPE_U8, HAL_DTYPE_BOOL}) {
    for (uint32_t axis = 0; axis < 3; ++axis) {
      const hal_tensor_desc_t out_layout = dense(dtype, {5, 6, 7});
      const hal_tensor_desc_t src_layout = dense(dtype, {6, 6, 8});
      const hal_tensor_desc_t index_layout = dense(HAL_DTYPE_I64, {5, 4, 5});
      std::vector<int64_t> index;
      for (int64_t i = 0; i < numel(index_layout); ++i) {
        index.push_back(static_cast<int64_t>(ctx.random()() % 3));  // many duplicates
      }
      for (hal_scatter_mode_t mode : {HAL_SCATTER_REPLACE, HAL_SCATTER_ADD}) {
        if (mode == HAL_SCATTER_ADD && dtype == HAL_DTYPE_BOOL) continue;
        run_scatter(ctx, mode, axis, index_layout, index, index_layout, src_layout, out_layout,
                    false, {0, 0});
      }
    }
  }
}

HALCONFORM_TEST("operators.scatter.index_add_and_copy",
                "index_add and index_copy (a 1-D index viewed with stride 0), i32 index, "
                "strided out",
                {}) {
  // index_add(out [8, 5], 0, index [12], src [12, 5]).
  const hal_tensor_desc_t out_layout = padded(HAL_DTYPE_F32, {8, 5}, 3);
  const hal_tensor_desc_t src_layout = dense(HAL_DTYPE_F32, {12, 5});
  const hal_tensor_desc_t index_layout = spread(HAL_DTYPE_I32, {12, 5}, 0);
  std::vector<int64_t> index(60);
  const std::vector<int64_t> rows = {3, 0, 3, 7, 7, 7, 1, 2, 3, 0, 6, 5};
  for (size_t i = 0; i < 60; ++i) index[i] = rows[i / 5];
  run_scatter(ctx, HAL_SCATTER_ADD, 0, index_layout, index, dense(HAL_DTYPE_I32, {12}), src_layout,
              out_layout, false, tolerance_for(HAL_DTYPE_F32, 4));
  run_scatter(ctx, HAL_SCATTER_REPLACE, 0, index_layout, index, dense(HAL_DTYPE_I32, {12}),
              src_layout, out_layout, false, {0, 0});
  // Along the last axis: index_add(out [4, 9], 1, index [6], src [4, 6]) in bf16.
  const hal_tensor_desc_t index_last = spread(HAL_DTYPE_I64, {4, 6}, 1);
  std::vector<int64_t> columns(24);
  for (size_t i = 0; i < 24; ++i) columns[i] = static_cast<int64_t>((i % 6) * 5 % 9);
  run_scatter(ctx, HAL_SCATTER_ADD, 1, index_last, columns, dense(HAL_DTYPE_I64, {6}),
              dense(HAL_DTYPE_BF16, {4, 6}), dense(HAL_DTYPE_BF16, {4, 9}), false, {0, 0});
}

HALCONFORM_TEST("operators.scatter.out_of_range",
                "out-of-range indices write nothing, raise the status, and the rest lands", {}) {
  const hal_tensor_desc_t out_layout = dense(HAL_DTYPE_F32, {4, 6});
  const hal_tensor_desc_t layout = dense(HAL_DTYPE_I64, {4, 3});
  const std::vector<int64_t> index = {
      0, -1, 5,  6, 2, std::numeric_limits<int64_t>::min(), 3, std::numeric_limits<int64_t>::max(),
      1, 4,  -6, 5};
  for (hal_scatter_mode_t mode : {HAL_SCATTER_REPLACE, HAL_SCATTER_ADD}) {
    run_scatter(ctx, mode, 1, layout, index, layout, dense(HAL_DTYPE_F32, {4, 3}), out_layout, true,
                tolerance_for(HAL_DTYPE_F32, 2));
  }
}

HALCONFORM_TEST("operators.scatter.deterministic", "scatter_add twice gives identical bits", {}) {
  const hal_tensor_desc_t out_layout = dense(HAL_DTYPE_F32, {16, 64});
  const hal_tensor_desc_t src_layout = dense(HAL_DTYPE_F32, {2000, 64});
  const hal_tensor_desc_t index_layout = spread(HAL_DTYPE_I64, {2000, 64}, 0);
  hal_op_scatter_desc_t desc =
      scatter_desc(HAL_SCATTER_ADD, 0, index_layout, src_layout, out_layout);
  Plan plan;
  plan_or_skip(ctx, &desc.header, plan, HAL_OP_PLAN_DETERMINISTIC);
  std::vector<int64_t> rows(2000);
  for (auto& r : rows) r = static_cast<int64_t>(ctx.random()() % 16);
  const auto src = random_values(ctx.random(), numel(src_layout), HAL_DTYPE_F32);
  DeviceTensor di(ctx.device(), dense(HAL_DTYPE_I64, {2000})), ds(ctx.device(), src_layout, src),
      d1(ctx.device(), out_layout, std::vector<double>(1024, 0.0)),
      d2(ctx.device(), out_layout, std::vector<double>(1024, 0.0)),
      dstatus(ctx.device(), status_layout(), {0});
  di.upload_integers(rows);
  execute(ctx, plan, {di.data(), ds.data(), d1.data(), dstatus.data()});
  execute(ctx, plan, {di.data(), ds.data(), d2.data(), dstatus.data()});
  expect_identical(d1.download(), d2.download(), "index_add deterministic");
}

HALCONFORM_TEST("operators.gather_scatter.errors", "each descriptor rule is refused", {}) {
  const hal_tensor_desc_t f32 = dense(HAL_DTYPE_F32, {4, 5});
  const hal_tensor_desc_t i64 = dense(HAL_DTYPE_I64, {4, 5});
  const auto refused = [&](const hal_op_header_t* header, const char* rule) {
    hal_op_plan_t plan = nullptr;
    HC_EXPECT_RESULT(hal_op_plan_create(ctx.device(), header, 0, &plan),
                     HAL_ERROR_INVALID_ARGUMENT);
    HC_REQUIRE(plan == nullptr, std::string(rule) + ": a refused plan was written");
  };
  hal_op_gather_desc_t g = gather_desc(2, f32, i64, f32);
  refused(&g.header, "gather axis past the rank");
  g = gather_desc(0, f32, i64, f32);
  g.reserved = 1;
  refused(&g.header, "gather reserved");
  g = gather_desc(0, dense(HAL_DTYPE_F16, {4, 5}), i64, f32);
  refused(&g.header, "gather x of another dtype");
  g = gather_desc(0, f32, dense(HAL_DTYPE_F32, {4, 5}), f32);
  refused(&g.header, "gather float index");
  g = gather_desc(0, f32, dense(HAL_DTYPE_I64, {4, 4}), f32);
  refused(&g.header, "gather index not out's shape");
  g = gather_desc(0, dense(HAL_DTYPE_F32, {4, 3}), i64, f32);
  refused(&g.header, "gather x smaller than out off the axis");
  g = gather_desc(0, dense(HAL_DTYPE_F32, {4, 5, 1}), i64, f32);
  refused(&g.header, "gather x of another rank");
  hal_op_scatter_desc_t s = scatter_desc(HAL_SCATTER_MODE_COUNT, 0, i64, f32, f32);
  refused(&s.header, "scatter unknown mode");
  s = scatter_desc(HAL_SCATTER_ADD, 0, dense(HAL_DTYPE_I64, {4, 5}), dense(HAL_DTYPE_BOOL, {4, 5}),
                   dense(HAL_DTYPE_BOOL, {4, 5}));
  refused(&s.header, "scatter_add of bool");
  s = scatter_desc(HAL_SCATTER_REPLACE, 0, dense(HAL_DTYPE_I64, {4, 6}), f32, f32);
  refused(&s.header, "scatter index larger than src");
  s = scatter_desc(HAL_SCATTER_REPLACE, 0, dense(HAL_DTYPE_I64, {4, 6}),
                   dense(HAL_DTYPE_F32, {4, 6}), f32);
  refused(&s.header, "scatter index larger than out off the axis");
  s = scatter_desc(HAL_SCATTER_REPLACE, 1, i64, dense(HAL_DTYPE_F16, {4, 5}), f32);
  refused(&s.header, "scatter src of another dtype");
  hal_tensor_desc_t overlapping = f32;
  overlapping.strides[0] = 0;
  s = scatter_desc(HAL_SCATTER_REPLACE, 1, i64, f32, overlapping);
  refused(&s.header, "scatter out with stride 0");
  // At execution: the status word may overlap nothing.
  hal_op_gather_desc_t good = gather_desc(1, f32, i64, f32);
  Plan plan;
  plan_or_skip(ctx, &good.header, plan);
  DeviceTensor dx(ctx.device(), f32), di(ctx.device(), i64), dout(ctx.device(), f32);
  HC_EXPECT_RESULT(try_execute(ctx, plan, {dx.data(), di.data(), dout.data(), dout.data()}),
                   HAL_ERROR_INVALID_ARGUMENT);
  HC_EXPECT_RESULT(try_execute(ctx, plan, {dx.data(), di.data(), dout.data(), nullptr}),
                   HAL_ERROR_NULL_POINTER);
}
