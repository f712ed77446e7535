// The cuda plugin's convolution on cuDNN through the public API, over the
// stand-in driver (fake_driver/, host memory) and the stand-in cuDNN
// (fake_cudnn/, which models cuDNN 9's graph API and really convolves on the
// tensors, strides, padding, dilation and groups it is given). Results are
// compared with float64 references written here from the definition in
// api/hal/ops.h, on seeded random inputs, for the three kinds, both layouts,
// f32/f16/bf16, grouped, depthwise, transposed, 1-D, 2-D and 3-D cases; the
// graph the plugin handed cuDNN is checked from the stand-in's record (the
// operation, the tensors' dimensions and strides, the padding on each side,
// the engine); the engine filter (no TF32 on f32, no nondeterministic engine
// under HAL_OP_PLAN_DETERMINISTIC), the alignment variants and the
// workspace; declines fall through to the portable implementation with their
// reasons; cuDNN's failures reach the caller with their status; nothing leaks.
#include <catch2/catch.hpp>

#include <dlfcn.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "../ops/conv_cases.hpp"
#include "../ops/float64_tensor.hpp"
#include "../ops/op_session.hpp"
#include "fake_cudnn_support.hpp"
#include "hal.h"

namespace {

// cuDNN's values (cudnn_graph.h), written out: the test is independent of the headers.
constexpr int32_t kForward = 10, kBackwardFilter = 11, kBackwardData = 12;  // descriptor types
constexpr int32_t kCrossCorrelation = 1;  // CUDNN_CROSS_CORRELATION
constexpr int32_t kDataFloat = 0, kDataHalf = 2, kDataBfloat16 = 9;

using namespace fake_cudnn_test;
using namespace op_test;

// ---- convolution ----------------------------------------------------------

// How a case is planned and laid out, and the engine the stand-in must have run.
struct Expect {
  hal_op_plan_flags_t flags = HAL_OP_PLAN_FLAG_NONE;
  size_t shift = 0;     // bytes every operand starts into its allocation
  int64_t engine = -1;  // the engine cuDNN ran (-1: TF32 excluded only)
};

// The stand-in's record of the last execution against the case: the
// operation, cuDNN's dimension order (N, C, spatial), the filter's, the
// geometry (1-D lifted to 2-D), channels-last strides (C innermost).
void check_record(const FakeDnn& fake, const Conv& t, hal_op_kind_t kind, const Expect& expect) {
  const fake_cudnn_execution_t e = fake.last_call();
  // The transposed convolution exchanges forward and backward data.
  const int32_t operation = kind == HAL_OP_CONVOLUTION_BACKWARD_WEIGHTS    ? kBackwardFilter
                            : (kind == HAL_OP_CONVOLUTION) != t.transposed ? kForward
                                                                           : kBackwardData;
  CHECK(e.operation == operation);
  CHECK(e.mode == kCrossCorrelation);
  CHECK(e.compute_type == kDataFloat);
  CHECK(e.engine != FAKE_CUDNN_ENGINE_TF32);
  if (expect.engine >= 0) CHECK(e.engine == expect.engine);
  const int32_t type = t.dtype == HAL_DTYPE_F32   ? kDataFloat
                       : t.dtype == HAL_DTYPE_F16 ? kDataHalf
                                                  : kDataBfloat16;
  CHECK(e.x.type == type);
  const int lifted = t.spatial == 1 ? 1 : 0;
  CHECK(e.spatial_dims == static_cast<int64_t>(t.spatial) + lifted);
  for (uint32_t s = 0; s < t.spatial; ++s) {
    const uint32_t c = 3 - t.spatial + s;
    CHECK(e.stride[s + lifted] == t.stride[c]);
    CHECK(e.dilation[s + lifted] == t.dil[c]);
    CHECK(e.pre_padding[s + lifted] == t.pb[c]);
    CHECK(e.post_padding[s + lifted] == t.pe[c]);
  }
  // x is the convolution's input side: [N, C_in, i...]; w [C_out, C_in/g, k...].
  CHECK(e.x.dims[0] == t.n);
  CHECK(e.x.dims[1] == t.ci);
  CHECK(e.w.dims[0] == t.co);
  CHECK(e.w.dims[1] == t.ci / t.groups);
  CHECK(e.y.dims[1] == t.co);
  const int rank = e.x.rank;
  CHECK(rank == static_cast<int>(t.spatial) + 2 + lifted);
  for (uint32_t s = 0; s < t.spatial; ++s) {
    const uint32_t c = 3 - t.spatial + s;
    CHECK(e.x.dims[2 + lifted + s] == t.in[c]);
    CHECK(e.w.dims[2 + lifted + s] == t.k[c]);
    CHECK(e.y.dims[2 + lifted + s] == t.out()[c]);
  }
  if (t.layout == HAL_CHANNELS_LAST) {
    CHECK(e.x.strides[1] == 1);
    CHECK(e.w.strides[1] == 1);
    CHECK(e.y.strides[1] == 1);
  } else {
    CHECK(e.x.strides[rank - 1] == 1);
    CHECK(e.x.strides[1] == e.x.strides[rank - 1] * t.in[2] * t.in[1] * t.in[0]);
  }
  const int64_t alignment = expect.shift == 0 ? 16 : static_cast<int64_t>(dtype_size(t.dtype));
  CHECK(e.x.alignment == alignment);
}

// Forward, backward data and backward weights of |t|, checked against float64.
void check_conv(Session& session, const Conv& t, const Expect& expect = {}) {
  FakeDnn fake;
  std::mt19937 random(7);
  const auto o = t.out();
  const std::vector<int64_t> in_shape = shape_of(t, t.n, t.ci, t.in);
  const std::vector<int64_t> out_shape = shape_of(t, t.n, t.co, o);
  const std::vector<int64_t> w_shape = shape_of(t, t.co, t.ci / t.groups, t.k);
  const auto& x_shape = t.transposed ? out_shape : in_shape;
  const auto& y_shape = t.transposed ? in_shape : out_shape;
  const int64_t y_channels = t.transposed ? t.ci : t.co;
  const size_t shift = expect.shift;
  Tensor x(session, t.dtype, x_shape, shift), w(session, t.dtype, w_shape, shift);
  Tensor y(session, t.dtype, y_shape, shift), bias(session, HAL_DTYPE_F32, {y_channels});
  const auto xv = random_values(random, x.count(), t.dtype);
  const auto wv = random_values(random, w.count(), t.dtype);
  const auto bv = random_values(random, bias.count(), HAL_DTYPE_F32);
  const auto gv = random_values(random, y.count(), t.dtype);
  x.set(session, xv);
  w.set(session, wv);
  bias.set(session, bv);
  const std::string what =
      std::string(t.layout == HAL_CHANNELS_LAST ? "channels-last" : "channels-first") +
      (t.transposed ? " transposed" : "") + " " + std::to_string(t.spatial) + "-D groups " +
      std::to_string(t.groups) + " dtype " + std::to_string(t.dtype);
  INFO(what);
  const double reduction = static_cast<double>(t.ci / t.groups * t.k[0] * t.k[1] * t.k[2]);
  auto served = [&](const Planned& planned, hal_op_kind_t kind) {
    INFO("declines: " << planned.declines);
    REQUIRE(planned.implementation == "cuda.cudnn");
    check_record(fake, t, kind, expect);
  };
  // Forward.
  {
    const hal_op_convolution_desc_t desc = conv_desc(t, HAL_OP_CONVOLUTION, x, w, y, bias);
    Planned planned;
    plan_with_flags(session, &desc.header, expect.flags, planned);
    // The larger of the two alignment variants' workspaces.
    CHECK(planned.workspace == FAKE_CUDNN_VECTOR_WORKSPACE);
    run(session, planned, {x.data, w.data, t.bias ? bias.data : nullptr, nullptr, y.data});
    served(planned, HAL_OP_CONVOLUTION);
    expect_close(y.get(session), forward_reference(t, xv, wv, bv, y.count()), t.dtype, reduction,
                 what + " forward");
  }
  // Backward data: grad_y (gv, y's layout) to grad_x (x's).
  {
    Tensor gy(session, t.dtype, y_shape, shift), gx(session, t.dtype, x_shape, shift);
    gy.set(session, gv);
    const hal_op_convolution_desc_t desc =
        conv_desc(t, HAL_OP_CONVOLUTION_BACKWARD_DATA, gx, w, gy, bias);
    Planned planned;
    plan_with_flags(session, &desc.header, expect.flags, planned);
    run(session, planned, {gy.data, w.data, gx.data});
    served(planned, HAL_OP_CONVOLUTION_BACKWARD_DATA);
    expect_close(gx.get(session), backward_data_reference(t, gv, wv, gx.count()), t.dtype,
                 reduction, what + " backward data");
  }
  // Backward weights (and bias, where the case has one: portable).
  {
    Tensor gy(session, t.dtype, y_shape, shift), gw(session, t.dtype, w_shape, shift);
    Tensor gb(session, HAL_DTYPE_F32, {y_channels});
    gy.set(session, gv);
    const hal_op_convolution_desc_t desc =
        conv_desc(t, HAL_OP_CONVOLUTION_BACKWARD_WEIGHTS, x, gw, gy, gb);
    Planned planned;
    plan_with_flags(session, &desc.header, expect.flags, planned);
    run(session, planned, {x.data, gy.data, gw.data, t.bias ? gb.data : nullptr});
    served(planned, HAL_OP_CONVOLUTION_BACKWARD_WEIGHTS);
    const double positions = static_cast<double>(gy.count() / y_channels);
    expect_close(gw.get(session), backward_weights_reference(t, xv, gv, gw.count()), t.dtype,
                 positions, what + " backward weights");
  }
}

// A case cuDNN serves: no epilogue.
Conv plain() {
  Conv t;
  t.bias = false;
  t.act = HAL_ACTIVATION_NONE;
  return t;
}

}  // namespace

