// Portable matmul family: kernels/matmul.hal.
#include "launch.hpp"
#include "portable_constants.hpp"
#include "registry.hpp"

#include "hal_ops/tensor.hpp"
#include "hal_util/env.hpp"

#include <algorithm>
#include <cstring>
#include <optional>

namespace hal::ops::portable {

namespace {

constexpr const char* kMatmulSource = "matmul";
// The output tile one work-item computes: matmul.hal's MM_TM x MM_TN, both
// from the one table in ops/CMakeLists.txt.
constexpr int64_t kTileRows = constants::MM_TM;
constexpr int64_t kTileCols = constants::MM_TN;
constexpr int64_t kMaxGroups = 65535;

// A launch over (column tiles, row tiles, batch); the kernels loop with a
// grid stride, so the grid is capped at the dimension limits.
hal_launch_config_t tile_config(int64_t col_tiles, int64_t row_tiles, int64_t batch) {
  hal_launch_config_t config{};
  config.struct_size = sizeof(config);
  const int64_t block_x = std::min<int64_t>(16, col_tiles);
  const int64_t block_y = std::min<int64_t>(64 / block_x, row_tiles);
  config.block[0] = static_cast<uint32_t>(block_x);
  config.block[1] = static_cast<uint32_t>(block_y);
  config.block[2] = 1;
  config.grid[0] = static_cast<uint32_t>(std::min(kMaxGroups, (col_tiles + block_x - 1) / block_x));
  config.grid[1] = static_cast<uint32_t>(std::min(kMaxGroups, (row_tiles + block_y - 1) / block_y));
  config.grid[2] = static_cast<uint32_t>(std::min(kMaxGroups, batch));
  return config;
}

// matmul_tiled's output tile (64 x 64, block 16 x 16: matmul.hal), and the
// block and static shared memory it needs (its as[16][65] and bs[16][64]).
constexpr int64_t kSharedTile = 64;
constexpr uint32_t kTiledThreads = 256;
constexpr uint64_t kTiledSharedBytes = (16 * 65 + 16 * 64) * sizeof(float);

// Which matmul kernels serve a device: matmul_tiled and grouped_matmul_tiled
// (group-shared memory) on GPUs and accelerators, the register-blocked
// matmul_<dtype> and grouped_matmul on CPUs,
// where a work-item's 8 x 16 tile vectorises and staging through "shared"
// memory is a copy. HAL_OPS_PORTABLE_MATMUL=tiled or blocked overrides it
// (tests and benchmarks run both kernels on every device); another value
// declines the plan (nullopt, with |decline| saying why). A device whose
// blocks cannot hold the tiled kernel's 256 work-items and 8256 bytes of
// shared memory gets the register-blocked kernels (forced: a decline).
std::optional<bool> use_tiled_matmul(const PlanRequest& request, std::string* decline) {
  const hal_device_properties_t* device = request.properties;
  const bool fits = device != nullptr && device->max_threads_per_block >= kTiledThreads &&
                    device->max_shared_memory_bytes >= kTiledSharedBytes;
  const char* forced = hal::util::env("HAL_OPS_PORTABLE_MATMUL");
  if (forced != nullptr && forced[0] != '\0') {
    if (std::strcmp(forced, "blocked") == 0) return false;
    if (std::strcmp(forced, "tiled") != 0) {
      *decline = std::string("HAL_OPS_PORTABLE_MATMUL is '") + forced +
                 "': not 'tiled', 'blocked' or empty";
      return std::nullopt;
    }
    if (!fits) {
      *decline =
          "HAL_OPS_PORTABLE_MATMUL is 'tiled' but the device's blocks cannot hold its 256 "
          "work-items and 8256 bytes of shared memory";
      return std::nullopt;
    }
    return true;
  }
  return fits && device->type != HAL_DEVICE_TYPE_CPU;
}

// The batch dimensions of the matmul operands as one tensor each (d's batch
// shape, the operand's strides), for merge_views.
hal_tensor_desc_t batch_view(const hal_tensor_desc_t& tensor, uint32_t batch_rank) {
  hal_tensor_desc_t view{};
  view.dtype = tensor.dtype;
  view.rank = batch_rank;
  for (uint32_t d = 0; d < batch_rank; ++d) {
    view.shape[d] = tensor.shape[d];
    view.strides[d] = tensor.strides[d];
  }
  return view;
}

class MatmulPlan final : public PlannedOp {
 public:
  MatmulPlan(hal_kernel_t kernel, bool tiled, const hal_op_matmul_desc_t& desc, MergedViews batch)
      : kernel_(kernel), tiled_(tiled), desc_(desc), batch_(std::move(batch)) {}

