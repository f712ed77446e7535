// HAL_OP_EMBEDDING and HAL_OP_EMBEDDING_BACKWARD against float64 references:
// a gather of table rows (zero for an id outside [0, vocab)), and the sum of
// grad_out rows per id.
#include <algorithm>

#include "op_harness.hpp"

using namespace halconform;
using namespace halconform::ops;

namespace {

hal_op_embedding_desc_t embedding_desc(hal_op_kind_t kind, const hal_tensor_desc_t& ids,
                                       const hal_tensor_desc_t& table, const hal_tensor_desc_t& out,
                                       bool accumulate = false) {
  hal_op_embedding_desc_t desc{};
  desc.header.struct_size = sizeof(desc);
  desc.header.kind = kind;
  desc.accumulate = accumulate;
  desc.ids = ids;
  desc.table = table;
  desc.out = out;
  return desc;
}

// Ids in [-2, vocab + 2): a few out of range on both sides.
std::vector<double> some_ids(TestContext& ctx, int64_t n, int64_t vocab) {
  return random_ints(ctx.random(), n, -2, vocab + 2);
}

void check_forward(TestContext& ctx, const hal_tensor_desc_t& ids_layout,
                   const hal_tensor_desc_t& table_layout, const hal_tensor_desc_t& out_layout) {
  hal_op_embedding_desc_t desc =
      embedding_desc(HAL_OP_EMBEDDING, ids_layout, table_layout, out_layout);
  Plan plan;
  plan_or_skip(ctx, &desc.header, plan);
  const int64_t vocab = table_layout.shape[0], dim = table_layout.shape[1];
  const int64_t n = numel(ids_layout);
  const auto ids = some_ids(ctx, n, vocab);
  const auto table = random_values(ctx.random(), vocab * dim, table_layout.dtype);
  DeviceTensor dids(ctx.device(), ids_layout, ids), dtable(ctx.device(), table_layout, table),
      dout(ctx.device(), out_layout);
  execute(ctx, plan, {dids.data(), dtable.data(), dout.data()});
  std::vector<double> expected(static_cast<size_t>(n * dim), 0.0);
  for (int64_t i = 0; i < n; ++i) {
    const auto id = static_cast<int64_t>(ids[i]);
    if (id < 0 || id >= vocab) continue;
    for (int64_t c = 0; c < dim; ++c) expected[i * dim + c] = table[id * dim + c];
  }
  const std::string what =
      "embedding " + label(ids_layout) + " " + label(table_layout) + " -> " + label(out_layout);
  // A copy: exact except for the conversion to out's dtype.
  expect_close(dout.download(), expected, tolerance_for(out_layout.dtype), what);
  dout.check_untouched(what);
}

struct BackwardResult {
  std::vector<double> got;
  std::vector<double> expected;
  double max_terms = 1;
};

BackwardResult run_backward(TestContext& ctx, const hal_tensor_desc_t& ids_layout,
                            const hal_tensor_desc_t& grad_out_layout,
                            const hal_tensor_desc_t& grad_table_layout, bool accumulate,
                            const std::vector<double>& ids, const std::vector<double>& grad_out,
                            const std::vector<double>& initial, hal_op_plan_flags_t flags = 0) {
  hal_op_embedding_desc_t desc = embedding_desc(HAL_OP_EMBEDDING_BACKWARD, ids_layout,
                                                grad_table_layout, grad_out_layout, accumulate);
  Plan plan;
  plan_or_skip(ctx, &desc.header, plan, flags);
  DeviceTensor dids(ctx.device(), ids_layout, ids), dgo(ctx.device(), grad_out_layout, grad_out),
      dgt(ctx.device(), grad_table_layout, initial);
  execute(ctx, plan, {dids.data(), dgo.data(), dgt.data()});
  dgt.check_untouched("grad_table");
  const int64_t vocab = grad_table_layout.shape[0], dim = grad_table_layout.shape[1];
  BackwardResult result;
  result.got = dgt.download();
  result.expected.assign(static_cast<size_t>(vocab * dim), 0.0);
  std::vector<double> counts(static_cast<size_t>(vocab), 0.0);
  for (size_t i = 0; i < ids.size(); ++i) {
    const auto id = static_cast<int64_t>(ids[i]);
    if (id < 0 || id >= vocab) continue;
    counts[id] += 1;
    for (int64_t c = 0; c < dim; ++c) result.expected[id * dim + c] += grad_out[i * dim + c];
  }
  for (size_t i = 0; i < result.expected.size(); ++i) {
    if (accumulate) result.expected[i] += initial[i];
  }
  result.max_terms = 1 + *std::max_element(counts.begin(), counts.end());
  return result;
}

void check_backward(TestContext& ctx, hal_dtype_t ids_dtype, hal_dtype_t grad_out_dtype,
                    hal_dtype_t grad_table_dtype, int64_t n, int64_t vocab, int64_t dim,
                    bool accumulate) {
  const hal_tensor_desc_t ids_layout = dense(ids_dtype, {n});
  const hal_tensor_desc_t go_layout = dense(grad_out_dtype, {n, dim});
  const hal_tensor_desc_t gt_layout = dense(grad_table_dtype, {vocab, dim});
  const auto ids = some_ids(ctx, n, vocab);
  const auto grad_out = random_values(ctx.random(), n * dim, grad_out_dtype);
  const auto initial = random_values(ctx.random(), vocab * dim, grad_table_dtype);
  const BackwardResult r =
      run_backward(ctx, ids_layout, go_layout, gt_layout, accumulate, ids, grad_out, initial);
  // f32 sums of up to max_terms rows, rounded to grad_table's dtype.
  expect_close(r.got, r.expected, tolerance_for(grad_table_dtype, r.max_terms),
               "embedding backward " + label(go_layout) + " -> " + label(gt_layout) +
                   (accumulate ? " accumulate" : ""));
}

}  // namespace

