// The cuda plugin's pooling and batch norm on cuDNN through the public API,
// over the stand-in driver (host memory) and the stand-in cuDNN
// (fake_cudnn/, which models the graph API's resample and norm operations
// and computes them in double on the tensors, windows and strides it is
// given). Results are compared with float64 references written here from
// SPEC §17.6.9 and §17.6.10 (HAL's definitions, not cuDNN's), on seeded
// random inputs: average pooling with and without padding in the divisor,
// ceil mode, adaptive windows, max pooling with a NaN, both layouts, 1-D to
// 3-D, forward and backward; batch norm training with the running statistics
// and saved statistics (given or in the workspace; per-channel tensors
// contiguous or strided), its backward. The graph
// handed to cuDNN is checked from the stand-in's record; each case cuDNN
// cannot serve is declined with its reason to the portable implementation;
// bad input is refused with a specific error and writes nothing.
#include <catch2/catch.hpp>

#include <dlfcn.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "../ops/float64_tensor.hpp"
#include "../ops/op_session.hpp"
#include "fake_cudnn_support.hpp"
#include "hal.h"

namespace {

// cuDNN's values (cudnn_graph.h), written out: the test is independent of the headers.
constexpr int32_t kResampleForward = 25, kResampleBackward = 26;  // descriptor types
constexpr int32_t kNormForward = 29, kNormBackward = 30;
constexpr int32_t kAvgIncludePadding = 2, kMaxPool = 3, kAvgExcludePadding = 4;
constexpr int32_t kZeroPad = 0, kNegInfPad = 1;
constexpr int32_t kBatchNorm = 2, kTraining = 1;

using namespace fake_cudnn_test;
using namespace op_test;

// ---- pooling ------------------------------------------------------------------

// A pooling case: sizes outer first (D, H, W); the first 3 - spatial unused.
struct Pool {
  hal_pooling_kind_t pooling = HAL_POOLING_AVERAGE;
  hal_channel_layout_t layout = HAL_CHANNELS_FIRST;
  hal_dtype_t dtype = HAL_DTYPE_F32;
  uint32_t spatial = 2, flags = 0;
  int64_t n = 2, c = 3;
  std::array<int64_t, 3> in{1, 7, 8}, k{1, 3, 3}, s{1, 2, 2}, pb{1, 1, 1}, pe{1, 1, 0};
  std::array<int64_t, 3> d{1, 1, 1};
  std::array<int64_t, 3> adaptive_out{1, 1, 1};
  int64_t divisor_override = 0;

