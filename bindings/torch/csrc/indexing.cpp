// Indexing and assembling ops: cat (HAL_OP_CAT), index_select and gather
// (HAL_OP_GATHER), scatter, scatter_add, index_add and index_copy
// (HAL_OP_SCATTER), cumsum and cumprod (HAL_OP_SCAN), arange (HAL_OP_FILL),
// masked_fill (HAL_OP_WHERE).
//
// Indices are device data: HAL never reads or writes outside a tensor and
// raises a status word instead (SPEC §17.6, ops of the PyTorch device). Like
// CUDA's device-side asserts the error surfaces asynchronously: the next
// synchronising call on the device (.item(), a copy to the host,
// synchronize) raises IndexError.
#include "index_status.hpp"
#include "kernel_util.hpp"

#include <ATen/MemoryOverlap.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/arange_ops.h>
#include <ATen/ops/cat_ops.h>
#include <ATen/ops/cumprod_ops.h>
#include <ATen/ops/cumsum_ops.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/gather_ops.h>
#include <ATen/ops/index_add_ops.h>
#include <ATen/ops/index_copy_ops.h>
#include <ATen/ops/index_select_ops.h>
#include <ATen/ops/masked_fill_ops.h>
#include <ATen/ops/mul.h>
#include <ATen/ops/result_type.h>
#include <ATen/ops/scatter_add_ops.h>
#include <ATen/ops/scatter_ops.h>
#include <torch/library.h>

#include <atomic>
#include <cmath>
#include <mutex>

namespace hal_torch {

// ---- the status word ------------------------------------------------------------------------

namespace {

struct StatusWords {
  std::mutex mutex;
  std::vector<at::Tensor> words;                 // i32 [1] per device, zeroed
  std::unique_ptr<std::atomic<bool>[]> pending;  // an index op ran since the last check
};

StatusWords& status_words() {
  static auto* const instance = [] {
    auto* s = new StatusWords;
    s->words.resize(static_cast<size_t>(device_count()));
    s->pending = std::make_unique<std::atomic<bool>[]>(static_cast<size_t>(device_count()));
    return s;
  }();
  return *instance;
}

}  // namespace

void* index_status_word(c10::DeviceIndex device) {
  StatusWords& s = status_words();
  std::lock_guard<std::mutex> lock(s.mutex);
  at::Tensor& word = s.words[static_cast<size_t>(device)];
  if (!word.defined()) {
    word = at::empty({1}, at::TensorOptions().dtype(at::kInt).device(kHalDeviceType, device));
    check(hal_memset_async(word.data_ptr(), 0, sizeof(int32_t), current_hal_stream(device)),
          "zeroing the index status word");
    check(hal_stream_synchronize(current_hal_stream(device)), "zeroing the index status word");
  }
  s.pending[static_cast<size_t>(device)] = true;
  return word.data_ptr();
}

void check_index_status(c10::DeviceIndex device) {
  if (device < 0 || device >= device_count()) return;
  StatusWords& s = status_words();
  if (!s.pending[static_cast<size_t>(device)].exchange(false)) return;
  at::Tensor word;
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    word = s.words[static_cast<size_t>(device)];
  }
  int32_t value = 0;
  hal_stream_t stream = current_hal_stream(device);
  check(hal_memcpy_async(&value, word.const_data_ptr(), sizeof value, stream),
        "reading the index status word");
  check(hal_stream_synchronize(stream), "reading the index status word");
  if (value == 0) return;
  check(hal_memset_async(word.data_ptr(), 0, sizeof(int32_t), stream),
        "clearing the index status word");
  check(hal_stream_synchronize(stream), "clearing the index status word");
  C10_THROW_ERROR(IndexError,
                  "hal: an index out of range reached an earlier gather, scatter or "
                  "index op on hal:" +
                      std::to_string(device) +
                      " (HAL read or wrote nothing for it; the error is reported at "
                      "the next synchronising call, as CUDA's device-side asserts)");
}

