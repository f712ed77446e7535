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
// Each window's taps inside x are found once per plan (MaxPoolTaps), so
// neither loop checks bounds per tap nor divides: per-tap checks and the
// backward's divisions (from the flat index back to (d, h, w)) made these
// loops 1.2-2x slower than PyTorch's CPU kernels on ResNet-18's pooling.
// f32 tensors, i32 or i64 indices, any layout and strides, fixed or
// adaptive windows; other dtypes and empty tensors are declined for the
// portable implementation.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

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
};

// The taps inside x of each window of one dimension: window o's first such
// position and their count (0: none), |step| apart.
struct MaxPoolTaps {
  std::vector<int64_t> first, count;
  int64_t step = 1;

  explicit MaxPoolTaps(const Windows& w = Windows{}) : step(w.step()) {
    first.assign(static_cast<size_t>(w.out), 0);
    count.assign(static_cast<size_t>(w.out), 0);
    for (int64_t o = 0; o < w.out; ++o) {
      const int64_t start = w.start(o);
      // The first tap at or past position 0, and the first at or past |in|.
      const int64_t lo = start >= 0 ? 0 : (-start + step - 1) / step;
      const int64_t hi =
          std::min(w.taps(o), start >= w.in ? int64_t{0} : (w.in - start + step - 1) / step);
      if (hi > lo) {
        first[static_cast<size_t>(o)] = start + lo * step;
        count[static_cast<size_t>(o)] = hi - lo;
      }
    }
  }
  int64_t first_at(int64_t o) const { return first[static_cast<size_t>(o)]; }
  int64_t count_at(int64_t o) const { return count[static_cast<size_t>(o)]; }
};

struct MaxPooling {
  Canonical x, y, indices;
  MaxPoolTaps taps[3];  // D, H, W
  bool with_indices = false;
  bool indices_i64 = false;

  int64_t index_at(const void* base, int64_t offset) const {
    return indices_i64 ? static_cast<const int64_t*>(base)[offset]
                       : static_cast<const int32_t*>(base)[offset];
  }