  hal_result_t execute(const ExecContext& context) const override {
    const uint32_t rank = desc_.d.rank;
    const int64_t m = desc_.d.shape[rank - 2];
    const int64_t n = desc_.d.shape[rank - 1];
    const bool transpose_a = (desc_.flags & HAL_MATMUL_TRANSPOSE_A) != 0;
    const bool transpose_b = (desc_.flags & HAL_MATMUL_TRANSPOSE_B) != 0;
    const int64_t k = transpose_a ? desc_.a.shape[rank - 2] : desc_.a.shape[rank - 1];
    const int64_t batch = batch_.shape[0] * batch_.shape[1] * batch_.shape[2] * batch_.shape[3];
    if (m == 0 || n == 0 || batch == 0) return HAL_SUCCESS;
    const bool uses_c = desc_.beta != 0.0f;
    const bool has_bias = (desc_.flags & HAL_MATMUL_BIAS) != 0;
    const bool has_aux = (desc_.flags & HAL_MATMUL_SAVE_AUX) != 0;
    // An operand the kernel does not read (unused, or empty a and b when
    // k = 0) gets d's pointer so no NULL reaches a kernel argument.
    void* const d = context.operands[HAL_MATMUL_OPERAND_D];
    const auto or_d = [d](void* pointer) { return pointer != nullptr ? pointer : d; };
    const hal_tensor_desc_t& a = desc_.a;
    const hal_tensor_desc_t& b = desc_.b;
    KernelArgs args;
    args.pointer(or_d(context.operands[HAL_MATMUL_OPERAND_A]));
    for (int64_t stride : batch_.strides[0]) args.i64(stride);
    args.i64(transpose_a ? a.strides[rank - 1] : a.strides[rank - 2])
        .i64(transpose_a ? a.strides[rank - 2] : a.strides[rank - 1]);
    args.pointer(or_d(context.operands[HAL_MATMUL_OPERAND_B]));
    for (int64_t stride : batch_.strides[1]) args.i64(stride);
    args.i64(transpose_b ? b.strides[rank - 1] : b.strides[rank - 2])
        .i64(transpose_b ? b.strides[rank - 2] : b.strides[rank - 1]);
    const auto matrix = [&](int operand, int view, const hal_tensor_desc_t& tensor, bool used) {
      args.pointer(used ? or_d(context.operands[operand]) : d).i32(used ? tensor.dtype : 0);
      for (int64_t stride : batch_.strides[view]) args.i64(used ? stride : 0);
      args.i64(used ? tensor.strides[rank - 2] : 0).i64(used ? tensor.strides[rank - 1] : 0);
    };
    matrix(HAL_MATMUL_OPERAND_C, 2, desc_.c, uses_c);
    matrix(HAL_MATMUL_OPERAND_D, 3, desc_.d, true);
    matrix(HAL_MATMUL_OPERAND_AUX, 4, desc_.aux, has_aux);
    args.pointer(has_bias ? context.operands[HAL_MATMUL_OPERAND_BIAS] : d)
        .i32(has_bias ? desc_.bias.dtype : 0)
        .i64(has_bias ? desc_.bias.strides[0] : 0);
    args.i64(batch_.shape[1]).i64(batch_.shape[2]).i64(batch_.shape[3]).i64(batch);
    args.i64(m).i64(n).i64(k).f32(desc_.alpha).f32(desc_.beta).i32(desc_.activation);
    args.i32(static_cast<int32_t>((uses_c ? constants::MM_USE_C : 0) |
                                  (has_bias ? constants::MM_BIAS : 0) |
                                  (has_aux ? constants::MM_AUX : 0)));
    if (tiled_) return launch_tiled(args, context.stream, m, n, batch);
    return args.launch(
        kernel_, context.stream,
        tile_config((n + kTileCols - 1) / kTileCols, (m + kTileRows - 1) / kTileRows, batch));
  }