namespace {

// ---- cat ------------------------------------------------------------------------------------

at::Tensor& cat_out(const at::ITensorListRef& tensors_ref, int64_t dim, at::Tensor& out) {
  static OpCounter& counter = op_counter("aten::cat.out");
  const auto fallback = [&](const std::string& why) -> at::Tensor& {
    return HAL_FALLBACK(at::_ops::cat_out, why, tensors_ref, dim, out);
  };
  // Legacy behaviour: 1-D empty tensors are skipped.
  std::vector<at::Tensor> inputs;
  for (const at::Tensor& t : tensors_ref) {
    if (!(t.dim() == 1 && t.numel() == 0)) inputs.push_back(t);
  }
  if (inputs.empty() || inputs.size() > HAL_CAT_MAX_INPUTS)
    return fallback("no or too many inputs");
  const at::Tensor& first = inputs.front();
  const int64_t d = at::maybe_wrap_dim(dim, first.dim());
  std::vector<int64_t> sizes(first.sizes().begin(), first.sizes().end());
  sizes[static_cast<size_t>(d)] = 0;
  for (const at::Tensor& t : inputs) {
    TORCH_CHECK(t.dim() == first.dim(), "Tensors must have same number of dimensions: got ",
                first.dim(), " and ", t.dim());
    for (int64_t i = 0; i < t.dim(); ++i) {
      TORCH_CHECK(i == d || t.size(i) == first.size(i),
                  "Sizes of tensors must match except in dimension ", d, ". Expected size ",
                  first.size(i), " but got size ", t.size(i), " for tensor number in the list.");
    }
    if (t.device() != out.device()) return fallback("inputs on another device");
    sizes[static_cast<size_t>(d)] += t.size(d);
  }
  at::native::resize_output(out, sizes);
  if (out.numel() == 0) return out;
  at::Tensor target = out;
  for (const at::Tensor& t : inputs) {
    if (memory_overlaps(t, out)) target = at::empty(sizes, out.options());
  }
  std::vector<hal_tensor_desc_t> descs;
  std::vector<void*> operands;
  for (const at::Tensor& t : inputs) {
    const std::optional<hal_tensor_desc_t> td = describe(t);
    if (!td) return fallback("a layout or dtype HAL cannot describe");
    descs.push_back(*td);
    operands.push_back(operand(t));
  }
  const std::optional<hal_tensor_desc_t> od = describe(target);
  if (!od) return fallback("a layout or dtype HAL cannot describe");
  operands.push_back(operand(target));
  auto desc = make_desc<hal_op_cat_desc_t>(HAL_OP_CAT);
  desc.axis = static_cast<uint32_t>(d);
  desc.input_count = static_cast<uint32_t>(descs.size());
  desc.out = *od;
  const hal_op_cat_desc_t key = desc;
  desc.inputs = descs.data();
  const auto* bytes = reinterpret_cast<const std::byte*>(descs.data());
  const c10::DeviceIndex device = hal_index(out);
  const PlanResult planned = plan_for_keyed(
      device, desc, key, std::span<const std::byte>(bytes, descs.size() * sizeof(descs[0])));
  if (!planned) return fallback(*planned.decline);
  execute(device, *planned.plan, operands, {}, "cat");
  if (!target.is_same(out)) out.copy_(target);
  ++counter.native;
  return out;
}

// ---- gather ---------------------------------------------------------------------------------

// out = x gathered along |axis| by |index| (out's shape). "" when done.
std::string run_gather(const at::Tensor& x, int64_t axis, const at::Tensor& index,
                       const at::Tensor& out) {
  if (out.numel() == 0) return "";
  const std::optional<hal_tensor_desc_t> xd = describe(x);
  const std::optional<hal_tensor_desc_t> id = describe(index);
  const std::optional<hal_tensor_desc_t> od = describe(out);
  if (!xd || !id || !od) return "a layout or dtype HAL cannot describe";
  auto desc = make_desc<hal_op_gather_desc_t>(HAL_OP_GATHER);
  desc.axis = static_cast<uint32_t>(axis);
  desc.x = *xd;
  desc.index = *id;
  desc.out = *od;
  const c10::DeviceIndex device = hal_index(out);
  std::string why;
  const Plan* plan = plan_or_reason(device, desc, why);
  if (plan == nullptr) return why;
  execute(device, *plan, {operand(x), operand(index), operand(out), index_status_word(device)},
          "gather");
  return "";
}

// A 1-D index viewed with stride 0 in every dimension of |shape| but |axis|.
at::Tensor index_along(const at::Tensor& index, at::IntArrayRef shape, int64_t axis) {
  std::vector<int64_t> strides(shape.size(), 0);
  if (!shape.empty()) strides[static_cast<size_t>(axis)] = index.dim() == 0 ? 0 : index.stride(0);
  return index.as_strided(shape, strides, index.storage_offset());
}

at::Tensor& index_select_out(const at::Tensor& self, int64_t dim, const at::Tensor& index,
                             at::Tensor& out) {
  static OpCounter& counter = op_counter("aten::index_select.out");
  const auto fallback = [&](const std::string& why) -> at::Tensor& {
    return HAL_FALLBACK(at::_ops::index_select_out, why, self, dim, index, out);
  };
  TORCH_CHECK_INDEX(index.dim() <= 1, "index_select(): Index is supposed to be a vector");
  TORCH_CHECK_INDEX(index.scalar_type() == at::kLong || index.scalar_type() == at::kInt,
                    "index_select(): Expected dtype int32 or int64 for index");
  if (self.dim() == 0) return fallback("a 0-dim input");
  const int64_t d = at::maybe_wrap_dim(dim, self.dim());
  std::vector<int64_t> sizes(self.sizes().begin(), self.sizes().end());
  sizes[static_cast<size_t>(d)] = index.numel();
  at::native::resize_output(out, sizes);
  if (memory_overlaps(out, self) || memory_overlaps(out, index)) return fallback("out overlaps");
  const std::string why = run_gather(self, d, index_along(index, sizes, d), out);
  if (!why.empty()) return fallback(why);
  ++counter.native;
  return out;
}

at::Tensor index_select(const at::Tensor& self, int64_t dim, const at::Tensor& index) {
  at::Tensor out = at::empty({0}, self.options());
  return index_select_out(self, dim, index, out);
}

at::Tensor& gather_out(const at::Tensor& self, int64_t dim, const at::Tensor& index,
                       bool sparse_grad, at::Tensor& out) {
  static OpCounter& counter = op_counter("aten::gather.out");
  const auto fallback = [&](const std::string& why) -> at::Tensor& {
    return HAL_FALLBACK(at::_ops::gather_out, why, self, dim, index, sparse_grad, out);
  };
  TORCH_CHECK_INDEX(
      index.numel() == 0 || index.scalar_type() == at::kLong || index.scalar_type() == at::kInt,
      "gather(): Expected dtype int32/int64 for index");
  if (self.dim() == 0 || index.dim() != self.dim()) return fallback("0-dim or rank-changing");
  const int64_t d = at::maybe_wrap_dim(dim, self.dim());
  for (int64_t i = 0; i < self.dim(); ++i) {
    TORCH_CHECK(i == d || index.size(i) <= self.size(i), "Size does not match at dimension ", i,
                " expected index ", index.sizes(), " to be no larger than self ", self.sizes(),
                " apart from dimension ", d);
  }
  at::native::resize_output(out, index.sizes());
  if (memory_overlaps(out, self) || memory_overlaps(out, index)) return fallback("out overlaps");
  const std::string why = run_gather(self, d, index, out);
  if (!why.empty()) return fallback(why);
  ++counter.native;
  return out;
}

// ---- scatter --------------------------------------------------------------------------------

// out (already holding self) updated in place. "" when done.
std::string run_scatter(hal_scatter_mode_t mode, int64_t axis, const at::Tensor& index,
                        const at::Tensor& src, const at::Tensor& out) {
  if (index.numel() == 0) return "";
  const std::optional<hal_tensor_desc_t> id = describe(index);
  const std::optional<hal_tensor_desc_t> sd = describe(src);
  const std::optional<hal_tensor_desc_t> od = describe(out);
  if (!id || !sd || !od) return "a layout or dtype HAL cannot describe";
  if (memory_overlaps(out, src) || memory_overlaps(out, index)) return "out overlaps an input";
  auto desc = make_desc<hal_op_scatter_desc_t>(HAL_OP_SCATTER);
  desc.mode = mode;
  desc.axis = static_cast<uint32_t>(axis);
  desc.index = *id;
  desc.src = *sd;
  desc.out = *od;
  const c10::DeviceIndex device = hal_index(out);
  std::string why;
  const Plan* plan = plan_or_reason(device, desc, why);
  if (plan == nullptr) return why;
  execute(device, *plan, {operand(index), operand(src), operand(out), index_status_word(device)},
          "scatter");
  return "";
}

// out = self, then the scatter; self itself when out is self (the in-place forms).
at::Tensor& scatter_into(OpCounter& counter, hal_scatter_mode_t mode, const at::Tensor& self,
                         int64_t dim, const at::Tensor& index, const at::Tensor& src,
                         at::Tensor& out,
                         const std::function<at::Tensor&(const std::string&)>& fallback) {
  if (self.dim() == 0 || index.dim() != self.dim() || src.dim() != self.dim()) {
    return fallback("0-dim or rank-changing");
  }
  if (index.scalar_type() != at::kLong) return fallback("an index that is not int64");
  if (src.scalar_type() != self.scalar_type()) return fallback("src of another dtype");
  const int64_t d = at::maybe_wrap_dim(dim, self.dim());
  for (int64_t i = 0; i < self.dim(); ++i) {
    TORCH_CHECK(index.size(i) <= src.size(i) && (i == d || index.size(i) <= self.size(i)),
                "Expected index ", index.sizes(), " to be no larger than self ", self.sizes(),
                " apart from dimension ", d, " and to be no larger size than src ", src.sizes());
  }
  if (!out.is_same(self)) {
    at::native::resize_output(out, self.sizes());
    out.copy_(self);
  }
  const std::string why = run_scatter(mode, d, index, src, out);
  if (!why.empty()) return fallback(why);
  ++counter.native;
  return out;
}

at::Tensor& scatter_src_out(const at::Tensor& self, int64_t dim, const at::Tensor& index,
                            const at::Tensor& src, at::Tensor& out) {
  static OpCounter& counter = op_counter("aten::scatter.src_out");
  return scatter_into(counter, HAL_SCATTER_REPLACE, self, dim, index, src, out,
                      [&](const std::string& why) -> at::Tensor& {
                        return HAL_FALLBACK(at::_ops::scatter_src_out, why, self, dim, index, src,
                                            out);
                      });
}

at::Tensor& scatter_add_out(const at::Tensor& self, int64_t dim, const at::Tensor& index,
                            const at::Tensor& src, at::Tensor& out) {
  static OpCounter& counter = op_counter("aten::scatter_add.out");
  return scatter_into(counter, HAL_SCATTER_ADD, self, dim, index, src, out,
                      [&](const std::string& why) -> at::Tensor& {
                        return HAL_FALLBACK(at::_ops::scatter_add_out, why, self, dim, index, src,
                                            out);
                      });
}

// index_add / index_copy: a 1-D index viewed over source's shape.
at::Tensor& index_scatter(OpCounter& counter, hal_scatter_mode_t mode, const at::Tensor& self,
                          int64_t dim, const at::Tensor& index, const at::Tensor& source,
                          at::Tensor& out,
                          const std::function<at::Tensor&(const std::string&)>& fallback) {
  TORCH_CHECK_INDEX(index.dim() <= 1, "index_add_(): Index is supposed to be a vector");
  if (self.dim() == 0 || source.dim() != self.dim() || index.scalar_type() != at::kLong) {
    return fallback("0-dim, rank-changing or an int32 index");
  }
  const int64_t d = at::maybe_wrap_dim(dim, self.dim());
  TORCH_CHECK(index.numel() == source.size(d), "index_add_(): Number of indices (", index.numel(),
              ") should be equal to source.size(dim) (", source.size(d), ")");
  return scatter_into(counter, mode, self, d, index_along(index, source.sizes(), d), source, out,
                      fallback);
}

at::Tensor& index_add_out(const at::Tensor& self, int64_t dim, const at::Tensor& index,
                          const at::Tensor& source, const c10::Scalar& alpha, at::Tensor& out) {
  static OpCounter& counter = op_counter("aten::index_add.out");
  const at::Tensor scaled =
      alpha.isIntegral(true) && alpha.toLong() == 1 ? source : at::mul(source, alpha);
  return index_scatter(counter, HAL_SCATTER_ADD, self, dim, index, scaled, out,
                       [&](const std::string& why) -> at::Tensor& {
                         return HAL_FALLBACK(at::_ops::index_add_out, why, self, dim, index, source,
                                             alpha, out);
                       });
}

at::Tensor& index_copy_out(const at::Tensor& self, int64_t dim, const at::Tensor& index,
                           const at::Tensor& source, at::Tensor& out) {
  static OpCounter& counter = op_counter("aten::index_copy.out");
  return index_scatter(counter, HAL_SCATTER_REPLACE, self, dim, index, source, out,
                       [&](const std::string& why) -> at::Tensor& {
                         return HAL_FALLBACK(at::_ops::index_copy_out, why, self, dim, index,
                                             source, out);
                       });
}

// ---- scans ----------------------------------------------------------------------------------

at::Tensor& scan_out(OpCounter& counter, hal_scan_kind_t kind, const at::Tensor& self, int64_t dim,
                     std::optional<at::ScalarType> dtype, at::Tensor& out,
                     const std::function<at::Tensor&(const std::string&)>& fallback) {
  const int64_t d = at::maybe_wrap_dim(dim, self.dim());
  at::native::resize_output(out, self.sizes());
  if (out.numel() == 0) return out;
  if (self.dim() == 0) return fallback("a 0-dim input");
  at::Tensor target = out;
  if (memory_overlaps(out, self) && !same_view(out, self)) target = empty_like_contiguous(out);
  const std::optional<hal_tensor_desc_t> xd = describe(self);
  const std::optional<hal_tensor_desc_t> od = describe(target);
  if (!xd || !od) return fallback("a layout or dtype HAL cannot describe");
  auto desc = make_desc<hal_op_scan_desc_t>(HAL_OP_SCAN);
  desc.scan = kind;
  desc.axis = static_cast<uint32_t>(d);
  desc.x = *xd;
  desc.out = *od;
  (void)dtype;  // out's dtype is the result's: HAL converts
  const c10::DeviceIndex device = hal_index(out);
  std::string why;
  const Plan* plan = plan_or_reason(device, desc, why);
  if (plan == nullptr) return fallback(why);
  execute(device, *plan, {operand(self), operand(target)}, "scan");
  if (!target.is_same(out)) out.copy_(target);
  ++counter.native;
  return out;
}

at::Tensor& cumsum_out(const at::Tensor& self, int64_t dim, std::optional<at::ScalarType> dtype,
                       at::Tensor& out) {
  static OpCounter& counter = op_counter("aten::cumsum.out");
  return scan_out(counter, HAL_SCAN_SUM, self, dim, dtype, out,
                  [&](const std::string& why) -> at::Tensor& {
                    return HAL_FALLBACK(at::_ops::cumsum_out, why, self, dim, dtype, out);
                  });
}

at::Tensor& cumprod_out(const at::Tensor& self, int64_t dim, std::optional<at::ScalarType> dtype,
                        at::Tensor& out) {
  static OpCounter& counter = op_counter("aten::cumprod.out");
  return scan_out(counter, HAL_SCAN_PROD, self, dim, dtype, out,
                  [&](const std::string& why) -> at::Tensor& {
                    return HAL_FALLBACK(at::_ops::cumprod_out, why, self, dim, dtype, out);
                  });
}

// ---- arange, masked_fill --------------------------------------------------------------------

at::Tensor& arange_out(const c10::Scalar& start, const c10::Scalar& end, const c10::Scalar& step,
                       at::Tensor& out) {
  static OpCounter& counter = op_counter("aten::arange.start_out");
  const auto fallback = [&](const std::string& why) -> at::Tensor& {
    return HAL_FALLBACK(at::_ops::arange_start_out, why, start, end, step, out);
  };
  if (start.isComplex() || end.isComplex() || step.isComplex()) return fallback("complex");
  double size_d = 0;
  if (at::isIntegralType(out.scalar_type(), true)) {
    const int64_t s = start.toLong();
    const int64_t e = end.toLong();
    const int64_t st = step.toLong();
    TORCH_CHECK(st != 0, "step must be nonzero");
    TORCH_CHECK((st > 0 && e >= s) || (st < 0 && e <= s),
                "upper bound and larger bound inconsistent with step sign");
    const int64_t sign = (st > 0) - (st < 0);
    size_d = static_cast<double>((e - s + st - sign) / st);  // integer division, as aten
  } else {
    const double s = start.toDouble();
    const double e = end.toDouble();
    const double st = step.toDouble();
    TORCH_CHECK(st != 0, "step must be nonzero");
    TORCH_CHECK(std::isfinite(s) && std::isfinite(e), "unsupported range: ", s, " -> ", e);
    TORCH_CHECK((st > 0 && e >= s) || (st < 0 && e <= s),
                "upper bound and larger bound inconsistent with step sign");
    size_d = std::ceil((e - s) / st);
  }
  TORCH_CHECK(size_d >= 0 && size_d <= static_cast<double>(std::numeric_limits<int64_t>::max()),
              "invalid size, possible overflow?");
  const auto size = static_cast<int64_t>(size_d);
  if (out.numel() != size) out.resize_({size});
  if (size == 0) return out;
  const std::optional<hal_tensor_desc_t> od = describe(out);
  if (!od) return fallback("a layout or dtype HAL cannot describe");
  auto desc = make_desc<hal_op_fill_desc_t>(HAL_OP_FILL);
  desc.out = *od;
  const c10::DeviceIndex device = hal_index(out);
  std::string why;
  const Plan* plan = plan_or_reason(device, desc, why);
  if (plan == nullptr) return fallback(why);
  execute(device, *plan, {operand(out)}, "arange", {scalar_value(start), scalar_value(step)});
  ++counter.native;
  return out;
}

// self = mask ? value : self, as HAL_OP_WHERE with a scalar a and out = b = self.
at::Tensor& masked_fill_scalar(at::Tensor& self, const at::Tensor& mask, const c10::Scalar& value) {
  static OpCounter& counter = op_counter("aten::masked_fill_.Scalar");
  const auto fallback = [&](const std::string& why) -> at::Tensor& {
    return HAL_FALLBACK(at::_ops::masked_fill__Scalar, why, self, mask, value);
  };
  TORCH_CHECK(mask.scalar_type() == at::kBool,
              "masked_fill_ only supports boolean masks, but got "
              "mask with dtype ",
              mask.scalar_type());
  if (self.numel() == 0) return self;
  if (mask.device() != self.device() || memory_overlaps(self, mask)) {
    return fallback("a mask on another device or overlapping self");
  }
  at::assert_no_internal_overlap(self);
  const at::Tensor m = mask.expand(self.sizes());  // raises aten's error when it cannot
  const std::optional<hal_tensor_desc_t> md = describe(m);
  const std::optional<hal_tensor_desc_t> sd = describe(self);
  if (!md || !sd) return fallback("a layout or dtype HAL cannot describe");
  auto desc = make_desc<hal_op_where_desc_t>(HAL_OP_WHERE);
  desc.a_is_scalar = 1;
  desc.cond = *md;
  desc.b = *sd;
  desc.out = *sd;
  const c10::DeviceIndex device = hal_index(self);
  std::string why;
  const Plan* plan = plan_or_reason(device, desc, why);
  if (plan == nullptr) return fallback(why);
  execute(device, *plan, {operand(m), nullptr, operand(self), operand(self)}, "masked_fill",
          {scalar_value(value)});
  ++counter.native;
  return self;
}

at::Tensor& masked_fill_tensor(at::Tensor& self, const at::Tensor& mask, const at::Tensor& value) {
  TORCH_CHECK(value.dim() == 0,
              "masked_fill_ only supports a 0-dimensional value tensor, but got "
              "tensor with ",
              value.dim(), " dimension(s).");
  if (!value.is_cpu()) {
    return HAL_FALLBACK(at::_ops::masked_fill__Tensor, "a value tensor on the device", self, mask,
                        value);
  }
  return masked_fill_scalar(self, mask, value.item());
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("cat.out", TORCH_FN(cat_out));
  m.impl("index_select", TORCH_FN(index_select));
  m.impl("index_select.out", TORCH_FN(index_select_out));
  m.impl("gather.out", TORCH_FN(gather_out));
  m.impl("scatter.src_out", TORCH_FN(scatter_src_out));
  m.impl("scatter_add.out", TORCH_FN(scatter_add_out));
  m.impl("index_add.out", TORCH_FN(index_add_out));
  m.impl("index_copy.out", TORCH_FN(index_copy_out));
  m.impl("cumsum.out", TORCH_FN(cumsum_out));
  m.impl("cumprod.out", TORCH_FN(cumprod_out));
  m.impl("arange.start_out", TORCH_FN(arange_out));
  m.impl("masked_fill_.Scalar", TORCH_FN(masked_fill_scalar));
  m.impl("masked_fill_.Tensor", TORCH_FN(masked_fill_tensor));
}

}  // namespace hal_torch
