// The convolutional ops (convolution, pooling, batch and group norm) through
// the public API, against float64 references computed here: on the cpu
// plugin both its oneDNN implementation ("cpu.onednn", the default) and the
// loader's portable one (HAL_OPS_IMPLEMENTATIONS=portable); on the opencl
// plugin (HAL_TEST_OPENCL) the portable one, which is what it runs. Also:
// every descriptor rule refused with its message, what cpu.onednn declines
// and why, the same bits run to run, and a workspace at an odd address.
// Small shapes: the big matrix is the halconform operators profile.
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "conv_cases.hpp"
#include "float64_tensor.hpp"
#include "hal.h"
#include "op_session.hpp"

namespace {

#ifdef HAL_TEST_OPENCL
constexpr bool kOpencl = true;
#else
constexpr bool kOpencl = false;
#endif

using namespace op_test;

// While true, plan() plans on a thread of its own that ends before the plan
// runs: the plan then executes on another thread than the one that created
// it (as in a framework, whose stream executors run what its thread planned).
bool g_plan_on_another_thread = false;

// Plans |desc| with every implementation, or (|portable|) the portable one.
void plan(Session& session, const hal_op_header_t* desc, bool portable, Planned& out) {
  if (portable) setenv("HAL_OPS_IMPLEMENTATIONS", "portable", 1);
  if (g_plan_on_another_thread) {
    hal_result_t result = HAL_SUCCESS;
    std::string message;
    std::thread([&] {
      result = hal_op_plan_create(session.device(), desc, HAL_OP_PLAN_DETERMINISTIC, &out.plan);
      message = hal_error_last_message();
    }).join();
    if (portable) unsetenv("HAL_OPS_IMPLEMENTATIONS");
    INFO(message);
    REQUIRE(result == HAL_SUCCESS);
    hal_op_plan_info_t info{};
    info.struct_size = sizeof info;
    REQUIRE(hal_op_plan_get_info(out.plan, &info) == HAL_SUCCESS);
    out.implementation = info.implementation;
    out.declines = info.declines;
    out.workspace = info.workspace_bytes;
    return;
  }
  plan_with_flags(session, desc, HAL_OP_PLAN_DETERMINISTIC, out);
  if (portable) unsetenv("HAL_OPS_IMPLEMENTATIONS");
}

// The implementations a case runs on: cpu.onednn (the cpu default) and the
// portable one; opencl has only the portable one.
std::vector<bool> implementations() {
  return kOpencl ? std::vector<bool>{true} : std::vector<bool>{false, true};
}

void expect_served(const Planned& planned, bool portable, bool onednn_serves) {
  INFO("declines: " << planned.declines);
  if (portable || kOpencl || !onednn_serves) {
    CHECK(planned.implementation == "portable");
  } else {
    CHECK(planned.implementation == "cpu.onednn");
  }
}

// ---- convolution ----------------------------------------------------------

// Forward, backward data and backward weights of |t| on one implementation.
void check_conv(Session& session, const Conv& t, bool portable, bool onednn_serves = true) {
  std::mt19937 random(7);
  const auto o = t.out();
  // x/y of the op: the transposed op's x is the convolution's output side.
  const std::vector<int64_t> in_shape = shape_of(t, t.n, t.ci, t.in);
  const std::vector<int64_t> out_shape = shape_of(t, t.n, t.co, o);
  const std::vector<int64_t> w_shape = shape_of(t, t.co, t.ci / t.groups, t.k);
  const auto& x_shape = t.transposed ? out_shape : in_shape;
  const auto& y_shape = t.transposed ? in_shape : out_shape;
  const int64_t y_channels = t.transposed ? t.ci : t.co;
  Tensor x(session, t.dtype, x_shape), w(session, t.dtype, w_shape);
  Tensor y(session, t.dtype, y_shape), bias(session, HAL_DTYPE_F32, {y_channels});
  const auto xv = random_values(random, x.count(), t.dtype);
  const auto wv = random_values(random, w.count(), t.dtype);
  const auto bv = random_values(random, bias.count(), HAL_DTYPE_F32);
  const auto gv = random_values(random, y.count(), t.dtype);
  x.set(session, xv);
  w.set(session, wv);
  bias.set(session, bv);
  const std::string what = std::string(portable ? "portable" : "default") +
                           (t.layout == HAL_CHANNELS_LAST ? " channels-last" : " channels-first") +
                           (t.transposed ? " transposed" : "") + " groups " +
                           std::to_string(t.groups) + " dtype " + std::to_string(t.dtype);
  const double reduction = static_cast<double>(t.ci / t.groups * t.k[0] * t.k[1] * t.k[2]);
  // Forward.
  {
    const hal_op_convolution_desc_t desc = conv_desc(t, HAL_OP_CONVOLUTION, x, w, y, bias);
    Planned planned;
    plan(session, &desc.header, portable, planned);
    expect_served(planned, portable, onednn_serves);
    run(session, planned, {x.data, w.data, t.bias ? bias.data : nullptr, nullptr, y.data});
    expect_close(y.get(session), forward_reference(t, xv, wv, bv, y.count()), t.dtype, reduction,
                 what + " forward");
  }
  // Backward data: grad_y (gv, y's layout) to grad_x (x's).
  {
    Tensor gy(session, t.dtype, y_shape), gx(session, t.dtype, x_shape);
    gy.set(session, gv);
    const hal_op_convolution_desc_t desc =
        conv_desc(t, HAL_OP_CONVOLUTION_BACKWARD_DATA, gx, w, gy, bias);
    Planned planned;
    plan(session, &desc.header, portable, planned);
    expect_served(planned, portable, onednn_serves);
    run(session, planned, {gy.data, w.data, gx.data});
    expect_close(gx.get(session), backward_data_reference(t, gv, wv, gx.count()), t.dtype,
                 reduction, what + " backward data");
  }
  // Backward weights and bias.
  {
    Tensor gy(session, t.dtype, y_shape), gw(session, t.dtype, w_shape);
    Tensor gb(session, HAL_DTYPE_F32, {y_channels});
    gy.set(session, gv);
    const hal_op_convolution_desc_t desc =
        conv_desc(t, HAL_OP_CONVOLUTION_BACKWARD_WEIGHTS, x, gw, gy, gb);
    Planned planned;
    plan(session, &desc.header, portable, planned);
    expect_served(planned, portable, onednn_serves);
    run(session, planned, {x.data, gy.data, gw.data, t.bias ? gb.data : nullptr});
    const double positions = static_cast<double>(gy.count() / y_channels);
    expect_close(gw.get(session), backward_weights_reference(t, xv, gv, gw.count()), t.dtype,
                 positions, what + " backward weights");
    if (t.bias) {
      expect_close(gb.get(session), bias_gradient_reference(t, gv), HAL_DTYPE_F32, positions,
                   what + " bias");
    }
  }
}

}  // namespace

TEST_CASE("convolution: the implementations against float64", "[ops][conv]") {
  Session session;
  for (bool portable : implementations()) {
    Conv nchw;  // strided, asymmetric padding, dilation with stride
    check_conv(session, nchw, portable);
    Conv nhwc;  // channels-last bf16, grouped
    nhwc.layout = HAL_CHANNELS_LAST;
    nhwc.dtype = HAL_DTYPE_BF16;
    nhwc.groups = 2;
    check_conv(session, nhwc, portable);
    Conv depthwise;  // f16 (oneDNN: widened to f32 in the workspace)
    depthwise.layout = HAL_CHANNELS_LAST;
    depthwise.dtype = HAL_DTYPE_F16;
    depthwise.ci = depthwise.co = depthwise.groups = 4;
    check_conv(session, depthwise, portable);
    Conv transposed;  // output padding 1 (y one larger than the smallest)
    transposed.transposed = true;
    transposed.in = {1, 8, 9};
    transposed.stride = {1, 2, 2};
    transposed.dil = {1, 1, 1};
    transposed.pb = {0, 1, 1};
    transposed.pe = {0, 1, 1};
    transposed.groups = 2;
    check_conv(session, transposed, portable);
    Conv three;  // 3-D
    three.spatial = 3;
    three.in = {4, 5, 6};
    three.k = {2, 3, 2};
    three.stride = {2, 1, 2};
    three.pb = {1, 0, 1};
    three.pe = {0, 1, 0};
    three.dil = {1, 1, 1};
    check_conv(session, three, portable);
    Conv one;  // 1-D
    one.spatial = 1;
    one.in = {1, 1, 13};
    one.k = {1, 1, 4};
    one.stride = {1, 1, 3};
    one.pb = {0, 0, 2};
    one.pe = {0, 0, 1};
    one.dil = {1, 1, 1};
    check_conv(session, one, portable);
  }
}