  bool adaptive() const { return (flags & HAL_POOLING_ADAPTIVE) != 0; }
  // SPEC §17.6.9's output extents.
  std::array<int64_t, 3> out() const {
    std::array<int64_t, 3> o{1, 1, 1};
    for (uint32_t j = 3 - spatial; j < 3; ++j) {
      if (adaptive()) {
        o[j] = adaptive_out[j];
        continue;
      }
      const int64_t eff = d[j] * (k[j] - 1) + 1;
      const int64_t span = in[j] + pb[j] + pe[j] - eff;
      if ((flags & HAL_POOLING_CEIL_MODE) == 0) {
        o[j] = span / s[j] + 1;
      } else {
        o[j] = (span + s[j] - 1) / s[j] + 1;
        if ((o[j] - 1) * s[j] >= in[j] + pb[j]) --o[j];
      }
    }
    return o;
  }
  std::vector<int64_t> shape(const std::array<int64_t, 3>& extents) const {
    std::vector<int64_t> out{n};
    if (layout == HAL_CHANNELS_FIRST) out.push_back(c);
    for (uint32_t j = 3 - spatial; j < 3; ++j) out.push_back(extents[j]);
    if (layout == HAL_CHANNELS_LAST) out.push_back(c);
    return out;
  }
  // The flat index (in |extents|' tensor, this layout) of (n, c, position).
  int64_t at(const std::array<int64_t, 3>& extents, int64_t b, int64_t ch,
             const std::array<int64_t, 3>& p) const {
    int64_t plane = 0, size = 1;
    for (uint32_t j = 3 - spatial; j < 3; ++j) {
      plane = plane * extents[j] + p[j];
      size *= extents[j];
    }
    return layout == HAL_CHANNELS_FIRST ? (b * c + ch) * size + plane : (b * size + plane) * c + ch;
  }
};

hal_op_pooling_desc_t pool_desc(const Pool& t, hal_op_kind_t kind, const Tensor& x,
                                const Tensor& y) {
  hal_op_pooling_desc_t desc{};
  desc.header.struct_size = sizeof desc;
  desc.header.kind = kind;
  desc.pooling = t.pooling;
  desc.layout = t.layout;
  desc.spatial_dims = t.spatial;
  desc.flags = t.flags;
  desc.divisor_override = t.divisor_override;
  for (uint32_t j = 0; j < t.spatial; ++j) {
    const uint32_t from = 3 - t.spatial + j;
    desc.kernel[j] = t.k[from];
    desc.stride[j] = t.s[from];
    desc.dilation[j] = t.d[from];
    desc.pad_begin[j] = t.pb[from];
    desc.pad_end[j] = t.pe[from];
  }
  desc.x = x.desc;
  desc.y = y.desc;
  return desc;
}

// Each output window's positions inside x (flat, x's layout) and its
// divisor, from SPEC §17.6.9.
struct WindowSet {
  std::vector<std::vector<int64_t>> inside;
  std::vector<double> divisor;
};

WindowSet windows(const Pool& t) {
  const auto o = t.out();
  WindowSet w;
  w.inside.resize(static_cast<size_t>(t.n * t.c * o[0] * o[1] * o[2]));
  w.divisor.resize(w.inside.size());
  for (int64_t b = 0; b < t.n; ++b) {
    for (int64_t ch = 0; ch < t.c; ++ch) {
      for (int64_t o0 = 0; o0 < o[0]; ++o0) {
        for (int64_t o1 = 0; o1 < o[1]; ++o1) {
          for (int64_t o2 = 0; o2 < o[2]; ++o2) {
            const std::array<int64_t, 3> op{o0, o1, o2};
            // Per dimension: the window's positions, and how many the
            // divisor counts with COUNT_INCLUDE_PAD.
            std::array<std::vector<int64_t>, 3> positions;
            double padded = 1;
            for (int j = 0; j < 3; ++j) {
              if (j < 3 - static_cast<int>(t.spatial)) {  // an unused dimension: extent 1
                positions[j].push_back(0);
                continue;
              }
              if (t.adaptive()) {
                const int64_t lo = op[j] * t.in[j] / o[j];
                const int64_t hi = ((op[j] + 1) * t.in[j] + o[j] - 1) / o[j];
                for (int64_t p = lo; p < hi; ++p) positions[j].push_back(p);
                continue;
              }
              int64_t counted = 0;
              for (int64_t tap = 0; tap < t.k[j]; ++tap) {
                const int64_t p = op[j] * t.s[j] - t.pb[j] + tap * t.d[j];
                if (p >= -t.pb[j] && p < t.in[j] + t.pe[j]) ++counted;
                if (p >= 0 && p < t.in[j]) positions[j].push_back(p);
              }
              padded *= static_cast<double>(counted);
            }
            const auto index = static_cast<size_t>(t.at(o, b, ch, op));
            for (int64_t p0 : positions[0]) {
              for (int64_t p1 : positions[1]) {
                for (int64_t p2 : positions[2]) {
                  w.inside[index].push_back(t.at(t.in, b, ch, {p0, p1, p2}));
                }
              }
            }
            REQUIRE(!w.inside[index].empty());  // SPEC's padding rule: no window is empty
            w.divisor[index] = t.divisor_override > 0 ? static_cast<double>(t.divisor_override)
                               : (t.flags & HAL_POOLING_COUNT_INCLUDE_PAD) != 0
                                   ? padded
                                   : static_cast<double>(w.inside[index].size());
          }
        }
      }
    }
  }
  return w;
}

// The forward and (average) backward of |t| on cuDNN, against float64.
void check_pool(Session& session, const Pool& t, int32_t mode, bool nan = false) {
  FakeDnn fake;
  std::mt19937 random(5);
  const auto o = t.out();
  Tensor x(session, t.dtype, t.shape(t.in)), y(session, t.dtype, t.shape(o));
  std::vector<double> xv = random_values(random, x.count(), t.dtype);
  if (nan) xv[5] = NAN;  // one window (or more) holds a NaN
  x.set(session, xv);
  const WindowSet w = windows(t);
  INFO("pooling " << t.spatial << "-D layout " << t.layout << " dtype " << t.dtype << " flags "
                  << t.flags);
  const auto check_record = [&](int32_t operation) {
    const fake_cudnn_execution_t e = fake.last_call();
    CHECK(e.operation == operation);
    CHECK(e.resample_mode == mode);
    CHECK(e.padding_mode == (mode == kMaxPool ? kNegInfPad : kZeroPad));
    CHECK(e.nan_propagation == 1);
    const int lifted = t.spatial == 1 ? 1 : 0;
    CHECK(e.spatial_dims == static_cast<int64_t>(t.spatial) + lifted);
    CHECK(e.x.dims[0] == t.n);
    CHECK(e.x.dims[1] == t.c);
    if (t.layout == HAL_CHANNELS_LAST) CHECK(e.x.strides[1] == 1);
    for (uint32_t j = 0; j < t.spatial; ++j) {
      const uint32_t from = 3 - t.spatial + j;
      const int64_t kernel = t.adaptive() ? t.in[from] / o[from] : t.k[from];
      CHECK(e.window[lifted + j] == kernel);
      CHECK(e.stride[lifted + j] == (t.adaptive() ? kernel : t.s[from]));
      CHECK(e.pre_padding[lifted + j] == (t.adaptive() ? 0 : t.pb[from]));
      CHECK(e.x.dims[2 + lifted + j] == t.in[from]);
      CHECK(e.y.dims[2 + lifted + j] == o[from]);
    }
  };
  {
    const hal_op_pooling_desc_t desc = pool_desc(t, HAL_OP_POOLING, x, y);
    Planned planned;
    plan_with_flags(session, &desc.header, HAL_OP_PLAN_FLAG_NONE, planned);
    INFO("declines: " << planned.declines);
    REQUIRE(planned.implementation == "cuda.cudnn");
    run(session, planned, {x.data, y.data, nullptr});
    check_record(kResampleForward);
    std::vector<double> want(y.count());
    for (size_t i = 0; i < want.size(); ++i) {
      if (t.pooling == HAL_POOLING_MAX) {
        double best = -INFINITY;
        for (int64_t p : w.inside[i]) {
          const double v = xv[static_cast<size_t>(p)];
          if (std::isnan(v) || v > best) best = v;  // a NaN wins (SPEC §17.6.9)
          if (std::isnan(best)) break;
        }
        want[i] = best;
      } else {
        double sum = 0;
        for (int64_t p : w.inside[i]) sum += xv[static_cast<size_t>(p)];
        want[i] = sum / w.divisor[i];
      }
    }
    std::vector<double> got = y.get(session);
    if (nan) {
      size_t nans = 0;
      for (size_t i = 0; i < want.size(); ++i) {
        CHECK(std::isnan(got[i]) == std::isnan(want[i]));
        if (std::isnan(want[i])) {
          ++nans;
          want[i] = got[i] = 0;
        }
      }
      CHECK(nans > 0);
    }
    expect_close(got, want, t.dtype, static_cast<double>(t.k[0] * t.k[1] * t.k[2]), "forward");
  }
  if (t.pooling == HAL_POOLING_MAX) return;  // its backward is declined (below)
  Tensor gy(session, t.dtype, t.shape(o)), gx(session, t.dtype, t.shape(t.in));
  const std::vector<double> gv = random_values(random, gy.count(), t.dtype);
  gy.set(session, gv);
  const hal_op_pooling_desc_t desc = pool_desc(t, HAL_OP_POOLING_BACKWARD, gx, gy);
  Planned planned;
  plan_with_flags(session, &desc.header, HAL_OP_PLAN_FLAG_NONE, planned);
  INFO("declines: " << planned.declines);
  REQUIRE(planned.implementation == "cuda.cudnn");
  run(session, planned, {gy.data, nullptr, gx.data});
  check_record(kResampleBackward);
  // Scattered from each window (the reference's own formulation).
  std::vector<double> want(gx.count(), 0.0);
  for (size_t i = 0; i < w.inside.size(); ++i) {
    for (int64_t p : w.inside[i]) want[static_cast<size_t>(p)] += gv[i] / w.divisor[i];
  }
  expect_close(gx.get(session), want, t.dtype, static_cast<double>(t.k[0] * t.k[1] * t.k[2]),
               "backward");
}

// Plans |desc| and expects the portable implementation with cuDNN's |reason|.
void expect_declined(Session& session, const hal_op_header_t* desc, const std::string& reason) {
  Planned planned;
  plan_with_flags(session, desc, HAL_OP_PLAN_FLAG_NONE, planned);
  INFO(planned.declines);
  CHECK(planned.implementation == "portable");
  CHECK(planned.declines.find("cuda.cudnn: cuDNN: " + reason) != std::string::npos);
}

// ---- batch norm ---------------------------------------------------------------

struct Norm {
  hal_channel_layout_t layout = HAL_CHANNELS_FIRST;
  hal_dtype_t dtype = HAL_DTYPE_F32;
  std::vector<int64_t> spatial{5, 6};
  int64_t n = 3, c = 4;
  float epsilon = 1e-3f;
  int64_t param_stride = 1;  // the per-channel tensors' element stride
  bool in_place = false;     // y is x (forward), grad_x is grad_y (backward)
  std::vector<int64_t> shape() const {
    std::vector<int64_t> out{n};
    if (layout == HAL_CHANNELS_FIRST) out.push_back(c);
    out.insert(out.end(), spatial.begin(), spatial.end());
    if (layout == HAL_CHANNELS_LAST) out.push_back(c);
    return out;
  }
  int64_t channel_of(size_t flat) const {
    int64_t size = 1;
    for (int64_t e : spatial) size *= e;
    const auto i = static_cast<int64_t>(flat);
    return layout == HAL_CHANNELS_FIRST ? i / size % c : i % c;
  }
  double m() const {
    double out = static_cast<double>(n);
    for (int64_t e : spatial) out *= static_cast<double>(e);
    return out;
  }
};

// A per-channel f32 [C] tensor: every |stride|-th element of an allocation
// whose other elements hold kGap, which get() checks are never written.
struct Channel {
  static constexpr double kGap = -7.0;
  Tensor full;
  hal_tensor_desc_t desc{};
  void* data = nullptr;
  int64_t c = 0, stride = 1;
  Channel(Session& session, int64_t channels, int64_t element_stride)
      : full(session, HAL_DTYPE_F32, {channels * element_stride}),
        c(channels),
        stride(element_stride) {
    desc = full.desc;
    desc.shape[0] = c;
    desc.strides[0] = stride;
    data = full.data;
  }
  size_t count() const { return static_cast<size_t>(c); }
  void set(Session& session, const std::vector<double>& values) const {
    std::vector<double> all(static_cast<size_t>(c * stride), kGap);
    for (size_t i = 0; i < values.size(); ++i) all[i * static_cast<size_t>(stride)] = values[i];
    full.set(session, all);
  }
  std::vector<double> get(Session& session) const {
    const std::vector<double> all = full.get(session);
    std::vector<double> out;
    for (size_t i = 0; i < all.size(); ++i) {
      if (i % static_cast<size_t>(stride) == 0) {
        out.push_back(all[i]);
      } else {
        CHECK(all[i] == kGap);  // nothing written outside the view
      }
    }
    return out;
  }
};

hal_op_batch_norm_desc_t norm_desc(const Norm& t, hal_op_kind_t kind, uint32_t flags,
                                   const Tensor& x, const Tensor& y,
                                   const hal_tensor_desc_t& channel) {
  hal_op_batch_norm_desc_t desc{};
  desc.header.struct_size = sizeof desc;
  desc.header.kind = kind;
  desc.layout = t.layout;
  desc.flags = flags;
  desc.epsilon = t.epsilon;
  desc.x = x.desc;
  desc.scale = desc.shift = desc.running_mean = desc.running_var = channel;
  desc.saved_mean = desc.saved_rstd = channel;
  if (kind == HAL_OP_BATCH_NORM) {
    desc.y = y.desc;
  } else {
    desc.grad_y = desc.grad_x = y.desc;
    desc.grad_scale = desc.grad_shift = channel;
  }
  return desc;
}

// Per-channel float64 statistics of SPEC §17.6.10: mean, biased var.
void statistics(const Norm& t, const std::vector<double>& xv, std::vector<double>& mean,
                std::vector<double>& var) {
  mean.assign(static_cast<size_t>(t.c), 0.0);
  var.assign(static_cast<size_t>(t.c), 0.0);
  for (size_t i = 0; i < xv.size(); ++i) mean[static_cast<size_t>(t.channel_of(i))] += xv[i];
  for (double& v : mean) v /= t.m();
  for (size_t i = 0; i < xv.size(); ++i) {
    const double d = xv[i] - mean[static_cast<size_t>(t.channel_of(i))];
    var[static_cast<size_t>(t.channel_of(i))] += d * d;
  }
  for (double& v : var) v /= t.m();
}

// Training forward (running and saved statistics given or not) and backward
// (parameter gradients written or not) of |t|, against float64.
void check_norm(Session& session, const Norm& t, bool save, bool grads) {
  FakeDnn fake;
  std::mt19937 random(9);
  INFO("batch norm layout " << t.layout << " dtype " << t.dtype << " in place " << t.in_place
                            << " rank " << t.spatial.size() + 2 << " save " << save << " grads "
                            << grads);
  Tensor x(session, t.dtype, t.shape()), y_own(session, t.dtype, t.shape());
  const Tensor& y = t.in_place ? x : y_own;
  const int64_t ps = t.param_stride;
  const Channel scale(session, t.c, ps), shift(session, t.c, ps);
  const Channel run_mean(session, t.c, ps), run_var(session, t.c, ps);
  const Channel saved_mean(session, t.c, ps), saved_rstd(session, t.c, ps);
  std::vector<double> xv = random_values(random, x.count(), t.dtype, -2, 3);
  const auto sv = random_values(random, scale.count(), HAL_DTYPE_F32, 0.5, 1.5);
  const auto hv = random_values(random, shift.count(), HAL_DTYPE_F32);
  const auto rm = random_values(random, run_mean.count(), HAL_DTYPE_F32);
  const auto rv = random_values(random, run_var.count(), HAL_DTYPE_F32, 0.5, 2);
  x.set(session, xv);
  scale.set(session, sv);
  shift.set(session, hv);
  run_mean.set(session, rm);
  run_var.set(session, rv);
  const std::vector<double> sentinel(static_cast<size_t>(t.c), 42.0);
  saved_mean.set(session, sentinel);
  saved_rstd.set(session, sentinel);
  std::vector<double> mean, var;
  statistics(t, xv, mean, var);
  std::vector<double> rstd(mean.size());
  for (size_t k = 0; k < mean.size(); ++k) {
    rstd[k] = 1.0 / std::sqrt(var[k] + static_cast<double>(t.epsilon));
  }
  const double momentum = 0.1;
  {
    uint32_t flags = HAL_BATCH_NORM_TRAINING | HAL_BATCH_NORM_SCALE | HAL_BATCH_NORM_SHIFT |
                     HAL_BATCH_NORM_UPDATE_RUNNING;
    if (save) flags |= HAL_BATCH_NORM_SAVE_STATS;
    const hal_op_batch_norm_desc_t desc = norm_desc(t, HAL_OP_BATCH_NORM, flags, x, y, scale.desc);
    Planned planned;
    plan_with_flags(session, &desc.header, HAL_OP_PLAN_FLAG_NONE, planned);
    INFO("declines: " << planned.declines);
    REQUIRE(planned.implementation == "cuda.cudnn");
    // Without the saved statistics they are scratch after cuDNN's workspace.
    CHECK((planned.workspace > FAKE_CUDNN_VECTOR_WORKSPACE) == !save);
    hal_op_scalar_t m{};
    m.f64 = momentum;
    run(session, planned,
        {x.data, scale.data, shift.data, run_mean.data, run_var.data, y.data,
         save ? saved_mean.data : nullptr, save ? saved_rstd.data : nullptr},
        {m});
    const fake_cudnn_execution_t e = fake.last_call();
    CHECK(e.operation == kNormForward);
    CHECK(e.norm_mode == kBatchNorm);
    CHECK(e.norm_phase == kTraining);
    CHECK(e.running_stats == 1);
    CHECK(e.tensor_count == 12);
    CHECK(e.epsilon == static_cast<double>(t.epsilon));
    CHECK(e.factor == Approx(momentum).epsilon(1e-7));
    CHECK(e.x.dims[1] == t.c);
    std::vector<double> want(y.count());
    for (size_t i = 0; i < want.size(); ++i) {
      const auto k = static_cast<size_t>(t.channel_of(i));
      want[i] = (xv[i] - mean[k]) * rstd[k] * sv[k] + hv[k];
    }
    expect_close(y.get(session), want, t.dtype, t.m(), "y");
    std::vector<double> want_rm(mean.size()), want_rv(mean.size());
    for (size_t k = 0; k < mean.size(); ++k) {
      want_rm[k] = (1 - momentum) * rm[k] + momentum * mean[k];
      want_rv[k] = (1 - momentum) * rv[k] + momentum * var[k] * t.m() / (t.m() - 1);
    }
    expect_close(run_mean.get(session), want_rm, HAL_DTYPE_F32, t.m(), "running_mean");
    expect_close(run_var.get(session), want_rv, HAL_DTYPE_F32, t.m(), "running_var");
    expect_close(saved_mean.get(session), save ? mean : sentinel, HAL_DTYPE_F32, t.m(),
                 "saved_mean");
    expect_close(saved_rstd.get(session), save ? rstd : sentinel, HAL_DTYPE_F32, t.m(),
                 "saved_rstd");
  }
  // The backward reads the saved statistics (f32, as the forward wrote them).
  x.set(session, xv);  // (in place, the forward wrote y over it)
  saved_mean.set(session, mean);
  saved_rstd.set(session, rstd);
  Tensor gy(session, t.dtype, t.shape()), gx_own(session, t.dtype, t.shape());
  const Tensor& gx = t.in_place ? gy : gx_own;
  const Channel g_scale(session, t.c, ps), g_shift(session, t.c, ps);
  const auto gv = random_values(random, gy.count(), t.dtype);
  gy.set(session, gv);
  g_scale.set(session, sentinel);
  g_shift.set(session, sentinel);
  uint32_t flags = HAL_BATCH_NORM_TRAINING | HAL_BATCH_NORM_SCALE;
  if (grads) flags |= HAL_BATCH_NORM_GRAD_SCALE | HAL_BATCH_NORM_GRAD_SHIFT;
  const hal_op_batch_norm_desc_t desc =
      norm_desc(t, HAL_OP_BATCH_NORM_BACKWARD, flags, x, gy, scale.desc);
  Planned planned;
  plan_with_flags(session, &desc.header, HAL_OP_PLAN_FLAG_NONE, planned);
  INFO("declines: " << planned.declines);
  REQUIRE(planned.implementation == "cuda.cudnn");
  run(session, planned,
      {x.data, gy.data, scale.data, saved_mean.data, saved_rstd.data, nullptr, nullptr, nullptr,
       gx.data, grads ? g_scale.data : nullptr, grads ? g_shift.data : nullptr});
  const fake_cudnn_execution_t e = fake.last_call();
  CHECK(e.operation == kNormBackward);
  CHECK(e.tensor_count == 8);
  std::vector<double> want_shift(mean.size(), 0.0), want_scale(mean.size(), 0.0);
  for (size_t i = 0; i < gv.size(); ++i) {
    const auto k = static_cast<size_t>(t.channel_of(i));
    want_shift[k] += gv[i];
    want_scale[k] += gv[i] * (xv[i] - mean[k]) * rstd[k];
  }
  std::vector<double> want(gx.count());
  for (size_t i = 0; i < want.size(); ++i) {
    const auto k = static_cast<size_t>(t.channel_of(i));
    const double xhat = (xv[i] - mean[k]) * rstd[k];
    want[i] = sv[k] * rstd[k] * (gv[i] - want_shift[k] / t.m() - xhat * want_scale[k] / t.m());
  }
  expect_close(gx.get(session), want, t.dtype, 16 + t.m() / 8, "grad_x");
  expect_close(g_scale.get(session), grads ? want_scale : sentinel, HAL_DTYPE_F32, t.m(),
               "grad_scale");
  expect_close(g_shift.get(session), grads ? want_shift : sentinel, HAL_DTYPE_F32, t.m(),
               "grad_shift");
}

}  // namespace

