// What the operator tests share: host tensors in float64 (the reference's
// domain), device tensors of any layout and dtype, plans, executions, and the
// per-dtype tolerances of SPEC.md §17.
#ifndef HAL_CONFORMANCE_OPERATORS_OP_HARNESS_HPP_
#define HAL_CONFORMANCE_OPERATORS_OP_HARNESS_HPP_

#include <hal.h>

#include <cstdint>
#include <initializer_list>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "check.hpp"
#include "context.hpp"

namespace halconform::ops {

inline constexpr double kNan = std::numeric_limits<double>::quiet_NaN();
inline constexpr double kInf = std::numeric_limits<double>::infinity();

// ---- dtypes ----------------------------------------------------------------
// Rounds |value| to |dtype| (round to nearest even; integers truncate) and back.
double round_to(hal_dtype_t dtype, double value);
// Writes |value| as one element of |dtype| at |out|.
void store_element(hal_dtype_t dtype, double value, void* out);
double load_element(hal_dtype_t dtype, const void* in);
const char* dtype_label(hal_dtype_t dtype);

// ---- row-major indexing -----------------------------------------------------
// The coordinates of row-major element |i| of |layout|'s shape, and back.
inline std::vector<int64_t> coordinates(const hal_tensor_desc_t& layout, int64_t i) {
  std::vector<int64_t> c(layout.rank);
  for (uint32_t d = layout.rank; d-- > 0;) {
    c[d] = i % layout.shape[d];
    i /= layout.shape[d];
  }
  return c;
}
inline int64_t row_major(const hal_tensor_desc_t& layout, const std::vector<int64_t>& c) {
  int64_t i = 0;
  for (uint32_t d = 0; d < layout.rank; ++d) i = i * layout.shape[d] + c[d];
  return i;
}

// The row-major index in |input| (whose size-1 dimensions broadcast) of
// row-major element |i| of |out|.
inline int64_t broadcast_index(const hal_tensor_desc_t& input, const hal_tensor_desc_t& out,
                               int64_t i) {
  int64_t index = 0;
  int64_t scale = 1;
  for (uint32_t d = out.rank; d-- > 0;) {
    const int64_t coordinate = i % out.shape[d];
    i /= out.shape[d];
    if (input.shape[d] != 1) index += coordinate * scale;
    scale *= input.shape[d];
  }
  return index;
}

// ---- layouts ---------------------------------------------------------------
// A dense row-major layout.
hal_tensor_desc_t dense(hal_dtype_t dtype, std::initializer_list<int64_t> shape);
hal_tensor_desc_t dense(hal_dtype_t dtype, const std::vector<int64_t>& shape);
// A strided view: dimension d's stride is (dense stride) * pad[d]-ish: each
// row of the last dimension is padded by |pad| elements, so the view is not
// contiguous but its last dimension is.
hal_tensor_desc_t padded(hal_dtype_t dtype, std::initializer_list<int64_t> shape, int64_t pad);
// |tensor| with dimensions d0 and d1 swapped (a transposed view of the same memory).
hal_tensor_desc_t transposed(hal_tensor_desc_t tensor, uint32_t d0, uint32_t d1);
int64_t numel(const hal_tensor_desc_t& tensor);
std::vector<int64_t> shape_of(const hal_tensor_desc_t& tensor);
// The element offset of row-major logical index |i| in |tensor|.
int64_t offset_of(const hal_tensor_desc_t& tensor, int64_t i);
std::string label(const hal_tensor_desc_t& tensor);  // "f32[2,3]{3,1}"

// ---- host data -------------------------------------------------------------
// |count| uniform values in [low, high), rounded to |dtype| so the device and
// the reference start from the same numbers.
std::vector<double> random_values(std::mt19937_64& random, int64_t count, hal_dtype_t dtype,
                                  double low = -1.0, double high = 1.0);
std::vector<double> random_ints(std::mt19937_64& random, int64_t count, int64_t low, int64_t high);

// ---- device tensors --------------------------------------------------------
// Device memory holding a tensor of |layout|, filled from logical (row-major)
// values; bytes of the allocation outside the view hold a canary that
// check_untouched() verifies.
class DeviceTensor {
 public:
  DeviceTensor(hal_device_t device, const hal_tensor_desc_t& layout,
               const std::vector<double>& values = {});
  ~DeviceTensor();
  DeviceTensor(const DeviceTensor&) = delete;
  DeviceTensor& operator=(const DeviceTensor&) = delete;