// Channels-first tensors with a kernel of more than one tap run on oneDNN's
// direct kernels over blocked activations (cpu.onednn reorders them through
// the workspace; its gemm convolution was 2-4x slower), a 1x1 kernel on the
// gemm one in place: odd extents, channels that fill no block of 16, stride
// with dilation and asymmetric padding, in f32 and bf16.
TEST_CASE("convolution: channels-first on blocked kernels, odd shapes", "[ops][conv]") {
  Session session;
  for (bool portable : implementations()) {
    Conv f32;
    f32.n = 3;
    f32.ci = 17;  // >= 16: backward data takes the blocked kernels too
    f32.co = 20;
    f32.in = {1, 11, 9};
    check_conv(session, f32, portable);
    Conv bf16 = f32;
    bf16.dtype = HAL_DTYPE_BF16;
    check_conv(session, bf16, portable);
    Conv grouped = f32;  // 2 groups of 16 input channels
    grouped.ci = 32;
    grouped.co = 18;
    grouped.groups = 2;
    grouped.act = HAL_ACTIVATION_NONE;
    check_conv(session, grouped, portable);
    Conv pointwise = f32;  // 1x1, strided: gemm on the caller's tensors
    pointwise.k = {1, 1, 1};
    pointwise.dil = {1, 1, 1};
    pointwise.pb = pointwise.pe = {0, 0, 0};
    check_conv(session, pointwise, portable);
  }
  if (!kOpencl) {
    // The blocked path stages activations in the workspace; the 1x1 one none
    // (its workspace is oneDNN's scratchpad alone: the strided 1x1's im2col
    // of one image per thread, smaller than x here).
    for (int64_t kernel : {3, 1}) {
      Conv t;
      t.n = 3;
      t.in = {1, 20, 18};
      t.ci = 17;
      t.bias = false;
      t.k = {1, kernel, kernel};
      if (kernel == 1) t.pb = t.pe = t.dil = {1, 1, 1};
      if (kernel == 1) t.pb = t.pe = {0, 0, 0};
      Tensor x(session, t.dtype, shape_of(t, t.n, t.ci, t.in));
      Tensor w(session, t.dtype, shape_of(t, t.co, t.ci, t.k));
      Tensor y(session, t.dtype, shape_of(t, t.n, t.co, t.out()));
      const hal_op_convolution_desc_t desc = conv_desc(t, HAL_OP_CONVOLUTION, x, w, y, Tensor());
      Planned planned;
      plan(session, &desc.header, false, planned);
      INFO("kernel " << kernel);
      CHECK(planned.implementation == "cpu.onednn");
      if (kernel > 1) {
        CHECK(planned.workspace >= x.count() * sizeof(float));
      } else {
        CHECK(planned.workspace < x.count() * sizeof(float));
      }
    }
  }
}

// Channels-last backward data into fewer than 16 input channels per group
// (ResNet's stem: 3) runs on oneDNN's gemm convolution over channels-first
// copies (cpu.onednn stages grad_y and grad_x through the workspace; its
// direct kernels were 1.2-2.2x slower): odd extents, stride with dilation,
// asymmetric padding, grouped, f32 and bf16, every kind against float64.
TEST_CASE("convolution: channels-last backward data into few channels", "[ops][conv]") {
  Session session;
  for (bool portable : implementations()) {
    Conv stem;
    stem.layout = HAL_CHANNELS_LAST;
    stem.n = 3;
    stem.ci = 3;
    stem.co = 20;
    stem.in = {1, 11, 9};
    check_conv(session, stem, portable);
    Conv bf16 = stem;
    bf16.dtype = HAL_DTYPE_BF16;
    check_conv(session, bf16, portable);
    Conv grouped = stem;  // 2 groups of 5 input channels
    grouped.ci = 10;
    grouped.co = 8;
    grouped.groups = 2;
    check_conv(session, grouped, portable);
  }
  if (!kOpencl) {
    // 3 input channels: grad_y and grad_x staged; 16: both in place (the
    // workspace holds the blocked weights alone, smaller than grad_y here).
    for (int64_t channels : {3, 16}) {
      Conv t;
      t.layout = HAL_CHANNELS_LAST;
      t.n = 3;
      t.in = {1, 20, 18};
      t.ci = channels;
      t.bias = false;
      Tensor x(session, t.dtype, shape_of(t, t.n, t.ci, t.in));
      Tensor w(session, t.dtype, shape_of(t, t.co, t.ci, t.k));
      Tensor y(session, t.dtype, shape_of(t, t.n, t.co, t.out()));
      const hal_op_convolution_desc_t desc =
          conv_desc(t, HAL_OP_CONVOLUTION_BACKWARD_DATA, x, w, y, Tensor());
      Planned planned;
      plan(session, &desc.header, false, planned);
      INFO("input channels " << channels);
      CHECK(planned.implementation == "cpu.onednn");
      if (channels < 16) {
        CHECK(planned.workspace >= (x.count() + y.count()) * sizeof(float));
      } else {
        CHECK(planned.workspace < y.count() * sizeof(float));
      }
    }
  }
}

// oneDNN's gemm convolution (im2col in its scratchpad) planned on this
// thread and executed from another: at one OpenMP thread (ctest runs this
// case again with OMP_NUM_THREADS=1) cpu.onednn runs both where they are
// called, and oneDNN 2.6's own per-thread scratchpad was missing on the
// executing thread (invalid arguments, or a crash at 2 threads); the plan's
// scratchpad now lives in its workspace. Backward data into 3 channels,
// channels-first and channels-last, then checked against float64 by a
// second execution on this thread (bit for bit the same).
TEST_CASE("convolution: gemm primitives planned on one thread, run on another",
          "[ops][conv][one-thread]") {
  Session session;
  for (bool portable : implementations()) {
    for (hal_channel_layout_t layout : {HAL_CHANNELS_FIRST, HAL_CHANNELS_LAST}) {
      Conv t;
      t.layout = layout;
      t.n = 4;
      t.ci = 3;
      t.co = 32;
      t.in = {1, 30, 28};
      t.bias = false;
      Tensor x(session, t.dtype, shape_of(t, t.n, t.ci, t.in));
      Tensor w(session, t.dtype, shape_of(t, t.co, t.ci, t.k));
      Tensor gy(session, t.dtype, shape_of(t, t.n, t.co, t.out()));
      std::mt19937 random(11);
      w.set(session, random_values(random, w.count(), t.dtype));
      gy.set(session, random_values(random, gy.count(), t.dtype));
      const hal_op_convolution_desc_t desc =
          conv_desc(t, HAL_OP_CONVOLUTION_BACKWARD_DATA, x, w, gy, Tensor());
      Planned planned;
      plan(session, &desc.header, portable, planned);
      void* workspace = planned.workspace > 0 ? session.alloc_bytes(planned.workspace) : nullptr;
      std::vector<void*> operands{gy.data, w.data, x.data};
      hal_op_exec_args_t args{};
      args.struct_size = sizeof args;
      args.operand_count = 3;
      args.operands = operands.data();
      args.workspace = workspace;
      args.workspace_bytes = planned.workspace;
      hal_result_t executed = HAL_ERROR_INTERNAL, synchronized = HAL_ERROR_INTERNAL;
      std::string message;
      std::thread([&] {
        executed = hal_op_execute(planned.plan, &args, session.stream());
        synchronized = hal_stream_synchronize(session.stream());
        message = hal_error_last_message();
      }).join();
      INFO(planned.implementation << " " << message);
      REQUIRE(executed == HAL_SUCCESS);
      REQUIRE(synchronized == HAL_SUCCESS);
      const std::vector<double> other_thread = x.get(session);
      run(session, planned, operands);
      CHECK(x.get(session) == other_thread);
      std::vector<double> want(x.count(), 0.0);
      const auto wv = w.get(session), gv = gy.get(session);
      taps(t, [&](int64_t i, int64_t out, int64_t f) { want[i] += gv[out] * wv[f]; });
      expect_close(other_thread, want, t.dtype, static_cast<double>(t.co * t.k[1] * t.k[2]),
                   std::string(portable ? "portable" : "default") + " backward data, layout " +
                       std::to_string(layout));
    }
  }
}

