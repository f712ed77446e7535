// Portable batch and group norm: kernels/channel_norm.hal. Statistics and
// gradient sums run per segment (a channel, or a sample's group) in fixed
// chunks summed in order (workspace), then one element-wise pass.
#include "launch.hpp"
#include "portable_constants.hpp"
#include "registry.hpp"

#include "hal_ops/spatial.hpp"
#include "hal_ops/tensor.hpp"

#include <algorithm>

namespace hal::ops::portable {

namespace {

constexpr const char* kChannelNormSource = "channel_norm";
// The kernels' chunk, segment kinds and flags (ops/CMakeLists.txt's table).
constexpr int64_t kChunk = constants::CN_CHUNK;
constexpr int kSegChannel = constants::CN_SEG_CHANNEL;
constexpr int kSegGroup = constants::CN_SEG_GROUP;
constexpr int kFlagScale = constants::CN_SCALE;
constexpr int kFlagShift = constants::CN_SHIFT;
constexpr int kFlagRelu = constants::CN_RELU;
constexpr int kFlagTraining = constants::CN_TRAINING;

int64_t chunks_of(int64_t m) {
  return (m + kChunk - 1) / kChunk;
}

// The tensors of x's shape as [N, C, D, H, W] with their spatial dimensions
// merged into 3 (false when they do not merge).
bool canonical_views(hal_channel_layout_t layout, const hal_tensor_desc_t& x,
                     std::initializer_list<const hal_tensor_desc_t*> tensors,
                     std::vector<Canonical5>* out) {
  const uint32_t rank = x.rank;
  const uint32_t channel = channel_dim(layout, rank);
  const auto spatial = [&](const hal_tensor_desc_t& tensor) {
    hal_tensor_desc_t view{};
    view.dtype = tensor.dtype;
    for (uint32_t d = 1; d < rank; ++d) {
      if (d == channel) continue;
      view.shape[view.rank] = tensor.shape[d];
      view.strides[view.rank] = tensor.strides[d];
      ++view.rank;
    }
    return view;
  };
  std::vector<hal_tensor_desc_t> views;
  for (const hal_tensor_desc_t* tensor : tensors) views.push_back(spatial(*tensor));
  while (views.size() < 4) views.push_back(views.front());
  MergedViews merged;
  if (!merge_views(views[0], {&views[0], &views[1], &views[2], &views[3]}, &merged) ||
      merged.shape[0] != 1) {
    return false;
  }
  size_t v = 0;
  for (const hal_tensor_desc_t* tensor : tensors) {
    Canonical5 c;
    c.dtype = tensor->dtype;
    c.shape = {tensor->shape[0], tensor->shape[channel], merged.shape[1], merged.shape[2],
               merged.shape[3]};
    c.strides = {tensor->strides[0], tensor->strides[channel], merged.strides[v][1],
                 merged.strides[v][2], merged.strides[v][3]};
    out->push_back(c);
    ++v;
  }
  return true;
}

void push_view(KernelArgs& args, const void* pointer, const Canonical5& tensor) {
  args.pointer(pointer).i32(tensor.dtype);
  for (int64_t stride : tensor.strides) args.i64(stride);
}

hal_result_t launch_items(KernelArgs& args, hal_kernel_t kernel, hal_stream_t stream, int64_t items,
                          uint32_t block = 128) {
  if (items <= 0) return HAL_SUCCESS;
  return args.launch(kernel, stream, linear_config(items, block));
}

// The kernels of the module this plan uses.
struct Kernels {
  hal_kernel_t chunks = nullptr, finalize = nullptr, load_stats = nullptr, apply = nullptr;
  hal_kernel_t backward_chunks = nullptr, backward_finalize = nullptr, backward_apply = nullptr;
};

bool load_kernels(const PlanRequest& request, bool backward, Kernels* k, std::string* decline) {
  const auto get = [&](const char* name, hal_kernel_t* out) {
    *out = portable_kernel(request, kChannelNormSource, name, decline);
    return *out != nullptr;
  };
  if (!get("cn_load_stats", &k->load_stats)) return false;
  if (!backward) {
    return get("cn_chunks", &k->chunks) && get("cn_finalize", &k->finalize) &&
           get("cn_apply", &k->apply);
  }
  return get("cn_backward_chunks", &k->backward_chunks) &&
         get("cn_backward_finalize", &k->backward_finalize) &&
         get("cn_backward_apply", &k->backward_apply);
}

// The workspace, in floats: statistics, chunk sums, coefficients.
struct Workspace {
  int64_t mean = 0, rstd = 0, part0 = 0, part1 = 0, coef0 = 0, coef1 = 0, floats = 0;
};

Workspace workspace_layout(int64_t stats, int64_t parts, int64_t coefs) {
  Workspace w;
  w.mean = 0;
  w.rstd = stats;
  w.part0 = 2 * stats;
  w.part1 = w.part0 + parts;
  w.coef0 = w.part1 + parts;
  w.coef1 = w.coef0 + coefs;
  w.floats = w.coef1 + coefs;
  return w;
}

// What the batch and group norm plans share: the views and the geometry.
struct Shape {
  Canonical5 x, y, grad_y, grad_x;  // y: the forward's output (relu backward reads it)
  int64_t nb = 0, channels = 0, positions = 0, groups = 1;
};

class ChannelNormPlan final : public PlannedOp {
 public:
  ChannelNormPlan(Kernels kernels, Shape shape, bool group_norm, bool backward, uint32_t flags,
                  float epsilon, hal_op_batch_norm_desc_t bn, hal_op_group_norm_desc_t gn)
      : k_(kernels),
        s_(std::move(shape)),
        group_norm_(group_norm),
        backward_(backward),
        flags_(flags),
        epsilon_(epsilon),
        bn_(bn),
        gn_(gn) {
    const int64_t cg = s_.channels / s_.groups;
    // Statistics segments and their sizes.
    stats_ = group_norm_ ? s_.nb * s_.groups : s_.channels;
    stat_m_ = group_norm_ ? cg * s_.positions : s_.nb * s_.positions;
    int64_t parts = stats_ * chunks_of(stat_m_);
    // Group norm's parameter gradients are per channel over (n, positions).
    if (group_norm_ && backward_)
      parts = std::max(parts, s_.channels * chunks_of(s_.nb * s_.positions));
    ws_ = workspace_layout(stats_, parts, backward_ ? stats_ : 0);
  }

