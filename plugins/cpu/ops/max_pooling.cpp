// HAL_OP_POOLING and HAL_OP_POOLING_BACKWARD with HAL_POOLING_MAX, for the
// cpu plugin's pooling (named cpu.onednn with the rest of the kind): host
// loops, not a oneDNN primitive. oneDNN keeps its argmax in a workspace of
// its own format, not the flat indices HAL's backward reads, and its
// comparisons skip a NaN that SPEC §17.6.9 propagates; the portable kernels
// (one work-item per element, the backward a gather over the windows that
// may contain each input) took 365 ms of a 1.1 s ResNet-18 training step
// (batch 8, 160x160, one thread) where PyTorch's CPU kernels take 60.
//
// One task per (n, c) plane on the plugin's thread pool: the forward scans
// each window in row-major order (d, h, w) with SPEC §17.6.9's rule (the
// first element, then a larger one or a NaN); the backward zeroes the
// plane of grad_x, then adds grad_y[o] at indices[o] in output order (f32,
// as the portable kernels sum) when that position lies in window o: an
// index outside its window, whatever its value, contributes nothing.
// f32 tensors, i32 or i64 indices, any layout and strides, fixed or
// adaptive windows; other dtypes and empty tensors are declined for the
// portable implementation.
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>

#include "native_plan.hpp"
#include "onednn_common.hpp"
#include "ops.hpp"

namespace hal::cpu::ops {
namespace {

// A tensor as [N, C, D, H, W] (spatial dimensions it lacks: extent 1, stride 0).
struct Canonical {
  int64_t shape[5] = {1, 1, 1, 1, 1};
  int64_t strides[5] = {0, 0, 0, 0, 0};
};

Canonical max_pooling_canonical(const hal_tensor_desc_t& tensor, hal_channel_layout_t layout,
                                uint32_t spatial_dims) {
  Canonical out;
  const auto take = [&](int to, uint32_t from) {
    out.shape[to] = tensor.shape[from];
    out.strides[to] = tensor.strides[from];
  };
  take(0, 0);
  take(1, layout == HAL_CHANNELS_LAST ? spatial_dims + 1 : 1);
  for (uint32_t s = 0; s < spatial_dims; ++s) {
    take(static_cast<int>(5 - spatial_dims + s), layout == HAL_CHANNELS_LAST ? 1 + s : 2 + s);
  }
  return out;
}

// The windows of one spatial dimension: window o starts at start(o) (may
// be negative) and has taps(o) taps |step| apart.
struct Windows {
  int64_t in = 1, out = 1, kernel = 1, stride = 1, dilation = 1, pad = 0;
  bool adaptive = false;
  int64_t start(int64_t o) const { return adaptive ? o * in / out : o * stride - pad; }
  int64_t taps(int64_t o) const {
    return adaptive ? ((o + 1) * in + out - 1) / out - o * in / out : kernel;
  }
  int64_t step() const { return adaptive ? 1 : dilation; }
  // Whether position |p| is a tap of window |o|.
  bool contains(int64_t o, int64_t p) const {
    const int64_t offset = p - start(o);
    return offset >= 0 && offset % step() == 0 && offset / step() < taps(o);
  }
};

struct MaxPooling {
  Canonical x, y, indices;
  Windows windows[3];  // D, H, W
  bool with_indices = false;
  bool indices_i64 = false;

  int64_t index_at(const void* base, int64_t offset) const {
    return indices_i64 ? static_cast<const int64_t*>(base)[offset]
                       : static_cast<const int32_t*>(base)[offset];
  }

  void forward(int64_t n, int64_t c, const float* xp, float* yp, void* ip) const {
    const int64_t x_base = n * x.strides[0] + c * x.strides[1];
    const int64_t xh = x.shape[3], xw = x.shape[4];
    for (int64_t od = 0; od < y.shape[2]; ++od) {
      for (int64_t oh = 0; oh < y.shape[3]; ++oh) {
        for (int64_t ow = 0; ow < y.shape[4]; ++ow) {
          float best = -std::numeric_limits<float>::infinity();
          int64_t best_index = -1;
          const int64_t zd = windows[0].start(od), zh = windows[1].start(oh);
          const int64_t zw = windows[2].start(ow);
          for (int64_t a = 0; a < windows[0].taps(od); ++a) {
            const int64_t pz = zd + a * windows[0].step();
            if (pz < 0 || pz >= x.shape[2]) continue;
            for (int64_t b = 0; b < windows[1].taps(oh); ++b) {
              const int64_t py = zh + b * windows[1].step();
              if (py < 0 || py >= xh) continue;
              const float* row = xp + x_base + pz * x.strides[2] + py * x.strides[3];
              for (int64_t t = 0; t < windows[2].taps(ow); ++t) {
                const int64_t px = zw + t * windows[2].step();
                if (px < 0 || px >= xw) continue;
                const float v = row[px * x.strides[4]];
                // The first element, then a larger one or a NaN (the last NaN wins).
                if (best_index < 0 || v > best || std::isnan(v)) {
                  best = v;
                  best_index = (pz * xh + py) * xw + px;
                }
              }
            }
          }
          yp[n * y.strides[0] + c * y.strides[1] + od * y.strides[2] + oh * y.strides[3] +
             ow * y.strides[4]] = best;
          if (with_indices) {
            const int64_t at = n * indices.strides[0] + c * indices.strides[1] +
                               od * indices.strides[2] + oh * indices.strides[3] +
                               ow * indices.strides[4];
            if (indices_i64) {
              static_cast<int64_t*>(ip)[at] = best_index;
            } else {
              static_cast<int32_t*>(ip)[at] = static_cast<int32_t>(best_index);
            }
          }
        }
      }
    }
  }