// One plan executed over different buffers (and workspaces) each time, and a
// second plan of another shape beside it: each execution computes from the
// pointers it is given, against float64.
TEST_CASE("convolution: one plan over different buffers, two shapes interleaved", "[ops][conv]") {
  Session session;
  for (bool portable : implementations()) {
    Conv a;
    a.ci = 17;
    a.co = 20;
    a.in = {1, 11, 9};
    Conv b = a;
    b.n = 1;
    b.ci = 5;
    b.co = 3;
    b.in = {1, 6, 13};
    b.stride = {1, 1, 2};
    std::mt19937 random(11);
    struct Shape {
      Conv t;
      std::unique_ptr<Tensor> x, w, y, bias;
      Planned planned;
    };
    std::vector<Shape> shapes(2);
    shapes[0].t = a;
    shapes[1].t = b;
    for (Shape& s : shapes) {
      s.x = std::make_unique<Tensor>(session, s.t.dtype, shape_of(s.t, s.t.n, s.t.ci, s.t.in));
      s.w = std::make_unique<Tensor>(session, s.t.dtype,
                                     shape_of(s.t, s.t.co, s.t.ci / s.t.groups, s.t.k));
      s.y = std::make_unique<Tensor>(session, s.t.dtype, shape_of(s.t, s.t.n, s.t.co, s.t.out()));
      s.bias = std::make_unique<Tensor>(session, HAL_DTYPE_F32, std::vector<int64_t>{s.t.co});
      const hal_op_convolution_desc_t desc =
          conv_desc(s.t, HAL_OP_CONVOLUTION, *s.x, *s.w, *s.y, *s.bias);
      plan(session, &desc.header, portable, s.planned);
    }
    for (int round = 0; round < 3; ++round) {
      for (Shape& s : shapes) {
        const Conv& t = s.t;
        // Fresh buffers every round: the plan holds no pointer of an earlier one.
        Tensor x(session, t.dtype, shape_of(t, t.n, t.ci, t.in));
        Tensor w(session, t.dtype, shape_of(t, t.co, t.ci / t.groups, t.k));
        Tensor y(session, t.dtype, shape_of(t, t.n, t.co, t.out()));
        Tensor bias(session, HAL_DTYPE_F32, {t.co});
        const auto xv = random_values(random, x.count(), t.dtype);
        const auto wv = random_values(random, w.count(), t.dtype);
        const auto bv = random_values(random, bias.count(), HAL_DTYPE_F32);
        x.set(session, xv);
        w.set(session, wv);
        bias.set(session, bv);
        run(session, s.planned, {x.data, w.data, bias.data, nullptr, y.data});
        std::vector<double> want(y.count(), 0.0);
        taps(t, [&](int64_t i, int64_t out, int64_t f) { want[out] += xv[i] * wv[f]; });
        const size_t per_channel = y.count() / static_cast<size_t>(t.n * t.co);
        for (size_t i = 0; i < want.size(); ++i) {
          want[i] = activate(t.act, want[i] + bv[i / per_channel % static_cast<size_t>(t.co)]);
        }
        expect_close(y.get(session), want, t.dtype, static_cast<double>(t.ci * 9),
                     "round " + std::to_string(round) + " shape ci " + std::to_string(t.ci));
      }
    }
  }
}

TEST_CASE("convolution: the same bits run to run, and at an odd workspace address", "[ops][conv]") {
  Session session;
  for (bool portable : implementations()) {
    Conv t;
    t.layout = HAL_CHANNELS_LAST;
    t.dtype = HAL_DTYPE_F16;  // oneDNN stages every tensor through the workspace
    t.n = 3;
    t.ci = 16;
    t.co = 24;
    t.in = {1, 17, 15};
    std::mt19937 random(3);
    const auto o = t.out();
    Tensor x(session, t.dtype, shape_of(t, t.n, t.ci, t.in));
    Tensor gy(session, t.dtype, shape_of(t, t.n, t.co, o));
    Tensor gw(session, HAL_DTYPE_F32, shape_of(t, t.co, t.ci, t.k));
    Tensor gb(session, HAL_DTYPE_F32, {t.co});
    x.set(session, random_values(random, x.count(), t.dtype));
    gy.set(session, random_values(random, gy.count(), t.dtype));
    const hal_op_convolution_desc_t desc =
        conv_desc(t, HAL_OP_CONVOLUTION_BACKWARD_WEIGHTS, x, gw, gy, gb);
    Planned planned;
    plan(session, &desc.header, portable, planned);
    run(session, planned, {x.data, gy.data, gw.data, gb.data});
    const auto first = gw.get(session);
    run(session, planned, {x.data, gy.data, gw.data, gb.data}, {}, 1);
    const auto second = gw.get(session);
    CHECK(std::memcmp(first.data(), second.data(), first.size() * sizeof(double)) == 0);
    if (!portable) CHECK(planned.workspace > 0);  // the reorders' f32 copies
  }
}