  size_t workspace_bytes() const override {
    return static_cast<size_t>(ws_.floats) * sizeof(float);
  }

  hal_result_t execute(const ExecContext& context) const override {
    return backward_ ? execute_backward(context) : execute_forward(context);
  }

 private:
  bool has(uint32_t bn_flag, uint32_t gn_flag) const {
    return (flags_ & (group_norm_ ? gn_flag : bn_flag)) != 0;
  }

  int kernel_flags() const {
    int flags = 0;
    if (has(HAL_BATCH_NORM_SCALE, HAL_GROUP_NORM_SCALE)) flags |= kFlagScale;
    if (has(HAL_BATCH_NORM_SHIFT, HAL_GROUP_NORM_SHIFT)) flags |= kFlagShift;
    if (!group_norm_ && (flags_ & HAL_BATCH_NORM_RELU) != 0) flags |= kFlagRelu;
    if (!group_norm_ && (flags_ & HAL_BATCH_NORM_TRAINING) != 0) flags |= kFlagTraining;
    return flags;
  }

  bool training() const { return group_norm_ || (flags_ & HAL_BATCH_NORM_TRAINING) != 0; }

  // Batch norm's running statistics (mode 0), its saved ones (1), group
  // norm's saved ones (2) into the workspace.
  hal_result_t load_stats(const ExecContext& context, int mode, int mean_operand,
                          int second_operand) const {
    const hal_tensor_desc_t& mean = mode == 0   ? bn_.running_mean
                                    : mode == 1 ? bn_.saved_mean
                                                : gn_.mean;
    const hal_tensor_desc_t& second = mode == 0   ? bn_.running_var
                                      : mode == 1 ? bn_.saved_rstd
                                                  : gn_.rstd;
    KernelArgs args;
    args.pointer(context.operands[mean_operand]).i32(mean.dtype).i64(mean.strides[0]);
    args.i64(mode == 2 ? mean.strides[1] : 0);
    args.pointer(context.operands[second_operand]).i32(second.dtype).i64(second.strides[0]);
    args.i64(mode == 2 ? second.strides[1] : 0);
    args.i64(stats_).i64(s_.groups).f32(epsilon_).i32(mode);
    args.pointer(context.workspace).i64(ws_.mean).i64(ws_.rstd);
    return launch_items(args, k_.load_stats, context.stream, stats_, 64);
  }