  // |gy| has y's layout, |gx| x's.
  void backward(int64_t n, int64_t c, const float* gy, const void* ip, float* gx) const {
    const int64_t x_base = n * x.strides[0] + c * x.strides[1];
    const int64_t xd = x.shape[2], xh = x.shape[3], xw = x.shape[4];
    for (int64_t pz = 0; pz < xd; ++pz) {
      for (int64_t py = 0; py < xh; ++py) {
        float* row = gx + x_base + pz * x.strides[2] + py * x.strides[3];
        for (int64_t px = 0; px < xw; ++px) row[px * x.strides[4]] = 0.0f;
      }
    }
    const int64_t plane = xd * xh * xw;
    for (int64_t od = 0; od < y.shape[2]; ++od) {
      for (int64_t oh = 0; oh < y.shape[3]; ++oh) {
        for (int64_t ow = 0; ow < y.shape[4]; ++ow) {
          const int64_t p = index_at(ip, n * indices.strides[0] + c * indices.strides[1] +
                                             od * indices.strides[2] + oh * indices.strides[3] +
                                             ow * indices.strides[4]);
          if (p < 0 || p >= plane) continue;
          const int64_t pz = p / (xh * xw), py = p / xw % xh, px = p % xw;
          if (!windows[0].contains(od, pz) || !windows[1].contains(oh, py) ||
              !windows[2].contains(ow, px)) {
            continue;
          }
          gx[x_base + pz * x.strides[2] + py * x.strides[3] + px * x.strides[4]] +=
              gy[n * y.strides[0] + c * y.strides[1] + od * y.strides[2] + oh * y.strides[3] +
                 ow * y.strides[4]];
        }
      }
    }
  }
};

bool empty(const hal_tensor_desc_t& tensor) {
  for (uint32_t d = 0; d < tensor.rank; ++d) {
    if (tensor.shape[d] == 0) return true;
  }
  return false;
}

}  // namespace

std::unique_ptr<OpPlan> plan_max_pooling(const hal_op_pooling_desc_t& desc, Decline& decline) {
  if (desc.x.dtype != HAL_DTYPE_F32 || desc.y.dtype != HAL_DTYPE_F32) {
    decline.reason = std::string("max pooling of x=") + dtype_text(desc.x.dtype) +
                     " y=" + dtype_text(desc.y.dtype) + ": the cpu plugin's loops take f32 only";
    return nullptr;
  }
  if (empty(desc.x) || empty(desc.y)) {
    decline.reason = "an empty tensor is left to the portable implementation";
    return nullptr;
  }
  auto pooling = std::make_shared<MaxPooling>();
  const uint32_t sd = desc.spatial_dims;
  pooling->x = max_pooling_canonical(desc.x, desc.layout, sd);
  pooling->y = max_pooling_canonical(desc.y, desc.layout, sd);
  pooling->with_indices = (desc.flags & HAL_POOLING_INDICES) != 0;
  if (pooling->with_indices) {
    pooling->indices = max_pooling_canonical(desc.indices, desc.layout, sd);
    pooling->indices_i64 = desc.indices.dtype == HAL_DTYPE_I64;
  }
  for (uint32_t s = 0; s < sd; ++s) {
    Windows& w = pooling->windows[3 - sd + s];
    w.in = pooling->x.shape[2 + 3 - sd + s];
    w.out = pooling->y.shape[2 + 3 - sd + s];
    w.adaptive = (desc.flags & HAL_POOLING_ADAPTIVE) != 0;
    w.kernel = desc.kernel[s];
    w.stride = desc.stride[s];
    w.dilation = desc.dilation[s];
    w.pad = desc.pad_begin[s];
  }
  const uint64_t planes = static_cast<uint64_t>(pooling->x.shape[0] * pooling->x.shape[1]);
  const int64_t channels = pooling->x.shape[1];
  if (desc.header.kind == HAL_OP_POOLING) {
    // Operands: 0 x, 1 y, 2 indices.
    return std::make_unique<NativePlan>(
        3, [pooling, planes, channels](ThreadPool& pool, void* const* operands,
                                       const hal_op_scalar_t*) {
          const auto* x = static_cast<const float*>(operands[0]);
          auto* y = static_cast<float*>(operands[1]);
          parallel_items(pool, planes, [&](uint64_t item, uint32_t) {
            const auto plane = static_cast<int64_t>(item);
            pooling->forward(plane / channels, plane % channels, x, y, operands[2]);
          });
        });
  }
  if (!pooling->with_indices) {  // the rules refuse it; said here too
    decline.reason = "a max pooling backward needs the forward's indices";
    return nullptr;
  }
  // Operands: 0 grad_y, 1 indices, 2 grad_x.
  return std::make_unique<NativePlan>(
      3,
      [pooling, planes, channels](ThreadPool& pool, void* const* operands, const hal_op_scalar_t*) {
        const auto* gy = static_cast<const float*>(operands[0]);
        auto* gx = static_cast<float*>(operands[2]);
        parallel_items(pool, planes, [&](uint64_t item, uint32_t) {
          const auto plane = static_cast<int64_t>(item);
          pooling->backward(plane / channels, plane % channels, gy, operands[1], gx);
        });
      });
}

}  // namespace hal::cpu::ops