namespace {

// ---- pooling --------------------------------------------------------------

struct Pool {
  hal_pooling_kind_t kind = HAL_POOLING_AVERAGE;
  hal_channel_layout_t layout = HAL_CHANNELS_FIRST;
  int64_t n = 2, c = 3, h = 9, w = 8;
  int64_t k = 3, s = 2, pb = 1, pe = 1;
  bool include_pad = false, ceil_mode = false;
  int64_t oh() const {
    const int64_t span = h + pb + pe - k;
    int64_t o = ceil_mode ? (span + s - 1) / s + 1 : span / s + 1;
    if (ceil_mode && (o - 1) * s >= h + pb) --o;
    return o;
  }
  int64_t ow() const {
    const int64_t span = w + pb + pe - k;
    int64_t o = ceil_mode ? (span + s - 1) / s + 1 : span / s + 1;
    if (ceil_mode && (o - 1) * s >= w + pb) --o;
    return o;
  }
};

std::vector<int64_t> pool_shape(const Pool& t, int64_t h, int64_t w) {
  return t.layout == HAL_CHANNELS_FIRST ? std::vector<int64_t>{t.n, t.c, h, w}
                                        : std::vector<int64_t>{t.n, h, w, t.c};
}

int64_t pool_index(const Pool& t, int64_t hh, int64_t ww, int64_t n, int64_t c, int64_t y,
                   int64_t x) {
  return t.layout == HAL_CHANNELS_FIRST ? ((n * t.c + c) * hh + y) * ww + x
                                        : ((n * hh + y) * ww + x) * t.c + c;
}

hal_op_pooling_desc_t pool_desc(const Pool& t, bool backward, const Tensor& x, const Tensor& y,
                                const Tensor& indices) {
  hal_op_pooling_desc_t desc{};
  desc.header.struct_size = sizeof desc;
  desc.header.kind = backward ? HAL_OP_POOLING_BACKWARD : HAL_OP_POOLING;
  desc.pooling = t.kind;
  desc.layout = t.layout;
  desc.spatial_dims = 2;
  desc.flags = (t.kind == HAL_POOLING_MAX ? uint32_t{HAL_POOLING_INDICES} : 0u) |
               (t.include_pad ? uint32_t{HAL_POOLING_COUNT_INCLUDE_PAD} : 0u) |
               (t.ceil_mode ? uint32_t{HAL_POOLING_CEIL_MODE} : 0u);
  for (int s = 0; s < 2; ++s) {
    desc.kernel[s] = t.k;
    desc.stride[s] = t.s;
    desc.dilation[s] = 1;
    desc.pad_begin[s] = t.pb;
    desc.pad_end[s] = t.pe;
  }
  desc.x = x.desc;
  desc.y = y.desc;
  desc.indices = indices.desc;
  return desc;
}

// Forward and backward of |t| against windows enumerated here.
void check_pool(Session& session, const Pool& t, bool portable, bool onednn_serves) {
  std::mt19937 random(11);
  Tensor x(session, HAL_DTYPE_F32, pool_shape(t, t.h, t.w));
  Tensor y(session, HAL_DTYPE_F32, pool_shape(t, t.oh(), t.ow()));
  Tensor idx(session, HAL_DTYPE_I64, pool_shape(t, t.oh(), t.ow()));
  Tensor gy(session, HAL_DTYPE_F32, pool_shape(t, t.oh(), t.ow()));
  Tensor gx(session, HAL_DTYPE_F32, pool_shape(t, t.h, t.w));
  const auto xv = random_values(random, x.count(), HAL_DTYPE_F32);
  const auto gv = random_values(random, gy.count(), HAL_DTYPE_F32);
  x.set(session, xv);
  gy.set(session, gv);
  const bool max = t.kind == HAL_POOLING_MAX;
  const std::string what = std::string(portable ? "portable" : "default") +
                           (max ? " max" : " average") + (t.include_pad ? " include_pad" : "") +
                           (t.ceil_mode ? " ceil" : "");
  std::vector<double> want_y(y.count()), want_idx(y.count(), -1), want_gx(x.count(), 0.0);
  for (int64_t n = 0; n < t.n; ++n)
    for (int64_t c = 0; c < t.c; ++c)
      for (int64_t oy = 0; oy < t.oh(); ++oy)
        for (int64_t ox = 0; ox < t.ow(); ++ox) {
          const int64_t o = pool_index(t, t.oh(), t.ow(), n, c, oy, ox);
          double sum = 0, best = -INFINITY;
          int64_t inside = 0, padded = 0, best_at = -1;
          std::vector<int64_t> members;
          for (int64_t a = 0; a < t.k; ++a)
            for (int64_t b = 0; b < t.k; ++b) {
              const int64_t py = oy * t.s - t.pb + a, px = ox * t.s - t.pb + b;
              if (py >= -t.pb && py < t.h + t.pe && px >= -t.pb && px < t.w + t.pe) ++padded;
              if (py < 0 || py >= t.h || px < 0 || px >= t.w) continue;
              const int64_t i = pool_index(t, t.h, t.w, n, c, py, px);
              members.push_back(i);
              ++inside;
              sum += xv[i];
              if (best_at < 0 || xv[i] > best) {
                best = xv[i];
                best_at = py * t.w + px;
              }
            }
          const double divisor = t.include_pad ? padded : inside;
          want_y[o] = max ? best : sum / divisor;
          want_idx[o] = static_cast<double>(best_at);
          if (max) {
            want_gx[pool_index(t, t.h, t.w, n, c, best_at / t.w, best_at % t.w)] += gv[o];
          } else {
            for (int64_t i : members) want_gx[i] += gv[o] / divisor;
          }
        }
  {
    const hal_op_pooling_desc_t desc = pool_desc(t, false, x, y, idx);
    Planned planned;
    plan(session, &desc.header, portable, planned);
    expect_served(planned, portable, onednn_serves);
    if (!portable && !onednn_serves && !kOpencl)
      CHECK_THAT(planned.declines, Catch::Contains("cpu"));
    run(session, planned, {x.data, y.data, max ? idx.data : nullptr});
    expect_close(y.get(session), want_y, HAL_DTYPE_F32, 9, what + " y");
    if (max) CHECK(idx.get(session) == want_idx);
  }
  {
    const hal_op_pooling_desc_t desc = pool_desc(t, true, gx, gy, idx);
    Planned planned;
    plan(session, &desc.header, portable, planned);
    expect_served(planned, portable, onednn_serves);
    run(session, planned, {gy.data, max ? idx.data : nullptr, gx.data});
    expect_close(gx.get(session), want_gx, HAL_DTYPE_F32, 9, what + " grad_x");
  }
}

}  // namespace

TEST_CASE("pooling: the implementations against float64", "[ops][pooling][one-thread]") {
  Session session;
  for (bool portable : implementations()) {
    for (hal_channel_layout_t layout : {HAL_CHANNELS_FIRST, HAL_CHANNELS_LAST}) {
      Pool average;
      average.layout = layout;
      check_pool(session, average, portable, true);
      average.include_pad = true;
      check_pool(session, average, portable, true);
      Pool ceil_exclude;  // ceil mode without the padding in the divisor: oneDNN serves it
      ceil_exclude.layout = layout;
      ceil_exclude.ceil_mode = true;
      ceil_exclude.h = 10;
      check_pool(session, ceil_exclude, portable, true);
      Pool max;  // cpu.onednn's host loops (f32)
      max.kind = HAL_POOLING_MAX;
      max.layout = layout;
      check_pool(session, max, portable, true);
      max.ceil_mode = true;
      max.h = 10;
      check_pool(session, max, portable, true);
    }
  }
}

// Indices are device data (SPEC §17.6.9): an index outside its window, in
// the plane or not, contributes nothing to grad_x; one inside adds grad_y.
TEST_CASE("max pooling backward: an index outside its window contributes nothing",
          "[ops][pooling]") {
  Session session;
  for (bool portable : implementations()) {
    for (hal_channel_layout_t layout : {HAL_CHANNELS_FIRST, HAL_CHANNELS_LAST}) {
      Pool t;  // 2x2 windows, stride 2, no padding: 6x6 into 3x3
      t.kind = HAL_POOLING_MAX;
      t.layout = layout;
      t.n = 1;
      t.c = 2;
      t.h = t.w = 6;
      t.k = t.s = 2;
      t.pb = t.pe = 0;
      Tensor x(session, HAL_DTYPE_F32, pool_shape(t, t.h, t.w));
      Tensor y(session, HAL_DTYPE_F32, pool_shape(t, t.oh(), t.ow()));
      Tensor idx(session, HAL_DTYPE_I64, pool_shape(t, t.oh(), t.ow()));
      Tensor gy(session, HAL_DTYPE_F32, pool_shape(t, t.oh(), t.ow()));
      Tensor gx(session, HAL_DTYPE_F32, pool_shape(t, t.h, t.w));
      std::mt19937 random(23);
      const auto gv = random_values(random, gy.count(), HAL_DTYPE_F32);
      gy.set(session, gv);
      std::vector<double> iv(idx.count()), want(gx.count(), 0.0);
      for (int64_t c = 0; c < t.c; ++c)
        for (int64_t oy = 0; oy < t.oh(); ++oy)
          for (int64_t ox = 0; ox < t.ow(); ++ox) {
            const int64_t o = pool_index(t, t.oh(), t.ow(), 0, c, oy, ox);
            const int64_t inside = (2 * oy + 1) * t.w + 2 * ox;  // window row 1, column 0
            switch ((oy * t.ow() + ox + c) % 4) {
              case 0:  // inside its window
                iv[o] = static_cast<double>(inside);
                want[pool_index(t, t.h, t.w, 0, c, inside / t.w, inside % t.w)] += gv[o];
                break;
              case 1:  // in the plane, in the next window over
                iv[o] = static_cast<double>((inside + 2) % (t.h * t.w));
                break;
              case 2:
                iv[o] = -1;
                break;
              default:
                iv[o] = 1e12;
            }
          }
      idx.set(session, iv);
      hal_op_pooling_desc_t desc = pool_desc(t, true, gx, gy, idx);
      Planned planned;
      plan(session, &desc.header, portable, planned);
      expect_served(planned, portable, true);
      run(session, planned, {gy.data, idx.data, gx.data});
      CHECK(gx.get(session) == want);
    }
  }
}