 private:
  // matmul_tiled: one block per 64 x 64 tile of each batch element, in as
  // many launches as the grid limits need (each with its tile offsets).
  hal_result_t launch_tiled(const KernelArgs& common, hal_stream_t stream, int64_t m, int64_t n,
                            int64_t batch) const {
    const int64_t extents[3] = {(n + kSharedTile - 1) / kSharedTile,
                                (m + kSharedTile - 1) / kSharedTile, batch};
    hal_launch_config_t config{};
    config.struct_size = sizeof(config);
    config.block[0] = 16;
    config.block[1] = 16;
    config.block[2] = 1;
    for (int64_t z = 0; z < extents[2]; z += kMaxGroups) {
      for (int64_t y = 0; y < extents[1]; y += kMaxGroups) {
        for (int64_t x = 0; x < extents[0]; x += kMaxGroups) {
          config.grid[0] = static_cast<uint32_t>(std::min(kMaxGroups, extents[0] - x));
          config.grid[1] = static_cast<uint32_t>(std::min(kMaxGroups, extents[1] - y));
          config.grid[2] = static_cast<uint32_t>(std::min(kMaxGroups, extents[2] - z));
          KernelArgs args = common;
          args.i32(desc_.a.dtype).i64(x).i64(y).i64(z);
          if (const hal_result_t r = args.launch(kernel_, stream, config); r != HAL_SUCCESS)
            return r;
        }
      }
    }
    return HAL_SUCCESS;
  }

  hal_kernel_t kernel_;
  bool tiled_;
  hal_op_matmul_desc_t desc_;
  MergedViews batch_;  // views: a, b, c, d, aux
};

class Matmul final : public Implementation {
 public:
  const char* name() const override { return "portable"; }
  std::unique_ptr<PlannedOp> plan(const PlanRequest& request, std::string* decline) const override {
    const auto& desc = *reinterpret_cast<const hal_op_matmul_desc_t*>(request.desc);
    const uint32_t batch_rank = desc.d.rank - 2;
    const bool uses_c = desc.beta != 0.0f;
    const bool has_aux = (desc.flags & HAL_MATMUL_SAVE_AUX) != 0;
    const hal_tensor_desc_t shape = batch_view(desc.d, batch_rank);
    const hal_tensor_desc_t a = batch_view(desc.a, batch_rank);
    const hal_tensor_desc_t b = batch_view(desc.b, batch_rank);
    const hal_tensor_desc_t c = uses_c ? batch_view(desc.c, batch_rank) : shape;
    const hal_tensor_desc_t aux = has_aux ? batch_view(desc.aux, batch_rank) : shape;
    MergedViews batch;
    if (!merge_views(shape, {&a, &b, &c, &shape, &aux}, &batch)) {
      *decline = "the batch dimensions need more than 4 dimensions after merging";
      return nullptr;
    }
    const std::optional<bool> use_tiled = use_tiled_matmul(request, decline);
    if (!use_tiled) return nullptr;
    const bool tiled = *use_tiled;
    const char* kernel_name = tiled                            ? "matmul_tiled"
                              : desc.a.dtype == HAL_DTYPE_F16  ? "matmul_f16"
                              : desc.a.dtype == HAL_DTYPE_BF16 ? "matmul_bf16"
                                                               : "matmul_f32";
    hal_kernel_t kernel = portable_kernel(request, kMatmulSource, kernel_name, decline);
    if (kernel == nullptr) return nullptr;
    return std::make_unique<MatmulPlan>(kernel, tiled, desc, std::move(batch));
  }
};

class BiasActivationBackwardPlan final : public PlannedOp {
 public:
  BiasActivationBackwardPlan(hal_kernel_t kernel,
                             const hal_op_bias_activation_backward_desc_t& desc)
      : kernel_(kernel), desc_(desc) {}

