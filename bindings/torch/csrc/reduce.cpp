// Reductions on HAL_OP_REDUCE: sum, mean, amax/amin, max/min (values and
// indices), argmax/argmin, prod, the 2-norm, all/any.
//
// HAL reduces the axes of a mask and keeps them as size 1; torch's result
// (keepdim or not) is that layout with the size-1 axes dropped, so the kernel
// writes through a keepdim view of the output.
#include "kernel_util.hpp"

#include <ATen/WrapDimUtilsMulti.h>
#include <ATen/native/ReduceOpsUtils.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/all_ops.h>
#include <ATen/ops/amax_ops.h>
#include <ATen/ops/amin_ops.h>
#include <ATen/ops/any_ops.h>
#include <ATen/ops/argmax_ops.h>
#include <ATen/ops/argmin_ops.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/linalg_vector_norm_ops.h>
#include <ATen/ops/max_ops.h>
#include <ATen/ops/mean_ops.h>
#include <ATen/ops/min_ops.h>
#include <ATen/ops/prod_ops.h>
#include <ATen/ops/sum_ops.h>
#include <torch/library.h>

namespace hal_torch {
namespace {

// The reduced axes of |self| (none given: all).
std::bitset<64> reduced_axes(const at::Tensor& self, at::OptionalIntArrayRef dims) {
  const int64_t ndim = self.dim();
  if (!dims.has_value() || dims->empty()) {
    std::bitset<64> all;
    for (int64_t d = 0; d < ndim; ++d) all.set(static_cast<size_t>(d));
    return all;
  }
  return at::dim_list_to_bitset(*dims, ndim);
}

// The result's sizes: reduced axes dropped, or kept as 1.
std::vector<int64_t> result_sizes(const at::Tensor& self, const std::bitset<64>& axes,
                                  bool keepdim) {
  std::vector<int64_t> sizes;
  for (int64_t d = 0; d < self.dim(); ++d) {
    if (!axes.test(static_cast<size_t>(d))) {
      sizes.push_back(self.size(d));
    } else if (keepdim) {
      sizes.push_back(1);
    }
  }
  return sizes;
}

// out = reduce(self) over |axes|; |out| already has the result's sizes. "" when done.
std::string run_reduce(hal_reduce_kind_t kind, const at::Tensor& self, const std::bitset<64>& axes,
                       const at::Tensor& out) {
  if (out.numel() == 0) return "";
  if (self.dim() > HAL_TENSOR_MAX_RANK) return "more than 8 dimensions";
  const std::optional<hal_tensor_desc_t> x = describe(self);
  if (!x) return "a layout or dtype HAL cannot describe";
  // out with the reduced axes kept as size 1 (stride of a size-1 axis: anything valid).
  std::vector<int64_t> keep_sizes;
  std::vector<int64_t> keep_strides;
  int64_t k = 0;
  const bool kept = out.dim() == self.dim() && self.dim() > 0;  // keepdim: out is the layout
  for (int64_t d = 0; d < self.dim() && !kept; ++d) {
    if (axes.test(static_cast<size_t>(d))) {
      keep_sizes.push_back(1);
      keep_strides.push_back(1);
    } else {
      keep_sizes.push_back(out.size(k));
      keep_strides.push_back(out.stride(k));
      ++k;
    }
  }
  if (!kept && k != out.dim()) return "an out of another rank";
  const std::optional<hal_tensor_desc_t> o =
      kept ? describe(out) : describe(out, keep_sizes, keep_strides);
  if (!o) return "a layout or dtype HAL cannot describe";
  auto desc = make_desc<hal_op_reduce_desc_t>(HAL_OP_REDUCE);
  desc.reduce = kind;
  desc.axes_mask = static_cast<uint32_t>(axes.to_ulong());
  desc.x = *x;
  desc.out = *o;
  const c10::DeviceIndex device = hal_index(self);
  std::string why;
  const Plan* plan = plan_or_reason(device, desc, why);
  if (plan == nullptr) return why;
  execute(device, *plan, {operand(self), operand(out)}, "reduce");
  return "";
}

// The common shape of a reduction with an out= tensor: resize it, reduce into it (through a
// temporary when it overlaps self or is not dense), or fall back.
template <typename Fallback>
at::Tensor& reduce_into(OpCounter& counter, hal_reduce_kind_t kind, const at::Tensor& self,
                        at::OptionalIntArrayRef dims, bool keepdim, at::Tensor& out,
                        Fallback&& fallback) {
  const std::bitset<64> axes = reduced_axes(self, dims);
  at::native::resize_output(out, result_sizes(self, axes, keepdim));
  at::Tensor target = out;
  if (memory_overlaps(out, self) || !out.is_non_overlapping_and_dense()) {
    target = at::empty(out.sizes(), out.options());
  }
  const std::string why = run_reduce(kind, self, axes, target);
  if (!why.empty()) return fallback(why);
  if (!target.is_same(out)) out.copy_(target);
  ++counter.native;
  return out;
}

at::ScalarType sum_dtype(const at::Tensor& self, std::optional<at::ScalarType> dtype) {
  if (dtype.has_value()) return *dtype;
  return at::isIntegralType(self.scalar_type(), true) ? at::kLong : self.scalar_type();
}

at::Tensor& sum_out(const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim,
                    std::optional<at::ScalarType> dtype, at::Tensor& out) {
  static OpCounter& counter = op_counter("aten::sum.IntList_out");
  const auto fallback = [&](const std::string& why) -> at::Tensor& {
    return HAL_FALLBACK(at::_ops::sum_IntList_out, why, self, dim, keepdim, dtype, out);
  };
  TORCH_CHECK(!dtype.has_value() || out.scalar_type() == *dtype, "sum: expected out dtype ", *dtype,
              " but got ", out.scalar_type());
  return reduce_into(counter, HAL_REDUCE_KIND_SUM, self, dim, keepdim, out, fallback);
}

at::Tensor sum_dim(const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim,
                   std::optional<at::ScalarType> dtype) {
  at::Tensor out = at::empty({0}, self.options().dtype(sum_dtype(self, dtype)));
  return sum_out(self, dim, keepdim, dtype, out);
}

at::Tensor& mean_out(const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim,
                     std::optional<at::ScalarType> dtype, at::Tensor& out) {
  static OpCounter& counter = op_counter("aten::mean.out");
  const auto fallback = [&](const std::string& why) -> at::Tensor& {
    return HAL_FALLBACK(at::_ops::mean_out, why, self, dim, keepdim, dtype, out);
  };
  if (!at::isFloatingType(dtype.value_or(self.scalar_type()))) {
    return fallback("a mean of integers (an error, as on the CPU)");
  }
  return reduce_into(counter, HAL_REDUCE_KIND_MEAN, self, dim, keepdim, out, fallback);
}

at::Tensor mean_dim(const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim,
                    std::optional<at::ScalarType> dtype) {
  at::Tensor out = at::empty({0}, self.options().dtype(dtype.value_or(self.scalar_type())));
  return mean_out(self, dim, keepdim, dtype, out);
}

#define HAL_EXTREMUM(fn, aten, kind)                                                    \
  at::Tensor& fn##_out(const at::Tensor& self, at::IntArrayRef dim, bool keepdim,       \
                       at::Tensor& out) {                                               \
    static OpCounter& counter = op_counter("aten::" #aten ".out");                      \
    const auto fallback = [&](const std::string& why) -> at::Tensor& {                  \
      return HAL_FALLBACK(at::_ops::aten##_out, why, self, dim, keepdim, out);          \
    };                                                                                  \
    if (self.numel() == 0) return fallback("an empty input (an error, as on the CPU)"); \
    return reduce_into(counter, kind, self, dim, keepdim, out, fallback);               \
  }

HAL_EXTREMUM(amax, amax, HAL_REDUCE_KIND_MAX)
HAL_EXTREMUM(amin, amin, HAL_REDUCE_KIND_MIN)

// max()/min() of everything.
at::Tensor extremum_all(OpCounter& counter, hal_reduce_kind_t kind, const at::Tensor& self,
                        const std::function<at::Tensor(const std::string&)>& fallback) {
  if (self.numel() == 0) return fallback("an empty input (an error, as on the CPU)");
  at::Tensor out = at::empty({}, self.options());
  const std::string why = run_reduce(kind, self, reduced_axes(self, std::nullopt), out);
  if (!why.empty()) return fallback(why);
  ++counter.native;
  return out;
}

at::Tensor max_all(const at::Tensor& self) {
  static OpCounter& counter = op_counter("aten::max");
  return extremum_all(counter, HAL_REDUCE_KIND_MAX, self, [&](const std::string& why) {
    return HAL_FALLBACK(at::_ops::max, why, self);
  });
}

at::Tensor min_all(const at::Tensor& self) {
  static OpCounter& counter = op_counter("aten::min");
  return extremum_all(counter, HAL_REDUCE_KIND_MIN, self, [&](const std::string& why) {
    return HAL_FALLBACK(at::_ops::min, why, self);
  });
}

// max.dim / min.dim: values and the first index of the extremum, two reductions.
std::tuple<at::Tensor&, at::Tensor&> extremum_dim_out(OpCounter& counter, hal_reduce_kind_t kind,
                                                      hal_reduce_kind_t arg_kind,
                                                      const at::Tensor& self, int64_t dim,
                                                      bool keepdim, at::Tensor& values,
                                                      at::Tensor& indices, bool& done) {
  done = false;
  if (self.numel() == 0 || self.dim() == 0) return {values, indices};
  const int64_t d = at::maybe_wrap_dim(dim, self.dim());
  std::bitset<64> axes;
  axes.set(static_cast<size_t>(d));
  const std::vector<int64_t> sizes = result_sizes(self, axes, keepdim);
  at::native::resize_output(values, sizes);
  at::native::resize_output(indices, sizes);
  if (memory_overlaps(values, self) || memory_overlaps(indices, self) ||
      !values.is_non_overlapping_and_dense() || !indices.is_non_overlapping_and_dense()) {
    return {values, indices};
  }
  if (!run_reduce(kind, self, axes, values).empty()) return {values, indices};
  if (!run_reduce(arg_kind, self, axes, indices).empty()) return {values, indices};
  ++counter.native;
  done = true;
  return {values, indices};
}

std::tuple<at::Tensor&, at::Tensor&> max_dim_out(const at::Tensor& self, int64_t dim, bool keepdim,
                                                 at::Tensor& values, at::Tensor& indices) {
  static OpCounter& counter = op_counter("aten::max.dim_max");
  bool done = false;
  extremum_dim_out(counter, HAL_REDUCE_KIND_MAX, HAL_REDUCE_KIND_ARGMAX, self, dim, keepdim, values,
                   indices, done);
  if (done) return {values, indices};
  return HAL_FALLBACK(at::_ops::max_dim_max, "HAL declined a part of max.dim", self, dim, keepdim,
                      values, indices);
}

std::tuple<at::Tensor&, at::Tensor&> min_dim_out(const at::Tensor& self, int64_t dim, bool keepdim,
                                                 at::Tensor& values, at::Tensor& indices) {
  static OpCounter& counter = op_counter("aten::min.dim_min");
  bool done = false;
  extremum_dim_out(counter, HAL_REDUCE_KIND_MIN, HAL_REDUCE_KIND_ARGMIN, self, dim, keepdim, values,
                   indices, done);
  if (done) return {values, indices};
  return HAL_FALLBACK(at::_ops::min_dim_min, "HAL declined a part of min.dim", self, dim, keepdim,
                      values, indices);
}

at::Tensor& argmax_out(const at::Tensor& self, std::optional<int64_t> dim, bool keepdim,
                       at::Tensor& out) {
  static OpCounter& counter = op_counter("aten::argmax.out");
  const auto fallback = [&](const std::string& why) -> at::Tensor& {
    return HAL_FALLBACK(at::_ops::argmax_out, why, self, dim, keepdim, out);
  };
  if (self.numel() == 0) return fallback("an empty input (an error, as on the CPU)");
  if (!dim.has_value()) {
    // Over the flattened tensor: HAL's row-major index over all axes is that index.
    return reduce_into(counter, HAL_REDUCE_KIND_ARGMAX, self, std::nullopt, keepdim, out, fallback);
  }
  return reduce_into(counter, HAL_REDUCE_KIND_ARGMAX, self, at::IntArrayRef(*dim), keepdim, out,
                     fallback);
}

at::Tensor& argmin_out(const at::Tensor& self, std::optional<int64_t> dim, bool keepdim,
                       at::Tensor& out) {
  static OpCounter& counter = op_counter("aten::argmin.out");
  const auto fallback = [&](const std::string& why) -> at::Tensor& {
    return HAL_FALLBACK(at::_ops::argmin_out, why, self, dim, keepdim, out);
  };
  if (self.numel() == 0) return fallback("an empty input (an error, as on the CPU)");
  if (!dim.has_value()) {
    return reduce_into(counter, HAL_REDUCE_KIND_ARGMIN, self, std::nullopt, keepdim, out, fallback);
  }
  return reduce_into(counter, HAL_REDUCE_KIND_ARGMIN, self, at::IntArrayRef(*dim), keepdim, out,
                     fallback);
}

at::Tensor& prod_out(const at::Tensor& self, int64_t dim, bool keepdim,
                     std::optional<at::ScalarType> dtype, at::Tensor& out) {
  static OpCounter& counter = op_counter("aten::prod.int_out");
  const auto fallback = [&](const std::string& why) -> at::Tensor& {
    return HAL_FALLBACK(at::_ops::prod_int_out, why, self, dim, keepdim, dtype, out);
  };
  return reduce_into(counter, HAL_REDUCE_KIND_PROD, self, at::IntArrayRef(dim), keepdim, out,
                     fallback);
}

at::Tensor& vector_norm_out(const at::Tensor& self, const c10::Scalar& ord,
                            at::OptionalIntArrayRef dim, bool keepdim,
                            std::optional<at::ScalarType> dtype, at::Tensor& out) {
  static OpCounter& counter = op_counter("aten::linalg_vector_norm.out");
  const auto fallback = [&](const std::string& why) -> at::Tensor& {
    return HAL_FALLBACK(at::_ops::linalg_vector_norm_out, why, self, ord, dim, keepdim, dtype, out);
  };
  if (ord.toDouble() != 2.0) return fallback("an order other than 2");
  if (dtype.has_value() && *dtype != self.scalar_type()) return fallback("a dtype argument");
  return reduce_into(counter, HAL_REDUCE_KIND_NORM2, self, dim, keepdim, out, fallback);
}

// all/any over bool: HAL's MIN/MAX of a BOOL tensor.
at::Tensor& all_any_out(OpCounter& counter, hal_reduce_kind_t kind, const at::Tensor& self,
                        at::OptionalIntArrayRef dim, bool keepdim, at::Tensor& out,
                        const std::function<at::Tensor&(const std::string&)>& fallback) {
  if (self.scalar_type() != at::kBool || out.scalar_type() != at::kBool) {
    return fallback("a non-bool input");
  }
  return reduce_into(counter, kind, self, dim, keepdim, out, fallback);
}

at::Tensor& all_out(const at::Tensor& self, at::Tensor& out) {
  static OpCounter& counter = op_counter("aten::all.all_out");
  return all_any_out(counter, HAL_REDUCE_KIND_MIN, self, std::nullopt, false, out,
                     [&](const std::string& why) -> at::Tensor& {
                       return HAL_FALLBACK(at::_ops::all_all_out, why, self, out);
                     });
}

at::Tensor& any_out(const at::Tensor& self, at::Tensor& out) {
  static OpCounter& counter = op_counter("aten::any.all_out");
  return all_any_out(counter, HAL_REDUCE_KIND_MAX, self, std::nullopt, false, out,
                     [&](const std::string& why) -> at::Tensor& {
                       return HAL_FALLBACK(at::_ops::any_all_out, why, self, out);
                     });
}

at::Tensor& all_dims_out(const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim,
                         at::Tensor& out) {
  static OpCounter& counter = op_counter("aten::all.dims_out");
  return all_any_out(counter, HAL_REDUCE_KIND_MIN, self, dim, keepdim, out,
                     [&](const std::string& why) -> at::Tensor& {
                       return HAL_FALLBACK(at::_ops::all_dims_out, why, self, dim, keepdim, out);
                     });
}

at::Tensor& any_dims_out(const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim,
                         at::Tensor& out) {
  static OpCounter& counter = op_counter("aten::any.dims_out");
  return all_any_out(counter, HAL_REDUCE_KIND_MAX, self, dim, keepdim, out,
                     [&](const std::string& why) -> at::Tensor& {
                       return HAL_FALLBACK(at::_ops::any_dims_out, why, self, dim, keepdim, out);
                     });
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("sum.dim_IntList", TORCH_FN(sum_dim));
  m.impl("sum.IntList_out", TORCH_FN(sum_out));
  m.impl("mean.dim", TORCH_FN(mean_dim));
  m.impl("mean.out", TORCH_FN(mean_out));
  m.impl("amax.out", TORCH_FN(amax_out));
  m.impl("amin.out", TORCH_FN(amin_out));
  m.impl("max", TORCH_FN(max_all));
  m.impl("min", TORCH_FN(min_all));
  m.impl("max.dim_max", TORCH_FN(max_dim_out));
  m.impl("min.dim_min", TORCH_FN(min_dim_out));
  m.impl("argmax.out", TORCH_FN(argmax_out));
  m.impl("argmin.out", TORCH_FN(argmin_out));
  m.impl("prod.int_out", TORCH_FN(prod_out));
  m.impl("linalg_vector_norm.out", TORCH_FN(vector_norm_out));
  m.impl("all.all_out", TORCH_FN(all_out));
  m.impl("any.all_out", TORCH_FN(any_out));
  m.impl("all.dims_out", TORCH_FN(all_dims_out));
  m.impl("any.dims_out", TORCH_FN(any_dims_out));
}

}  // namespace hal_torch