  // One (n, c) plane. |kUnitW|: x's W stride is 1 (NCHW), so the innermost
  // loop reads consecutive floats.
  template <bool kUnitW>
  void forward(int64_t n, int64_t c, const float* xp, float* yp, void* ip) const {
    const float* plane = xp + n * x.strides[0] + c * x.strides[1];
    const int64_t xh = x.shape[3], xw = x.shape[4];
    const int64_t sx = kUnitW ? 1 : x.strides[4];
    const MaxPoolTaps &td = taps[0], &th = taps[1], &tw = taps[2];
    const int64_t y_base = n * y.strides[0] + c * y.strides[1];
    const int64_t i_base = n * indices.strides[0] + c * indices.strides[1];
    for (int64_t od = 0; od < y.shape[2]; ++od) {
      const int64_t d0 = td.first_at(od), dn = td.count_at(od);
      for (int64_t oh = 0; oh < y.shape[3]; ++oh) {
        const int64_t h0 = th.first_at(oh), hn = dn == 0 ? 0 : th.count_at(oh);
        for (int64_t ow = 0; ow < y.shape[4]; ++ow) {
          const int64_t w0 = tw.first_at(ow), wn = hn == 0 ? 0 : tw.count_at(ow);
          float best = -std::numeric_limits<float>::infinity();
          int64_t best_index = -1;
          if (wn > 0) {
            best = plane[d0 * x.strides[2] + h0 * x.strides[3] + w0 * sx];
            best_index = (d0 * xh + h0) * xw + w0;
          }
          for (int64_t a = 0; a < dn && wn > 0; ++a) {
            const int64_t pz = d0 + a * td.step;
            for (int64_t b = 0; b < hn; ++b) {
              const int64_t py = h0 + b * th.step;
              const float* row = plane + pz * x.strides[2] + py * x.strides[3];
              const int64_t row_index = (pz * xh + py) * xw;
              for (int64_t t = 0; t < wn; ++t) {
                const int64_t px = w0 + t * tw.step;
                const float v = row[px * sx];
                // A larger element or a NaN (the last NaN wins); the first
                // tap, compared with itself, changes nothing. Selects, not a
                // branch: on random data the branch is mispredicted often.
                const bool take = v > best || v != v;
                best = take ? v : best;
                best_index = take ? row_index + px : best_index;
              }
            }
          }
          yp[y_base + od * y.strides[2] + oh * y.strides[3] + ow * y.strides[4]] = best;
          if (with_indices) {
            const int64_t at = i_base + od * indices.strides[2] + oh * indices.strides[3] +
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

  // The offset in an x plane of flat position |p| when it is a tap of the
  // window (od, oh, ow), else -1. p can lie only in the window's row
  // (pz, py) where its column p - (pz * H + py) * W falls among the row's
  // taps: found by walking the window's rows, with no division.
  int64_t offset_in_window(int64_t p, int64_t od, int64_t oh, int64_t ow) const {
    const MaxPoolTaps &td = taps[0], &th = taps[1], &tw = taps[2];
    const int64_t d0 = td.first_at(od), dn = td.count_at(od);
    const int64_t h0 = th.first_at(oh), hn = th.count_at(oh);
    const int64_t w0 = tw.first_at(ow), wn = tw.count_at(ow);
    const int64_t w_end = w0 + (wn - 1) * tw.step + 1;
    if (p < 0 || p >= x.shape[2] * x.shape[3] * x.shape[4]) return -1;  // no overflow below
    for (int64_t a = 0; a < dn; ++a) {
      const int64_t pz = d0 + a * td.step;
      for (int64_t b = 0; b < hn && wn > 0; ++b) {
        const int64_t py = h0 + b * th.step;
        const int64_t px = p - (pz * x.shape[3] + py) * x.shape[4];
        if (px < w0 || px >= w_end) continue;
        if (tw.step != 1 && (px - w0) % tw.step != 0) return -1;
        return pz * x.strides[2] + py * x.strides[3] + px * x.strides[4];
      }
    }
    return -1;
  }

  // Whether every window is a plain 2-D box (no depth, no dilation): the
  // backward then finds an index's row by one division instead of walking
  // the window's rows, whose data-dependent branches cost more than the rest
  // of the loop.
  bool plain_2d() const {
    return x.shape[2] == 1 && y.shape[2] == 1 && taps[1].step == 1 && taps[2].step == 1;
  }

  // The backward of a plain 2-D box: index p is in window (oh, ow) when its
  // row py = p / W and column px = p - py * W fall in the window's taps;
  // unsigned comparisons reject p outside the plane and rows or columns
  // outside the window.
  void backward_plain_2d(int64_t n, int64_t c, const float* gy, const void* ip,
                         float* plane) const {
    const int64_t xw = x.shape[4];
    const auto plane_size = static_cast<uint64_t>(x.shape[3] * xw);
    const bool narrow = plane_size <= UINT32_MAX;
    const auto w32 = static_cast<uint32_t>(xw);
    const MaxPoolTaps &th = taps[1], &tw = taps[2];
    const int64_t y_base = n * y.strides[0] + c * y.strides[1];
    const int64_t i_base = n * indices.strides[0] + c * indices.strides[1];
    for (int64_t oh = 0; oh < y.shape[3]; ++oh) {
      const int64_t h0 = th.first_at(oh);
      const auto hn = static_cast<uint64_t>(th.count_at(oh));
      for (int64_t ow = 0; ow < y.shape[4]; ++ow) {
        const int64_t p = index_at(ip, i_base + oh * indices.strides[3] + ow * indices.strides[4]);
        if (static_cast<uint64_t>(p) >= plane_size) continue;
        // One division (32-bit where the plane allows: several times cheaper than 64-bit).
        const int64_t py = narrow ? static_cast<int64_t>(static_cast<uint32_t>(p) / w32) : p / xw;
        const int64_t px = p - py * xw;
        if (static_cast<uint64_t>(py - h0) >= hn ||
            static_cast<uint64_t>(px - tw.first_at(ow)) >= static_cast<uint64_t>(tw.count_at(ow))) {
          continue;
        }
        plane[py * x.strides[3] + px * x.strides[4]] +=
            gy[y_base + oh * y.strides[3] + ow * y.strides[4]];
      }
    }
  }

  // |gy| has y's layout, |gx| x's.
  void backward(int64_t n, int64_t c, const float* gy, const void* ip, float* gx) const {
    float* plane = gx + n * x.strides[0] + c * x.strides[1];
    for (int64_t pz = 0; pz < x.shape[2]; ++pz) {
      for (int64_t py = 0; py < x.shape[3]; ++py) {
        float* row = plane + pz * x.strides[2] + py * x.strides[3];
        if (x.strides[4] == 1) {
          std::fill(row, row + x.shape[4], 0.0f);
        } else {
          for (int64_t px = 0; px < x.shape[4]; ++px) row[px * x.strides[4]] = 0.0f;
        }
      }
    }
    if (plain_2d()) {
      backward_plain_2d(n, c, gy, ip, plane);
      return;
    }
    const int64_t y_base = n * y.strides[0] + c * y.strides[1];
    const int64_t i_base = n * indices.strides[0] + c * indices.strides[1];
    for (int64_t od = 0; od < y.shape[2]; ++od) {
      for (int64_t oh = 0; oh < y.shape[3]; ++oh) {
        for (int64_t ow = 0; ow < y.shape[4]; ++ow) {
          const int64_t p = index_at(ip, i_base + od * indices.strides[2] +
                                             oh * indices.strides[3] + ow * indices.strides[4]);
          const int64_t at = offset_in_window(p, od, oh, ow);
          if (at < 0) continue;
          plane[at] += gy[y_base + od * y.strides[2] + oh * y.strides[3] + ow * y.strides[4]];
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
  for (uint32_t d = 0; d < 3; ++d) {
    Windows w;  // a dimension the tensors lack: one window of one tap
    w.in = pooling->x.shape[2 + d];
    w.out = pooling->y.shape[2 + d];
    if (d >= 3 - sd) {
      const uint32_t s = d - (3 - sd);
      w.adaptive = (desc.flags & HAL_POOLING_ADAPTIVE) != 0;
      w.kernel = desc.kernel[s];
      w.stride = desc.stride[s];
      w.dilation = desc.dilation[s];
      w.pad = desc.pad_begin[s];
    }
    pooling->taps[d] = MaxPoolTaps(w);
  }
  const uint64_t planes = static_cast<uint64_t>(pooling->x.shape[0] * pooling->x.shape[1]);
  const int64_t channels = pooling->x.shape[1];
  const bool unit_w = pooling->x.strides[4] == 1;
  if (desc.header.kind == HAL_OP_POOLING) {
    // Operands: 0 x, 1 y, 2 indices.
    return std::make_unique<NativePlan>(
        3, [pooling, planes, channels, unit_w](ThreadPool& pool, void* const* operands,
                                               const hal_op_scalar_t*) {
          const auto* x = static_cast<const float*>(operands[0]);
          auto* y = static_cast<float*>(operands[1]);
          parallel_items(pool, planes, [&](uint64_t item, uint32_t) {
            const auto plane = static_cast<int64_t>(item);
            if (unit_w) {
              pooling->forward<true>(plane / channels, plane % channels, x, y, operands[2]);
            } else {
              pooling->forward<false>(plane / channels, plane % channels, x, y, operands[2]);
            }
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
