/* hal_tensor_desc_contiguous compiled as C99 (hal/ops.h is a C header; the
 * function is a static inline, so each language's compilation is its own),
 * called by tensor_desc_test.cpp. */
#include <hal.h>

void contiguous_from_c(hal_tensor_desc_t* tensor, hal_dtype_t dtype, uint32_t rank,
                       const int64_t* shape);

void contiguous_from_c(hal_tensor_desc_t* tensor, hal_dtype_t dtype, uint32_t rank,
                       const int64_t* shape) {
  hal_tensor_desc_contiguous(tensor, dtype, rank, shape);
}