  hal_result_t execute_forward(const ExecContext& context) const {
    // Operands: BN 0 x, 1 scale, 2 shift, 3 running_mean, 4 running_var,
    // 5 y, 6 saved_mean, 7 saved_rstd; GN 0 x, 1 scale, 2 shift, 3 y,
    // 4 mean, 5 rstd.
    void* const x = context.operands[0];
    void* const y = context.operands[group_norm_ ? 3 : 5];
    const int64_t cg = s_.channels / s_.groups;
    if (training()) {
      const int64_t chunks = chunks_of(stat_m_);
      for (int pass = 0; pass < 2; ++pass) {
        KernelArgs args;
        push_view(args, x, s_.x);
        args.i64(s_.x.shape[2]).i64(s_.x.shape[3]).i64(s_.x.shape[4]);
        args.i64(stats_).i64(stat_m_).i64(chunks).i64(s_.groups).i64(cg);
        args.i32(group_norm_ ? kSegGroup : kSegChannel).i32(pass);
        args.pointer(context.workspace).i64(ws_.part0).i64(ws_.part1);
        if (hal_result_t r = launch_items(args, k_.chunks, context.stream, stats_ * chunks, 64);
            r != HAL_SUCCESS)
          return r;
      }
      const bool save = group_norm_ ? (flags_ & HAL_GROUP_NORM_SAVE_STATS) != 0
                                    : (flags_ & HAL_BATCH_NORM_SAVE_STATS) != 0;
      const bool update = !group_norm_ && (flags_ & HAL_BATCH_NORM_UPDATE_RUNNING) != 0;
      const hal_tensor_desc_t& mean = group_norm_ ? gn_.mean : bn_.saved_mean;
      const hal_tensor_desc_t& rstd = group_norm_ ? gn_.rstd : bn_.saved_rstd;
      void* const mean_ptr = save ? context.operands[group_norm_ ? 4 : 6] : x;
      void* const rstd_ptr = save ? context.operands[group_norm_ ? 5 : 7] : x;
      KernelArgs args;
      args.pointer(context.workspace).i64(ws_.part0).i64(ws_.part1).i64(ws_.mean).i64(ws_.rstd);
      args.i64(stats_).i64(stat_m_).i64(chunks).f32(epsilon_);
      args.pointer(mean_ptr).i64(save ? mean.strides[0] : 0);
      args.i64(save && group_norm_ ? mean.strides[1] : 0);
      args.pointer(rstd_ptr).i64(save ? rstd.strides[0] : 0);
      args.i64(save && group_norm_ ? rstd.strides[1] : 0);
      args.i32(save ? 1 : 0).i64(s_.groups).i32(group_norm_ ? 1 : 0);
      args.pointer(update ? context.operands[3] : x)
          .i32(update ? bn_.running_mean.dtype : 0)
          .i64(update ? bn_.running_mean.strides[0] : 0);
      args.pointer(update ? context.operands[4] : x)
          .i32(update ? bn_.running_var.dtype : 0)
          .i64(update ? bn_.running_var.strides[0] : 0);
      args.i32(update ? 1 : 0).f32(update ? static_cast<float>(context.scalars[0].f64) : 0.0f);
      if (hal_result_t r = launch_items(args, k_.finalize, context.stream, stats_, 64);
          r != HAL_SUCCESS)
        return r;
    } else if (hal_result_t r = load_stats(context, 0, 3, 4); r != HAL_SUCCESS) {
      return r;
    }
    const int flags = kernel_flags();
    const hal_tensor_desc_t& scale = group_norm_ ? gn_.scale : bn_.scale;
    const hal_tensor_desc_t& shift = group_norm_ ? gn_.shift : bn_.shift;
    KernelArgs args;
    push_view(args, x, s_.x);
    push_view(args, y, s_.y);
    args.pointer((flags & kFlagScale) ? context.operands[1] : x)
        .i32((flags & kFlagScale) ? scale.dtype : 0)
        .i64((flags & kFlagScale) ? scale.strides[0] : 0);
    args.pointer((flags & kFlagShift) ? context.operands[2] : x)
        .i32((flags & kFlagShift) ? shift.dtype : 0)
        .i64((flags & kFlagShift) ? shift.strides[0] : 0);
    args.pointer(context.workspace).i64(ws_.mean).i64(ws_.rstd);
    args.i64(s_.nb).i64(s_.channels).i64(s_.x.shape[2]).i64(s_.x.shape[3]).i64(s_.x.shape[4]);
    args.i64(s_.groups).i32(group_norm_ ? 1 : 0).i32(flags);
    return launch_items(args, k_.apply, context.stream, s_.nb * s_.channels * s_.positions);
  }