TEST_CASE("convolution on cuDNN against float64", "[cudnn]") {
  Session session;
  Conv nchw = plain();  // strided, asymmetric padding, dilation with stride
  check_conv(session, nchw);
  Conv nhwc = plain();  // channels-last bf16, grouped
  nhwc.layout = HAL_CHANNELS_LAST;
  nhwc.dtype = HAL_DTYPE_BF16;
  nhwc.groups = 2;
  check_conv(session, nhwc);
  Conv depthwise = plain();  // f16 depthwise
  depthwise.layout = HAL_CHANNELS_LAST;
  depthwise.dtype = HAL_DTYPE_F16;
  depthwise.ci = depthwise.co = depthwise.groups = 4;
  check_conv(session, depthwise);
  Conv transposed = plain();  // output padding 1 (y one larger than the smallest)
  transposed.transposed = true;
  transposed.in = {1, 8, 9};
  transposed.stride = {1, 2, 2};
  transposed.dil = {1, 1, 1};
  transposed.pb = {0, 1, 1};
  transposed.pe = {0, 1, 1};
  transposed.groups = 2;
  check_conv(session, transposed);
  Conv three = plain();  // 3-D
  three.spatial = 3;
  three.in = {4, 5, 6};
  three.k = {2, 3, 2};
  three.stride = {2, 1, 2};
  three.pb = {1, 0, 1};
  three.pe = {0, 1, 0};
  three.dil = {1, 1, 1};
  check_conv(session, three);
  Conv one = plain();  // 1-D, channels-last
  one.spatial = 1;
  one.layout = HAL_CHANNELS_LAST;
  one.in = {1, 1, 13};
  one.k = {1, 1, 4};
  one.stride = {1, 1, 3};
  one.pb = {0, 0, 2};
  one.pe = {0, 0, 1};
  one.dil = {1, 1, 1};
  check_conv(session, one);
}

