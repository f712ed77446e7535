// Portable attention: kernels/attention.hal (flash-style; the row kernels are
// barrier-free, attention_forward_tiled stages tiles in group-shared memory;
// see the kernel file for the work split).
#include "launch.hpp"
#include "portable_constants.hpp"
#include "registry.hpp"

#include "hal_ops/tensor.hpp"
#include "hal_util/env.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>

namespace hal::ops::portable {

namespace {

constexpr const char* kAttentionSource = "attention";
// The kernels keep a query (or key) row and its accumulators in registers.
constexpr int64_t kMaxHeadDim = constants::AT_MAX_HEAD_DIM;

enum Operand : int {
  kQ = 0,
  kK = 1,
  kV = 2,
  kOut = 3,
  kLse = 4,
  kCuQ = 5,
  kCuK = 6,
  kSparsity = 7,
  kGradOut = 8,
  kGradQ = 9,
  kGradK = 10,
  kGradV = 11,
};

// attention_forward_tiled's block (AT_TILE x AT_TILE work-items) and static
// shared memory: qs and kvs [AT_TILE][AT_MAX_HEAD_DIM + 1], ss and ps
// [AT_TILE][AT_TILE + 1] (attention.hal). The backward's tiled kernels need
// less: AT_TILE x AT_GQ_ROWS work-items, 33440 (grad_q) and 33984 (grad_kv)
// bytes.
constexpr int64_t kAttentionTile = constants::AT_TILE;
constexpr uint32_t kAttentionTiledThreads = static_cast<uint32_t>(kAttentionTile * kAttentionTile);
constexpr uint64_t kAttentionTiledSharedBytes =
    (2 * kAttentionTile * (kMaxHeadDim + 1) + 2 * kAttentionTile * (kAttentionTile + 1)) *
    sizeof(float);
constexpr int64_t kAttentionGradRows = constants::AT_GQ_ROWS;
constexpr int64_t kAttentionMaxGroups = 65535;

// Which kernels serve a dense plan without varlen (the tiled kernels'
// cases): attention_forward_tiled, attention_grad_q_tiled and
// attention_grad_kv_tiled (group-shared memory) on GPUs and accelerators,
// the barrier-free attention_forward, attention_grad_q and attention_grad_kv
// (one work-item per row) on CPUs, where staging through "shared" memory is
// a copy. Varlen and block-sparse plans take the row kernels.
// HAL_OPS_PORTABLE_ATTENTION=tiled or rows overrides the choice (tests run
// both sets on every device); another value declines the plan (nullopt,
// with |decline| saying why). A device whose blocks cannot hold the forward
// kernel's 256 work-items and 35072 bytes of shared memory (the backward's
// need less) gets the row kernels (forced: a decline).
std::optional<bool> use_tiled_attention(const PlanRequest& request, std::string* decline) {
  const hal_device_properties_t* device = request.properties;
  const bool fits = device != nullptr && device->max_threads_per_block >= kAttentionTiledThreads &&
                    device->max_shared_memory_bytes >= kAttentionTiledSharedBytes;
  const char* forced = hal::util::env("HAL_OPS_PORTABLE_ATTENTION");
  if (forced != nullptr && forced[0] != '\0') {
    if (std::strcmp(forced, "rows") == 0) return false;
    if (std::strcmp(forced, "tiled") != 0) {
      *decline = std::string("HAL_OPS_PORTABLE_ATTENTION is '") + forced +
                 "': not 'tiled', 'rows' or empty";
      return std::nullopt;
    }
    if (!fits) {
      *decline =
          "HAL_OPS_PORTABLE_ATTENTION is 'tiled' but the device's blocks cannot hold its 256 "
          "work-items and " +
          std::to_string(kAttentionTiledSharedBytes) + " bytes of shared memory";
      return std::nullopt;
    }
    return true;
  }
  return fits && device->type != HAL_DEVICE_TYPE_CPU;
}

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}
size_t align16(size_t bytes) {
  return (bytes + 15) / 16 * 16;
}

class AttentionPlan final : public PlannedOp {
 public:
  struct Kernels {
    hal_kernel_t sanitize = nullptr;
    hal_kernel_t forward = nullptr;
    bool tiled = false;  // forward, grad_q and grad_kv are the _tiled kernels
    hal_kernel_t delta = nullptr;
    hal_kernel_t grad_q = nullptr;
    hal_kernel_t grad_kv = nullptr;
  };