  // The backward sums of |segments| segments of m elements (seg layout)
  // and their finalize (parameter gradients and/or grad_x coefficients).
  hal_result_t backward_sums(const ExecContext& context, void* y, int seg, int scaled,
                             int64_t segments, int64_t m, void* grad_scale, void* grad_shift,
                             bool coefficients) const {
    const int64_t chunks = chunks_of(m);
    const int64_t cg = s_.channels / s_.groups;
    const hal_tensor_desc_t& scale = group_norm_ ? gn_.scale : bn_.scale;
    const int flags = kernel_flags();
    void* const x = context.operands[0];
    {
      KernelArgs args;
      push_view(args, x, s_.x);
      push_view(args, context.operands[1], s_.grad_y);
      push_view(args, y != nullptr ? y : x, (flags & kFlagRelu) ? s_.y : s_.x);
      args.pointer((flags & kFlagScale) ? context.operands[2] : x)
          .i32((flags & kFlagScale) ? scale.dtype : 0)
          .i64((flags & kFlagScale) ? scale.strides[0] : 0);
      args.i64(s_.x.shape[2]).i64(s_.x.shape[3]).i64(s_.x.shape[4]);
      args.i64(segments).i64(m).i64(chunks).i64(s_.groups).i64(cg);
      args.i32(seg).i32(group_norm_ ? 1 : 0).i32(scaled).i32(flags);
      args.pointer(context.workspace).i64(ws_.mean).i64(ws_.rstd).i64(ws_.part0).i64(ws_.part1);
      if (hal_result_t r =
              launch_items(args, k_.backward_chunks, context.stream, segments * chunks, 64);
          r != HAL_SUCCESS)
        return r;
    }
    const hal_tensor_desc_t& gs = group_norm_ ? gn_.grad_scale : bn_.grad_scale;
    const hal_tensor_desc_t& gb = group_norm_ ? gn_.grad_shift : bn_.grad_shift;
    KernelArgs args;
    args.pointer(context.workspace).i64(ws_.part0).i64(ws_.part1).i64(segments).i64(m).i64(chunks);
    args.pointer(grad_scale != nullptr ? grad_scale : x)
        .i32(grad_scale != nullptr ? gs.dtype : 0)
        .i64(grad_scale != nullptr ? gs.strides[0] : 0)
        .i32(grad_scale != nullptr ? 1 : 0);
    args.pointer(grad_shift != nullptr ? grad_shift : x)
        .i32(grad_shift != nullptr ? gb.dtype : 0)
        .i64(grad_shift != nullptr ? gb.strides[0] : 0)
        .i32(grad_shift != nullptr ? 1 : 0);
    args.i64(coefficients ? ws_.coef0 : -1).i64(coefficients ? ws_.coef1 : -1);
    return launch_items(args, k_.backward_finalize, context.stream, segments, 64);
  }