TEST_CASE("cuDNN's engines: no TF32 on f32, determinism, alignment, workspace", "[cudnn]") {
  Session session;
  const Conv t = plain();
  SECTION("16-byte aligned operands run the vectorised engine, with its workspace") {
    Expect expect;
    expect.engine = FAKE_CUDNN_ENGINE_VECTOR;
    check_conv(session, t, expect);
  }
  SECTION("HAL_OP_PLAN_DETERMINISTIC: backward filter on the deterministic engine") {
    // The forward and backward data have no nondeterministic engine here.
    Conv f16 = t;
    f16.dtype = HAL_DTYPE_F16;
    Expect expect;
    expect.flags = HAL_OP_PLAN_DETERMINISTIC;
    FakeDnn fake;
    std::mt19937 random(3);
    Tensor x(session, f16.dtype, shape_of(f16, f16.n, f16.ci, f16.in));
    Tensor gy(session, f16.dtype, shape_of(f16, f16.n, f16.co, f16.out()));
    Tensor gw(session, f16.dtype, shape_of(f16, f16.co, f16.ci, f16.k));
    x.set(session, random_values(random, x.count(), f16.dtype));
    gy.set(session, random_values(random, gy.count(), f16.dtype));
    const hal_op_convolution_desc_t desc =
        conv_desc(f16, HAL_OP_CONVOLUTION_BACKWARD_WEIGHTS, x, gw, gy, Tensor());
    for (hal_op_plan_flags_t flags : {HAL_OP_PLAN_FLAG_NONE, HAL_OP_PLAN_DETERMINISTIC}) {
      Planned planned;
      plan_with_flags(session, &desc.header, flags, planned);
      REQUIRE(planned.implementation == "cuda.cudnn");
      run(session, planned, {x.data, gy.data, gw.data, nullptr});
      CHECK(fake.last_call().engine == (flags == HAL_OP_PLAN_DETERMINISTIC
                                            ? FAKE_CUDNN_ENGINE_GENERIC
                                            : FAKE_CUDNN_ENGINE_VECTOR));
    }
    check_conv(session, f16, expect);  // and the numbers, deterministic
  }
  SECTION("operands aligned only to their element run the element-aligned plan") {
    Expect expect;
    expect.shift = 4;
    expect.engine = FAKE_CUDNN_ENGINE_GENERIC;
    check_conv(session, t, expect);
  }
}