  AttentionPlan(const hal_op_attention_desc_t& desc, bool backward, Kernels kernels)
      : desc_(desc), backward_(backward), kernels_(kernels) {
    varlen_ = desc.has_cu_seqlens != 0;
    heads_ = desc.q.shape[2];
    kv_heads_ = desc.k.shape[2];
    dim_ = desc.q.shape[3];
    q_rows_ = desc.q.shape[0] * desc.q.shape[1];
    k_rows_ = desc.k.shape[0] * desc.k.shape[1];
    scale_ = desc.scale != 0.0f ? desc.scale
                                : static_cast<float>(1.0 / std::sqrt(static_cast<double>(dim_)));
    if (desc.sparsity != HAL_ATTENTION_DENSE) {
      const int64_t s_q = varlen_ ? desc.max_seqlen_q : desc.q.shape[1];
      const int64_t s_k = varlen_ ? desc.max_seqlen_k : desc.k.shape[1];
      nqb_ = ceil_div(s_q, desc.block_q);
      nkb_ = ceil_div(s_k, desc.block_k);
    }
    cu_bytes_ = varlen_ ? align16(2 * (static_cast<size_t>(desc.batch) + 1) * sizeof(int32_t)) : 0;
    delta_bytes_ = backward ? static_cast<size_t>(q_rows_ * heads_) * sizeof(float) : 0;
  }

  size_t workspace_bytes() const override { return cu_bytes_ + delta_bytes_; }