  hal_result_t execute_backward(const ExecContext& context) const {
    // Operands: BN 0 x, 1 grad_y, 2 scale, 3 saved_mean, 4 saved_rstd,
    // 5 running_mean, 6 running_var, 7 y, 8 grad_x, 9 grad_scale,
    // 10 grad_shift; GN 0 x, 1 grad_y, 2 scale, 3 mean, 4 rstd, 5 grad_x,
    // 6 grad_scale, 7 grad_shift.
    void* const x = context.operands[0];
    void* const grad_x = context.operands[group_norm_ ? 5 : 8];
    void* const y = group_norm_ ? nullptr : context.operands[7];
    void* const grad_scale = context.operands[group_norm_ ? 6 : 9];
    void* const grad_shift = context.operands[group_norm_ ? 7 : 10];
    hal_result_t r = group_norm_  ? load_stats(context, 2, 3, 4)
                     : training() ? load_stats(context, 1, 3, 4)
                                  : load_stats(context, 0, 5, 6);
    if (r != HAL_SUCCESS) return r;
    if (group_norm_) {
      const int64_t cg = s_.channels / s_.groups;
      r = backward_sums(context, nullptr, kSegGroup, 1, stats_, cg * s_.positions, nullptr, nullptr,
                        true);
      if (r != HAL_SUCCESS) return r;
      if (grad_scale != nullptr || grad_shift != nullptr) {
        // Per channel; reuses the chunk arrays only (the coefficients stay).
        r = backward_sums(context, nullptr, kSegChannel, 0, s_.channels, s_.nb * s_.positions,
                          grad_scale, grad_shift, false);
        if (r != HAL_SUCCESS) return r;
      }
    } else if (training() || grad_scale != nullptr || grad_shift != nullptr) {
      r = backward_sums(context, y, kSegChannel, 0, s_.channels, s_.nb * s_.positions, grad_scale,
                        grad_shift, training());
      if (r != HAL_SUCCESS) return r;
    }
    const int flags = kernel_flags();
    const hal_tensor_desc_t& scale = group_norm_ ? gn_.scale : bn_.scale;
    KernelArgs args;
    push_view(args, x, s_.x);
    push_view(args, context.operands[1], s_.grad_y);
    push_view(args, y != nullptr ? y : x, (flags & kFlagRelu) ? s_.y : s_.x);
    push_view(args, grad_x, s_.grad_x);
    args.pointer((flags & kFlagScale) ? context.operands[2] : x)
        .i32((flags & kFlagScale) ? scale.dtype : 0)
        .i64((flags & kFlagScale) ? scale.strides[0] : 0);
    args.pointer(context.workspace).i64(ws_.mean).i64(ws_.rstd).i64(ws_.coef0).i64(ws_.coef1);
    args.i64(s_.nb).i64(s_.channels).i64(s_.x.shape[2]).i64(s_.x.shape[3]).i64(s_.x.shape[4]);
    args.i64(s_.groups).i32(group_norm_ ? 1 : 0).i32(flags);
    return launch_items(args, k_.backward_apply, context.stream,
                        s_.nb * s_.channels * s_.positions);
  }

