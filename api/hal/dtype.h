/* HAL public C API: element types of device buffers, shared by collectives
 * and (later) operators. */
#ifndef HAL_DTYPE_H_
#define HAL_DTYPE_H_

#include "hal/result.h"

#ifdef __cplusplus
extern "C" {
#endif

/*===------------------------------------------------------------------===*
 * Types and enums
 *===------------------------------------------------------------------===*/

/* An element type. Values are stable; new types are only appended. f16 is
 * IEEE binary16, bf16 the upper half of a binary32. */
typedef enum hal_dtype HAL_ENUM_TYPE {
  HAL_DTYPE_F32 = 0,
  HAL_DTYPE_F16 = 1,
  HAL_DTYPE_BF16 = 2,
  HAL_DTYPE_F64 = 3,
  HAL_DTYPE_I32 = 4,
  HAL_DTYPE_I64 = 5,
  HAL_DTYPE_I8 = 6,
  HAL_DTYPE_U8 = 7,
  /* OCP 8-bit floats (OFP8, v1.0), storage types (SPEC.md §17.7): E4M3
   * ("e4m3fn": bias 7, largest finite 448, no infinity, NaN = S.1111.111) and
   * E5M2 (bias 15, largest finite 57344, IEEE infinities and NaNs). Not
   * collective dtypes. */
  HAL_DTYPE_F8_E4M3 = 8,
  HAL_DTYPE_F8_E5M2 = 9,
  /* One byte, 0 (false) or 1 (true); an op that reads a BOOL takes any
   * nonzero byte as true and writes only 0 or 1. Not a collective dtype. */
  HAL_DTYPE_BOOL = 10,
  HAL_DTYPE_COUNT = 11, /* one past the last type of this version; not a type */
  HAL_DTYPE_MAX_ENUM = 0x7fffffff
} hal_dtype_t;

/* The size of one element of |dtype| in bytes, 0 for a value that is not a
 * hal_dtype_t. A macro, so it costs nothing and needs no library call. */
#define HAL_DTYPE_SIZE(dtype)                                                             \
  ((dtype) == HAL_DTYPE_F64 || (dtype) == HAL_DTYPE_I64                              ? 8u \
   : (dtype) == HAL_DTYPE_F32 || (dtype) == HAL_DTYPE_I32                            ? 4u \
   : (dtype) == HAL_DTYPE_F16 || (dtype) == HAL_DTYPE_BF16                           ? 2u \
   : (dtype) == HAL_DTYPE_I8 || (dtype) == HAL_DTYPE_U8 || (dtype) == HAL_DTYPE_BOOL ? 1u \
   : (dtype) == HAL_DTYPE_F8_E4M3 || (dtype) == HAL_DTYPE_F8_E5M2                    ? 1u \
                                                                                     : 0u)

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* HAL_DTYPE_H_ */
