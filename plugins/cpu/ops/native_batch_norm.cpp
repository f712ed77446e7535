// HAL_OP_BATCH_NORM and HAL_OP_BATCH_NORM_BACKWARD on channels-first
// (NCHW) f32 tensors, as host loops on the plugin's thread pool, tried by
// plan_batch_norm before oneDNN (named cpu.onednn with the rest of the kind,
// as max pooling is). oneDNN 2.6 serves this layout with its generic
// ncsp_bnorm kernel: about 0.2 ms of fixed cost per call and a backward
// slower than PyTorch's CPU kernels at every ResNet-18 shape (issues 33/34).
//
// One work item per channel: its N planes of H x W contiguous values stay in
// the worker's caches across the passes (the mean, the squared deviations,
// then y; the backward's two sums, then grad_x), and no sum crosses threads,
// so every plan is deterministic. The sums run in 32 f32 lanes flushed into
// f64 lanes every 2048 values (bn_sums_body): the statistics are SPEC
// §17.6.10's two passes, with less rounding than one f32 accumulator over
// N x H x W values. The loops are cloned per ISA
// (HAL_ISA_CLONES: AVX-512F, AVX2, baseline; picked by what the CPU has).
//
// Served: x, y, grad_y, grad_x dense f32; the per-channel tensors f32 with
// any stride; every flag (RELU's backward reads y). Declined, each with its
// reason, for oneDNN (or the portable implementation): channels-last,
// other dtypes, strided activations, empty tensors.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "hal_util/isa_clones.hpp"
#include "native_plan.hpp"
#include "ops.hpp"

