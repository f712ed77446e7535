// Portable convolution family: kernels/convolution.hal. Every kind and the
// transposed convolution reduce to three products over the convolution's
// own geometry (its input side and output side):
//  - the forward GEMM (input side -> output side): CONVOLUTION, and the
//    transposed convolution's BACKWARD_DATA;
//  - the backward GEMM (output side -> input side): BACKWARD_DATA, and the
//    transposed convolution's forward (with its bias, residual and
//    activation);
//  - the weight GEMM (input side x output-side gradient): BACKWARD_WEIGHTS of
//    either, split over the reduction into the workspace when the tiles
//    alone would leave the device idle.
#include "launch.hpp"
#include "portable_constants.hpp"
#include "registry.hpp"

#include "hal_ops/spatial.hpp"
#include "hal_ops/tensor.hpp"

#include <algorithm>

namespace hal::ops::portable {

namespace {

constexpr const char* kConvolutionSource = "convolution";
constexpr int64_t kTile = 64;
constexpr int64_t kMaxGrid = 65535;
// The kernels' modes and features (ops/CMakeLists.txt's table).
constexpr int kModeForward = constants::CV_FORWARD;
constexpr int kModeBackward = constants::CV_BACKWARD;
constexpr int kFeatureBias = constants::CV_BIAS;
constexpr int kFeatureResidual = constants::CV_RESIDUAL;
// Below this many destination channels per group a 64-wide tile is mostly
// idle: the direct kernels serve (depthwise, narrow groups), unless the
// reduction is long, where the tile's shared gathers still win.
constexpr int64_t kDirectChannels = 8;
constexpr int64_t kDirectReduction = 256;
// The weight gradient is split over its reduction until about this many
// blocks (tiled) or work-items (direct) run, with chunks of at least
// kMinChunk positions. Shape-only, so the split (and the bits) never vary.
constexpr int64_t kTargetBlocks = 128;
constexpr int64_t kTargetItems = 8192;
constexpr int64_t kMinChunk = 256;

int64_t ceil_div64(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

// The convolution's geometry in canonical order, whichever op and direction.
struct Geometry {
  Canonical5 in, out, w;  // the convolution's input side, output side, filter
  std::array<int64_t, kSpatial> stride{}, dilation{}, pad{};
  int64_t groups = 1;
  int c_inner = 0;  // channels-last: reduce channel-innermost
};

Geometry geometry_of(const hal_op_convolution_desc_t& desc) {
  Geometry g;
  const bool transposed = (desc.flags & HAL_CONV_TRANSPOSED) != 0;
  const Canonical5 x = canonical(desc.x, desc.layout, desc.spatial_dims);
  const Canonical5 y = canonical(desc.y, desc.layout, desc.spatial_dims);
  g.in = transposed ? y : x;
  g.out = transposed ? x : y;
  g.w = canonical(desc.w, desc.layout, desc.spatial_dims);
  g.stride = spatial_param(desc.stride, desc.spatial_dims, 1);
  g.dilation = spatial_param(desc.dilation, desc.spatial_dims, 1);
  g.pad = spatial_param(desc.pad_begin, desc.spatial_dims, 0);
  g.groups = desc.groups;
  g.c_inner = desc.layout == HAL_CHANNELS_LAST ? 1 : 0;
  return g;
}

void push_strides(KernelArgs& args, const Canonical5& tensor) {
  for (int64_t stride : tensor.strides) args.i64(stride);
}

// One data GEMM: src (the op's input activation or gradient) to dst.
struct DataProduct {
  int mode = kModeForward;
  int src_operand = 0, dst_operand = 0;
  int bias_operand = -1, residual_operand = -1;
  Canonical5 src, dst, residual;
  hal_tensor_desc_t bias{};
  int64_t cs = 0, ct = 0;  // per group: reduction channels, destination channels
  int64_t w_col = 0, w_red = 0, w_group = 0;
  int act = 0;
  bool direct = false;
  int64_t row_tiles = 0, grid_y = 1, grid_z = 1;
};

class DataPlan final : public PlannedOp {
 public:
  DataPlan(hal_kernel_t kernel, Geometry geometry, DataProduct product)
      : kernel_(kernel), g_(std::move(geometry)), p_(std::move(product)) {}

  hal_result_t execute(const ExecContext& context) const override {
    const int64_t rows = p_.dst.shape[0] * p_.dst.shape[2] * p_.dst.shape[3] * p_.dst.shape[4];
    if (rows == 0) return HAL_SUCCESS;
    void* const dst = context.operands[p_.dst_operand];
    const auto or_dst = [dst](void* pointer) { return pointer != nullptr ? pointer : dst; };
    const bool has_bias = p_.bias_operand >= 0;
    const bool has_residual = p_.residual_operand >= 0;
    KernelArgs args;
    args.pointer(context.operands[p_.src_operand]).i32(p_.src.dtype);
    push_strides(args, p_.src);
    args.pointer(context.operands[1]).i64(p_.w_col).i64(p_.w_red).i64(p_.w_group);
    args.i64(g_.w.strides[2]).i64(g_.w.strides[3]).i64(g_.w.strides[4]);
    args.pointer(dst).i32(p_.dst.dtype);
    push_strides(args, p_.dst);
    args.pointer(has_bias ? or_dst(context.operands[p_.bias_operand]) : dst)
        .i32(has_bias ? p_.bias.dtype : 0)
        .i64(has_bias ? p_.bias.strides[0] : 0);
    args.pointer(has_residual ? or_dst(context.operands[p_.residual_operand]) : dst)
        .i32(has_residual ? p_.residual.dtype : 0);
    for (int d = 0; d < 5; ++d) args.i64(has_residual ? p_.residual.strides[d] : 0);
    args.i64(p_.src.shape[0]).i64(p_.cs);
    args.i64(p_.src.shape[2]).i64(p_.src.shape[3]).i64(p_.src.shape[4]);
    args.i64(p_.ct).i64(p_.dst.shape[2]).i64(p_.dst.shape[3]).i64(p_.dst.shape[4]);
    args.i64(g_.w.shape[2]).i64(g_.w.shape[3]).i64(g_.w.shape[4]);
    for (int64_t v : g_.stride) args.i64(v);
    for (int64_t v : g_.dilation) args.i64(v);
    for (int64_t v : g_.pad) args.i64(v);
    args.i64(g_.groups).i32(p_.mode).i32(g_.c_inner).i32(p_.act);
    args.i32((has_bias ? kFeatureBias : 0) | (has_residual ? kFeatureResidual : 0));
    if (p_.direct) {
      return args.launch(kernel_, context.stream, linear_config(rows * g_.groups * p_.ct, 128));
    }
    hal_launch_config_t config{};
    config.struct_size = sizeof(config);
    config.block[0] = 16;
    config.block[1] = 16;
    config.block[2] = 1;
    config.grid[0] = static_cast<uint32_t>(ceil_div64(p_.ct, kTile));
    config.grid[1] = static_cast<uint32_t>(p_.grid_y);
    config.grid[2] = static_cast<uint32_t>(p_.grid_z);
    return args.launch(kernel_, context.stream, config);
  }

 private:
  hal_kernel_t kernel_;
  Geometry g_;
  DataProduct p_;
};

// The weight GEMM: grad_w (and grad_bias through its column of ones) from
// the input side |in| and the output-side gradient |gy|.
struct WeightsProduct {
  int in_operand = 0, gy_operand = 1, out_operand = 2;
  int bias_operand = -1;         // grad_bias through the GEMM's column of ones
  int channel_sum_operand = -1;  // transposed: grad_bias = the channel sums of this operand
  hal_tensor_desc_t bias{};
  Canonical5 sum_tensor;
  int64_t cig = 0, cog = 0, cols = 0;
  bool direct = false;
  int64_t splits = 1, chunk = 16;
};

class WeightsPlan final : public PlannedOp {
 public:
  WeightsPlan(hal_kernel_t gemm, hal_kernel_t reduce, hal_kernel_t channel_sum, Geometry geometry,
              WeightsProduct product)
      : gemm_(gemm),
        reduce_(reduce),
        channel_sum_(channel_sum),
        g_(std::move(geometry)),
        p_(std::move(product)) {}

  size_t workspace_bytes() const override {
    if (p_.splits <= 1) return 0;
    return static_cast<size_t>(p_.splits * g_.groups * p_.cog * p_.cols) * sizeof(float);
  }

  hal_result_t execute(const ExecContext& context) const override {
    void* const out = context.operands[p_.out_operand];
    const bool with_bias = p_.bias_operand >= 0;
    void* const bias = with_bias ? context.operands[p_.bias_operand] : out;
    const bool split = p_.splits > 1;
    void* const ws = split ? context.workspace : out;
    KernelArgs args;
    args.pointer(context.operands[p_.in_operand]).i32(g_.in.dtype);
    push_strides(args, g_.in);
    args.pointer(context.operands[p_.gy_operand]);
    push_strides(args, g_.out);
    args.pointer(out).i32(g_.w.dtype);
    push_strides(args, g_.w);
    args.pointer(bias).i32(with_bias ? p_.bias.dtype : 0).i64(with_bias ? p_.bias.strides[0] : 0);
    args.pointer(ws).i64(g_.in.shape[0]).i64(p_.cig);
    args.i64(g_.in.shape[2]).i64(g_.in.shape[3]).i64(g_.in.shape[4]);
    args.i64(p_.cog).i64(g_.out.shape[2]).i64(g_.out.shape[3]).i64(g_.out.shape[4]);
    args.i64(g_.w.shape[2]).i64(g_.w.shape[3]).i64(g_.w.shape[4]);
    for (int64_t v : g_.stride) args.i64(v);
    for (int64_t v : g_.dilation) args.i64(v);
    for (int64_t v : g_.pad) args.i64(v);
    args.i64(g_.groups).i64(p_.chunk).i32(split ? 1 : 0).i32(g_.c_inner).i32(with_bias ? 1 : 0);
    hal_result_t result;
    if (p_.direct) {
      args.i64(p_.splits);
      result = args.launch(gemm_, context.stream,
                           linear_config(p_.splits * g_.groups * p_.cog * p_.cols, 128));
    } else {
      hal_launch_config_t config{};
      config.struct_size = sizeof(config);
      config.block[0] = 16;
      config.block[1] = 16;
      config.block[2] = 1;
      config.grid[0] = static_cast<uint32_t>(ceil_div64(p_.cols, kTile));
      config.grid[1] = static_cast<uint32_t>(ceil_div64(p_.cog, kTile));
      config.grid[2] = static_cast<uint32_t>(g_.groups * p_.splits);
      result = args.launch(gemm_, context.stream, config);
    }
    if (result != HAL_SUCCESS) return result;
    if (split) {
      KernelArgs sum;
      sum.pointer(ws).i64(p_.splits).i64(g_.groups).i64(p_.cog).i64(p_.cig);
      sum.i64(g_.w.shape[2]).i64(g_.w.shape[3]).i64(g_.w.shape[4]);
      sum.i32(g_.c_inner).i32(with_bias ? 1 : 0);
      sum.pointer(out).i32(g_.w.dtype);
      push_strides(sum, g_.w);
      sum.pointer(bias).i32(with_bias ? p_.bias.dtype : 0).i64(with_bias ? p_.bias.strides[0] : 0);
      result = sum.launch(reduce_, context.stream, linear_config(g_.groups * p_.cog * p_.cols));
      if (result != HAL_SUCCESS) return result;
    }
    if (p_.channel_sum_operand >= 0) {
      const Canonical5& t = p_.sum_tensor;
      KernelArgs sum;
      sum.pointer(context.operands[p_.channel_sum_operand]).i32(t.dtype);
      push_strides(sum, t);
      for (int d = 0; d < 5; ++d) sum.i64(t.shape[d]);
      sum.pointer(context.operands[3]).i32(p_.bias.dtype).i64(p_.bias.strides[0]);
      result = sum.launch(channel_sum_, context.stream, linear_config(t.shape[1], 64));
    }
    return result;
  }

 private:
  hal_kernel_t gemm_;
  hal_kernel_t reduce_;
  hal_kernel_t channel_sum_;
  Geometry g_;
  WeightsProduct p_;
};

class Convolution final : public Implementation {
 public:
  const char* name() const override { return "portable"; }

  std::unique_ptr<PlannedOp> plan(const PlanRequest& request, std::string* decline) const override {
    const auto& desc = *reinterpret_cast<const hal_op_convolution_desc_t*>(request.desc);
    Geometry g = geometry_of(desc);
    const hal_op_kind_t kind = desc.header.kind;
    if (kind == HAL_OP_CONVOLUTION_BACKWARD_WEIGHTS) return plan_weights(request, desc, g, decline);
    const bool transposed = (desc.flags & HAL_CONV_TRANSPOSED) != 0;
    const bool forward = kind == HAL_OP_CONVOLUTION;
    DataProduct p;
    // Which GEMM, and which operands are its source and destination.
    p.mode = forward != transposed ? kModeForward : kModeBackward;
    if (forward) {
      p.src_operand = 0;
      p.dst_operand = 4;
      if ((desc.flags & HAL_CONV_BIAS) != 0) p.bias_operand = 2;
      if ((desc.flags & HAL_CONV_RESIDUAL) != 0) p.residual_operand = 3;
      p.act = static_cast<int>(desc.activation);
    } else {
      p.src_operand = 0;
      p.dst_operand = 2;
    }
    p.src = canonical(forward ? desc.x : desc.y, desc.layout, desc.spatial_dims);
    p.dst = canonical(forward ? desc.y : desc.x, desc.layout, desc.spatial_dims);
    p.bias = desc.bias;
    if (p.residual_operand >= 0)
      p.residual = canonical(desc.residual, desc.layout, desc.spatial_dims);
    const int64_t cig = g.in.shape[1] / g.groups;
    const int64_t cog = g.out.shape[1] / g.groups;
    if (p.mode == kModeForward) {
      p.cs = cig;
      p.ct = cog;
      p.w_col = g.w.strides[0];
      p.w_red = g.w.strides[1];
      p.w_group = cog * g.w.strides[0];
    } else {
      p.cs = cog;
      p.ct = cig;
      p.w_col = g.w.strides[1];
      p.w_red = g.w.strides[0];
      p.w_group = cog * g.w.strides[0];
    }
    const int64_t rows = p.dst.shape[0] * p.dst.shape[2] * p.dst.shape[3] * p.dst.shape[4];
    const int64_t reduction = p.cs * g.w.shape[2] * g.w.shape[3] * g.w.shape[4];
    if (reduction >= INT32_MAX) {
      *decline = "the reduction (channels per group x kernel taps) passes 2^31 - 1";
      return nullptr;
    }
    p.direct = p.ct < kDirectChannels && reduction <= kDirectReduction;
    if (!p.direct) {
      p.row_tiles = std::max<int64_t>(1, ceil_div64(rows, kTile));
      p.grid_y = std::min(p.row_tiles, kMaxGrid);
      p.grid_z = g.groups * ceil_div64(p.row_tiles, p.grid_y);
      if (p.grid_z > kMaxGrid || ceil_div64(p.ct, kTile) > kMaxGrid) {
        *decline = "more row tiles times groups than a 65535 x 65535 grid holds";
        return nullptr;
      }
    }
    hal_kernel_t kernel = portable_kernel(
        request, kConvolutionSource, p.direct ? "conv_direct_data" : "conv_gemm_data", decline);
    if (kernel == nullptr) return nullptr;
    return std::make_unique<DataPlan>(kernel, std::move(g), std::move(p));
  }

 private:
  std::unique_ptr<PlannedOp> plan_weights(const PlanRequest& request,
                                          const hal_op_convolution_desc_t& desc, Geometry& g,
                                          std::string* decline) const {
    const bool transposed = (desc.flags & HAL_CONV_TRANSPOSED) != 0;
    const bool has_bias = (desc.flags & HAL_CONV_BIAS) != 0;
    WeightsProduct p;
    // x is the input side unless transposed, where grad_y is.
    p.in_operand = transposed ? 1 : 0;
    p.gy_operand = transposed ? 0 : 1;
    p.out_operand = 2;
    p.bias = desc.bias;
    if (has_bias && !transposed) p.bias_operand = 3;
    if (has_bias && transposed) {
      // The transposed op's bias gradient sums its own grad_y (the
      // convolution's input side), which the GEMM's ones column does not.
      p.channel_sum_operand = 1;
      p.sum_tensor = g.in;
    }
    p.cig = g.in.shape[1] / g.groups;
    p.cog = g.out.shape[1] / g.groups;
    const int64_t taps = g.w.shape[2] * g.w.shape[3] * g.w.shape[4];
    p.cols = p.cig * taps + (p.bias_operand >= 0 ? 1 : 0);
    const int64_t total = g.out.shape[0] * g.out.shape[2] * g.out.shape[3] * g.out.shape[4];
    p.direct = p.cog < 16 || p.cols < 16;
    const int64_t parallel = p.direct
                                 ? g.groups * p.cog * p.cols
                                 : g.groups * ceil_div64(p.cog, kTile) * ceil_div64(p.cols, kTile);
    const int64_t target = p.direct ? kTargetItems : kTargetBlocks;
    int64_t splits = std::max<int64_t>(1, ceil_div64(target, parallel));
    splits = std::min(splits, std::max<int64_t>(1, total / kMinChunk));
    if (!p.direct) splits = std::min(splits, std::max<int64_t>(1, kMaxGrid / g.groups));
    p.chunk = std::max<int64_t>(16, ceil_div64(ceil_div64(total, splits), 16) * 16);
    p.splits = std::max<int64_t>(1, ceil_div64(total, p.chunk));
    if (!p.direct && (ceil_div64(p.cols, kTile) > kMaxGrid || ceil_div64(p.cog, kTile) > kMaxGrid ||
                      g.groups * p.splits > kMaxGrid)) {
      *decline = "the weight gradient's tiles do not fit a 65535 x 65535 x 65535 grid";
      return nullptr;
    }
    hal_kernel_t gemm =
        portable_kernel(request, kConvolutionSource,
                        p.direct ? "conv_direct_weights" : "conv_gemm_weights", decline);
    if (gemm == nullptr) return nullptr;
    hal_kernel_t reduce = nullptr;
    if (p.splits > 1) {
      reduce = portable_kernel(request, kConvolutionSource, "conv_weights_reduce", decline);
      if (reduce == nullptr) return nullptr;
    }
    hal_kernel_t channel_sum = nullptr;
    if (p.channel_sum_operand >= 0) {
      channel_sum = portable_kernel(request, kConvolutionSource, "conv_channel_sum", decline);
      if (channel_sum == nullptr) return nullptr;
    }
    return std::make_unique<WeightsPlan>(gemm, reduce, channel_sum, std::move(g), std::move(p));
  }
};

}  // namespace

void add_convolution(ImplementationTable& table) {
  static const Convolution convolution;
  table[HAL_OP_CONVOLUTION].push_back(&convolution);
  table[HAL_OP_CONVOLUTION_BACKWARD_DATA].push_back(&convolution);
  table[HAL_OP_CONVOLUTION_BACKWARD_WEIGHTS].push_back(&convolution);
}

}  // namespace hal::ops::portable