  hal_result_t execute(const ExecContext& context) const override {
    const int64_t rows = desc_.grad_out.shape[0];
    const int64_t n = desc_.grad_out.shape[1];
    const bool with_bias = desc_.compute_bias_grad != 0;
    if (n == 0 || (rows == 0 && !with_bias)) return HAL_SUCCESS;
    const bool uses_aux = desc_.activation != HAL_ACTIVATION_NONE;
    void* const some = with_bias ? context.operands[3] : context.operands[2];
    const auto or_some = [some](void* pointer) { return pointer != nullptr ? pointer : some; };
    KernelArgs args;
    args.pointer(or_some(context.operands[0]))
        .i32(desc_.grad_out.dtype)
        .i64(desc_.grad_out.strides[0])
        .i64(desc_.grad_out.strides[1]);
    args.pointer(uses_aux ? or_some(context.operands[1]) : some)
        .i32(uses_aux ? desc_.aux.dtype : 0)
        .i64(uses_aux ? desc_.aux.strides[0] : 0)
        .i64(uses_aux ? desc_.aux.strides[1] : 0);
    args.pointer(or_some(context.operands[2]))
        .i32(desc_.grad_pre.dtype)
        .i64(desc_.grad_pre.strides[0])
        .i64(desc_.grad_pre.strides[1]);
    if (with_bias) {
      args.pointer(context.operands[3])
          .i32(desc_.grad_bias.dtype)
          .i64(desc_.grad_bias.strides[0])
          .i64(rows)
          .i64(n)
          .i32(desc_.activation);
      return args.launch(kernel_, context.stream, linear_config(n, 64));
    }
    args.i64(n).i64(rows * n).i32(desc_.activation);
    return args.launch(kernel_, context.stream, linear_config(rows * n));
  }

 private:
  hal_kernel_t kernel_;
  hal_op_bias_activation_backward_desc_t desc_;
};

class BiasActivationBackward final : public Implementation {
 public:
  const char* name() const override { return "portable"; }
  std::unique_ptr<PlannedOp> plan(const PlanRequest& request, std::string* decline) const override {
    const auto& desc =
        *reinterpret_cast<const hal_op_bias_activation_backward_desc_t*>(request.desc);
    hal_kernel_t kernel = portable_kernel(
        request, kMatmulSource,
        desc.compute_bias_grad != 0 ? "bias_act_backward_columns" : "bias_act_backward_elements",
        decline);
    if (kernel == nullptr) return nullptr;
    return std::make_unique<BiasActivationBackwardPlan>(kernel, desc);
  }
};

class GroupedMatmulPlan final : public PlannedOp {
 public:
  GroupedMatmulPlan(hal_kernel_t kernel, bool tiled, const hal_op_grouped_matmul_desc_t& desc)
      : kernel_(kernel), tiled_(tiled), desc_(desc) {}