// With dilation a window's taps have gaps: an index in a gap lies inside the
// window's span but is no tap of it, and contributes nothing (the cpu
// plugin finds the tap by walking the window's rows, then checks the gap).
TEST_CASE("max pooling backward: an index between dilated taps contributes nothing",
          "[ops][pooling]") {
  Session session;
  for (bool portable : implementations()) {
    // One 5x5 plane, 2x2 windows of dilation 2, stride 1: 3x3 windows with
    // taps at rows {oy, oy + 2} and columns {ox, ox + 2}.
    const int64_t side = 5, out = 3;
    Tensor x(session, HAL_DTYPE_F32, {1, 1, side, side});
    Tensor idx(session, HAL_DTYPE_I64, {1, 1, out, out});
    Tensor gy(session, HAL_DTYPE_F32, {1, 1, out, out});
    Tensor gx(session, HAL_DTYPE_F32, {1, 1, side, side});
    std::mt19937 random(29);
    const auto gv = random_values(random, gy.count(), HAL_DTYPE_F32);
    gy.set(session, gv);
    std::vector<double> iv(idx.count()), want(gx.count(), 0.0);
    for (int64_t oy = 0; oy < out; ++oy)
      for (int64_t ox = 0; ox < out; ++ox) {
        const size_t o = static_cast<size_t>(oy * out + ox);
        if ((oy + ox) % 2 == 0) {  // the tap (oy + 2, ox + 2)
          iv[o] = static_cast<double>((oy + 2) * side + ox + 2);
          want[static_cast<size_t>((oy + 2) * side + ox + 2)] += gv[o];
        } else {  // (oy, ox + 1): in the window's first row, between its two taps
          iv[o] = static_cast<double>(oy * side + ox + 1);
        }
      }
    idx.set(session, iv);
    hal_op_pooling_desc_t desc{};
    desc.header.struct_size = sizeof desc;
    desc.header.kind = HAL_OP_POOLING_BACKWARD;
    desc.pooling = HAL_POOLING_MAX;
    desc.layout = HAL_CHANNELS_FIRST;
    desc.spatial_dims = 2;
    desc.flags = HAL_POOLING_INDICES;
    for (int s = 0; s < 2; ++s) {
      desc.kernel[s] = 2;
      desc.stride[s] = 1;
      desc.dilation[s] = 2;
    }
    desc.x = gx.desc;
    desc.y = gy.desc;
    desc.indices = idx.desc;
    Planned planned;
    plan(session, &desc.header, portable, planned);
    expect_served(planned, portable, true);
    run(session, planned, {gy.data, idx.data, gx.data});
    CHECK(gx.get(session) == want);
  }
}

