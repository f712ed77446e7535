// mm, bmm, addmm, baddbmm and _addmm_activation on HAL_OP_MATMUL: any
// strides (a transposed weight is read in place), bias epilogue for addmm's
// row-broadcast self, beta * c for a full one. linear and matmul are
// PyTorch's composites over these; their backward is mm/bmm of transposed
// views (no copies).
#include "kernel_util.hpp"

#include <ATen/ExpandUtils.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/_addmm_activation_ops.h>
#include <ATen/ops/addmm_ops.h>
#include <ATen/ops/baddbmm_ops.h>
#include <ATen/ops/bmm_ops.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/mm_ops.h>
#include <torch/library.h>

namespace hal_torch {
namespace {

// HAL refuses stride 0 in a matrix dimension of extent > 1 (an expanded
// operand): such an operand is made dense first.
at::Tensor matrix_operand(const at::Tensor& t) {
  for (int64_t d = t.dim() - 2; d < t.dim(); ++d) {
    if (t.size(d) > 1 && t.stride(d) == 0) return t.contiguous();
  }
  return t;
}

struct Epilogue {
  float alpha = 1.0f;
  float beta = 0.0f;
  const at::Tensor* c = nullptr;     // beta * c (c has d's shape)
  const at::Tensor* bias = nullptr;  // [n], added before the activation
  hal_activation_t activation = HAL_ACTIVATION_NONE;
};

// d = act(alpha * a @ b + beta * c + bias) for [batch..., m, k] x [batch..., k, n].
std::string run_matmul(const at::Tensor& a_in, const at::Tensor& b_in, const at::Tensor& d,
                       const Epilogue& e) {
  if (d.numel() == 0) return "";
  if (!is_hal_float(a_in.scalar_type()) || a_in.scalar_type() != b_in.scalar_type()) {
    return "matmul operands of dtypes HAL's matmul does not take";
  }
  const at::Tensor a = matrix_operand(a_in);
  const at::Tensor b = matrix_operand(b_in);
  auto desc = make_desc<hal_op_matmul_desc_t>(HAL_OP_MATMUL);
  desc.activation = e.activation;
  desc.alpha = e.alpha;
  desc.beta = e.c != nullptr ? e.beta : 0.0f;
  const std::optional<hal_tensor_desc_t> ad = describe(a);
  const std::optional<hal_tensor_desc_t> bd = describe(b);
  const std::optional<hal_tensor_desc_t> dd = describe(d);
  if (!ad || !bd || !dd) return "a layout or dtype HAL cannot describe";
  desc.a = *ad;
  desc.b = *bd;
  desc.d = *dd;
  void* c_ptr = nullptr;
  void* bias_ptr = nullptr;
  at::Tensor c;
  if (e.c != nullptr) {
    c = matrix_operand(*e.c);
    const std::optional<hal_tensor_desc_t> cd = describe(c);
    if (!cd) return "a layout or dtype HAL cannot describe";
    desc.c = *cd;
    c_ptr = operand(c);
  }
  if (e.bias != nullptr) {
    const std::optional<hal_tensor_desc_t> biasd = describe(*e.bias);
    if (!biasd) return "a layout or dtype HAL cannot describe";
    desc.flags |= HAL_MATMUL_BIAS;
    desc.bias = *biasd;
    bias_ptr = operand(*e.bias);
  }
  const c10::DeviceIndex device = hal_index(d);
  std::string why;
  const Plan* plan = plan_or_reason(device, desc, why);
  if (plan == nullptr) return why;
  void* const operands[] = {operand(a), operand(b), c_ptr, operand(d), bias_ptr, nullptr};
  execute(device, *plan, operands, {}, "matmul");
  return "";
}

// A result tensor for |out| that HAL may write: |out| itself unless it overlaps an input.
at::Tensor writable(const at::Tensor& out, std::initializer_list<const at::Tensor*> inputs) {
  for (const at::Tensor* input : inputs) {
    if (input != nullptr && input->defined() && memory_overlaps(out, *input)) {
      return at::empty(out.sizes(), out.options());
    }
  }
  return out;
}

at::Tensor& mm_out(const at::Tensor& self, const at::Tensor& mat2, at::Tensor& out) {
  static OpCounter& counter = op_counter("aten::mm.out");
  TORCH_CHECK(self.dim() == 2 && mat2.dim() == 2, "mm: both arguments must be 2-D, got ",
              self.dim(), "-D and ", mat2.dim(), "-D");
  TORCH_CHECK(self.size(1) == mat2.size(0), "mat1 and mat2 shapes cannot be multiplied (",
              self.size(0), "x", self.size(1), " and ", mat2.size(0), "x", mat2.size(1), ")");
  TORCH_CHECK(self.scalar_type() == mat2.scalar_type(),
              "expected m1 and m2 to have the same dtype, but got: ", self.scalar_type(),
              " != ", mat2.scalar_type());
  at::native::resize_output(out, {self.size(0), mat2.size(1)});
  const at::Tensor target = writable(out, {&self, &mat2});
  const std::string why = run_matmul(self, mat2, target, {});
  if (!why.empty()) return HAL_FALLBACK(at::_ops::mm_out, why, self, mat2, out);
  if (!target.is_same(out)) out.copy_(target);
  ++counter.native;
  return out;
}

at::Tensor mm(const at::Tensor& self, const at::Tensor& mat2) {
  at::Tensor out = at::empty({0}, self.options());
  return mm_out(self, mat2, out);
}

at::Tensor& bmm_out(const at::Tensor& self, const at::Tensor& mat2, at::Tensor& out) {
  static OpCounter& counter = op_counter("aten::bmm.out");
  TORCH_CHECK(self.dim() == 3 && mat2.dim() == 3, "batch1 and batch2 must be 3D tensors");
  TORCH_CHECK(self.size(0) == mat2.size(0) && self.size(2) == mat2.size(1),
              "Expected size for first two dimensions of batch2 tensor to be: [", self.size(0),
              ", ", self.size(2), "] but got: [", mat2.size(0), ", ", mat2.size(1), "].");
  TORCH_CHECK(self.scalar_type() == mat2.scalar_type(), "expected scalar type ", self.scalar_type(),
              " but found ", mat2.scalar_type());
  at::native::resize_output(out, {self.size(0), self.size(1), mat2.size(2)});
  const at::Tensor target = writable(out, {&self, &mat2});
  const std::string why = run_matmul(self, mat2, target, {});
  if (!why.empty()) return HAL_FALLBACK(at::_ops::bmm_out, why, self, mat2, out);
  if (!target.is_same(out)) out.copy_(target);
  ++counter.native;
  return out;
}

at::Tensor bmm(const at::Tensor& self, const at::Tensor& mat2) {
  at::Tensor out = at::empty({0}, self.options());
  return bmm_out(self, mat2, out);
}

// out = beta * self + alpha * (m1 @ m2) (+ activation), self broadcast to out's shape:
// a row vector as HAL's bias (when beta is 1), a full matrix as c.
std::string addmm_impl(const at::Tensor& self, const at::Tensor& m1, const at::Tensor& m2,
                       const c10::Scalar& beta, const c10::Scalar& alpha, at::Tensor& out,
                       hal_activation_t activation) {
  TORCH_CHECK(m1.dim() == m2.dim() && (m1.dim() == 2 || m1.dim() == 3),
              "addmm: matrices expected, got ", m1.dim(), "-D and ", m2.dim(), "-D tensors");
  TORCH_CHECK(m1.size(-1) == m2.size(-2), "mat1 and mat2 shapes cannot be multiplied (",
              m1.size(-2), "x", m1.size(-1), " and ", m2.size(-2), "x", m2.size(-1), ")");
  std::vector<int64_t> sizes(m1.sizes().begin(), m1.sizes().end());
  sizes.back() = m2.size(-1);
  TORCH_CHECK(at::is_expandable_to(self.sizes(), sizes), "The input tensor (shape ", self.sizes(),
              ") must be broadcastable to ", c10::IntArrayRef(sizes));
  at::native::resize_output(out, sizes);
  if (self.scalar_type() != out.scalar_type() || beta.isComplex() || alpha.isComplex()) {
    return "mixed or complex dtypes";
  }
  if (out.numel() == 0) return "";
  Epilogue e;
  e.alpha = static_cast<float>(alpha.toDouble());
  e.activation = activation;
  const double b = beta.toDouble();
  const int64_t n = sizes.back();
  at::Tensor bias;
  at::Tensor c;
  // out may be self (addmm_) exactly; any other overlap with an input goes through a copy.
  at::Tensor target = writable(out, {&m1, &m2});
  if (b != 0.0) {
    const at::Tensor expanded = self.expand(sizes);
    bool row_vector = b == 1.0;
    for (size_t d = 0; d + 1 < sizes.size() && row_vector; ++d) {
      row_vector = expanded.stride(static_cast<int64_t>(d)) == 0 || sizes[d] == 1;
    }
    if (same_view(expanded, target)) {
      c = target;  // out is self: HAL reads c before writing d
      e.c = &c;
      e.beta = static_cast<float>(b);
    } else if (memory_overlaps(expanded, target)) {
      target = at::empty(sizes, out.options());
      c = expanded;
      e.c = &c;
      e.beta = static_cast<float>(b);
    } else if (row_vector) {
      bias = expanded.select(0, 0);
      while (bias.dim() > 1) bias = bias.select(0, 0);
      if (n > 1 && bias.stride(0) == 0) bias = bias.contiguous();
      e.bias = &bias;
    } else {
      c = expanded;
      e.c = &c;
      e.beta = static_cast<float>(b);
    }
  }
  const std::string why = run_matmul(m1, m2, target, e);
  if (!why.empty()) return why;
  if (!target.is_same(out)) out.copy_(target);
  return "";
}

at::Tensor& addmm_out(const at::Tensor& self, const at::Tensor& m1, const at::Tensor& m2,
                      const c10::Scalar& beta, const c10::Scalar& alpha, at::Tensor& out) {
  static OpCounter& counter = op_counter("aten::addmm.out");
  TORCH_CHECK(m1.dim() == 2 && m2.dim() == 2, "mat1 must be a matrix, got ", m1.dim(), "-D tensor");
  const std::string why = addmm_impl(self, m1, m2, beta, alpha, out, HAL_ACTIVATION_NONE);
  if (!why.empty()) return HAL_FALLBACK(at::_ops::addmm_out, why, self, m1, m2, beta, alpha, out);
  ++counter.native;
  return out;
}

at::Tensor addmm(const at::Tensor& self, const at::Tensor& m1, const at::Tensor& m2,
                 const c10::Scalar& beta, const c10::Scalar& alpha) {
  at::Tensor out = at::empty({0}, m1.options());
  return addmm_out(self, m1, m2, beta, alpha, out);
}

at::Tensor& addmm_(at::Tensor& self, const at::Tensor& m1, const at::Tensor& m2,
                   const c10::Scalar& beta, const c10::Scalar& alpha) {
  return addmm_out(self, m1, m2, beta, alpha, self);
}

at::Tensor& addmm_activation_out(const at::Tensor& self, const at::Tensor& m1, const at::Tensor& m2,
                                 const c10::Scalar& beta, const c10::Scalar& alpha, bool use_gelu,
                                 at::Tensor& out) {
  static OpCounter& counter = op_counter("aten::_addmm_activation.out");
  TORCH_CHECK(m1.dim() == 2 && m2.dim() == 2, "mat1 must be a matrix");
  const std::string why = addmm_impl(self, m1, m2, beta, alpha, out,
                                     use_gelu ? HAL_ACTIVATION_GELU_TANH : HAL_ACTIVATION_RELU);
  if (!why.empty()) {
    return HAL_FALLBACK(at::_ops::_addmm_activation_out, why, self, m1, m2, beta, alpha, use_gelu,
                        out);
  }
  ++counter.native;
  return out;
}

at::Tensor& baddbmm_out(const at::Tensor& self, const at::Tensor& b1, const at::Tensor& b2,
                        const c10::Scalar& beta, const c10::Scalar& alpha, at::Tensor& out) {
  static OpCounter& counter = op_counter("aten::baddbmm.out");
  TORCH_CHECK(b1.dim() == 3 && b2.dim() == 3, "batch1 must be a 3D tensor");
  TORCH_CHECK(b1.size(0) == b2.size(0), "batch1 and batch2 must have same number of batches, got ",
              b1.size(0), " and ", b2.size(0));
  const std::string why = addmm_impl(self, b1, b2, beta, alpha, out, HAL_ACTIVATION_NONE);
  if (!why.empty()) {
    return HAL_FALLBACK(at::_ops::baddbmm_out, why, self, b1, b2, beta, alpha, out);
  }
  ++counter.native;
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("mm", TORCH_FN(mm));
  m.impl("mm.out", TORCH_FN(mm_out));
  m.impl("bmm", TORCH_FN(bmm));
  m.impl("bmm.out", TORCH_FN(bmm_out));
  m.impl("addmm", TORCH_FN(addmm));
  m.impl("addmm_", TORCH_FN(addmm_));
  m.impl("addmm.out", TORCH_FN(addmm_out));
  m.impl("_addmm_activation.out", TORCH_FN(addmm_activation_out));
  m.impl("baddbmm.out", TORCH_FN(baddbmm_out));
}

}  // namespace hal_torch