  hal_result_t execute(const ExecContext& context) const override {
    const int64_t rows = desc_.a.shape[0];
    const int64_t k = desc_.a.shape[1];
    const int64_t n = desc_.d.shape[1];
    if (rows == 0 || n == 0 || desc_.groups == 0) return HAL_SUCCESS;
    const bool transpose_b = (desc_.flags & HAL_MATMUL_TRANSPOSE_B) != 0;
    void* const d = context.operands[HAL_MATMUL_OPERAND_D];
    const auto or_d = [d](void* pointer) { return pointer != nullptr ? pointer : d; };
    const hal_tensor_desc_t& b = desc_.b;
    KernelArgs args;
    args.pointer(or_d(context.operands[0])).i64(desc_.a.strides[0]).i64(desc_.a.strides[1]);
    args.pointer(or_d(context.operands[1]))
        .i64(b.strides[0])
        .i64(transpose_b ? b.strides[2] : b.strides[1])
        .i64(transpose_b ? b.strides[1] : b.strides[2])
        .i32(desc_.a.dtype);
    args.pointer(context.operands[2]);
    args.pointer(d).i32(desc_.d.dtype).i64(desc_.d.strides[0]).i64(desc_.d.strides[1]);
    args.i64(rows).i64(n).i64(k).i32(static_cast<int32_t>(desc_.groups));
    if (tiled_) {
      // grouped_matmul_tiled: one block per 64 x 64 tile, in as many
      // launches as the grid limits need (each with its tile offsets).
      const int64_t col_tiles = (n + kSharedTile - 1) / kSharedTile;
      const int64_t row_tiles = (rows + kSharedTile - 1) / kSharedTile;
      hal_launch_config_t config{};
      config.struct_size = sizeof(config);
      config.block[0] = 16;
      config.block[1] = 16;
      config.block[2] = 1;
      config.grid[2] = 1;
      for (int64_t y = 0; y < row_tiles; y += kMaxGroups) {
        for (int64_t x = 0; x < col_tiles; x += kMaxGroups) {
          config.grid[0] = static_cast<uint32_t>(std::min(kMaxGroups, col_tiles - x));
          config.grid[1] = static_cast<uint32_t>(std::min(kMaxGroups, row_tiles - y));
          KernelArgs tile_args = args;
          tile_args.i64(x).i64(y);
          if (const hal_result_t r = tile_args.launch(kernel_, context.stream, config);
              r != HAL_SUCCESS) {
            return r;
          }
        }
      }
      return HAL_SUCCESS;
    }
    return args.launch(
        kernel_, context.stream,
        tile_config((n + kTileCols - 1) / kTileCols, (rows + kTileRows - 1) / kTileRows, 1));
  }

 private:
  hal_kernel_t kernel_;
  bool tiled_;
  hal_op_grouped_matmul_desc_t desc_;
};

class GroupedMatmul final : public Implementation {
 public:
  const char* name() const override { return "portable"; }
  std::unique_ptr<PlannedOp> plan(const PlanRequest& request, std::string* decline) const override {
    const auto& desc = *reinterpret_cast<const hal_op_grouped_matmul_desc_t*>(request.desc);
    if (desc.groups > static_cast<uint32_t>(INT32_MAX - 1)) {
      *decline = "more than 2^31 - 2 groups";
      return nullptr;
    }
    const std::optional<bool> tiled = use_tiled_matmul(request, decline);
    if (!tiled) return nullptr;
    hal_kernel_t kernel = portable_kernel(
        request, kMatmulSource, *tiled ? "grouped_matmul_tiled" : "grouped_matmul", decline);
    if (kernel == nullptr) return nullptr;
    return std::make_unique<GroupedMatmulPlan>(kernel, *tiled, desc);
  }
};

}  // namespace

void add_matmul(ImplementationTable& table) {
  static const Matmul matmul;
  static const BiasActivationBackward bias_activation_backward;
  static const GroupedMatmul grouped_matmul;
  table[HAL_OP_MATMUL].push_back(&matmul);
  table[HAL_OP_BIAS_ACTIVATION_BACKWARD].push_back(&bias_activation_backward);
  table[HAL_OP_GROUPED_MATMUL].push_back(&grouped_matmul);
}

}  // namespace hal::ops::portable