namespace {

// ---- batch and group norm --------------------------------------------------

struct Norm {
  bool group = false;
  hal_channel_layout_t layout = HAL_CHANNELS_FIRST;
  hal_dtype_t dtype = HAL_DTYPE_F32;
  int64_t n = 3, c = 4, h = 5, w = 6, groups = 2;
  bool training = true;
  bool update = true;  // batch norm training: UPDATE_RUNNING (needs two values per channel)
  bool relu = false;   // batch norm: HAL_BATCH_NORM_RELU, forward and backward
};

std::vector<int64_t> norm_shape(const Norm& t) {
  return t.layout == HAL_CHANNELS_FIRST ? std::vector<int64_t>{t.n, t.c, t.h, t.w}
                                        : std::vector<int64_t>{t.n, t.h, t.w, t.c};
}

int64_t channel_of(const Norm& t, size_t i) {
  return t.layout == HAL_CHANNELS_LAST ? static_cast<int64_t>(i) % t.c
                                       : static_cast<int64_t>(i) / (t.h * t.w) % t.c;
}
int64_t sample_of(const Norm& t, size_t i) {
  return static_cast<int64_t>(i) / (t.c * t.h * t.w);
}
int64_t segment_of(const Norm& t, size_t i) {
  return t.group ? sample_of(t, i) * t.groups + channel_of(t, i) / (t.c / t.groups)
                 : channel_of(t, i);
}

void check_norm(Session& session, const Norm& t, bool portable, bool onednn_serves) {
  std::mt19937 random(5);
  const auto shape = norm_shape(t);
  Tensor x(session, t.dtype, shape), y(session, t.dtype, shape);
  Tensor gy(session, t.dtype, shape), gx(session, t.dtype, shape);
  Tensor scale(session, HAL_DTYPE_F32, {t.c}), shift(session, HAL_DTYPE_F32, {t.c});
  Tensor rm(session, HAL_DTYPE_F32, {t.c}), rv(session, HAL_DTYPE_F32, {t.c});
  const int64_t segments = t.group ? t.n * t.groups : t.c;
  const std::vector<int64_t> stat_shape =
      t.group ? std::vector<int64_t>{t.n, t.groups} : std::vector<int64_t>{t.c};
  Tensor mean(session, HAL_DTYPE_F32, stat_shape), rstd(session, HAL_DTYPE_F32, stat_shape);
  Tensor gscale(session, HAL_DTYPE_F32, {t.c}), gshift(session, HAL_DTYPE_F32, {t.c});
  const auto xv = random_values(random, x.count(), t.dtype, -2, 2);
  const auto gv = random_values(random, x.count(), t.dtype);
  const auto sv = random_values(random, t.c, HAL_DTYPE_F32, 0.5, 1.5);
  const auto bv = random_values(random, t.c, HAL_DTYPE_F32);
  const auto rmv = random_values(random, t.c, HAL_DTYPE_F32);
  const auto rvv = random_values(random, t.c, HAL_DTYPE_F32, 0.5, 2);
  x.set(session, xv);
  gy.set(session, gv);
  scale.set(session, sv);
  shift.set(session, bv);
  rm.set(session, rmv);
  rv.set(session, rvv);
  const double m = static_cast<double>(x.count()) / static_cast<double>(segments);
  const float epsilon = 1e-5f;
  // The statistics, y, and the gradients in float64.
  std::vector<double> mu(segments, 0), var(segments, 0), rs(segments);
  const bool batch_stats = t.group || t.training;
  for (size_t i = 0; i < xv.size(); ++i) mu[segment_of(t, i)] += xv[i] / m;
  for (size_t i = 0; i < xv.size(); ++i) {
    const double d = xv[i] - mu[segment_of(t, i)];
    var[segment_of(t, i)] += d * d / m;
  }
  if (!batch_stats) {
    mu = rmv;
    var = rvv;
  }
  for (int64_t s = 0; s < segments; ++s) rs[s] = 1 / std::sqrt(var[s] + epsilon);
  std::vector<double> want_y(xv.size()), want_gx(xv.size()), want_gs(t.c, 0), want_gb(t.c, 0);
  std::vector<double> sum_h(segments, 0), sum_hx(segments, 0);
  for (size_t i = 0; i < xv.size(); ++i) {
    const int64_t s = segment_of(t, i), c = channel_of(t, i);
    const double xhat = (xv[i] - mu[s]) * rs[s];
    want_y[i] = xhat * sv[c] + bv[c];
    if (t.relu) want_y[i] = std::max(want_y[i], 0.0);
    const double h = gv[i] * (t.group ? sv[c] : 1.0);
    sum_h[s] += h;
    sum_hx[s] += h * xhat;
    want_gs[c] += gv[i] * xhat;
    want_gb[c] += gv[i];
  }
  for (size_t i = 0; i < xv.size(); ++i) {
    const int64_t s = segment_of(t, i), c = channel_of(t, i);
    const double xhat = (xv[i] - mu[s]) * rs[s];
    if (t.group) {
      want_gx[i] = rs[s] * (gv[i] * sv[c] - sum_h[s] / m - xhat * sum_hx[s] / m);
    } else if (t.training) {
      want_gx[i] = sv[c] * rs[s] * (gv[i] - sum_h[s] / m - xhat * sum_hx[s] / m);
    } else {
      want_gx[i] = gv[i] * sv[c] * rs[s];
    }
  }
  std::string what =
      std::string(portable ? "portable" : "default") + (t.group      ? " group_norm"
                                                        : t.training ? " batch_norm training"
                                                                     : " batch_norm inference");
  what += " [" + std::to_string(t.n) + "," + std::to_string(t.c) + "," + std::to_string(t.h) + "," +
          std::to_string(t.w) + "]" + (t.relu ? " relu" : "");
  Planned forward, backward;
  if (t.group) {
    hal_op_group_norm_desc_t desc{};
    desc.header.struct_size = sizeof desc;
    desc.header.kind = HAL_OP_GROUP_NORM;
    desc.layout = t.layout;
    desc.groups = static_cast<uint32_t>(t.groups);
    desc.flags = HAL_GROUP_NORM_SCALE | HAL_GROUP_NORM_SHIFT | HAL_GROUP_NORM_SAVE_STATS;
    desc.epsilon = epsilon;
    desc.x = x.desc;
    desc.y = y.desc;
    desc.scale = scale.desc;
    desc.shift = shift.desc;
    desc.mean = mean.desc;
    desc.rstd = rstd.desc;
    desc.grad_y = gy.desc;
    desc.grad_x = gx.desc;
    desc.grad_scale = gscale.desc;
    desc.grad_shift = gshift.desc;
    plan(session, &desc.header, portable, forward);
    run(session, forward, {x.data, scale.data, shift.data, y.data, mean.data, rstd.data});
    desc.header.kind = HAL_OP_GROUP_NORM_BACKWARD;
    desc.flags = HAL_GROUP_NORM_SCALE | HAL_GROUP_NORM_GRAD_SCALE | HAL_GROUP_NORM_GRAD_SHIFT;
    plan(session, &desc.header, portable, backward);
    run(session, backward,
        {x.data, gy.data, scale.data, mean.data, rstd.data, gx.data, gscale.data, gshift.data});
  } else {
    hal_op_batch_norm_desc_t desc{};
    desc.header.struct_size = sizeof desc;
    desc.header.kind = HAL_OP_BATCH_NORM;
    desc.layout = t.layout;
    desc.epsilon = epsilon;
    const bool update = t.training && t.update;
    const uint32_t relu = t.relu ? uint32_t{HAL_BATCH_NORM_RELU} : 0u;
    desc.flags = HAL_BATCH_NORM_SCALE | HAL_BATCH_NORM_SHIFT | relu |
                 (t.training ? uint32_t{HAL_BATCH_NORM_TRAINING | HAL_BATCH_NORM_SAVE_STATS} : 0u) |
                 (update ? uint32_t{HAL_BATCH_NORM_UPDATE_RUNNING} : 0u);
    desc.x = x.desc;
    desc.y = y.desc;
    desc.scale = scale.desc;
    desc.shift = shift.desc;
    desc.running_mean = rm.desc;
    desc.running_var = rv.desc;
    desc.saved_mean = mean.desc;
    desc.saved_rstd = rstd.desc;
    desc.grad_y = gy.desc;
    desc.grad_x = gx.desc;
    desc.grad_scale = gscale.desc;
    desc.grad_shift = gshift.desc;
    plan(session, &desc.header, portable, forward);
    const double momentum = 0.25;
    run(session, forward,
        {x.data, scale.data, shift.data, t.training && !update ? nullptr : rm.data,
         t.training && !update ? nullptr : rv.data, y.data, t.training ? mean.data : nullptr,
         t.training ? rstd.data : nullptr},
        update ? std::vector<hal_op_scalar_t>{{momentum, 0, 0}} : std::vector<hal_op_scalar_t>{});
    if (update) {
      std::vector<double> want_rm(t.c), want_rv(t.c);
      for (int64_t c = 0; c < t.c; ++c) {
        want_rm[c] = (1 - momentum) * rmv[c] + momentum * mu[c];
        want_rv[c] = (1 - momentum) * rvv[c] + momentum * var[c] * m / (m - 1);
      }
      expect_close(rm.get(session), want_rm, HAL_DTYPE_F32, m, what + " running_mean");
      expect_close(rv.get(session), want_rv, HAL_DTYPE_F32, m, what + " running_var");
      // The backward reads the statistics the forward saved.
    } else {
      rm.set(session, rmv);
      rv.set(session, rvv);
    }
    if (t.relu) {
      // g = 0 where the forward's y <= 0: the gradients of the reference
      // again, over the y the implementation wrote (an element at 0 either
      // way is not a disagreement of the backward).
      const std::vector<double> got_y = y.get(session);
      std::fill(sum_h.begin(), sum_h.end(), 0.0);
      std::fill(sum_hx.begin(), sum_hx.end(), 0.0);
      std::fill(want_gs.begin(), want_gs.end(), 0.0);
      std::fill(want_gb.begin(), want_gb.end(), 0.0);
      std::vector<double> g(gv.size());
      for (size_t i = 0; i < gv.size(); ++i) {
        const int64_t s = segment_of(t, i), c = channel_of(t, i);
        const double xhat = (xv[i] - mu[s]) * rs[s];
        g[i] = got_y[i] > 0 ? gv[i] : 0.0;
        sum_h[s] += g[i];
        sum_hx[s] += g[i] * xhat;
        want_gs[c] += g[i] * xhat;
        want_gb[c] += g[i];
      }
      for (size_t i = 0; i < gv.size(); ++i) {
        const int64_t s = segment_of(t, i), c = channel_of(t, i);
        const double xhat = (xv[i] - mu[s]) * rs[s];
        want_gx[i] = t.training ? sv[c] * rs[s] * (g[i] - sum_h[s] / m - xhat * sum_hx[s] / m)
                                : g[i] * sv[c] * rs[s];
      }
    }
    desc.header.kind = HAL_OP_BATCH_NORM_BACKWARD;
    desc.flags = HAL_BATCH_NORM_SCALE | HAL_BATCH_NORM_GRAD_SCALE | HAL_BATCH_NORM_GRAD_SHIFT |
                 relu | (t.training ? uint32_t{HAL_BATCH_NORM_TRAINING} : 0u);
    plan(session, &desc.header, portable, backward);
    run(session, backward,
        {x.data, gy.data, scale.data, t.training ? mean.data : nullptr,
         t.training ? rstd.data : nullptr, t.training ? nullptr : rm.data,
         t.training ? nullptr : rv.data, t.relu ? y.data : nullptr, gx.data, gscale.data,
         gshift.data});
  }
  expect_served(forward, portable, onednn_serves);
  expect_served(backward, portable, onednn_serves);
  expect_close(y.get(session), want_y, t.dtype, m, what + " y");
  if (batch_stats) {
    expect_close(mean.get(session), mu, HAL_DTYPE_F32, m, what + " mean");
    expect_close(rstd.get(session), rs, HAL_DTYPE_F32, m, what + " rstd");
  }
  expect_close(gx.get(session), want_gx, t.dtype, 16 + m / 8, what + " grad_x");
  const double per_channel = static_cast<double>(x.count() / t.c);
  expect_close(gscale.get(session), want_gs, HAL_DTYPE_F32, per_channel, what + " grad_scale");
  expect_close(gshift.get(session), want_gb, HAL_DTYPE_F32, per_channel, what + " grad_shift");
}

}  // namespace

TEST_CASE("batch and group norm: the implementations against float64", "[ops][norm][one-thread]") {
  Session session;
  for (bool portable : implementations()) {
    for (hal_channel_layout_t layout : {HAL_CHANNELS_FIRST, HAL_CHANNELS_LAST}) {
      for (hal_dtype_t dtype : {HAL_DTYPE_F32, HAL_DTYPE_BF16}) {
        Norm training;
        training.layout = layout;
        training.dtype = dtype;
        check_norm(session, training, portable, true);
        Norm inference = training;
        inference.training = false;
        check_norm(session, inference, portable, true);
        Norm group = training;  // no oneDNN group norm in 2.6: portable
        group.group = true;
        check_norm(session, group, portable, false);
      }
    }
  }
}