TEST_CASE("convolution cases cuDNN does not serve fall through to the portable implementation",
          "[cudnn]") {
  Session session;
  Conv fused;  // bias and relu: not fused through cuDNN
  Tensor x(session, fused.dtype, shape_of(fused, fused.n, fused.ci, fused.in));
  Tensor w(session, fused.dtype, shape_of(fused, fused.co, fused.ci, fused.k));
  Tensor y(session, fused.dtype, shape_of(fused, fused.n, fused.co, fused.out()));
  Tensor y32(session, HAL_DTYPE_F32, shape_of(fused, fused.n, fused.co, fused.out()));
  Tensor bias(session, HAL_DTYPE_F32, {fused.co});
  {
    const hal_op_convolution_desc_t desc = conv_desc(fused, HAL_OP_CONVOLUTION, x, w, y, bias);
    Planned planned;
    plan_with_flags(session, &desc.header, HAL_OP_PLAN_FLAG_NONE, planned);
    CHECK(planned.implementation == "portable");
    CHECK(planned.declines.find(
              "cuda.cudnn: cuDNN: the bias epilogue is not fused through cuDNN here") !=
          std::string::npos);
  }
  {
    Conv relu = plain();
    relu.act = HAL_ACTIVATION_RELU;
    const hal_op_convolution_desc_t desc = conv_desc(relu, HAL_OP_CONVOLUTION, x, w, y, bias);
    Planned planned;
    plan_with_flags(session, &desc.header, HAL_OP_PLAN_FLAG_NONE, planned);
    CHECK(planned.implementation == "portable");
    CHECK(planned.declines.find("the activation epilogue is not fused") != std::string::npos);
  }
  {
    // bf16 inputs, an f32 output: cuDNN's convolution writes its inputs' type.
    Conv mixed = plain();
    mixed.dtype = HAL_DTYPE_BF16;
    Tensor xb(session, HAL_DTYPE_BF16, shape_of(mixed, mixed.n, mixed.ci, mixed.in));
    Tensor wb(session, HAL_DTYPE_BF16, shape_of(mixed, mixed.co, mixed.ci, mixed.k));
    const hal_op_convolution_desc_t desc = conv_desc(mixed, HAL_OP_CONVOLUTION, xb, wb, y32, bias);
    Planned planned;
    plan_with_flags(session, &desc.header, HAL_OP_PLAN_FLAG_NONE, planned);
    CHECK(planned.implementation == "portable");
    CHECK(planned.declines.find("cuDNN's convolution reads and writes one type") !=
          std::string::npos);
  }
  // (The portable kernels plan on the stand-in driver but run nothing there:
  // their numbers are conv_ops_test's and a GPU's.)
}