  hal_result_t execute(const ExecContext& context) const override {
    void* const* ops = context.operands;
    const void* q = ops[kQ];
    char* workspace = static_cast<char*>(context.workspace);
    // Unused pointer arguments get q: a valid address the kernels never read.
    const void* cu_q = q;
    const void* cu_k = q;
    if (varlen_) {
      cu_q = workspace;
      cu_k = workspace + (desc_.batch + 1) * sizeof(int32_t);
      KernelArgs args;
      args.pointer(ops[kCuQ]).pointer(ops[kCuK]).pointer(cu_q).pointer(cu_k);
      args.i32(static_cast<int32_t>(desc_.batch)).i64(desc_.q.shape[1]).i64(desc_.k.shape[1]);
      if (hal_result_t r = args.launch(kernels_.sanitize, context.stream, linear_config(1, 1));
          r != HAL_SUCCESS)
        return r;
    }
    const void* mask = desc_.sparsity == HAL_ATTENTION_BLOCK_MASK ? ops[kSparsity] : q;
    const void* indices = desc_.sparsity == HAL_ATTENTION_BLOCK_INDICES ? ops[kSparsity] : q;
    // The arguments every row kernel ends with.
    const auto add_geometry = [&](KernelArgs& args, int64_t count) {
      args.pointer(cu_q).pointer(cu_k).i32(static_cast<int32_t>(desc_.batch));
      args.pointer(mask).pointer(indices);
      args.i64(desc_.q.shape[1]).i64(desc_.k.shape[1]);
      args.i32(static_cast<int32_t>(heads_)).i32(static_cast<int32_t>(kv_heads_));
      args.i32(static_cast<int32_t>(dim_)).f32(scale_);
      args.i32(desc_.causal).i32(desc_.sparsity).i32(varlen_ ? 1 : 0);
      args.i64(desc_.block_q).i64(desc_.block_k).i64(nqb_).i64(nkb_);
      args.i32(static_cast<int32_t>(desc_.topk)).i64(count);
    };
    const auto add_lse = [&](KernelArgs& args) {
      args.pointer(ops[kLse]);
      for (int d = 0; d < 3; ++d) args.i64(desc_.lse.strides[d]);
    };
    const int64_t q_count = q_rows_ * heads_;
    const int64_t k_count = k_rows_ * kv_heads_;

    if (!backward_) {
      if (q_count == 0) return HAL_SUCCESS;
      if (kernels_.tiled) return launch_tiled_forward(context);
      KernelArgs args;
      view_args(args, q, desc_.q);
      view_args(args, ops[kK], desc_.k);
      view_args(args, ops[kV], desc_.v);
      view_args(args, ops[kOut], desc_.out);
      add_lse(args);
      add_geometry(args, q_count);
      return args.launch(kernels_.forward, context.stream, linear_config(q_count, 64));
    }

    const void* delta = delta_bytes_ > 0 ? workspace + cu_bytes_ : q;
    if (q_count > 0) {
      KernelArgs args;
      view_args(args, ops[kOut], desc_.out);
      view_args(args, ops[kGradOut], desc_.grad_out);
      args.pointer(delta).i64(desc_.q.shape[1]).i32(static_cast<int32_t>(heads_));
      args.i32(static_cast<int32_t>(dim_)).i64(q_count);
      if (hal_result_t r = args.launch(kernels_.delta, context.stream, linear_config(q_count));
          r != HAL_SUCCESS)
        return r;
      KernelArgs grad_q;
      view_args(grad_q, q, desc_.q);
      view_args(grad_q, ops[kK], desc_.k);
      view_args(grad_q, ops[kV], desc_.v);
      view_args(grad_q, ops[kGradOut], desc_.grad_out);
      view_args(grad_q, ops[kGradQ], desc_.grad_q);
      add_lse(grad_q);
      grad_q.pointer(delta);
      if (kernels_.tiled) {
        add_tiled_geometry(grad_q);
        if (hal_result_t r = launch_tiles(kernels_.grad_q, grad_q, desc_.q.shape[1], heads_,
                                          kAttentionGradRows, context);
            r != HAL_SUCCESS)
          return r;
      } else {
        add_geometry(grad_q, q_count);
        if (hal_result_t r =
                grad_q.launch(kernels_.grad_q, context.stream, linear_config(q_count, 64));
            r != HAL_SUCCESS)
          return r;
      }
    }
    if (k_count == 0) return HAL_SUCCESS;
    // The tiled and row kernels take the same operands; only the geometry and launch differ.
    KernelArgs grad_kv;
    view_args(grad_kv, q, desc_.q);
    view_args(grad_kv, ops[kK], desc_.k);
    view_args(grad_kv, ops[kV], desc_.v);
    view_args(grad_kv, ops[kGradOut], desc_.grad_out);
    grad_kv.pointer(ops[kGradK]).i32(desc_.grad_k.dtype);
    grad_kv.pointer(ops[kGradV]).i32(desc_.grad_v.dtype);
    for (int d = 0; d < 4; ++d) grad_kv.i64(desc_.grad_k.strides[d]);
    add_lse(grad_kv);
    grad_kv.pointer(delta);
    if (kernels_.tiled) {
      add_tiled_geometry(grad_kv);
      return launch_tiles(kernels_.grad_kv, grad_kv, desc_.k.shape[1], kv_heads_,
                          kAttentionGradRows, context);
    }
    add_geometry(grad_kv, k_count);
    return grad_kv.launch(kernels_.grad_kv, context.stream, linear_config(k_count, 64));
  }

 private:
  // attention_forward_tiled: one block per AT_TILE query rows of each
  // (batch, head), in as many launches as the grid limits need (each with
  // its offsets).
  hal_result_t launch_tiled_forward(const ExecContext& context) const {
    void* const* ops = context.operands;
    KernelArgs common;
    view_args(common, ops[kQ], desc_.q);
    view_args(common, ops[kK], desc_.k);
    view_args(common, ops[kV], desc_.v);
    view_args(common, ops[kOut], desc_.out);
    common.pointer(ops[kLse]);
    for (int d = 0; d < 3; ++d) common.i64(desc_.lse.strides[d]);
    add_tiled_geometry(common);
    return launch_tiles(kernels_.forward, common, desc_.q.shape[1], heads_, kAttentionTile,
                        context);
  }

  // The arguments every _tiled kernel takes before its grid offsets.
  void add_tiled_geometry(KernelArgs& args) const {
    args.i64(desc_.q.shape[1]).i64(desc_.k.shape[1]);
    args.i32(static_cast<int32_t>(heads_)).i32(static_cast<int32_t>(kv_heads_));
    args.i32(static_cast<int32_t>(dim_)).f32(scale_).i32(desc_.causal);
  }