namespace hal::cpu::ops {
namespace {

constexpr size_t kBnLanes = 32;
// Planes ahead of the one a loop works on that it asks into the caches: a
// channel's planes lie N x C x H x W apart, and at ResNet's 7x7 and 14x14
// planes (196 and 784 bytes) the hardware prefetcher, which stops at each
// 4 KiB page, does not follow them.
constexpr size_t kBnPrefetchPlanes = 2;

inline void bn_prefetch_plane(const float* plane, size_t s) {
  const auto* at = reinterpret_cast<const char*>(plane);
  for (size_t offset = 0; offset < s * sizeof(float); offset += 64) {
    __builtin_prefetch(at + offset, 0, 3);
  }
}

// Channels per work item: one where a plane is large (its N planes fill
// the caches), up to kBnBlock where planes are small, so that an item walks
// each sample's block of channels as one contiguous run (n outer, channels
// inner) that the hardware prefetcher follows, where one channel's 196-byte
// 7x7 planes, N x C x H x W apart, left the loads waiting on memory.
constexpr size_t kBnBlock = 16;
constexpr size_t kBnSmallPlane = 1024;  // values; below, channels are blocked
// Bytes of one sample's run of a block's channels: at 32 x 128 x 28 x 28,
// runs of 4 channels (12.5 KiB) took 1.1 and 1.6 ms (forward, backward)
// where runs of 16 (50 KiB) took 1.4 and 2.3: an item's data then stays
// in L2 between its passes.
constexpr size_t kBnRunBytes = 8192;

// The per-channel sums of |block| channels, one loop for each (kMode): 0
// sum x; 1 sum (x - mean)^2; 2 sum g and sum g (x - mean); 3 those with g =
// 0 where y <= 0 (the fused relu). Channel b's |planes| planes of |s| values
// lie at b * s + n * stride. Per channel: f32 lanes that run on across
// planes (a plane's tail goes to its first lanes), added into f64 lanes
// every kBnFlush values and after the last plane, then the f64 lanes in
// order; the same order whatever the block, so the bits depend on the shape
// alone. No sum crosses lanes inside a plane: one in-order reduction per
// plane (a serial chain of 32 adds) cost more than the 49 values of a 7x7
// plane.
constexpr size_t kBnFlush = 2048;

template <int kMode>
__attribute__((always_inline)) inline void bn_sums_body(const float* x, const float* g,
                                                        const float* y, size_t planes,
                                                        size_t stride, size_t s, size_t block,
                                                        const float* mean, double* out_first,
                                                        double* out_second) {
  constexpr bool kTwo = kMode >= 2;
  float first[kBnBlock][kBnLanes] = {}, second[kBnBlock][kBnLanes] = {};
  double first_total[kBnBlock][kBnLanes] = {}, second_total[kBnBlock][kBnLanes] = {};
  size_t pending = 0;
  for (size_t n = 0; n < planes; ++n) {
    if (block == 1 && n + kBnPrefetchPlanes < planes) {
      bn_prefetch_plane(x + (n + kBnPrefetchPlanes) * stride, s);
      if (kTwo) bn_prefetch_plane(g + (n + kBnPrefetchPlanes) * stride, s);
      if (kMode == 3) bn_prefetch_plane(y + (n + kBnPrefetchPlanes) * stride, s);
    }
    for (size_t b = 0; b < block; ++b) {
      const size_t offset = n * stride + b * s;
      const float* p = x + offset;
      const float* d = kTwo ? g + offset : nullptr;
      const float* r = kMode == 3 ? y + offset : nullptr;
      const float centre = kMode == 0 ? 0.0f : mean[b];
      float* lanes = first[b];
      float* lanes_second = second[b];
      auto add = [&](size_t lane, size_t j) __attribute__((always_inline)) {
        if constexpr (kMode == 0) {
          lanes[lane] += p[j];
        } else if constexpr (kMode == 1) {
          const float v = p[j] - centre;
          lanes[lane] += v * v;
        } else {
          float gv = d[j];
          if constexpr (kMode == 3) gv = r[j] > 0.0f ? gv : 0.0f;
          lanes[lane] += gv;
          lanes_second[lane] += gv * (p[j] - centre);
        }
      };
      size_t j = 0;
      for (; j + kBnLanes <= s; j += kBnLanes) {
        for (size_t k = 0; k < kBnLanes; ++k) add(k, j + k);
      }
      if (j + 16 <= s) {
        for (size_t k = 0; k < 16; ++k) add(k, j + k);
        j += 16;
      }
      if (j + 8 <= s) {
        for (size_t k = 0; k < 8; ++k) add(k, j + k);
        j += 8;
      }
      for (size_t k = 0; j < s; ++j, ++k) add(k, j);
    }
    pending += s;
    if (pending >= kBnFlush || n + 1 == planes) {
      for (size_t b = 0; b < block; ++b) {
        for (size_t k = 0; k < kBnLanes; ++k) {
          first_total[b][k] += first[b][k];
          first[b][k] = 0;
          if (kTwo) {
            second_total[b][k] += second[b][k];
            second[b][k] = 0;
          }
        }
      }
      pending = 0;
    }
  }
  for (size_t b = 0; b < block; ++b) {
    double total = 0, total_second = 0;
    for (size_t k = 0; k < kBnLanes; ++k) {
      total += first_total[b][k];
      total_second += second_total[b][k];
    }
    out_first[b] = total;
    if (kTwo) out_second[b] = total_second;
  }
}

// sum x of each channel of the block.
HAL_ISA_CLONES void bn_sum(const float* x, size_t planes, size_t stride, size_t s, size_t block,
                           double* out) {
  bn_sums_body<0>(x, nullptr, nullptr, planes, stride, s, block, nullptr, out, nullptr);
}

// sum (x - mean)^2 of each channel of the block.
HAL_ISA_CLONES void bn_squared_deviations(const float* x, size_t planes, size_t stride, size_t s,
                                          size_t block, const float* mean, double* out) {
  bn_sums_body<1>(x, nullptr, nullptr, planes, stride, s, block, mean, out, nullptr);
}

// y = (x - mean) * factor + shift (factor = rstd * scale), then relu, per
// channel of the block.
HAL_ISA_CLONES void bn_apply(const float* x, float* y, size_t planes, size_t stride, size_t s,
                             size_t block, const float* mean, const float* factor,
                             const float* shift, bool relu) {
  for (size_t n = 0; n < planes; ++n) {
    for (size_t b = 0; b < block; ++b) {
      const float* p = x + n * stride + b * s;
      float* q = y + n * stride + b * s;
      const float centre = mean[b], scale = factor[b], offset = shift[b];
      if (relu) {
        for (size_t j = 0; j < s; ++j) {
          const float v = (p[j] - centre) * scale + offset;
          q[j] = v > 0.0f ? v : 0.0f;  // NaN: 0, as the portable kernels' max(v, 0)
        }
      } else {
        for (size_t j = 0; j < s; ++j) q[j] = (p[j] - centre) * scale + offset;
      }
    }
  }
}

// sum g and sum g (x - mean) of each channel of the block (g = 0 where y
// <= 0 when |y| is given: the fused relu).
HAL_ISA_CLONES void bn_gradient_sums(const float* x, const float* g, const float* y, size_t planes,
                                     size_t stride, size_t s, size_t block, const float* mean,
                                     double* out_sum_g, double* out_sum_gd) {
  if (y != nullptr) {
    bn_sums_body<3>(x, g, y, planes, stride, s, block, mean, out_sum_g, out_sum_gd);
  } else {
    bn_sums_body<2>(x, g, nullptr, planes, stride, s, block, mean, out_sum_g, out_sum_gd);
  }
}

// grad_x = g * a + (x - mean) * b + c per channel of the block (g = 0 where
// y <= 0 when |y| is given); grad_x may be g.
HAL_ISA_CLONES void bn_grad_x(const float* x, const float* g, const float* y, float* gx,
                              size_t planes, size_t stride, size_t s, size_t block,
                              const float* mean, const float* a, const float* b, const float* c) {
  for (size_t n = 0; n < planes; ++n) {
    for (size_t ch = 0; ch < block; ++ch) {
      const size_t offset = n * stride + ch * s;
      const float* p = x + offset;
      const float* d = g + offset;
      float* q = gx + offset;
      const float centre = mean[ch], ka = a[ch], kb = b[ch], kc = c[ch];
      if (y != nullptr) {
        const float* r = y + offset;
        for (size_t j = 0; j < s; ++j) {
          const float gv = r[j] > 0.0f ? d[j] : 0.0f;
          q[j] = gv * ka + (p[j] - centre) * kb + kc;
        }
      } else {
        for (size_t j = 0; j < s; ++j) q[j] = d[j] * ka + (p[j] - centre) * kb + kc;
      }
    }
  }
}

// Element |c| of a per-channel f32 vector of any stride.
struct BnVector {
  int64_t stride = 1;
  float get(const void* base, int64_t c) const {
    return static_cast<const float*>(base)[c * stride];
  }
  void set(void* base, int64_t c, float value) const {
    static_cast<float*>(base)[c * stride] = value;
  }
};

bool bn_activation_served(const char* name, const hal_tensor_desc_t& tensor, Decline& decline) {
  if (tensor.dtype != HAL_DTYPE_F32) {
    decline.reason = std::string("cpu.native's batch norm reads f32 activations; ") + name +
                     " is another dtype (oneDNN's kernels serve it)";
    return false;
  }
  if (!dense(tensor)) {
    decline.reason = std::string("cpu.native's batch norm reads dense NCHW tensors; ") + name +
                     " is strided (oneDNN's kernels serve it)";
    return false;
  }
  return true;
}

bool bn_vector_served(const char* name, const hal_tensor_desc_t& tensor, Decline& decline) {
  if (tensor.dtype != HAL_DTYPE_F32) {
    decline.reason = std::string("cpu.native's batch norm reads f32 per-channel tensors; ") + name +
                     " is another dtype (oneDNN's host steps convert it)";
    return false;
  }
  return true;
}

// Operands (api/hal/ops.h).
enum BnForward { kFx = 0, kFscale, kFshift, kFrunMean, kFrunVar, kFy, kFsavedMean, kFsavedRstd };
enum BnBackward {
  kGx = 0,
  kGgy,
  kGscale,
  kGsavedMean,
  kGsavedRstd,
  kGrunMean,
  kGrunVar,
  kGy,
  kGgx,
  kGgscale,
  kGgshift
};

}  // namespace

std::unique_ptr<OpPlan> plan_native_batch_norm(const hal_op_batch_norm_desc_t& desc,
                                               Decline& decline) {
  const bool backward = desc.header.kind == HAL_OP_BATCH_NORM_BACKWARD;
  const uint32_t flags = desc.flags;
  const bool training = (flags & HAL_BATCH_NORM_TRAINING) != 0;
  const bool has_scale = (flags & HAL_BATCH_NORM_SCALE) != 0;
  const bool has_shift = (flags & HAL_BATCH_NORM_SHIFT) != 0;
  const bool relu = (flags & HAL_BATCH_NORM_RELU) != 0;
  const bool update = (flags & HAL_BATCH_NORM_UPDATE_RUNNING) != 0;
  const bool save = (flags & HAL_BATCH_NORM_SAVE_STATS) != 0;
  const bool want_grad_scale = (flags & HAL_BATCH_NORM_GRAD_SCALE) != 0;
  const bool want_grad_shift = (flags & HAL_BATCH_NORM_GRAD_SHIFT) != 0;
  if (desc.layout != HAL_CHANNELS_FIRST) {
    decline.reason =
        "cpu.native's batch norm serves channels-first tensors; channels-last is left to "
        "oneDNN's nspc kernels, which vectorise over the channels";
    return nullptr;
  }
  if (element_count(desc.x) == 0) {
    decline.reason = "an empty tensor is left to the portable implementation";
    return nullptr;
  }
  if (!bn_activation_served("x", desc.x, decline)) return nullptr;
  if (backward) {
    if (!bn_activation_served("grad_y", desc.grad_y, decline) ||
        !bn_activation_served("grad_x", desc.grad_x, decline) ||
        (relu && !bn_activation_served("y", desc.y, decline))) {
      return nullptr;
    }
  } else if (!bn_activation_served("y", desc.y, decline)) {
    return nullptr;
  }
  if ((has_scale && !bn_vector_served("scale", desc.scale, decline)) ||
      (!backward && has_shift && !bn_vector_served("shift", desc.shift, decline)) ||
      ((!training || update) && (!bn_vector_served("running_mean", desc.running_mean, decline) ||
                                 !bn_vector_served("running_var", desc.running_var, decline))) ||
      (backward && want_grad_scale && !bn_vector_served("grad_scale", desc.grad_scale, decline)) ||
      (backward && want_grad_shift && !bn_vector_served("grad_shift", desc.grad_shift, decline))) {
    return nullptr;
  }

  const int64_t batch = desc.x.shape[0];
  const int64_t channels = desc.x.shape[1];
  const auto plane =
      static_cast<size_t>(static_cast<int64_t>(element_count(desc.x)) / (batch * channels));
  const auto planes = static_cast<size_t>(batch);
  const auto sample_stride = static_cast<size_t>(channels) * plane;
  const double m = static_cast<double>(planes * plane);
  const float epsilon = desc.epsilon;
  const BnVector scale{desc.scale.strides[0]}, shift{desc.shift.strides[0]};
  const BnVector run_mean{desc.running_mean.strides[0]}, run_var{desc.running_var.strides[0]};
  const BnVector saved_mean{desc.saved_mean.strides[0]}, saved_rstd{desc.saved_rstd.strides[0]};
  const BnVector grad_scale{desc.grad_scale.strides[0]}, grad_shift{desc.grad_shift.strides[0]};

  // Channels per item: runs of about kBnRunBytes per sample, up to kBnBlock
  // channels, one channel from kBnSmallPlane values per plane on.
  const size_t block =
      plane >= kBnSmallPlane ? 1 : std::clamp<size_t>(kBnRunBytes / (plane * 4), 1, kBnBlock);
  const auto items = (static_cast<size_t>(channels) + block - 1) / block;

  if (!backward) {
    const uint32_t scalars = training && update ? 1 : 0;
    return std::make_unique<NativePlan>(
        8,
        [=](ThreadPool& pool, void* const* operand, const hal_op_scalar_t* scalar) {
          const double momentum = scalars != 0 ? scalar[0].f64 : 0.0;
          const auto* x = static_cast<const float*>(operand[kFx]);
          auto* y = static_cast<float*>(operand[kFy]);
          parallel_items(pool, items, [&](uint64_t item, uint32_t) {
            const size_t c0 = static_cast<size_t>(item) * block;
            const size_t count = std::min(block, static_cast<size_t>(channels) - c0);
            const float* xc = x + c0 * plane;
            float mean[kBnBlock], factor[kBnBlock], offset[kBnBlock];
            double sums[kBnBlock];
            if (training) {
              bn_sum(xc, planes, sample_stride, plane, count, sums);
              for (size_t b = 0; b < count; ++b) mean[b] = static_cast<float>(sums[b] / m);
              bn_squared_deviations(xc, planes, sample_stride, plane, count, mean, sums);
            }
            for (size_t b = 0; b < count; ++b) {
              const auto c = static_cast<int64_t>(c0 + b);
              float rstd;
              if (training) {
                const auto variance = static_cast<float>(sums[b] / m);
                rstd = 1.0f / std::sqrt(variance + epsilon);
                if (save) {
                  saved_mean.set(operand[kFsavedMean], c, mean[b]);
                  saved_rstd.set(operand[kFsavedRstd], c, rstd);
                }
                if (update) {
                  const double unbiased = static_cast<double>(variance) * (m / (m - 1));
                  const double rm = run_mean.get(operand[kFrunMean], c);
                  const double rv = run_var.get(operand[kFrunVar], c);
                  run_mean.set(operand[kFrunMean], c,
                               static_cast<float>((1 - momentum) * rm + momentum * mean[b]));
                  run_var.set(operand[kFrunVar], c,
                              static_cast<float>((1 - momentum) * rv + momentum * unbiased));
                }
              } else {
                mean[b] = run_mean.get(operand[kFrunMean], c);
                rstd = 1.0f / std::sqrt(run_var.get(operand[kFrunVar], c) + epsilon);
              }
              factor[b] = rstd * (has_scale ? scale.get(operand[kFscale], c) : 1.0f);
              offset[b] = has_shift ? shift.get(operand[kFshift], c) : 0.0f;
            }
            bn_apply(xc, y + c0 * plane, planes, sample_stride, plane, count, mean, factor, offset,
                     relu);
          });
        },
        scalars);
  }

  return std::make_unique<NativePlan>(11, [=](ThreadPool& pool, void* const* operand,
                                              const hal_op_scalar_t*) {
    const auto* x = static_cast<const float*>(operand[kGx]);
    const auto* g = static_cast<const float*>(operand[kGgy]);
    const auto* y = relu ? static_cast<const float*>(operand[kGy]) : nullptr;
    auto* gx = static_cast<float*>(operand[kGgx]);
    parallel_items(pool, items, [&](uint64_t item, uint32_t) {
      const size_t c0 = static_cast<size_t>(item) * block;
      const size_t count = std::min(block, static_cast<size_t>(channels) - c0);
      const size_t offset = c0 * plane;
      float mean[kBnBlock], rstd[kBnBlock], a[kBnBlock], b[kBnBlock], k0[kBnBlock];
      double sum_g[kBnBlock] = {}, sum_gd[kBnBlock] = {};
      for (size_t i = 0; i < count; ++i) {
        const auto c = static_cast<int64_t>(c0 + i);
        if (training) {
          mean[i] = saved_mean.get(operand[kGsavedMean], c);
          rstd[i] = saved_rstd.get(operand[kGsavedRstd], c);
        } else {
          mean[i] = run_mean.get(operand[kGrunMean], c);
          rstd[i] = 1.0f / std::sqrt(run_var.get(operand[kGrunVar], c) + epsilon);
        }
      }
      if (training || want_grad_scale || want_grad_shift) {
        bn_gradient_sums(x + offset, g + offset, y != nullptr ? y + offset : nullptr, planes,
                         sample_stride, plane, count, mean, sum_g, sum_gd);
      }
      for (size_t i = 0; i < count; ++i) {
        const auto c = static_cast<int64_t>(c0 + i);
        const double sum_gxhat = sum_gd[i] * rstd[i];  // sum g xhat
        if (want_grad_scale) {
          grad_scale.set(operand[kGgscale], c, static_cast<float>(sum_gxhat));
        }
        if (want_grad_shift) grad_shift.set(operand[kGgshift], c, static_cast<float>(sum_g[i]));
        const double k = static_cast<double>(rstd[i]) *
                         (has_scale ? static_cast<double>(scale.get(operand[kGscale], c)) : 1.0);
        // TRAINING: k (g - sum_g/m - xhat sum_gxhat/m); else k g.
        a[i] = static_cast<float>(k);
        b[i] = static_cast<float>(training ? -k * rstd[i] * sum_gxhat / m : 0.0);
        k0[i] = static_cast<float>(training ? -k * sum_g[i] / m : 0.0);
      }
      bn_grad_x(x + offset, g + offset, y != nullptr ? y + offset : nullptr, gx + offset, planes,
                sample_stride, plane, count, mean, a, b, k0);
    });
  });
}

}  // namespace hal::cpu::ops