TEST_CASE("pooling on cuDNN against float64", "[cudnn]") {
  Session session;
  Pool exclude;  // 3x3 / 2, padding 1+1 and 1+0, the divisor counting inside x only
  check_pool(session, exclude, kAvgExcludePadding);
  Pool include = exclude;  // the padding counted, channels-last bf16
  include.flags = HAL_POOLING_COUNT_INCLUDE_PAD;
  include.layout = HAL_CHANNELS_LAST;
  include.dtype = HAL_DTYPE_BF16;
  check_pool(session, include, kAvgIncludePadding);
  Pool ceil = exclude;  // ceil mode: the last window overhangs pad_end (post padding)
  ceil.flags = HAL_POOLING_CEIL_MODE;
  ceil.in = {1, 8, 8};
  ceil.pb = ceil.pe = {0, 0, 0};
  REQUIRE(ceil.out()[1] == 4);  // floor mode would give 3
  check_pool(session, ceil, kAvgExcludePadding);
  Pool adaptive = exclude;  // 8x6 -> 4x2: windows of 2x3
  adaptive.flags = HAL_POOLING_ADAPTIVE;
  adaptive.in = {1, 8, 6};
  adaptive.adaptive_out = {1, 4, 2};
  check_pool(session, adaptive, kAvgExcludePadding);
  Pool one = exclude;  // 1-D channels-last f16
  one.spatial = 1;
  one.layout = HAL_CHANNELS_LAST;
  one.dtype = HAL_DTYPE_F16;
  one.in = {1, 1, 11};
  one.k = {1, 1, 4};
  one.s = {1, 1, 3};
  one.pb = {0, 0, 2};
  one.pe = {0, 0, 1};
  check_pool(session, one, kAvgExcludePadding);
  Pool three = exclude;  // 3-D
  three.spatial = 3;
  three.in = {4, 5, 6};
  three.k = {2, 3, 2};
  three.s = {2, 1, 2};
  three.pb = {1, 1, 0};
  three.pe = {0, 1, 1};
  check_pool(session, three, kAvgExcludePadding);
  Pool max = exclude;  // max without indices, with a NaN that wins its windows
  max.pooling = HAL_POOLING_MAX;
  check_pool(session, max, kMaxPool, true);
  Pool max_last = max;  // channels-last f16, ceil mode
  max_last.layout = HAL_CHANNELS_LAST;
  max_last.dtype = HAL_DTYPE_F16;
  max_last.flags = HAL_POOLING_CEIL_MODE;
  max_last.in = {1, 8, 9};
  check_pool(session, max_last, kMaxPool);
}