  // A _tiled kernel: blocks of (AT_TILE, |rows|) work-items, one per |rows|
  // of the |sequence| rows of each (batch, head of |heads|), in as many
  // launches as the grid limits need (each with its offsets after |common|).
  hal_result_t launch_tiles(hal_kernel_t kernel, const KernelArgs& common, int64_t sequence,
                            int64_t heads, int64_t rows, const ExecContext& context) const {
    const int64_t extents[3] = {ceil_div(sequence, rows), heads, desc_.q.shape[0]};
    hal_launch_config_t config{};
    config.struct_size = sizeof(config);
    config.block[0] = static_cast<uint32_t>(kAttentionTile);
    config.block[1] = static_cast<uint32_t>(rows);
    config.block[2] = 1;
    for (int64_t z = 0; z < extents[2]; z += kAttentionMaxGroups) {
      for (int64_t y = 0; y < extents[1]; y += kAttentionMaxGroups) {
        for (int64_t x = 0; x < extents[0]; x += kAttentionMaxGroups) {
          config.grid[0] = static_cast<uint32_t>(std::min(kAttentionMaxGroups, extents[0] - x));
          config.grid[1] = static_cast<uint32_t>(std::min(kAttentionMaxGroups, extents[1] - y));
          config.grid[2] = static_cast<uint32_t>(std::min(kAttentionMaxGroups, extents[2] - z));
          KernelArgs args = common;
          args.i64(x).i64(y).i64(z);
          if (const hal_result_t r = args.launch(kernel, context.stream, config); r != HAL_SUCCESS)
            return r;
        }
      }
    }
    return HAL_SUCCESS;
  }

  hal_op_attention_desc_t desc_;
  bool backward_;
  Kernels kernels_;
  bool varlen_ = false;
  int64_t heads_ = 0, kv_heads_ = 0, dim_ = 0, q_rows_ = 0, k_rows_ = 0;
  int64_t nqb_ = 0, nkb_ = 0;
  float scale_ = 1.0f;
  size_t cu_bytes_ = 0, delta_bytes_ = 0;
};

class Attention final : public Implementation {
 public:
  const char* name() const override { return "portable"; }
  std::unique_ptr<PlannedOp> plan(const PlanRequest& request, std::string* decline) const override {
    const auto& desc = *reinterpret_cast<const hal_op_attention_desc_t*>(request.desc);
    const bool backward = desc.header.kind == HAL_OP_ATTENTION_BACKWARD;
    if (desc.q.shape[3] > kMaxHeadDim) {
      *decline = "head dim " + std::to_string(desc.q.shape[3]) + " exceeds " +
                 std::to_string(kMaxHeadDim) + ", the most the portable kernels keep per row";
      return nullptr;
    }
    if (backward) {
      for (int d = 0; d < 4; ++d) {
        if (desc.grad_k.strides[d] != desc.grad_v.strides[d]) {
          *decline = "grad_k and grad_v have different strides (the kernel takes one layout)";
          return nullptr;
        }
      }
    }
    AttentionPlan::Kernels kernels;
    const auto load = [&](const char* name, hal_kernel_t* kernel) {
      *kernel = portable_kernel(request, kAttentionSource, name, decline);
      return *kernel != nullptr;
    };
    if (desc.has_cu_seqlens != 0 && !load("attention_sanitize", &kernels.sanitize)) return nullptr;
    // The tiled kernels' cases: dense, without varlen (they have no
    // sequence lookup nor block skipping); the variable is checked for all.
    const std::optional<bool> tiled = use_tiled_attention(request, decline);
    if (!tiled) return nullptr;
    kernels.tiled = *tiled && desc.has_cu_seqlens == 0 && desc.sparsity == HAL_ATTENTION_DENSE;
    if (!backward) {
      if (!load(kernels.tiled ? "attention_forward_tiled" : "attention_forward", &kernels.forward))
        return nullptr;
    } else if (!load("attention_delta", &kernels.delta) ||
               !load(kernels.tiled ? "attention_grad_q_tiled" : "attention_grad_q",
                     &kernels.grad_q) ||
               !load(kernels.tiled ? "attention_grad_kv_tiled" : "attention_grad_kv",
                     &kernels.grad_kv)) {
      return nullptr;
    }
    return std::make_unique<AttentionPlan>(desc, backward, kernels);
  }
};

}  // namespace

void add_attention(ImplementationTable& table) {
  static const Attention attention;
  table[HAL_OP_ATTENTION].push_back(&attention);
  table[HAL_OP_ATTENTION_BACKWARD].push_back(&attention);
}

}  // namespace hal::ops::portable