  Kernels k_;
  Shape s_;
  bool group_norm_;
  bool backward_;
  uint32_t flags_;
  float epsilon_;
  hal_op_batch_norm_desc_t bn_;
  hal_op_group_norm_desc_t gn_;
  int64_t stats_ = 0, stat_m_ = 0;
  Workspace ws_;
};

constexpr const char* kSpatialMergeDecline =
    "the spatial dimensions need more than 3 dimensions after merging";

class BatchNorm final : public Implementation {
 public:
  const char* name() const override { return "portable"; }
  std::unique_ptr<PlannedOp> plan(const PlanRequest& request, std::string* decline) const override {
    const auto& desc = *reinterpret_cast<const hal_op_batch_norm_desc_t*>(request.desc);
    const bool backward = desc.header.kind == HAL_OP_BATCH_NORM_BACKWARD;
    const bool relu = (desc.flags & HAL_BATCH_NORM_RELU) != 0;
    Shape shape;
    std::vector<Canonical5> views;
    const bool merged =
        backward ? canonical_views(desc.layout, desc.x,
                                   {&desc.x, &desc.grad_y, &desc.grad_x, relu ? &desc.y : &desc.x},
                                   &views)
                 : canonical_views(desc.layout, desc.x, {&desc.x, &desc.y}, &views);
    if (!merged) {
      *decline = kSpatialMergeDecline;
      return nullptr;
    }
    shape.x = views[0];
    if (backward) {
      shape.grad_y = views[1];
      shape.grad_x = views[2];
      shape.y = views[3];
    } else {
      shape.y = views[1];
    }
    shape.nb = shape.x.shape[0];
    shape.channels = shape.x.shape[1];
    shape.positions = shape.x.shape[2] * shape.x.shape[3] * shape.x.shape[4];
    Kernels kernels;
    if (!load_kernels(request, backward, &kernels, decline)) return nullptr;
    return std::make_unique<ChannelNormPlan>(kernels, std::move(shape), false, backward, desc.flags,
                                             desc.epsilon, desc, hal_op_group_norm_desc_t{});
  }
};

class GroupNorm final : public Implementation {
 public:
  const char* name() const override { return "portable"; }
  std::unique_ptr<PlannedOp> plan(const PlanRequest& request, std::string* decline) const override {
    const auto& desc = *reinterpret_cast<const hal_op_group_norm_desc_t*>(request.desc);
    const bool backward = desc.header.kind == HAL_OP_GROUP_NORM_BACKWARD;
    Shape shape;
    std::vector<Canonical5> views;
    const bool merged = backward ? canonical_views(desc.layout, desc.x,
                                                   {&desc.x, &desc.grad_y, &desc.grad_x}, &views)
                                 : canonical_views(desc.layout, desc.x, {&desc.x, &desc.y}, &views);
    if (!merged) {
      *decline = kSpatialMergeDecline;
      return nullptr;
    }
    shape.x = views[0];
    if (backward) {
      shape.grad_y = views[1];
      shape.grad_x = views[2];
      shape.y = views[0];
    } else {
      shape.y = views[1];
    }
    shape.nb = shape.x.shape[0];
    shape.channels = shape.x.shape[1];
    shape.positions = shape.x.shape[2] * shape.x.shape[3] * shape.x.shape[4];
    shape.groups = desc.groups;
    Kernels kernels;
    if (!load_kernels(request, backward, &kernels, decline)) return nullptr;
    return std::make_unique<ChannelNormPlan>(kernels, std::move(shape), true, backward, desc.flags,
                                             desc.epsilon, hal_op_batch_norm_desc_t{}, desc);
  }
};

}  // namespace

void add_channel_norm(ImplementationTable& table) {
  static const BatchNorm batch_norm;
  static const GroupNorm group_norm;
  table[HAL_OP_BATCH_NORM].push_back(&batch_norm);
  table[HAL_OP_BATCH_NORM_BACKWARD].push_back(&batch_norm);
  table[HAL_OP_GROUP_NORM].push_back(&group_norm);
  table[HAL_OP_GROUP_NORM_BACKWARD].push_back(&group_norm);
}

}  // namespace hal::ops::portable