TEST_CASE("pooling cases cuDNN does not serve fall through with the reason", "[cudnn]") {
  Session session;
  Pool t;
  t.pooling = HAL_POOLING_MAX;
  Tensor x(session, t.dtype, t.shape(t.in)), y(session, t.dtype, t.shape(t.out()));
  {
    // Max with HAL's indices: cuDNN's index is another (the position in the window).
    Pool indexed = t;
    indexed.flags = HAL_POOLING_INDICES;
    hal_op_pooling_desc_t desc = pool_desc(indexed, HAL_OP_POOLING, x, y);
    Tensor indices(session, HAL_DTYPE_I64, t.shape(t.out()));
    desc.indices = indices.desc;
    expect_declined(session, &desc.header, "HAL's max indices are flat positions");
    desc.header.kind = HAL_OP_POOLING_BACKWARD;
    expect_declined(session, &desc.header, "the max backward reads HAL's saved indices");
  }
  {
    Pool dilated = t;
    dilated.d = {1, 2, 2};
    dilated.pb = dilated.pe = {0, 0, 0};
    Tensor yd(session, t.dtype, dilated.shape(dilated.out()));
    const hal_op_pooling_desc_t desc = pool_desc(dilated, HAL_OP_POOLING, x, yd);
    expect_declined(session, &desc.header, "cuDNN's resample has no dilation");
  }
  Pool average = t;
  average.pooling = HAL_POOLING_AVERAGE;
  {
    Pool divided = average;
    divided.divisor_override = 4;
    const hal_op_pooling_desc_t desc = pool_desc(divided, HAL_OP_POOLING, x, y);
    expect_declined(session, &desc.header, "divisor_override has no cuDNN resample mode");
  }
  {
    Pool ceil = average;
    ceil.flags = HAL_POOLING_CEIL_MODE | HAL_POOLING_COUNT_INCLUDE_PAD;
    ceil.in = {1, 8, 8};
    ceil.pb = ceil.pe = {0, 0, 0};
    Tensor x8(session, t.dtype, ceil.shape(ceil.in)), y4(session, t.dtype, ceil.shape(ceil.out()));
    const hal_op_pooling_desc_t desc = pool_desc(ceil, HAL_OP_POOLING, x8, y4);
    expect_declined(session, &desc.header, "ceil mode's last window overhangs pad_end");
  }
  {
    Pool uneven = average;  // 7x8 -> 3x3
    uneven.flags = HAL_POOLING_ADAPTIVE;
    uneven.adaptive_out = {1, 3, 3};
    Tensor y3(session, t.dtype, uneven.shape(uneven.out()));
    const hal_op_pooling_desc_t desc = pool_desc(uneven, HAL_OP_POOLING, x, y3);
    expect_declined(session, &desc.header, "adaptive windows of uneven sizes (input extent 7");
  }
  {
    Tensor y16(session, HAL_DTYPE_BF16, t.shape(t.out()));
    const hal_op_pooling_desc_t desc = pool_desc(average, HAL_OP_POOLING, x, y16);
    expect_declined(session, &desc.header, "x and y of dtypes f32, bf16");
  }
}