// The shapes around cpu.native's batch norm loops (native_batch_norm.cpp,
// NCHW f32; the kind is named cpu.onednn): planes shorter and longer than
// its 32 lanes with a tail, one value per channel (no running update then),
// many channels, blocks of channels with a short last block, one channel an
// item (large planes), the fused relu both ways; each training and inference,
// beside the portable implementation.
TEST_CASE("batch norm: NCHW f32 shapes of the native loops against float64", "[ops][norm]") {
  Session session;
  for (bool portable : implementations()) {
    Norm odd;
    odd.c = 5;
    odd.h = 7;
    odd.w = 9;
    Norm single;  // N x H x W = 1
    single.n = 1;
    single.c = 6;
    single.h = single.w = 1;
    single.update = false;
    Norm wide;
    wide.n = 2;
    wide.c = 520;
    wide.h = wide.w = 3;
    Norm large;
    large.n = 2;
    large.c = 3;
    large.h = 45;
    large.w = 47;
    Norm runs;  // 323 values a plane: blocks of 6 channels, 13 = 6 + 6 + 1
    runs.n = 2;
    runs.c = 13;
    runs.h = 17;
    runs.w = 19;
    Norm relu;
    relu.n = 2;
    relu.h = 6;
    relu.w = 11;
    relu.relu = true;
    for (Norm norm : {odd, single, wide, large, runs, relu}) {
      check_norm(session, norm, portable, true);
      norm.training = false;
      check_norm(session, norm, portable, true);
    }
  }
}

// ResNet-18's first layers, small (its stem 7x7 convolution from 3 channels,
// a 3x3 one, average pooling, batch norm), each planned on a thread
// that then ends and executed on this one. oneDNN's library-managed
// scratchpad lives in thread-local storage of the thread that created the
// primitive: executed on another thread, a primitive wrote into that
// thread's scratchpad, absent or smaller (a segfault in ResNet-18's first
// convolution through hal_torch with OMP_NUM_THREADS=1, where plans run on
// their caller rather than on the plugin's oneDNN thread). Registered twice:
// a team of one (OMP_NUM_THREADS=1, the case that crashed) and of two.
TEST_CASE("ops planned on one thread and executed on another", "[ops][threads]") {
  Session session;
  g_plan_on_another_thread = true;
  const bool portable = kOpencl;
  for (hal_channel_layout_t layout : {HAL_CHANNELS_FIRST, HAL_CHANNELS_LAST}) {
    Conv stem;
    stem.layout = layout;
    stem.n = 1;
    stem.ci = 3;
    stem.co = 64;
    stem.in = {1, 16, 16};
    stem.k = {1, 7, 7};
    stem.stride = {1, 2, 2};
    stem.dil = {1, 1, 1};
    stem.pb = stem.pe = {0, 3, 3};
    check_conv(session, stem, portable);
    Conv block = stem;
    block.ci = block.co = 32;
    block.in = {1, 6, 6};
    block.k = {1, 3, 3};
    block.stride = {1, 1, 1};
    block.pb = block.pe = {0, 1, 1};
    block.bias = false;
    check_conv(session, block, portable);
    Pool pool;
    pool.layout = layout;
    pool.c = 64;
    pool.h = pool.w = 12;
    check_pool(session, pool, portable, true);
    pool.kind = HAL_POOLING_MAX;  // ResNet-18's max pooling: the plugin's host loops
    check_pool(session, pool, portable, true);
    Norm norm;
    norm.layout = layout;
    norm.c = 64;
    norm.h = norm.w = 8;
    check_norm(session, norm, portable, true);
  }
  g_plan_on_another_thread = false;
}

