/* Test-only queries of the stand-in cuBLASLt (libcublasLt.so.13 built in the
 * test tree, never installed). A test reaches them with dlsym on the library
 * the plugin opened (HAL_CUDA_CUBLASLT_PATH). */
#ifndef HAL_TESTS_CUDA_FAKE_CUBLASLT_H_
#define HAL_TESTS_CUDA_FAKE_CUBLASLT_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One matrix layout as cublasLtMatrixLayoutCreate/SetAttribute gave it. */
typedef struct fake_cublaslt_layout {
  int32_t type; /* cudaDataType_t */
  uint64_t rows, cols;
  int64_t ld;
  int32_t batch_count;
  int64_t batch_stride;
} fake_cublaslt_layout_t;

/* One cublasLtMatmul as the library received it. */
typedef struct fake_cublaslt_matmul {
  int32_t compute_type;   /* cublasComputeType_t */
  int32_t scale_type;     /* cudaDataType_t */
  int32_t transa, transb; /* cublasOperation_t */
  uint32_t epilogue;      /* cublasLtEpilogue_t */
  int32_t bias_type;      /* -1: not set */
  const void* bias;
  void* aux; /* GELU_AUX's output */
  int64_t aux_ld, aux_batch_stride;
  fake_cublaslt_layout_t a, b, c, d;
  const void *a_ptr, *b_ptr, *c_ptr;
  void* d_ptr;
  float alpha, beta;
  uint64_t algo_id;       /* 1: any alignment, 2: 16-byte aligned operands */
  size_t workspace_bytes; /* what the call passed */
  const void* workspace;
} fake_cublaslt_matmul_t;

typedef struct fake_cublaslt_stats {
  uint64_t heuristic_calls, matmul_calls;
  long live_handles, live_descs, live_layouts, live_preferences;
} fake_cublaslt_stats_t;

/* The statistics, and the last cublasLtMatmul (0 when none yet). */
typedef void (*fake_cublaslt_stats_fn)(fake_cublaslt_stats_t* out);
typedef int (*fake_cublaslt_last_matmul_fn)(fake_cublaslt_matmul_t* out);
/* The next |times| calls of |what| ("create", "heuristic", "matmul") return
 * |status| (a cublasStatus_t) instead of doing their work. */
typedef void (*fake_cublaslt_fail_next_fn)(const char* what, int status, int times);

/* The workspace each algorithm the heuristic offers needs, when the
 * preference's cap allows it (else 0). */
#define FAKE_CUBLASLT_WORKSPACE_BYTES 1024

#ifdef __cplusplus
}
#endif

#endif /* HAL_TESTS_CUDA_FAKE_CUBLASLT_H_ */
