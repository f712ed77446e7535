// Tensor descriptor arithmetic and the checks every op's rules are built
// from. Each check returns an empty string when the tensor passes, else a
// sentence naming the operand and the rule it breaks.
#pragma once

#include <hal/ops.h>

#include <cstdint>
#include <initializer_list>
#include <string>

namespace hal::ops {

// Dtype sets as bit masks over hal_dtype_t.
using DtypeSet = uint32_t;
constexpr DtypeSet dtype_bit(hal_dtype_t dtype) {
  return static_cast<uint32_t>(dtype) < 32 ? 1u << static_cast<uint32_t>(dtype) : 0u;
}
constexpr DtypeSet kFloatDtypes =
    dtype_bit(HAL_DTYPE_F32) | dtype_bit(HAL_DTYPE_F16) | dtype_bit(HAL_DTYPE_BF16);
constexpr DtypeSet kIndexDtypes = dtype_bit(HAL_DTYPE_I32) | dtype_bit(HAL_DTYPE_I64);
// The integer dtypes (BOOL is a class of its own) and every dtype HAL knows.
constexpr DtypeSet kIntegerDtypes = dtype_bit(HAL_DTYPE_I32) | dtype_bit(HAL_DTYPE_I64) |
                                    dtype_bit(HAL_DTYPE_I8) | dtype_bit(HAL_DTYPE_U8);
constexpr DtypeSet kBoolDtype = dtype_bit(HAL_DTYPE_BOOL);
constexpr DtypeSet kAllDtypes =
    kFloatDtypes | dtype_bit(HAL_DTYPE_F64) | kIntegerDtypes | kBoolDtype;
// The OCP 8-bit floats: storage types that HAL_OP_CAST converts and the low
// precision ops (§17.7) take; no other op computes on them.
constexpr DtypeSet kFp8Dtypes = dtype_bit(HAL_DTYPE_F8_E4M3) | dtype_bit(HAL_DTYPE_F8_E5M2);
constexpr DtypeSet kF32Only = dtype_bit(HAL_DTYPE_F32);
constexpr DtypeSet kI32Only = dtype_bit(HAL_DTYPE_I32);

// "f32[4,5]{5,1}": dtype, shape, strides.
std::string describe_tensor(const hal_tensor_desc_t& tensor);
// "f32, f16, bf16".
std::string describe_dtypes(DtypeSet dtypes);

int64_t element_count(const hal_tensor_desc_t& tensor);
bool is_empty(const hal_tensor_desc_t& tensor);
// The largest element offset the tensor reaches (0 for an empty tensor).
int64_t last_offset(const hal_tensor_desc_t& tensor);
// Bytes from the base pointer to one past the last element (0 when empty).
uint64_t extent_bytes(const hal_tensor_desc_t& tensor);
// Dense row-major (dimensions of size 1 may have any stride).
bool is_contiguous(const hal_tensor_desc_t& tensor);
// The last dimension has stride 1 (or size 1).
bool is_last_dim_contiguous(const hal_tensor_desc_t& tensor);
// No two index tuples reach the same element (required of outputs).
bool is_non_overlapping(const hal_tensor_desc_t& tensor);
bool same_shape(const hal_tensor_desc_t& a, const hal_tensor_desc_t& b);
bool same_layout(const hal_tensor_desc_t& a, const hal_tensor_desc_t& b);

// rank <= HAL_TENSOR_MAX_RANK, a known dtype in |allowed|, rank in
// [min_rank, max_rank], shape >= 0, strides >= 0, offsets that fit in int64.
std::string check_tensor(const char* name, const hal_tensor_desc_t& tensor, DtypeSet allowed,
                         uint32_t min_rank, uint32_t max_rank);
// check_tensor plus: never reaches one element twice (outputs).
std::string check_output(const char* name, const hal_tensor_desc_t& tensor, DtypeSet allowed,
                         uint32_t min_rank, uint32_t max_rank);
// |tensor| has exactly |shape|.
std::string check_shape(const char* name, const hal_tensor_desc_t& tensor,
                        std::initializer_list<int64_t> shape);
std::string check_same_shape(const char* name, const hal_tensor_desc_t& tensor,
                             const char* other_name, const hal_tensor_desc_t& other);
// |tensor| broadcasts to |out|'s shape: out's rank, each dimension out's or 1
// (HAL_OP_BINARY's rule, shared by every op that broadcasts an input).
std::string check_broadcast(const char* name, const hal_tensor_desc_t& tensor,
                            const hal_tensor_desc_t& out);
// |tensor| seen with |out|'s shape: stride 0 where it has extent 1 and out
// does not (what check_broadcast allows, made explicit for a kernel).
hal_tensor_desc_t broadcast_to(const hal_tensor_desc_t& tensor, const hal_tensor_desc_t& out);

inline bool is_float_dtype(hal_dtype_t dtype) {
  return (kFloatDtypes & dtype_bit(dtype)) != 0;
}
inline bool is_integer_dtype(hal_dtype_t dtype) {
  return (kIntegerDtypes & dtype_bit(dtype)) != 0;
}

}  // namespace hal::ops
