// What every portable op's planner and executor share: kernel arguments,
// grid shapes, and merging tensor views into at most 4 dimensions.
#pragma once

#include "hal_ops/implementation.hpp"

#include <array>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <string>
#include <type_traits>
#include <vector>

namespace hal::ops::portable {

// Kernel arguments in order; values are copied, so temporaries are fine.
class KernelArgs {
 public:
  KernelArgs& pointer(const void* value) { return push(&value, sizeof(value)); }
  KernelArgs& i32(int32_t value) { return push(&value, sizeof(value)); }
  KernelArgs& u32(uint32_t value) { return push(&value, sizeof(value)); }
  KernelArgs& i64(int64_t value) { return push(&value, sizeof(value)); }
  KernelArgs& u64(uint64_t value) { return push(&value, sizeof(value)); }
  KernelArgs& f32(float value) { return push(&value, sizeof(value)); }
  KernelArgs& f64(double value) { return push(&value, sizeof(value)); }

  // Launches |kernel| on |stream| with these arguments.
  hal_result_t launch(hal_kernel_t kernel, hal_stream_t stream,
                      const hal_launch_config_t& config) const;

 private:
  KernelArgs& push(const void* value, size_t size);
  std::vector<std::array<unsigned char, 8>> storage_;
  std::vector<size_t> sizes_;
};

// A launch of |count| work-items (count >= 1) in blocks of |block| along x,
// as a 2-D grid so counts past 2^31 fit: the kernel's linear index is
// global_id(0) + global_id(1) * global_size(0), compared with the count.
hal_launch_config_t linear_config(int64_t count, uint32_t block = 256);

// Views of one shape merged into at most 4 dimensions (outer first; padded
// with size-1 dimensions at the front).
struct MergedViews {
  std::array<int64_t, 4> shape{1, 1, 1, 1};
  std::vector<std::array<int64_t, 4>> strides;  // one per view
};

// Merges the dimensions of |shape| that every view steps through densely
// together, drops size-1 dimensions, and fails (returns false) when more
// than 4 remain. Each view has |shape|'s shape (its strides may be 0).
bool merge_views(const hal_tensor_desc_t& shape,
                 std::initializer_list<const hal_tensor_desc_t*> views, MergedViews* out);

// Why a plan declines when merge_views() fails.
inline constexpr const char* kMergeDecline = "the views need more than 4 dimensions after merging";

// Appends one merged view's kernel arguments: pointer, dtype code, 4 strides
// (the order every elementwise kernel takes a tensor in).
inline void view_args(KernelArgs& args, const void* pointer, hal_dtype_t dtype,
                      const std::array<int64_t, 4>& strides) {
  args.pointer(pointer).i32(dtype);
  for (int64_t stride : strides) args.i64(stride);
}

// Appends a tensor's first four dimensions as they are laid out (the attention
// kernels' views): pointer, dtype code, its own 4 strides.
inline void view_args(KernelArgs& args, const void* pointer, const hal_tensor_desc_t& tensor) {
  args.pointer(pointer).i32(tensor.dtype);
  for (int d = 0; d < 4; ++d) args.i64(tensor.strides[d]);
}

// Appends the inner three merged extents (the outer one follows from the count).
inline KernelArgs& shape_args(KernelArgs& args, const MergedViews& views) {
  return args.i64(views.shape[1]).i64(views.shape[2]).i64(views.shape[3]);
}

// The kernel |name| of the portable source |source_name|, loaded on the
// request's device; on failure |decline| says why and nullptr is returned.
hal_kernel_t portable_kernel(const PlanRequest& request, const char* source_name, const char* name,
                             std::string* decline);

// Whether the device compiles dialect kernels; else |decline| says why.
bool device_runs_dialect(const PlanRequest& request, std::string* decline);

}  // namespace hal::ops::portable