TEST_CASE("batch norm training on cuDNN against float64", "[cudnn]") {
  Session session;
  Norm nchw;
  check_norm(session, nchw, true, true);
  Norm nhwc;  // channels-last bf16, statistics and gradients in the workspace
  nhwc.layout = HAL_CHANNELS_LAST;
  nhwc.dtype = HAL_DTYPE_BF16;
  check_norm(session, nhwc, false, false);
  Norm strided;  // per-channel tensors every other element (any stride, SPEC §17.6.10)
  strided.param_stride = 2;
  check_norm(session, strided, true, true);
  Norm in_place;  // y over x, grad_x over grad_y (SPEC: "may be x")
  in_place.in_place = true;
  check_norm(session, in_place, true, true);
  Norm flat;  // [N, C] (lifted to [N, C, 1, 1]), f16
  flat.spatial = {};
  flat.n = 9;
  flat.dtype = HAL_DTYPE_F16;
  check_norm(session, flat, true, false);
  Norm three;  // 3 spatial dimensions
  three.spatial = {2, 3, 4};
  check_norm(session, three, false, true);
}

TEST_CASE("batch norm cases cuDNN does not serve fall through with the reason", "[cudnn]") {
  Session session;
  const Norm t;
  Tensor x(session, t.dtype, t.shape()), y(session, t.dtype, t.shape());
  Tensor channel(session, HAL_DTYPE_F32, {t.c}), half(session, HAL_DTYPE_F16, {t.c});
  const uint32_t training = HAL_BATCH_NORM_TRAINING | HAL_BATCH_NORM_SCALE | HAL_BATCH_NORM_SHIFT;
  {
    hal_op_batch_norm_desc_t desc = norm_desc(t, HAL_OP_BATCH_NORM, training, x, y, channel.desc);
    desc.flags &= ~static_cast<uint32_t>(HAL_BATCH_NORM_TRAINING);
    expect_declined(session, &desc.header, "inference batch norm");
    desc.header.kind = HAL_OP_BATCH_NORM_BACKWARD;
    desc = norm_desc(t, HAL_OP_BATCH_NORM_BACKWARD, HAL_BATCH_NORM_SCALE, x, y, channel.desc);
    expect_declined(session, &desc.header, "inference batch norm");
  }
  {
    const hal_op_batch_norm_desc_t desc =
        norm_desc(t, HAL_OP_BATCH_NORM, training | HAL_BATCH_NORM_RELU, x, y, channel.desc);
    expect_declined(session, &desc.header, "the fused relu is not passed to cuDNN here");
  }
  {
    const hal_op_batch_norm_desc_t desc = norm_desc(
        t, HAL_OP_BATCH_NORM, HAL_BATCH_NORM_TRAINING | HAL_BATCH_NORM_SCALE, x, y, channel.desc);
    expect_declined(session, &desc.header, "cuDNN's batch norm reads scale and shift tensors");
  }
  {
    hal_op_batch_norm_desc_t desc = norm_desc(t, HAL_OP_BATCH_NORM, training, x, y, channel.desc);
    desc.scale = half.desc;
    expect_declined(session, &desc.header,
                    "scale is f16: cuDNN's batch norm takes f32 per-channel tensors");
  }
  {
    Tensor y16(session, HAL_DTYPE_F16, t.shape());
    const hal_op_batch_norm_desc_t desc =
        norm_desc(t, HAL_OP_BATCH_NORM, training, x, y16, channel.desc);
    expect_declined(session, &desc.header, "activations of dtypes f32, f16, f16");
  }
}