  void* data() const { return pointer_; }
  const hal_tensor_desc_t& layout() const { return layout_; }
  // The logical values, row-major, as float64.
  std::vector<double> download() const;
  // Integer (and bool) tensors exactly, i64 included: the logical values,
  // row-major (a bool's raw byte).
  void upload_integers(const std::vector<int64_t>& values);
  std::vector<int64_t> download_integers() const;
  // Every byte the view does not cover still holds the canary.
  void check_untouched(const std::string& what) const;

 private:
  hal_device_t device_;
  hal_tensor_desc_t layout_;
  void* pointer_ = nullptr;
  size_t bytes_ = 0;
};

// ---- plans -----------------------------------------------------------------
class Plan {
 public:
  Plan() = default;
  ~Plan();
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;
  hal_op_plan_t get() const { return plan_; }
  hal_op_plan_t* out() { return &plan_; }
  hal_op_plan_info_t info() const;

 private:
  hal_op_plan_t plan_ = nullptr;
};

// Plans |desc| on the test's device. An op no implementation of the device
// accepts skips the test with the declines (a device need not run every
// op); any other failure fails it.
void plan_or_skip(TestContext& ctx, const hal_op_header_t* desc, Plan& plan,
                  hal_op_plan_flags_t flags = 0);

// Executes |plan| on a fresh stream with |operands| (NULL for unused ones),
// allocating the workspace it asks for, and waits for it.
void execute(TestContext& ctx, const Plan& plan, const std::vector<void*>& operands,
             const std::vector<hal_op_scalar_t>& scalars = {});
// The same, returning the result of hal_op_execute instead of requiring success.
// Plans an error test expects to be accepted. A device with no implementation
// of the op declines them (SPEC.md §17.3: its operators profile skips): the
// descriptor rules are still checked (the loader refuses a broken descriptor
// before any implementation is asked), and finish() then ends the test as a
// skip naming the decline instead of a failure.
class Acceptance {
 public:
  explicit Acceptance(TestContext& ctx) : ctx_(ctx) {}
  // |desc| must be accepted, or declined with HAL_ERROR_UNSUPPORTED; true when accepted.
  bool expect(const hal_op_header_t* desc, const char* what);
  bool declined() const { return !declined_.empty(); }
  // Skips the test when a plan was declined; otherwise nothing.
  void finish();

 private:
  TestContext& ctx_;
  std::string declined_;
};

// A descriptor the loader must refuse with HAL_ERROR_INVALID_ARGUMENT (|what| names the rule).
void expect_refused(TestContext& ctx, const hal_op_header_t* desc, const char* what);
// The same, and the loader's message must contain |words| (the operand and rule it names).
void expect_refused_naming(TestContext& ctx, const hal_op_header_t* desc, const char* words);
template <class Desc>
void expect_refused_naming(TestContext& ctx, const Desc& desc, const char* words) {
  expect_refused_naming(ctx, &desc.header, words);
}

hal_result_t try_execute(TestContext& ctx, const Plan& plan, const std::vector<void*>& operands,
                         const std::vector<hal_op_scalar_t>& scalars = {},
                         void* workspace = nullptr, size_t workspace_bytes = 0);

// ---- comparison ------------------------------------------------------------
// |got| matches |expected| where |got - expected| <= atol + rtol * |expected|
// for every element; NaN matches NaN, inf matches the same inf. The failure
// names the first bad element, both values and the tolerance.
struct Tolerance {
  double atol;
  double rtol;
};
// SPEC.md §17's tolerance of an op's output of |dtype| whose f32 error scales
// with |terms| accumulated terms (1 for elementwise ops).
Tolerance tolerance_for(hal_dtype_t dtype, double terms = 1.0);
void expect_close(const std::vector<double>& got, const std::vector<double>& expected,
                  Tolerance tolerance, const std::string& what);
// Exact equality of integer (or bool) results; the failure names the first
// differing element.
void expect_equal_integers(const std::vector<int64_t>& got, const std::vector<int64_t>& expected,
                           const std::string& what);
// Bitwise equality of two downloads (determinism).
void expect_identical(const std::vector<double>& a, const std::vector<double>& b,
                      const std::string& what);

}  // namespace halconform::ops

#endif  // HAL_CONFORMANCE_OPERATORS_OP_HARNESS_HPP_
