#include "hal_util/names.hpp"

#include <array>

#include "hal_util/arg_types.hpp"

namespace hal::util {
namespace {

constexpr EnumName kCapability[] = {
    {HAL_DEVICE_CAP_KERNELS, "HAL_DEVICE_CAP_KERNELS", "kernels"},
    {HAL_DEVICE_CAP_EVENT_TIMING, "HAL_DEVICE_CAP_EVENT_TIMING", "event_timing"},
    {HAL_DEVICE_CAP_HOST_CALLBACKS, "HAL_DEVICE_CAP_HOST_CALLBACKS", "host_callbacks"},
    {HAL_DEVICE_CAP_HOST_MEMORY, "HAL_DEVICE_CAP_HOST_MEMORY", "host_memory"},
    {HAL_DEVICE_CAP_SHARED_MEMORY, "HAL_DEVICE_CAP_SHARED_MEMORY", "shared_memory"},
    {HAL_DEVICE_CAP_UNIFIED_ADDRESSING, "HAL_DEVICE_CAP_UNIFIED_ADDRESSING", "unified_addressing"},
    {HAL_DEVICE_CAP_PEER_ACCESS, "HAL_DEVICE_CAP_PEER_ACCESS", "peer_access"},
    {HAL_DEVICE_CAP_STREAM_QUERY, "HAL_DEVICE_CAP_STREAM_QUERY", "stream_query"},
    {HAL_DEVICE_CAP_COLLECTIVES, "HAL_DEVICE_CAP_COLLECTIVES", "collectives"},
    {HAL_DEVICE_CAP_ALLTOALLV, "HAL_DEVICE_CAP_ALLTOALLV", "alltoallv"},
};

constexpr EnumName kModuleFormat[] = {
    {HAL_MODULE_FORMAT_CPU_SHARED_OBJECT, "HAL_MODULE_FORMAT_CPU_SHARED_OBJECT",
     "cpu_shared_object"},
    {HAL_MODULE_FORMAT_OPENCL_C, "HAL_MODULE_FORMAT_OPENCL_C", "opencl_c"},
    {HAL_MODULE_FORMAT_SPIRV, "HAL_MODULE_FORMAT_SPIRV", "spirv"},
    {HAL_MODULE_FORMAT_PTX, "HAL_MODULE_FORMAT_PTX", "ptx"},
    {HAL_MODULE_FORMAT_CUBIN, "HAL_MODULE_FORMAT_CUBIN", "cubin"},
    {HAL_MODULE_FORMAT_HSACO, "HAL_MODULE_FORMAT_HSACO", "hsaco"},
    {HAL_MODULE_FORMAT_HAL_DIALECT, "HAL_MODULE_FORMAT_HAL_DIALECT", "hal_dialect"},
};

constexpr EnumName kMemoryKind[] = {
    {HAL_MEMORY_DEVICE, "HAL_MEMORY_DEVICE", "device"},
    {HAL_MEMORY_HOST, "HAL_MEMORY_HOST", "host"},
    {HAL_MEMORY_SHARED, "HAL_MEMORY_SHARED", "shared"},
};

constexpr EnumName kDtype[] = {
    {HAL_DTYPE_F32, "HAL_DTYPE_F32", "f32"},
    {HAL_DTYPE_F16, "HAL_DTYPE_F16", "f16"},
    {HAL_DTYPE_BF16, "HAL_DTYPE_BF16", "bf16"},
    {HAL_DTYPE_F64, "HAL_DTYPE_F64", "f64"},
    {HAL_DTYPE_I32, "HAL_DTYPE_I32", "i32"},
    {HAL_DTYPE_I64, "HAL_DTYPE_I64", "i64"},
    {HAL_DTYPE_I8, "HAL_DTYPE_I8", "i8"},
    {HAL_DTYPE_U8, "HAL_DTYPE_U8", "u8"},
    {HAL_DTYPE_BOOL, "HAL_DTYPE_BOOL", "bool"},
    {HAL_DTYPE_F8_E4M3, "HAL_DTYPE_F8_E4M3", "f8_e4m3"},
    {HAL_DTYPE_F8_E5M2, "HAL_DTYPE_F8_E5M2", "f8_e5m2"},
};

// Derived from hal_util/arg_types.hpp's table, the one list of argument types.
constexpr auto kArgType = [] {
  std::array<EnumName, std::size(kArgTypes)> names{};
  for (size_t i = 0; i < names.size(); ++i) {
    names[i] = {static_cast<uint32_t>(kArgTypes[i].type), kArgTypes[i].enumerator,
                kArgTypes[i].short_name};
  }
  return names;
}();

constexpr EnumName kDeviceType[] = {
    {HAL_DEVICE_TYPE_CPU, "HAL_DEVICE_TYPE_CPU", "cpu"},
    {HAL_DEVICE_TYPE_GPU, "HAL_DEVICE_TYPE_GPU", "gpu"},
    {HAL_DEVICE_TYPE_ACCELERATOR, "HAL_DEVICE_TYPE_ACCELERATOR", "accelerator"},
};

constexpr EnumName kPluginOutcome[] = {
    {HAL_PLUGIN_LOADED, "HAL_PLUGIN_LOADED", "loaded"},
    {HAL_PLUGIN_SKIPPED_DUPLICATE, "HAL_PLUGIN_SKIPPED_DUPLICATE", "skipped_duplicate"},
    {HAL_PLUGIN_FAILED_OPEN, "HAL_PLUGIN_FAILED_OPEN", "failed_open"},
    {HAL_PLUGIN_FAILED_SYMBOL, "HAL_PLUGIN_FAILED_SYMBOL", "failed_symbol"},
    {HAL_PLUGIN_FAILED_ABI, "HAL_PLUGIN_FAILED_ABI", "failed_abi"},
    {HAL_PLUGIN_FAILED_INIT, "HAL_PLUGIN_FAILED_INIT", "failed_init"},
};

constexpr EnumName kResult[] = {
    {HAL_SUCCESS, "HAL_SUCCESS", "success"},
    {HAL_NOT_READY, "HAL_NOT_READY", "not_ready"},
    {HAL_ERROR_INVALID_ARGUMENT, "HAL_ERROR_INVALID_ARGUMENT", "error_invalid_argument"},
    {HAL_ERROR_NULL_POINTER, "HAL_ERROR_NULL_POINTER", "error_null_pointer"},
    {HAL_ERROR_INVALID_HANDLE, "HAL_ERROR_INVALID_HANDLE", "error_invalid_handle"},
    {HAL_ERROR_DESTROYED_HANDLE, "HAL_ERROR_DESTROYED_HANDLE", "error_destroyed_handle"},
    {HAL_ERROR_INVALID_SIZE, "HAL_ERROR_INVALID_SIZE", "error_invalid_size"},
    {HAL_ERROR_OUT_OF_BOUNDS, "HAL_ERROR_OUT_OF_BOUNDS", "error_out_of_bounds"},
    {HAL_ERROR_OUT_OF_MEMORY, "HAL_ERROR_OUT_OF_MEMORY", "error_out_of_memory"},
    {HAL_ERROR_UNSUPPORTED, "HAL_ERROR_UNSUPPORTED", "error_unsupported"},
    {HAL_ERROR_NOT_INITIALIZED, "HAL_ERROR_NOT_INITIALIZED", "error_not_initialized"},
    {HAL_ERROR_PLUGIN_LOAD, "HAL_ERROR_PLUGIN_LOAD", "error_plugin_load"},
    {HAL_ERROR_ABI_MISMATCH, "HAL_ERROR_ABI_MISMATCH", "error_abi_mismatch"},
    {HAL_ERROR_INVALID_MODULE, "HAL_ERROR_INVALID_MODULE", "error_invalid_module"},
    {HAL_ERROR_NOT_FOUND, "HAL_ERROR_NOT_FOUND", "error_not_found"},
    {HAL_ERROR_INVALID_LAUNCH, "HAL_ERROR_INVALID_LAUNCH", "error_invalid_launch"},
    {HAL_ERROR_ARGUMENT_MISMATCH, "HAL_ERROR_ARGUMENT_MISMATCH", "error_argument_mismatch"},
    {HAL_ERROR_DEVICE_MISMATCH, "HAL_ERROR_DEVICE_MISMATCH", "error_device_mismatch"},
    {HAL_ERROR_INVALID_STATE, "HAL_ERROR_INVALID_STATE", "error_invalid_state"},
    {HAL_ERROR_TIMEOUT, "HAL_ERROR_TIMEOUT", "error_timeout"},
    {HAL_ERROR_DEVICE_LOST, "HAL_ERROR_DEVICE_LOST", "error_device_lost"},
    {HAL_ERROR_INTERNAL, "HAL_ERROR_INTERNAL", "error_internal"},
    {HAL_ERROR_REMOTE, "HAL_ERROR_REMOTE", "error_remote"},
};

constexpr EnumName kReduceOp[] = {
    {HAL_REDUCE_SUM, "HAL_REDUCE_SUM", "sum"}, {HAL_REDUCE_PROD, "HAL_REDUCE_PROD", "prod"},
    {HAL_REDUCE_MIN, "HAL_REDUCE_MIN", "min"}, {HAL_REDUCE_MAX, "HAL_REDUCE_MAX", "max"},
    {HAL_REDUCE_AVG, "HAL_REDUCE_AVG", "avg"},
};

constexpr EnumName kCollectiveKind[] = {
    {HAL_COLLECTIVE_ALLREDUCE, "HAL_COLLECTIVE_ALLREDUCE", "allreduce"},
    {HAL_COLLECTIVE_BROADCAST, "HAL_COLLECTIVE_BROADCAST", "broadcast"},
    {HAL_COLLECTIVE_REDUCE, "HAL_COLLECTIVE_REDUCE", "reduce"},
    {HAL_COLLECTIVE_ALLGATHER, "HAL_COLLECTIVE_ALLGATHER", "allgather"},
    {HAL_COLLECTIVE_REDUCE_SCATTER, "HAL_COLLECTIVE_REDUCE_SCATTER", "reduce_scatter"},
    {HAL_COLLECTIVE_ALLTOALL, "HAL_COLLECTIVE_ALLTOALL", "alltoall"},
    {HAL_COLLECTIVE_SEND, "HAL_COLLECTIVE_SEND", "send"},
    {HAL_COLLECTIVE_RECV, "HAL_COLLECTIVE_RECV", "recv"},
    {HAL_COLLECTIVE_ALLTOALLV, "HAL_COLLECTIVE_ALLTOALLV", "alltoallv"},
};

constexpr EnumName kOpKind[] = {
    {HAL_OP_MATMUL, "HAL_OP_MATMUL", "matmul"},
    {HAL_OP_BIAS_ACTIVATION_BACKWARD, "HAL_OP_BIAS_ACTIVATION_BACKWARD",
     "bias_activation_backward"},
    {HAL_OP_GROUPED_MATMUL, "HAL_OP_GROUPED_MATMUL", "grouped_matmul"},
    {HAL_OP_SOFTMAX, "HAL_OP_SOFTMAX", "softmax"},
    {HAL_OP_SOFTMAX_BACKWARD, "HAL_OP_SOFTMAX_BACKWARD", "softmax_backward"},
    {HAL_OP_NORM, "HAL_OP_NORM", "norm"},
    {HAL_OP_NORM_BACKWARD, "HAL_OP_NORM_BACKWARD", "norm_backward"},
    {HAL_OP_BINARY, "HAL_OP_BINARY", "binary"},
    {HAL_OP_UNARY, "HAL_OP_UNARY", "unary"},
    {HAL_OP_UNARY_BACKWARD, "HAL_OP_UNARY_BACKWARD", "unary_backward"},
    {HAL_OP_SWIGLU, "HAL_OP_SWIGLU", "swiglu"},
    {HAL_OP_SWIGLU_BACKWARD, "HAL_OP_SWIGLU_BACKWARD", "swiglu_backward"},
    {HAL_OP_REDUCE, "HAL_OP_REDUCE", "reduce"},
    {HAL_OP_ROPE, "HAL_OP_ROPE", "rope"},
    {HAL_OP_EMBEDDING, "HAL_OP_EMBEDDING", "embedding"},
    {HAL_OP_EMBEDDING_BACKWARD, "HAL_OP_EMBEDDING_BACKWARD", "embedding_backward"},
    {HAL_OP_CROSS_ENTROPY, "HAL_OP_CROSS_ENTROPY", "cross_entropy"},
    {HAL_OP_ADAMW, "HAL_OP_ADAMW", "adamw"},
    {HAL_OP_CAST, "HAL_OP_CAST", "cast"},
    {HAL_OP_PERMUTE, "HAL_OP_PERMUTE", "permute"},
    {HAL_OP_DROPOUT, "HAL_OP_DROPOUT", "dropout"},
    {HAL_OP_ATTENTION, "HAL_OP_ATTENTION", "attention"},
    {HAL_OP_ATTENTION_BACKWARD, "HAL_OP_ATTENTION_BACKWARD", "attention_backward"},
    {HAL_OP_TOPK_GATING, "HAL_OP_TOPK_GATING", "topk_gating"},
    {HAL_OP_CONVOLUTION, "HAL_OP_CONVOLUTION", "convolution"},
    {HAL_OP_CONVOLUTION_BACKWARD_DATA, "HAL_OP_CONVOLUTION_BACKWARD_DATA",
     "convolution_backward_data"},
    {HAL_OP_CONVOLUTION_BACKWARD_WEIGHTS, "HAL_OP_CONVOLUTION_BACKWARD_WEIGHTS",
     "convolution_backward_weights"},
    {HAL_OP_POOLING, "HAL_OP_POOLING", "pooling"},
    {HAL_OP_POOLING_BACKWARD, "HAL_OP_POOLING_BACKWARD", "pooling_backward"},
    {HAL_OP_BATCH_NORM, "HAL_OP_BATCH_NORM", "batch_norm"},
    {HAL_OP_BATCH_NORM_BACKWARD, "HAL_OP_BATCH_NORM_BACKWARD", "batch_norm_backward"},
    {HAL_OP_GROUP_NORM, "HAL_OP_GROUP_NORM", "group_norm"},
    {HAL_OP_GROUP_NORM_BACKWARD, "HAL_OP_GROUP_NORM_BACKWARD", "group_norm_backward"},
    {HAL_OP_UNARY_MATH, "HAL_OP_UNARY_MATH", "unary_math"},
    {HAL_OP_BINARY_SCALAR, "HAL_OP_BINARY_SCALAR", "binary_scalar"},
    {HAL_OP_WHERE, "HAL_OP_WHERE", "where"},
    {HAL_OP_CLAMP, "HAL_OP_CLAMP", "clamp"},
    {HAL_OP_SCAN, "HAL_OP_SCAN", "scan"},
    {HAL_OP_GATHER, "HAL_OP_GATHER", "gather"},
    {HAL_OP_SCATTER, "HAL_OP_SCATTER", "scatter"},
    {HAL_OP_CAT, "HAL_OP_CAT", "cat"},
    {HAL_OP_FILL, "HAL_OP_FILL", "fill"},
    {HAL_OP_PAGED_KV_APPEND, "HAL_OP_PAGED_KV_APPEND", "paged_kv_append"},
    {HAL_OP_PAGED_ATTENTION, "HAL_OP_PAGED_ATTENTION", "paged_attention"},
    {HAL_OP_QUANTIZE, "HAL_OP_QUANTIZE", "quantize"},
    {HAL_OP_DEQUANTIZE, "HAL_OP_DEQUANTIZE", "dequantize"},
    {HAL_OP_SCALED_MATMUL, "HAL_OP_SCALED_MATMUL", "scaled_matmul"},
    {HAL_OP_FAKE_QUANTIZE, "HAL_OP_FAKE_QUANTIZE", "fake_quantize"},
    {HAL_OP_FAKE_QUANTIZE_BACKWARD, "HAL_OP_FAKE_QUANTIZE_BACKWARD", "fake_quantize_backward"},
};

constexpr EnumName kOpStatus[] = {
    {HAL_OP_STATUS_OK, "HAL_OP_STATUS_OK", "ok"},
    {HAL_OP_STATUS_INDEX_OUT_OF_RANGE, "HAL_OP_STATUS_INDEX_OUT_OF_RANGE", "index_out_of_range"},
    {HAL_OP_STATUS_BLOCK_TABLE, "HAL_OP_STATUS_BLOCK_TABLE", "block_table"},
    {HAL_OP_STATUS_SEQ_LENS, "HAL_OP_STATUS_SEQ_LENS", "seq_lens"},
};

constexpr EnumName kOpVerdict[] = {
    {HAL_OP_VERDICT_ACCEPTS, "HAL_OP_VERDICT_ACCEPTS", "accepts"},
    {HAL_OP_VERDICT_DECLINES, "HAL_OP_VERDICT_DECLINES", "declines"},
    {HAL_OP_VERDICT_NOT_ASKED, "HAL_OP_VERDICT_NOT_ASKED", "not_asked"},
};

constexpr EnumName kActivation[] = {
    {HAL_ACTIVATION_NONE, "HAL_ACTIVATION_NONE", "none"},
    {HAL_ACTIVATION_RELU, "HAL_ACTIVATION_RELU", "relu"},
    {HAL_ACTIVATION_GELU_TANH, "HAL_ACTIVATION_GELU_TANH", "gelu_tanh"},
    {HAL_ACTIVATION_GELU_ERF, "HAL_ACTIVATION_GELU_ERF", "gelu_erf"},
    {HAL_ACTIVATION_SILU, "HAL_ACTIVATION_SILU", "silu"},
};

constexpr EnumName kNormKind[] = {
    {HAL_NORM_LAYERNORM, "HAL_NORM_LAYERNORM", "layernorm"},
    {HAL_NORM_RMSNORM, "HAL_NORM_RMSNORM", "rmsnorm"},
};

constexpr EnumName kBinaryOp[] = {
    {HAL_BINARY_ADD, "HAL_BINARY_ADD", "add"},
    {HAL_BINARY_SUB, "HAL_BINARY_SUB", "sub"},
    {HAL_BINARY_MUL, "HAL_BINARY_MUL", "mul"},
    {HAL_BINARY_DIV, "HAL_BINARY_DIV", "div"},
    {HAL_BINARY_MAX, "HAL_BINARY_MAX", "max"},
    {HAL_BINARY_MIN, "HAL_BINARY_MIN", "min"},
    {HAL_BINARY_POW, "HAL_BINARY_POW", "pow"},
    {HAL_BINARY_FMOD, "HAL_BINARY_FMOD", "fmod"},
    {HAL_BINARY_REMAINDER, "HAL_BINARY_REMAINDER", "remainder"},
    {HAL_BINARY_FLOOR_DIVIDE, "HAL_BINARY_FLOOR_DIVIDE", "floor_divide"},
    {HAL_BINARY_TRUNC_DIVIDE, "HAL_BINARY_TRUNC_DIVIDE", "trunc_divide"},
    {HAL_BINARY_ATAN2, "HAL_BINARY_ATAN2", "atan2"},
    {HAL_BINARY_EQ, "HAL_BINARY_EQ", "eq"},
    {HAL_BINARY_NE, "HAL_BINARY_NE", "ne"},
    {HAL_BINARY_LT, "HAL_BINARY_LT", "lt"},
    {HAL_BINARY_LE, "HAL_BINARY_LE", "le"},
    {HAL_BINARY_GT, "HAL_BINARY_GT", "gt"},
    {HAL_BINARY_GE, "HAL_BINARY_GE", "ge"},
    {HAL_BINARY_LOGICAL_AND, "HAL_BINARY_LOGICAL_AND", "logical_and"},
    {HAL_BINARY_LOGICAL_OR, "HAL_BINARY_LOGICAL_OR", "logical_or"},
    {HAL_BINARY_LOGICAL_XOR, "HAL_BINARY_LOGICAL_XOR", "logical_xor"},
    {HAL_BINARY_BITWISE_AND, "HAL_BINARY_BITWISE_AND", "bitwise_and"},
    {HAL_BINARY_BITWISE_OR, "HAL_BINARY_BITWISE_OR", "bitwise_or"},
    {HAL_BINARY_BITWISE_XOR, "HAL_BINARY_BITWISE_XOR", "bitwise_xor"},
};

constexpr EnumName kReduceKind[] = {
    {HAL_REDUCE_KIND_SUM, "HAL_REDUCE_KIND_SUM", "sum"},
    {HAL_REDUCE_KIND_MEAN, "HAL_REDUCE_KIND_MEAN", "mean"},
    {HAL_REDUCE_KIND_MAX, "HAL_REDUCE_KIND_MAX", "max"},
    {HAL_REDUCE_KIND_MIN, "HAL_REDUCE_KIND_MIN", "min"},
    {HAL_REDUCE_KIND_PROD, "HAL_REDUCE_KIND_PROD", "prod"},
    {HAL_REDUCE_KIND_ARGMAX, "HAL_REDUCE_KIND_ARGMAX", "argmax"},
    {HAL_REDUCE_KIND_ARGMIN, "HAL_REDUCE_KIND_ARGMIN", "argmin"},
    {HAL_REDUCE_KIND_NORM2, "HAL_REDUCE_KIND_NORM2", "norm2"},
};

constexpr EnumName kUnaryMath[] = {
    {HAL_UNARY_MATH_EXP, "HAL_UNARY_MATH_EXP", "exp"},
    {HAL_UNARY_MATH_EXP2, "HAL_UNARY_MATH_EXP2", "exp2"},
    {HAL_UNARY_MATH_EXPM1, "HAL_UNARY_MATH_EXPM1", "expm1"},
    {HAL_UNARY_MATH_LOG, "HAL_UNARY_MATH_LOG", "log"},
    {HAL_UNARY_MATH_LOG2, "HAL_UNARY_MATH_LOG2", "log2"},
    {HAL_UNARY_MATH_LOG10, "HAL_UNARY_MATH_LOG10", "log10"},
    {HAL_UNARY_MATH_LOG1P, "HAL_UNARY_MATH_LOG1P", "log1p"},
    {HAL_UNARY_MATH_SQRT, "HAL_UNARY_MATH_SQRT", "sqrt"},
    {HAL_UNARY_MATH_RSQRT, "HAL_UNARY_MATH_RSQRT", "rsqrt"},
    {HAL_UNARY_MATH_RECIPROCAL, "HAL_UNARY_MATH_RECIPROCAL", "reciprocal"},
    {HAL_UNARY_MATH_SIN, "HAL_UNARY_MATH_SIN", "sin"},
    {HAL_UNARY_MATH_COS, "HAL_UNARY_MATH_COS", "cos"},
    {HAL_UNARY_MATH_TAN, "HAL_UNARY_MATH_TAN", "tan"},
    {HAL_UNARY_MATH_TANH, "HAL_UNARY_MATH_TANH", "tanh"},
    {HAL_UNARY_MATH_ATAN, "HAL_UNARY_MATH_ATAN", "atan"},
    {HAL_UNARY_MATH_SIGMOID, "HAL_UNARY_MATH_SIGMOID", "sigmoid"},
    {HAL_UNARY_MATH_ERF, "HAL_UNARY_MATH_ERF", "erf"},
    {HAL_UNARY_MATH_ERFINV, "HAL_UNARY_MATH_ERFINV", "erfinv"},
    {HAL_UNARY_MATH_ABS, "HAL_UNARY_MATH_ABS", "abs"},
    {HAL_UNARY_MATH_NEG, "HAL_UNARY_MATH_NEG", "neg"},
    {HAL_UNARY_MATH_SIGN, "HAL_UNARY_MATH_SIGN", "sign"},
    {HAL_UNARY_MATH_FLOOR, "HAL_UNARY_MATH_FLOOR", "floor"},
    {HAL_UNARY_MATH_CEIL, "HAL_UNARY_MATH_CEIL", "ceil"},
    {HAL_UNARY_MATH_ROUND, "HAL_UNARY_MATH_ROUND", "round"},
    {HAL_UNARY_MATH_TRUNC, "HAL_UNARY_MATH_TRUNC", "trunc"},
    {HAL_UNARY_MATH_LOGICAL_NOT, "HAL_UNARY_MATH_LOGICAL_NOT", "logical_not"},
    {HAL_UNARY_MATH_ISNAN, "HAL_UNARY_MATH_ISNAN", "isnan"},
    {HAL_UNARY_MATH_ISINF, "HAL_UNARY_MATH_ISINF", "isinf"},
    {HAL_UNARY_MATH_ISFINITE, "HAL_UNARY_MATH_ISFINITE", "isfinite"},
    {HAL_UNARY_MATH_BITWISE_NOT, "HAL_UNARY_MATH_BITWISE_NOT", "bitwise_not"},
};

constexpr EnumName kClampBound[] = {
    {HAL_CLAMP_BOUND_NONE, "HAL_CLAMP_BOUND_NONE", "none"},
    {HAL_CLAMP_BOUND_TENSOR, "HAL_CLAMP_BOUND_TENSOR", "tensor"},
    {HAL_CLAMP_BOUND_SCALAR, "HAL_CLAMP_BOUND_SCALAR", "scalar"},
};

constexpr EnumName kScanKind[] = {
    {HAL_SCAN_SUM, "HAL_SCAN_SUM", "sum"},
    {HAL_SCAN_PROD, "HAL_SCAN_PROD", "prod"},
};

constexpr EnumName kScatterMode[] = {
    {HAL_SCATTER_REPLACE, "HAL_SCATTER_REPLACE", "replace"},
    {HAL_SCATTER_ADD, "HAL_SCATTER_ADD", "add"},
};

constexpr EnumName kChannelLayout[] = {
    {HAL_CHANNELS_FIRST, "HAL_CHANNELS_FIRST", "first"},
    {HAL_CHANNELS_LAST, "HAL_CHANNELS_LAST", "last"},
};

constexpr EnumName kPoolingKind[] = {
    {HAL_POOLING_MAX, "HAL_POOLING_MAX", "max"},
    {HAL_POOLING_AVERAGE, "HAL_POOLING_AVERAGE", "average"},
};

constexpr EnumName kCausalAlignment[] = {
    {HAL_CAUSAL_NONE, "HAL_CAUSAL_NONE", "none"},
    {HAL_CAUSAL_TOP_LEFT, "HAL_CAUSAL_TOP_LEFT", "top_left"},
    {HAL_CAUSAL_BOTTOM_RIGHT, "HAL_CAUSAL_BOTTOM_RIGHT", "bottom_right"},
};

constexpr EnumName kAttentionSparsity[] = {
    {HAL_ATTENTION_DENSE, "HAL_ATTENTION_DENSE", "dense"},
    {HAL_ATTENTION_BLOCK_MASK, "HAL_ATTENTION_BLOCK_MASK", "block_mask"},
    {HAL_ATTENTION_BLOCK_INDICES, "HAL_ATTENTION_BLOCK_INDICES", "block_indices"},
};

template <typename Spell>
std::string join_bits(uint32_t bits, std::span<const EnumName> table, Spell spell,
                      std::string_view separator) {
  std::string names;
  for (const EnumName& entry : table) {
    if ((bits & entry.value) == 0) continue;
    if (!names.empty()) names += separator;
    names += spell(entry);
    bits &= ~entry.value;
  }
  // Bits no entry names stay visible, one number per bit.
  for (uint32_t bit = 1; bits != 0; bit <<= 1) {
    if ((bits & bit) == 0) continue;
    if (!names.empty()) names += separator;
    names += std::to_string(bit);
    bits &= ~bit;
  }
  return names.empty() ? "none" : names;
}

const char* spell(const EnumName& entry, Spelling spelling) {
  return spelling == Spelling::kEnumerator ? entry.enumerator : entry.short_name;
}

}  // namespace

std::span<const EnumName> capability_table() noexcept {
  return kCapability;
}
std::span<const EnumName> module_format_table() noexcept {
  return kModuleFormat;
}
std::span<const EnumName> memory_kind_table() noexcept {
  return kMemoryKind;
}
std::span<const EnumName> dtype_table() noexcept {
  return kDtype;
}
std::span<const EnumName> arg_type_table() noexcept {
  return kArgType;
}
std::span<const EnumName> device_type_table() noexcept {
  return kDeviceType;
}
std::span<const EnumName> plugin_outcome_table() noexcept {
  return kPluginOutcome;
}
std::span<const EnumName> result_table() noexcept {
  return kResult;
}
std::span<const EnumName> reduce_op_table() noexcept {
  return kReduceOp;
}
std::span<const EnumName> collective_kind_table() noexcept {
  return kCollectiveKind;
}

std::span<const EnumName> op_kind_table() noexcept {
  return kOpKind;
}
std::span<const EnumName> activation_table() noexcept {
  return kActivation;
}
std::span<const EnumName> norm_kind_table() noexcept {
  return kNormKind;
}
std::span<const EnumName> binary_op_table() noexcept {
  return kBinaryOp;
}
std::span<const EnumName> reduce_kind_table() noexcept {
  return kReduceKind;
}
std::span<const EnumName> channel_layout_table() noexcept {
  return kChannelLayout;
}
std::span<const EnumName> pooling_kind_table() noexcept {
  return kPoolingKind;
}
std::span<const EnumName> unary_math_table() noexcept {
  return kUnaryMath;
}
std::span<const EnumName> clamp_bound_table() noexcept {
  return kClampBound;
}
std::span<const EnumName> scan_kind_table() noexcept {
  return kScanKind;
}
std::span<const EnumName> scatter_mode_table() noexcept {
  return kScatterMode;
}
std::span<const EnumName> causal_alignment_table() noexcept {
  return kCausalAlignment;
}
std::span<const EnumName> op_status_table() noexcept {
  return kOpStatus;
}
std::span<const EnumName> op_verdict_table() noexcept {
  return kOpVerdict;
}
std::span<const EnumName> attention_sparsity_table() noexcept {
  return kAttentionSparsity;
}

const EnumName* find_name(std::span<const EnumName> table, uint32_t value) noexcept {
  for (const EnumName& entry : table) {
    if (entry.value == value) return &entry;
  }
  return nullptr;
}

const char* enumerator_name(std::span<const EnumName> table, uint32_t value) noexcept {
  const EnumName* entry = find_name(table, value);
  return entry != nullptr ? entry->enumerator : "unknown";
}

const char* short_name(std::span<const EnumName> table, uint32_t value) noexcept {
  const EnumName* entry = find_name(table, value);
  return entry != nullptr ? entry->short_name : "unknown";
}

std::string capability_names(hal_device_caps_t capabilities, Spelling spelling,
                             std::string_view separator) {
  return join_bits(
      capabilities, capability_table(),
      [spelling](const EnumName& entry) { return spell(entry, spelling); }, separator);
}

std::string module_format_names(uint32_t formats, Spelling spelling, std::string_view separator) {
  // The mask holds 1u << format; walk it against the enumerators.
  std::string names;
  for (const EnumName& entry : module_format_table()) {
    const uint32_t bit = entry.value < 32 ? 1u << entry.value : 0;
    if ((formats & bit) == 0) continue;
    if (!names.empty()) names += separator;
    names += spell(entry, spelling);
    formats &= ~bit;
  }
  for (uint32_t format = 0; formats != 0; ++format) {
    const uint32_t bit = 1u << format;
    if ((formats & bit) == 0) continue;
    if (!names.empty()) names += separator;
    names += "format_" + std::to_string(format);
    formats &= ~bit;
  }
  return names.empty() ? "none" : names;
}

}  // namespace hal::util