namespace {

// Plans |desc| expecting HAL_ERROR_INVALID_ARGUMENT with |words| in the message.
void expect_refused(Session& session, const hal_op_header_t* desc, const char* words) {
  hal_op_plan_t plan = nullptr;
  const hal_result_t result = hal_op_plan_create(session.device(), desc, 0, &plan);
  const std::string message = hal_error_last_message();
  if (result == HAL_SUCCESS) hal_op_plan_destroy(plan);
  INFO("rule: " << words << "; message: " << message);
  CHECK(result == HAL_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(message, Catch::Contains(words));
}

hal_tensor_desc_t dense(std::vector<int64_t> shape, hal_dtype_t dtype = HAL_DTYPE_F32) {
  hal_tensor_desc_t tensor;
  hal_tensor_desc_contiguous(&tensor, dtype, static_cast<uint32_t>(shape.size()), shape.data());
  return tensor;
}

}  // namespace

TEST_CASE("the convolutional ops' rules: each refused with its message", "[ops][errors]") {
  Session session;
  hal_op_convolution_desc_t conv{};
  conv.header.struct_size = sizeof conv;
  conv.header.kind = HAL_OP_CONVOLUTION;
  conv.spatial_dims = 2;
  conv.groups = 2;
  conv.stride[0] = conv.stride[1] = 1;
  conv.dilation[0] = conv.dilation[1] = 1;
  conv.x = dense({1, 4, 5, 5});
  conv.w = dense({6, 2, 3, 3});
  conv.y = dense({1, 6, 3, 3});
  hal_op_plan_t ok = nullptr;
  REQUIRE(hal_op_plan_create(session.device(), &conv.header, 0, &ok) == HAL_SUCCESS);
  hal_op_plan_destroy(ok);
  const auto refuse = [&](auto mutate, const char* words) {
    hal_op_convolution_desc_t d = conv;
    mutate(d);
    expect_refused(session, &d.header, words);
  };
  refuse([](auto& d) { d.y = dense({1, 6, 4, 3}); }, "y has extent 4");
  refuse([](auto& d) { d.y = dense({1, 6, 0, 3}); }, "at least 1");
  refuse([](auto& d) { d.groups = 4; }, "must divide the channels");
  refuse([](auto& d) { d.w = dense({6, 4, 3, 3}); }, "filters of 2 channels");
  refuse([](auto& d) { d.pad_begin[0] = -1; }, "desc->pad_begin[0]");
  refuse([](auto& d) { d.stride[1] = 0; }, "desc->stride[1]");
  refuse([](auto& d) { d.dilation[0] = 0; }, "desc->dilation[0]");
  refuse([](auto& d) { d.layout = static_cast<hal_channel_layout_t>(7); }, "desc->layout");
  refuse([](auto& d) { d.spatial_dims = 0; }, "desc->spatial_dims");
  refuse([](auto& d) { d.flags = 1u << 9; }, "desc->flags");
  refuse([](auto& d) { d.w.dtype = HAL_DTYPE_F16; }, "one dtype");
  refuse([](auto& d) { d.x = dense({2, 4, 5, 5}); }, "batch sizes");
  refuse(
      [](auto& d) {
        d.x = dense({1, 4, 1, 5});
        d.y = dense({1, 6, 1, 3});
      },
      "the output size is <= 0");
  refuse(
      [](auto& d) {
        d.flags = HAL_CONV_BIAS;
        d.bias = dense({5});
      },
      "bias");
  refuse(
      [](auto& d) {
        d.flags = HAL_CONV_RESIDUAL;
        d.residual = dense({1, 6, 3, 4});
      },
      "residual");
  refuse(
      [](auto& d) {
        d.header.kind = HAL_OP_CONVOLUTION_BACKWARD_DATA, d.activation = HAL_ACTIVATION_RELU;
      },
      "HAL_ACTIVATION_NONE");

  hal_op_pooling_desc_t pool{};
  pool.header.struct_size = sizeof pool;
  pool.header.kind = HAL_OP_POOLING;
  pool.pooling = HAL_POOLING_MAX;
  pool.spatial_dims = 2;
  pool.flags = HAL_POOLING_INDICES;
  for (int s = 0; s < 2; ++s) {
    pool.kernel[s] = 3;
    pool.stride[s] = 2;
    pool.dilation[s] = 1;
    pool.pad_begin[s] = pool.pad_end[s] = 1;
  }
  pool.x = dense({1, 2, 7, 7});
  pool.y = dense({1, 2, 4, 4});
  pool.indices = dense({1, 2, 4, 4}, HAL_DTYPE_I64);
  REQUIRE(hal_op_plan_create(session.device(), &pool.header, 0, &ok) == HAL_SUCCESS);
  hal_op_plan_destroy(ok);
  const auto refuse_pool = [&](auto mutate, const char* words) {
    hal_op_pooling_desc_t d = pool;
    mutate(d);
    expect_refused(session, &d.header, words);
  };
  refuse_pool([](auto& d) { d.pad_end[1] = 2; }, "past half the window");
  refuse_pool([](auto& d) { d.y = dense({1, 2, 3, 4}); }, "gives 4");
  refuse_pool([](auto& d) { d.indices = dense({1, 2, 4, 4}, HAL_DTYPE_F32); }, "indices");
  refuse_pool([](auto& d) { d.flags = HAL_POOLING_INDICES | HAL_POOLING_COUNT_INCLUDE_PAD; },
              "HAL_POOLING_COUNT_INCLUDE_PAD");
  refuse_pool([](auto& d) { d.header.kind = HAL_OP_POOLING_BACKWARD, d.flags = 0; },
              "reads the forward's indices");
  refuse_pool([](auto& d) { d.pooling = HAL_POOLING_AVERAGE, d.flags = 0, d.dilation[0] = 2; },
              "dilation 1");

  hal_op_batch_norm_desc_t bn{};
  bn.header.struct_size = sizeof bn;
  bn.header.kind = HAL_OP_BATCH_NORM;
  bn.flags = HAL_BATCH_NORM_TRAINING | HAL_BATCH_NORM_UPDATE_RUNNING;
  bn.epsilon = 1e-5f;
  bn.x = bn.y = dense({2, 3, 4});
  bn.running_mean = bn.running_var = dense({3});
  REQUIRE(hal_op_plan_create(session.device(), &bn.header, 0, &ok) == HAL_SUCCESS);
  hal_op_plan_destroy(ok);
  const auto refuse_bn = [&](auto mutate, const char* words) {
    hal_op_batch_norm_desc_t d = bn;
    mutate(d);
    expect_refused(session, &d.header, words);
  };
  refuse_bn([](auto& d) { d.running_var = dense({4}); }, "running_var");
  refuse_bn([](auto& d) { d.x = d.y = dense({1, 3}); }, "unbiased");
  refuse_bn([](auto& d) { d.flags = HAL_BATCH_NORM_UPDATE_RUNNING; },
            "need HAL_BATCH_NORM_TRAINING");
  refuse_bn([](auto& d) { d.epsilon = NAN; }, "desc->epsilon");
  refuse_bn(
      [](auto& d) {
        d.flags |= HAL_BATCH_NORM_SAVE_STATS;
        d.saved_mean = dense({3}, HAL_DTYPE_BF16);
        d.saved_rstd = dense({3});
      },
      "saved_mean has dtype bf16");

  hal_op_group_norm_desc_t gn{};
  gn.header.struct_size = sizeof gn;
  gn.header.kind = HAL_OP_GROUP_NORM;
  gn.groups = 2;
  gn.epsilon = 1e-5f;
  gn.x = gn.y = dense({2, 4, 5});
  REQUIRE(hal_op_plan_create(session.device(), &gn.header, 0, &ok) == HAL_SUCCESS);
  hal_op_plan_destroy(ok);
  hal_op_group_norm_desc_t bad = gn;
  bad.groups = 3;
  expect_refused(session, &bad.header, "desc->groups 3");
  bad = gn;
  bad.flags = HAL_GROUP_NORM_SAVE_STATS;
  bad.mean = bad.rstd = dense({2, 3});
  expect_refused(session, &bad.header, "one value per sample and group");
}

TEST_CASE("cpu.onednn's declines carry their reasons", "[ops][declines]") {
  if (kOpencl) return;  // the opencl plugin has no operators of its own
  Session session;
  const auto declines_of = [&](const hal_op_header_t* desc) {
    Planned planned;
    plan(session, desc, false, planned);
    CHECK(planned.implementation == "portable");
    return planned.declines;
  };
  hal_op_pooling_desc_t pool{};
  pool.header.struct_size = sizeof pool;
  pool.header.kind = HAL_OP_POOLING;
  pool.pooling = HAL_POOLING_MAX;
  pool.spatial_dims = 2;
  for (int s = 0; s < 2; ++s) {
    pool.kernel[s] = pool.stride[s] = 2;
    pool.dilation[s] = 1;
  }
  pool.x = dense({1, 2, 6, 6}, HAL_DTYPE_BF16);
  pool.y = dense({1, 2, 3, 3}, HAL_DTYPE_BF16);
  CHECK_THAT(declines_of(&pool.header), Catch::Contains("the cpu plugin's loops take f32 only"));
  pool.x = dense({1, 2, 6, 6});
  pool.y = dense({1, 2, 3, 3});
  pool.pooling = HAL_POOLING_AVERAGE;
  pool.divisor_override = 3;
  CHECK_THAT(declines_of(&pool.header), Catch::Contains("divisor_override"));
  pool.divisor_override = 0;
  pool.flags = HAL_POOLING_ADAPTIVE;
  pool.y = dense({1, 2, 4, 4});  // 6 over 4: uneven windows
  CHECK_THAT(declines_of(&pool.header), Catch::Contains("uneven"));
  pool.flags = HAL_POOLING_CEIL_MODE | HAL_POOLING_COUNT_INCLUDE_PAD;
  for (int s = 0; s < 2; ++s) {
    pool.kernel[s] = 3;
    pool.pad_begin[s] = pool.pad_end[s] = 1;
  }
  pool.x = dense({1, 2, 6, 6});
  pool.y = dense({1, 2, 4, 4});
  CHECK_THAT(declines_of(&pool.header), Catch::Contains("overhang"));

  hal_op_group_norm_desc_t gn{};
  gn.header.struct_size = sizeof gn;
  gn.header.kind = HAL_OP_GROUP_NORM;
  gn.groups = 2;
  gn.epsilon = 1e-5f;
  gn.x = gn.y = dense({2, 4, 5});
  // Named before planning (op_implementation): oneDNN 2.6 has no group norm.
  CHECK_THAT(declines_of(&gn.header),
             Catch::Contains("no implementation of its own for group_norm"));

  hal_op_batch_norm_desc_t bn{};
  bn.header.struct_size = sizeof bn;
  bn.header.kind = HAL_OP_BATCH_NORM_BACKWARD;
  bn.flags = HAL_BATCH_NORM_TRAINING | HAL_BATCH_NORM_RELU;
  // bf16: the native loops (NCHW f32, which serve the fused relu's backward
  // too) decline first, then oneDNN's primitive.
  bn.x = bn.y = bn.grad_y = bn.grad_x = dense({2, 3, 4}, HAL_DTYPE_BF16);
  bn.saved_mean = bn.saved_rstd = dense({3});
  CHECK_THAT(declines_of(&bn.header), Catch::Contains("fused relu"));
  bn.header.kind = HAL_OP_BATCH_NORM;  // an empty batch: declined by both, for the portable one
  bn.flags = HAL_BATCH_NORM_SCALE;
  bn.epsilon = 1e-5f;
  bn.x = bn.y = dense({0, 3, 4});
  bn.scale = bn.running_mean = bn.running_var = dense({3});
  CHECK_THAT(declines_of(&bn.header), Catch::Contains("empty tensor"));

  hal_op_convolution_desc_t conv{};
  conv.header.struct_size = sizeof conv;
  conv.header.kind = HAL_OP_CONVOLUTION;
  conv.spatial_dims = 1;
  conv.groups = 1;
  conv.stride[0] = conv.dilation[0] = 1;
  conv.x = dense({0, 2, 5});
  conv.w = dense({3, 2, 3});
  conv.y = dense({0, 3, 3});
  CHECK_THAT(declines_of(&conv.header), Catch::Contains("empty batch"));
}
