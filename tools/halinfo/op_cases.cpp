#include "op_cases.hpp"

#include <cstring>
#include <initializer_list>

namespace halinfo {
namespace {

hal_tensor_desc_t tensor(hal_dtype_t dtype, std::initializer_list<int64_t> shape) {
  hal_tensor_desc_t desc{};
  hal_tensor_desc_contiguous(&desc, dtype, static_cast<uint32_t>(shape.size()), shape.begin());
  return desc;
}

template <class Desc>
OpCase make_case(std::string label, const Desc& desc) {
  OpCase op_case{std::move(label), {}};
  op_case.desc.resize(sizeof(Desc));
  std::memcpy(op_case.desc.data(), &desc, sizeof(Desc));
  return op_case;
}

const char* dtype_word(hal_dtype_t dtype) {
  return dtype == HAL_DTYPE_BF16 ? "bf16" : "f32";
}

const char* layout_word(hal_channel_layout_t layout) {
  return layout == HAL_CHANNELS_LAST ? "NHWC" : "NCHW";
}

// An activation [2, 16, 14, 14] (or NHWC) of |channels| channels and |size| pixels a side.
hal_tensor_desc_t activation(hal_dtype_t dtype, hal_channel_layout_t layout, int64_t channels,
                             int64_t size) {
  return layout == HAL_CHANNELS_LAST ? tensor(dtype, {2, size, size, channels})
                                     : tensor(dtype, {2, channels, size, size});
}

hal_op_matmul_desc_t matmul(hal_dtype_t dtype) {
  hal_op_matmul_desc_t desc{};
  desc.header.struct_size = sizeof(desc);
  desc.header.kind = HAL_OP_MATMUL;
  desc.activation = HAL_ACTIVATION_NONE;
  desc.alpha = 1.0f;
  desc.a = tensor(dtype, {128, 64});
  desc.b = tensor(dtype, {64, 96});
  desc.d = tensor(dtype, {128, 96});
  return desc;
}

// A 3x3 convolution, padding 1, stride 1, 16 -> 32 channels of 14x14.
hal_op_convolution_desc_t convolution(hal_op_kind_t kind, hal_dtype_t dtype,
                                      hal_channel_layout_t layout) {
  hal_op_convolution_desc_t desc{};
  desc.header.struct_size = sizeof(desc);
  desc.header.kind = kind;
  desc.layout = layout;
  desc.spatial_dims = 2;
  desc.groups = 1;
  desc.activation = HAL_ACTIVATION_NONE;
  for (int d = 0; d < 2; ++d) {
    desc.stride[d] = 1;
    desc.dilation[d] = 1;
    desc.pad_begin[d] = 1;
    desc.pad_end[d] = 1;
  }
  desc.x = activation(dtype, layout, 16, 14);
  desc.w =
      layout == HAL_CHANNELS_LAST ? tensor(dtype, {32, 3, 3, 16}) : tensor(dtype, {32, 16, 3, 3});
  desc.y = activation(dtype, layout, 32, 14);
  return desc;
}

// 3x3 windows, stride 2, padding 1, over 16 channels of 14x14 (7x7 out).
hal_op_pooling_desc_t pooling(hal_op_kind_t kind, hal_pooling_kind_t pooling_kind,
                              hal_channel_layout_t layout) {
  hal_op_pooling_desc_t desc{};
  desc.header.struct_size = sizeof(desc);
  desc.header.kind = kind;
  desc.pooling = pooling_kind;
  desc.layout = layout;
  desc.spatial_dims = 2;
  desc.flags = pooling_kind == HAL_POOLING_MAX ? HAL_POOLING_INDICES : 0;
  for (int d = 0; d < 2; ++d) {
    desc.kernel[d] = 3;
    desc.stride[d] = 2;
    desc.dilation[d] = 1;
    desc.pad_begin[d] = 1;
    desc.pad_end[d] = 1;
  }
  desc.x = activation(HAL_DTYPE_F32, layout, 16, 14);
  desc.y = activation(HAL_DTYPE_F32, layout, 16, 7);
  if (pooling_kind == HAL_POOLING_MAX) desc.indices = activation(HAL_DTYPE_I64, layout, 16, 7);
  return desc;
}

// 16 channels of 14x14, scale and shift: training (batch statistics, the
// running ones updated) or inference (the running statistics read).
hal_op_batch_norm_desc_t batch_norm(hal_op_kind_t kind, hal_channel_layout_t layout,
                                    bool training) {
  hal_op_batch_norm_desc_t desc{};
  desc.header.struct_size = sizeof(desc);
  desc.header.kind = kind;
  desc.layout = layout;
  desc.epsilon = 1e-5f;
  const hal_tensor_desc_t x = activation(HAL_DTYPE_F32, layout, 16, 14);
  const hal_tensor_desc_t channel = tensor(HAL_DTYPE_F32, {16});
  desc.x = x;
  desc.scale = channel;
  desc.saved_mean = channel;
  desc.saved_rstd = channel;
  desc.running_mean = channel;
  desc.running_var = channel;
  if (kind == HAL_OP_BATCH_NORM && !training) {
    desc.flags = HAL_BATCH_NORM_SCALE | HAL_BATCH_NORM_SHIFT;
    desc.y = x;
    desc.shift = channel;
  } else if (kind == HAL_OP_BATCH_NORM) {
    desc.flags = HAL_BATCH_NORM_TRAINING | HAL_BATCH_NORM_SCALE | HAL_BATCH_NORM_SHIFT |
                 HAL_BATCH_NORM_UPDATE_RUNNING | HAL_BATCH_NORM_SAVE_STATS;
    desc.y = x;
    desc.shift = channel;
  } else {
    desc.flags = (training ? static_cast<uint32_t>(HAL_BATCH_NORM_TRAINING) : 0u) |
                 HAL_BATCH_NORM_SCALE | HAL_BATCH_NORM_GRAD_SCALE | HAL_BATCH_NORM_GRAD_SHIFT;
    desc.grad_y = x;
    desc.grad_x = x;
    desc.grad_scale = channel;
    desc.grad_shift = channel;
  }
  return desc;
}

// 4 groups of 16 channels of 14x14, scale and shift.
hal_op_group_norm_desc_t group_norm(hal_op_kind_t kind, hal_channel_layout_t layout) {
  hal_op_group_norm_desc_t desc{};
  desc.header.struct_size = sizeof(desc);
  desc.header.kind = kind;
  desc.layout = layout;
  desc.groups = 4;
  desc.epsilon = 1e-5f;
  const hal_tensor_desc_t x = activation(HAL_DTYPE_F32, layout, 16, 14);
  const hal_tensor_desc_t channel = tensor(HAL_DTYPE_F32, {16});
  const hal_tensor_desc_t stats = tensor(HAL_DTYPE_F32, {2, 4});
  desc.x = x;
  desc.scale = channel;
  desc.mean = stats;
  desc.rstd = stats;
  if (kind == HAL_OP_GROUP_NORM) {
    desc.flags = HAL_GROUP_NORM_SCALE | HAL_GROUP_NORM_SHIFT | HAL_GROUP_NORM_SAVE_STATS;
    desc.y = x;
    desc.shift = channel;
  } else {
    desc.flags = HAL_GROUP_NORM_SCALE | HAL_GROUP_NORM_GRAD_SCALE | HAL_GROUP_NORM_GRAD_SHIFT;
    desc.grad_y = x;
    desc.grad_x = x;
    desc.grad_scale = channel;
    desc.grad_shift = channel;
  }
  return desc;
}

}  // namespace

std::vector<OpCase> op_cases(hal_op_kind_t kind) {
  std::vector<OpCase> cases;
  const hal_channel_layout_t layouts[] = {HAL_CHANNELS_FIRST, HAL_CHANNELS_LAST};
  switch (kind) {
    case HAL_OP_MATMUL:
      for (hal_dtype_t dtype : {HAL_DTYPE_F32, HAL_DTYPE_BF16}) {
        cases.push_back(
            make_case(std::string(dtype_word(dtype)) + " 128x64 @ 64x96", matmul(dtype)));
      }
      break;
    case HAL_OP_CONVOLUTION:
    case HAL_OP_CONVOLUTION_BACKWARD_DATA:
    case HAL_OP_CONVOLUTION_BACKWARD_WEIGHTS:
      for (hal_dtype_t dtype : {HAL_DTYPE_F32, HAL_DTYPE_BF16}) {
        for (hal_channel_layout_t layout : layouts) {
          cases.push_back(make_case(std::string(dtype_word(dtype)) + " " + layout_word(layout) +
                                        " 3x3 pad 1, 16->32 channels",
                                    convolution(kind, dtype, layout)));
        }
      }
      break;
    case HAL_OP_POOLING:
    case HAL_OP_POOLING_BACKWARD:
      for (hal_pooling_kind_t pooling_kind : {HAL_POOLING_MAX, HAL_POOLING_AVERAGE}) {
        for (hal_channel_layout_t layout : layouts) {
          cases.push_back(make_case(std::string("f32 ") + layout_word(layout) +
                                        (pooling_kind == HAL_POOLING_MAX ? " max" : " average") +
                                        " 3x3 stride 2 pad 1",
                                    pooling(kind, pooling_kind, layout)));
        }
      }
      break;
    case HAL_OP_BATCH_NORM:
    case HAL_OP_BATCH_NORM_BACKWARD:
      for (hal_channel_layout_t layout : layouts) {
        cases.push_back(make_case(std::string("f32 ") + layout_word(layout) + " training",
                                  batch_norm(kind, layout, true)));
      }
      cases.push_back(make_case("f32 NCHW inference", batch_norm(kind, HAL_CHANNELS_FIRST, false)));
      break;
    case HAL_OP_GROUP_NORM:
    case HAL_OP_GROUP_NORM_BACKWARD:
      for (hal_channel_layout_t layout : layouts) {
        cases.push_back(make_case(std::string("f32 ") + layout_word(layout) + " 4 groups",
                                  group_norm(kind, layout)));
      }
      break;
    default:
      break;
  }
  return cases;
}

}  // namespace halinfo
