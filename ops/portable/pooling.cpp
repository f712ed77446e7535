// Portable pooling: kernels/pooling.hal, one work-item per output element
// (forward) or input element (backward), over canonical [N, C, D, H, W]
// views of any layout and strides. Never declines but for the device.
#include "launch.hpp"
#include "portable_constants.hpp"
#include "registry.hpp"

#include "hal_ops/spatial.hpp"
#include "hal_ops/tensor.hpp"

namespace hal::ops::portable {

namespace {

constexpr const char* kPoolingSource = "pooling";
// The kernel's flags (ops/CMakeLists.txt's table).
constexpr int kFlagIncludePad = constants::PL_INCLUDE_PAD;
constexpr int kFlagAdaptive = constants::PL_ADAPTIVE;
constexpr int kFlagIndices = constants::PL_INDICES;

class PoolingPlan final : public PlannedOp {
 public:
  PoolingPlan(hal_kernel_t kernel, const hal_op_pooling_desc_t& desc)
      : kernel_(kernel), desc_(desc) {
    x_ = canonical(desc.x, desc.layout, desc.spatial_dims);
    y_ = canonical(desc.y, desc.layout, desc.spatial_dims);
    indices_ = (desc.flags & HAL_POOLING_INDICES) != 0
                   ? canonical(desc.indices, desc.layout, desc.spatial_dims)
                   : Canonical5{};
  }

  hal_result_t execute(const ExecContext& context) const override {
    const bool backward = desc_.header.kind == HAL_OP_POOLING_BACKWARD;
    const bool indices = (desc_.flags & HAL_POOLING_INDICES) != 0;
    const uint32_t dims = desc_.spatial_dims;
    // Forward: 0 x, 1 y, 2 indices; backward: 0 grad_y, 1 indices, 2 grad_x.
    void* const x = context.operands[backward ? 2 : 0];
    void* const y = context.operands[backward ? 0 : 1];
    void* const idx = indices ? context.operands[backward ? 1 : 2] : (backward ? x : y);
    const int idx_i64 = indices && desc_.indices.dtype == HAL_DTYPE_I64 ? 1 : 0;
    KernelArgs args;
    const auto push = [&](void* pointer, const Canonical5& tensor, bool with_dtype) {
      args.pointer(pointer);
      if (with_dtype) args.i32(tensor.dtype);
      for (int64_t stride : tensor.strides) args.i64(stride);
    };
    if (backward) {
      push(y, y_, true);
      push(x, x_, true);
      args.pointer(idx).i32(idx_i64);
      for (int64_t stride : indices_.strides) args.i64(stride);
    } else {
      push(x, x_, true);
      push(y, y_, true);
      args.pointer(idx).i32(idx_i64);
      for (int64_t stride : indices_.strides) args.i64(stride);
    }
    args.i64(x_.shape[0]).i64(x_.shape[1]);
    for (int d = 2; d < 5; ++d) args.i64(x_.shape[d]);
    for (int d = 2; d < 5; ++d) args.i64(y_.shape[d]);
    const bool adaptive = (desc_.flags & HAL_POOLING_ADAPTIVE) != 0;
    const auto param = [&](const int64_t* values, int64_t fill) {
      for (int64_t v : spatial_param(values, dims, fill)) args.i64(adaptive ? fill : v);
    };
    param(desc_.kernel, 1);
    param(desc_.stride, 1);
    param(desc_.dilation, 1);
    param(desc_.pad_begin, 0);
    param(desc_.pad_end, 0);
    args.i64(desc_.divisor_override).i32(desc_.pooling);
    args.i32(((desc_.flags & HAL_POOLING_COUNT_INCLUDE_PAD) != 0 ? kFlagIncludePad : 0) |
             (adaptive ? kFlagAdaptive : 0) | (indices ? kFlagIndices : 0));
    const Canonical5& items = backward ? x_ : y_;
    int64_t count = 1;
    for (int64_t extent : items.shape) count *= extent;
    if (count == 0) return HAL_SUCCESS;
    return args.launch(kernel_, context.stream, linear_config(count, 128));
  }

 private:
  hal_kernel_t kernel_;
  hal_op_pooling_desc_t desc_;
  Canonical5 x_, y_, indices_;
};

class Pooling final : public Implementation {
 public:
  const char* name() const override { return "portable"; }
  std::unique_ptr<PlannedOp> plan(const PlanRequest& request, std::string* decline) const override {
    const auto& desc = *reinterpret_cast<const hal_op_pooling_desc_t*>(request.desc);
    const bool backward = desc.header.kind == HAL_OP_POOLING_BACKWARD;
    hal_kernel_t kernel = portable_kernel(request, kPoolingSource,
                                          backward ? "pool_backward" : "pool_forward", decline);
    if (kernel == nullptr) return nullptr;
    return std::make_unique<PoolingPlan>(kernel, desc);
  }
};

}  // namespace

void add_pooling(ImplementationTable& table) {
  static const Pooling pooling;
  table[HAL_OP_POOLING].push_back(&pooling);
  table[HAL_OP_POOLING_BACKWARD].push_back(&pooling);
}

}  // namespace hal::ops::portable