TEST_CASE("bad input to cuDNN's pooling and batch norm: a specific error, nothing written",
          "[cudnn]") {
  FakeDnn fake;
  Session session;
  {
    // Shapes that do not fit are refused at the plan, naming the rule.
    Pool t;
    Tensor x(session, t.dtype, t.shape(t.in));
    Tensor wrong(session, t.dtype, t.shape({1, 5, 4}));  // the windows give 4x4
    const hal_op_pooling_desc_t desc = pool_desc(t, HAL_OP_POOLING, x, wrong);
    const std::string message = session.refused(&desc.header);
    CHECK(message.find("y") != std::string::npos);
    CHECK(message.find("4") != std::string::npos);
  }
  const Norm t;
  Tensor x(session, t.dtype, t.shape()), y(session, t.dtype, t.shape());
  Tensor channel(session, HAL_DTYPE_F32, {t.c}), short_channel(session, HAL_DTYPE_F32, {t.c - 1});
  const uint32_t flags = HAL_BATCH_NORM_TRAINING | HAL_BATCH_NORM_SCALE | HAL_BATCH_NORM_SHIFT |
                         HAL_BATCH_NORM_UPDATE_RUNNING;
  {
    hal_op_batch_norm_desc_t desc = norm_desc(t, HAL_OP_BATCH_NORM, flags, x, y, channel.desc);
    desc.running_var = short_channel.desc;
    const std::string message = session.refused(&desc.header);
    CHECK(message.find("running_var") != std::string::npos);
  }
  // At execution: a momentum outside [0, 1], and too little workspace (the
  // statistics' scratch), are refused before cuDNN is called: nothing written.
  const hal_op_batch_norm_desc_t desc = norm_desc(t, HAL_OP_BATCH_NORM, flags, x, y, channel.desc);
  Planned planned;
  plan_with_flags(session, &desc.header, HAL_OP_PLAN_FLAG_NONE, planned);
  REQUIRE(planned.implementation == "cuda.cudnn");
  Tensor run_mean(session, HAL_DTYPE_F32, {t.c}), run_var(session, HAL_DTYPE_F32, {t.c});
  const std::vector<double> sentinel(static_cast<size_t>(t.c), 42.0);
  const std::vector<double> y_sentinel(y.count(), 7.0);
  std::mt19937 random(1);
  x.set(session, random_values(random, x.count(), t.dtype));
  channel.set(session, sentinel);
  run_mean.set(session, sentinel);
  run_var.set(session, sentinel);
  y.set(session, y_sentinel);
  void* workspace = session.alloc_bytes(planned.workspace);
  std::vector<void*> operands{x.data,       channel.data, channel.data, run_mean.data,
                              run_var.data, y.data,       nullptr,      nullptr};
  hal_op_scalar_t momentum{};
  hal_op_exec_args_t args{};
  args.struct_size = sizeof args;
  args.operand_count = static_cast<uint32_t>(operands.size());
  args.operands = operands.data();
  args.scalar_count = 1;
  args.scalars = &momentum;
  args.workspace = workspace;
  args.workspace_bytes = planned.workspace;
  const uint64_t before = fake.executions();
  momentum.f64 = 1.5;
  CHECK(hal_op_execute(planned.plan, &args, session.stream()) == HAL_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(hal_error_last_message()).find("momentum") != std::string::npos);
  momentum.f64 = 0.5;
  args.workspace_bytes = planned.workspace - 1;
  CHECK(hal_op_execute(planned.plan, &args, session.stream()) == HAL_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(hal_error_last_message()).find("workspace") != std::string::npos);
  CHECK(fake.executions() == before);
  CHECK(y.get(session) == y_sentinel);
  CHECK(run_mean.get(session) == sentinel);
  CHECK(run_var.get(session) == sentinel);
  // cuDNN refusing the execution: its status reaches the caller.
  args.workspace_bytes = planned.workspace;
  fake.fail_next("execute", kStatusBadParam, 1);
  CHECK(hal_op_execute(planned.plan, &args, session.stream()) == HAL_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(hal_error_last_message())
            .find("cudnnBackendExecute failed: CUDNN_STATUS_BAD_PARAM (2000)") !=
        std::string::npos);
  CHECK(y.get(session) == y_sentinel);
}
