/* Test-only queries of the stand-in cuDNN (libcudnn.so.9 built in the test
 * tree, never installed). A test reaches them with dlsym on the library the
 * plugin opened (HAL_CUDA_CUDNN_PATH). */
#ifndef HAL_TESTS_CUDA_FAKE_CUDNN_H_
#define HAL_TESTS_CUDA_FAKE_CUDNN_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One tensor of an executed operation as the plugin described it. */
typedef struct fake_cudnn_tensor {
  int32_t type; /* cudnnDataType_t */
  int32_t rank;
  int64_t dims[5], strides[5];
  int64_t uid, alignment;
} fake_cudnn_tensor_t;

/* One cudnnBackendExecute as the library received it. */
typedef struct fake_cudnn_execution {
  int32_t operation;    /* cudnnBackendDescriptorType_t of the graph's operation */
  int32_t mode;         /* cudnnConvolutionMode_t */
  int32_t compute_type; /* cudnnDataType_t */
  int64_t spatial_dims;
  int64_t stride[3], dilation[3], pre_padding[3], post_padding[3];
  fake_cudnn_tensor_t x, w, y; /* in the forward's roles (dx is x, dy is y, dw is w) */
  int64_t engine;              /* FAKE_CUDNN_ENGINE_* */
  int64_t workspace_bytes;     /* the plan's */
  const void* workspace;
  /* Resample (pooling) operations: x, y are x and y (dx, dy backward);
   * spatial_dims, stride, pre_padding, post_padding are the resample's. */
  int32_t resample_mode, padding_mode, nan_propagation; /* cudnnResampleMode_t ... */
  int64_t window[3];
  /* Norm operations: x is x, y is y (dy backward). */
  int32_t norm_mode, norm_phase;
  int32_t running_stats;  /* the forward updates running statistics */
  int64_t tensor_count;   /* tensors of the operation */
  double epsilon, factor; /* the by-value scalars as executed */
} fake_cudnn_execution_t;

typedef struct fake_cudnn_stats {
  uint64_t executions;
  long live_handles, live_descriptors;
} fake_cudnn_stats_t;

/* The engines the heuristic offers, in its order: TF32 (convolutions of f32
 * data only; numerical note TENSOR_CORE; rounds f32 inputs to 10 mantissa
 * bits), VECTOR (tensors aligned to 16 bytes only; backward filter noted
 * NONDETERMINISTIC), GENERIC (any alignment). */
#define FAKE_CUDNN_ENGINE_TF32 0
#define FAKE_CUDNN_ENGINE_VECTOR 1
#define FAKE_CUDNN_ENGINE_GENERIC 2
/* Their workspaces: VECTOR's, GENERIC's (TF32 needs none). */
#define FAKE_CUDNN_VECTOR_WORKSPACE 4096
#define FAKE_CUDNN_GENERIC_WORKSPACE 1024

typedef void (*fake_cudnn_stats_fn)(fake_cudnn_stats_t* out);
/* The last cudnnBackendExecute (0 when none yet). */
typedef int (*fake_cudnn_last_execution_fn)(fake_cudnn_execution_t* out);
/* The next |times| calls of |what| ("create", "finalize_plan", "execute")
 * return |status| (a cudnnStatus_t) instead of doing their work. */
typedef void (*fake_cudnn_fail_next_fn)(const char* what, int status, int times);

#ifdef __cplusplus
}
#endif

#endif /* HAL_TESTS_CUDA_FAKE_CUDNN_H_ */