HALCONFORM_TEST("operators.embedding.forward", "i32/i64 ids, out-of-range ids, dtypes, views", {}) {
  for (hal_dtype_t dtype : {HAL_DTYPE_F32, HAL_DTYPE_F16, HAL_DTYPE_BF16}) {
    check_forward(ctx, dense(HAL_DTYPE_I32, {3, 7}), dense(dtype, {50, 13}),
                  dense(dtype, {3, 7, 13}));
    check_forward(ctx, dense(HAL_DTYPE_I64, {31}), dense(dtype, {9, 5}),
                  dense(HAL_DTYPE_F32, {31, 5}));
  }
  // strided table and out, transposed ids
  check_forward(ctx, transposed(dense(HAL_DTYPE_I32, {4, 6}), 0, 1),
                padded(HAL_DTYPE_F32, {40, 17}, 3), padded(HAL_DTYPE_F32, {6, 4, 17}, 2));
  // rank-0 ids and empty ids
  check_forward(ctx, dense(HAL_DTYPE_I64, {}), dense(HAL_DTYPE_F32, {10, 8}),
                dense(HAL_DTYPE_F32, {8}));
  check_forward(ctx, dense(HAL_DTYPE_I32, {0, 4}), dense(HAL_DTYPE_F32, {10, 8}),
                dense(HAL_DTYPE_F32, {0, 4, 8}));
}

HALCONFORM_TEST("operators.embedding.backward",
                "repeated ids summed, out-of-range ids skipped, accumulate, dtypes", {}) {
  for (bool accumulate : {false, true}) {
    check_backward(ctx, HAL_DTYPE_I32, HAL_DTYPE_F32, HAL_DTYPE_F32, 300, 20, 7, accumulate);
    check_backward(ctx, HAL_DTYPE_I64, HAL_DTYPE_BF16, HAL_DTYPE_F32, 257, 40, 9, accumulate);
    check_backward(ctx, HAL_DTYPE_I32, HAL_DTYPE_F16, HAL_DTYPE_F16, 100, 33, 4, accumulate);
    check_backward(ctx, HAL_DTYPE_I64, HAL_DTYPE_BF16, HAL_DTYPE_BF16, 64, 5, 3, accumulate);
  }
  // every row to one id: a long run summed in order
  const auto ids = std::vector<double>(500, 3.0);
  const auto grad_out = random_values(ctx.random(), 500 * 2, HAL_DTYPE_F32);
  const BackwardResult r = run_backward(
      ctx, dense(HAL_DTYPE_I32, {500}), dense(HAL_DTYPE_F32, {500, 2}),
      dense(HAL_DTYPE_F32, {6, 2}), false, ids, grad_out, std::vector<double>(12, 0.0));
  expect_close(r.got, r.expected, tolerance_for(HAL_DTYPE_F32, 500), "embedding backward one id");
}