TEST_CASE("without cuDNN, convolution is declined with the reason", "[cudnn]") {
  setenv("HAL_CUDA_CUDNN_PATH", "/nonexistent/libcudnn.so.9", 1);
  {
    Session session;
    const Conv t = plain();
    Tensor x(session, t.dtype, shape_of(t, t.n, t.ci, t.in));
    Tensor w(session, t.dtype, shape_of(t, t.co, t.ci, t.k));
    Tensor y(session, t.dtype, shape_of(t, t.n, t.co, t.out()));
    const hal_op_convolution_desc_t desc = conv_desc(t, HAL_OP_CONVOLUTION, x, w, y, Tensor());
    Planned planned;
    plan_with_flags(session, &desc.header, HAL_OP_PLAN_FLAG_NONE, planned);
    CHECK(planned.implementation == "portable");
    INFO(planned.declines);
    CHECK(planned.declines.find("cuda.cudnn: cuDNN: /nonexistent/libcudnn.so.9") !=
          std::string::npos);
  }
  setenv("HAL_CUDA_CUDNN_PATH", HAL_TEST_FAKE_CUDNN, 1);
}

TEST_CASE("cuDNN's failures reach the caller with their status, and nothing leaks", "[cudnn]") {
  FakeDnn fake;
  {
    Session session;
    const Conv t = plain();
    Tensor x(session, t.dtype, shape_of(t, t.n, t.ci, t.in));
    Tensor w(session, t.dtype, shape_of(t, t.co, t.ci, t.k));
    Tensor y(session, t.dtype, shape_of(t, t.n, t.co, t.out()));
    const hal_op_convolution_desc_t desc = conv_desc(t, HAL_OP_CONVOLUTION, x, w, y, Tensor());
    // Every execution plan refused: declined with cuDNN's status.
    fake.fail_next("finalize_plan", kStatusNotSupported, 100);
    {
      Planned planned;
      plan_with_flags(session, &desc.header, HAL_OP_PLAN_FLAG_NONE, planned);
      CHECK(planned.implementation == "portable");
      INFO(planned.declines);
      CHECK(planned.declines.find(
                "cudnnBackendFinalize(EXECUTION_PLAN) failed: CUDNN_STATUS_NOT_SUPPORTED (3000)") !=
            std::string::npos);
    }
    fake.fail_next("finalize_plan", 0, 0);
    // An execution cuDNN refuses: the caller gets the mapped result and the status.
    Planned planned;
    plan_with_flags(session, &desc.header, HAL_OP_PLAN_FLAG_NONE, planned);
    REQUIRE(planned.implementation == "cuda.cudnn");
    void* workspace = session.alloc_bytes(planned.workspace);
    std::vector<void*> operands{x.data, w.data, nullptr, nullptr, y.data};
    hal_op_exec_args_t args{};
    args.struct_size = sizeof args;
    args.operand_count = static_cast<uint32_t>(operands.size());
    args.operands = operands.data();
    args.workspace = workspace;
    args.workspace_bytes = planned.workspace;
    fake.fail_next("execute", kStatusBadParam, 1);
    CHECK(hal_op_execute(planned.plan, &args, session.stream()) == HAL_ERROR_INVALID_ARGUMENT);
    CHECK(std::string(hal_error_last_message())
              .find("cudnnBackendExecute failed: CUDNN_STATUS_BAD_PARAM (2000)") !=
          std::string::npos);
    // And the next one runs.
    CHECK(hal_op_execute(planned.plan, &args, session.stream()) == HAL_SUCCESS);
    CHECK(hal_stream_synchronize(session.stream()) == HAL_SUCCESS);
  }
  // Every descriptor and the handle destroyed with the plans and the device.
  const fake_cudnn_stats_t after = fake.now();
  CHECK(after.live_descriptors == 0);
  CHECK(after.live_handles == 0);
}

TEST_CASE("plans and executions on two threads share the device's handle safely",
          "[cudnn][threads]") {
  Session session;
  const Conv t = plain();
  std::mt19937 random(11);
  Tensor x(session, t.dtype, shape_of(t, t.n, t.ci, t.in));
  Tensor w(session, t.dtype, shape_of(t, t.co, t.ci, t.k));
  const auto xv = random_values(random, x.count(), t.dtype);
  const auto wv = random_values(random, w.count(), t.dtype);
  x.set(session, xv);
  w.set(session, wv);
  std::vector<double> want(static_cast<size_t>(t.n * t.co * t.out()[1] * t.out()[2]), 0.0);
  taps(t, [&](int64_t i, int64_t out, int64_t f) { want[out] += xv[i] * wv[f]; });
  // Each thread: its own stream and output, a plan of its own and the shared one.
  Tensor y0(session, t.dtype, shape_of(t, t.n, t.co, t.out()));
  const hal_op_convolution_desc_t shared_desc =
      conv_desc(t, HAL_OP_CONVOLUTION, x, w, y0, Tensor());
  Planned shared;
  plan_with_flags(session, &shared_desc.header, HAL_OP_PLAN_FLAG_NONE, shared);
  REQUIRE(shared.implementation == "cuda.cudnn");
  constexpr int kThreads = 2, kRounds = 4;
  std::vector<Tensor> outputs;
  std::vector<void*> workspaces;
  for (int i = 0; i < kThreads; ++i) {
    outputs.emplace_back(session, t.dtype, shape_of(t, t.n, t.co, t.out()));
    workspaces.push_back(session.alloc_bytes(shared.workspace));
  }
  std::vector<int> failures(kThreads, 0);
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      hal_stream_t stream = nullptr;
      if (hal_stream_create(session.device(), 0, &stream) != HAL_SUCCESS) {
        ++failures[i];
        return;
      }
      const hal_op_convolution_desc_t desc =
          conv_desc(t, HAL_OP_CONVOLUTION, x, w, outputs[i], Tensor());
      for (int round = 0; round < kRounds; ++round) {
        hal_op_plan_t own = nullptr;
        if (hal_op_plan_create(session.device(), &desc.header, 0, &own) != HAL_SUCCESS) {
          ++failures[i];
          continue;
        }
        std::vector<void*> operands{x.data, w.data, nullptr, nullptr, outputs[i].data};
        hal_op_exec_args_t args{};
        args.struct_size = sizeof args;
        args.operand_count = static_cast<uint32_t>(operands.size());
        args.operands = operands.data();
        args.workspace = workspaces[i];
        args.workspace_bytes = shared.workspace;
        for (hal_op_plan_t p : {own, shared.plan}) {
          if (hal_op_execute(p, &args, stream) != HAL_SUCCESS) ++failures[i];
        }
        if (hal_stream_synchronize(stream) != HAL_SUCCESS) ++failures[i];
        hal_op_plan_destroy(own);
      }
      hal_stream_destroy(stream);
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int i = 0; i < kThreads; ++i) {
    CHECK(failures[i] == 0);
    expect_close(outputs[i].get(session), want, t.dtype, 36, "thread " + std::to_string(i));
  }
}