HALCONFORM_TEST("operators.embedding.backward_views_and_empty",
                "multi-dimensional and strided grad_out, strided grad_table, no ids", {}) {
  const hal_tensor_desc_t ids_layout = transposed(dense(HAL_DTYPE_I32, {5, 3}), 0, 1);
  const hal_tensor_desc_t go_layout = padded(HAL_DTYPE_F32, {3, 5, 6}, 2);
  const hal_tensor_desc_t gt_layout = padded(HAL_DTYPE_F32, {12, 6}, 1);
  const auto ids = some_ids(ctx, 15, 12);
  const auto grad_out = random_values(ctx.random(), 90, HAL_DTYPE_F32);
  const auto initial = random_values(ctx.random(), 72, HAL_DTYPE_F32);
  BackwardResult r =
      run_backward(ctx, ids_layout, go_layout, gt_layout, true, ids, grad_out, initial);
  expect_close(r.got, r.expected, tolerance_for(HAL_DTYPE_F32, r.max_terms),
               "embedding backward views");
  // no ids: grad_table becomes 0, or stays with accumulate
  for (bool accumulate : {false, true}) {
    r = run_backward(ctx, dense(HAL_DTYPE_I32, {0}), dense(HAL_DTYPE_F32, {0, 6}),
                     dense(HAL_DTYPE_F32, {12, 6}), accumulate, {}, {}, initial);
    expect_close(r.got, r.expected, tolerance_for(HAL_DTYPE_F32), "embedding backward no ids");
  }
}

HALCONFORM_TEST("operators.embedding.backward_deterministic",
                "deterministic plans give bitwise-identical grad_table", {}) {
  const int64_t n = 2000, vocab = 7, dim = 5;
  const auto ids = random_ints(ctx.random(), n, 0, vocab);
  const auto grad_out = random_values(ctx.random(), n * dim, HAL_DTYPE_F32, -100, 100);
  const std::vector<double> zero(vocab * dim, 0.0);
  const auto once = run_backward(ctx, dense(HAL_DTYPE_I32, {n}), dense(HAL_DTYPE_F32, {n, dim}),
                                 dense(HAL_DTYPE_F32, {vocab, dim}), false, ids, grad_out, zero,
                                 HAL_OP_PLAN_DETERMINISTIC);
  const auto twice = run_backward(ctx, dense(HAL_DTYPE_I32, {n}), dense(HAL_DTYPE_F32, {n, dim}),
                                  dense(HAL_DTYPE_F32, {vocab, dim}), false, ids, grad_out, zero,
                                  HAL_OP_PLAN_DETERMINISTIC);
  expect_identical(once.got, twice.got, "embedding backward run twice");
}

HALCONFORM_TEST("operators.embedding.descriptor_errors", "each rule of the descriptor", {}) {
  const auto refused = [&](hal_op_embedding_desc_t desc, const char* rule) {
    hal_op_plan_t plan = nullptr;
    const hal_result_t result = hal_op_plan_create(ctx.device(), &desc.header, 0, &plan);
    if (plan != nullptr) hal_op_plan_destroy(plan);
    HC_REQUIRE(result == HAL_ERROR_INVALID_ARGUMENT,
               std::string("embedding descriptor accepted: ") + rule);
  };
  const hal_op_embedding_desc_t forward =
      embedding_desc(HAL_OP_EMBEDDING, dense(HAL_DTYPE_I32, {4, 3}), dense(HAL_DTYPE_F32, {10, 8}),
                     dense(HAL_DTYPE_F32, {4, 3, 8}));
  hal_op_embedding_desc_t d = forward;
  d.ids.dtype = HAL_DTYPE_F32;
  refused(d, "float ids");
  d = forward;
  d.table = dense(HAL_DTYPE_F32, {10, 8, 1});
  refused(d, "table of rank 3");
  d = forward;
  d.out = dense(HAL_DTYPE_F32, {4, 3, 9});
  refused(d, "out's last dimension");
  d = forward;
  d.out = dense(HAL_DTYPE_F32, {3, 4, 8});
  refused(d, "out's leading dimensions");
  d = forward;
  d.out = dense(HAL_DTYPE_I32, {4, 3, 8});
  refused(d, "out of i32");
  d = forward;
  d.accumulate = 1;
  refused(d, "accumulate on the forward op");
  d = forward;
  d.reserved = 1;
  refused(d, "reserved");
  d = forward;
  d.out.strides[0] = 0;
  refused(d, "out reaching an element twice");
  hal_op_embedding_desc_t backward = forward;
  backward.header.kind = HAL_OP_EMBEDDING_BACKWARD;
  d = backward;
  d.accumulate = 2;
  refused(d, "accumulate 2");
  d = backward;
  d.table.strides[0] = 0;
  refused(d, "grad_table reaching an element twice");
  d = backward;
  d.table.dtype = HAL_DTYPE_F64;
  refused(d, "grad_table of f64");
}
