/* HAL public C API: mixture-of-experts dispatch and combine over a
 * communicator.
 *
 * The experts are split evenly and contiguously over the communicator's
 * ranks: with E experts and n ranks (E a multiple of n), rank r owns experts
 * [r * E/n, (r + 1) * E/n), its local experts 0 .. E/n - 1.
 *
 * A routing (hal_moe_routing_t) is made once per batch from the top-k expert
 * indices of this rank's tokens (as HAL_OP_TOPK_GATING writes them). Every
 * rank of the communicator makes it together: it reads the indices to the
 * host, exchanges the per-expert counts and keeps the permutations in device
 * memory. Then:
 * - hal_moe_dispatch sends row t of tokens [T, hidden] to the owner of each
 *   of its k experts; this rank receives its rows grouped by local expert,
 *   each expert's rows contiguous (offsets from hal_moe_routing_get_info,
 *   ready for HAL_OP_GROUPED_MATMUL);
 * - hal_moe_combine is its inverse: from rows in the received layout it
 *   returns to each token's home rank the (weighted) sum over its k experts.
 *
 * Backward: the gradient of dispatch (without weights) is combine without
 * weights of the received rows' gradient, and the gradient of combine with
 * respect to the expert rows is dispatch of the output gradient with the same
 * weights. SPEC.md §13.7 has the gradient of the weights.
 *
 * Failure model and argument rules as for every collective (collective.h):
 * every call has the communicator's deadline, ranks that disagree get
 * HAL_ERROR_ARGUMENT_MISMATCH on every rank. */
#ifndef HAL_MOE_H_
#define HAL_MOE_H_

#include "hal/collective.h"
#include "hal/dtype.h"
#include "hal/stream.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One rank's routing of one batch. Owned by the caller:
 * hal_moe_routing_destroy frees it. */
typedef struct hal_moe_routing_s* hal_moe_routing_t;

/* What a routing is made from. Every rank gives the same num_experts and
 * top_k; num_tokens and recv_capacity are this rank's own. */
typedef struct hal_moe_routing_desc {
  size_t struct_size;   /* [in] sizeof(hal_moe_routing_desc_t) */
  const void* next;     /* [in] extension chain, NULL */
  uint32_t num_experts; /* over all ranks; a multiple of the rank count */
  uint32_t top_k;       /* experts per token, >= 1 */
  size_t num_tokens;    /* T: rows of this rank's tokens; may be 0 */
  size_t recv_capacity; /* the most rows this rank can receive */
} hal_moe_routing_desc_t;

#define HAL_MOE_ROUTING_DESC_INIT \
  { sizeof(hal_moe_routing_desc_t), NULL, 0u, 0u, 0u, 0u }

/* What a routing holds. */
typedef struct hal_moe_routing_info {
  size_t struct_size;          /* [in] sizeof(hal_moe_routing_info_t) */
  const void* next;            /* [in] extension chain, NULL */
  uint32_t num_local_experts;  /* E / n */
  uint32_t first_local_expert; /* rank * E / n */
  size_t num_send_rows;        /* T * k: rows this rank sends */
  size_t num_recv_rows;        /* rows dispatch writes on this rank */
  /* Device memory owned by the routing: i32 [num_local_experts + 1], local
   * expert l's rows are [offsets[l], offsets[l + 1]) of the received layout
   * (HAL_OP_GROUPED_MATMUL's offsets operand). Valid until the destroy. */
  const int32_t* expert_offsets;
} hal_moe_routing_info_t;

/* Makes this rank's routing: reads topk_indices (i32 [num_tokens, top_k],
 * row-major, device memory or host memory, read on |stream|), waits for
 * the read, exchanges the counts with every rank, and writes the
 * permutations to device memory. Blocks until done (the counts must be
 * known on the host to size the transfers). Every rank calls it.
 * Errors: the common ones of collective.h, plus HAL_ERROR_NULL_POINTER
 * (desc, out_routing; topk_indices with num_tokens > 0),
 * HAL_ERROR_INVALID_ARGUMENT (struct_size, num_experts 0 or not a multiple
 * of the rank count, top_k 0, more than 2^31 - 1 rows; an expert index
 * outside [0, num_experts) on any rank: every rank fails, the message names
 * the rank and the token), HAL_ERROR_ARGUMENT_MISMATCH (the ranks disagree on
 * num_experts or top_k: every rank), HAL_ERROR_OUT_OF_BOUNDS (this or any
 * rank would receive more than its recv_capacity rows: every rank fails,
 * the message names the rank), HAL_ERROR_OUT_OF_MEMORY, HAL_ERROR_TIMEOUT,
 * HAL_ERROR_REMOTE. A routing left at hal_shutdown is not freed. */
HAL_API hal_result_t hal_moe_routing_create(hal_comm_t comm, const hal_moe_routing_desc_t* desc,
                                            const int32_t* topk_indices, hal_stream_t stream,
                                            hal_moe_routing_t* out_routing);

/* Describes |routing|. Thread-safe.
 * Errors: HAL_ERROR_INVALID_HANDLE, HAL_ERROR_DESTROYED_HANDLE,
 * HAL_ERROR_NULL_POINTER, HAL_ERROR_INVALID_ARGUMENT (struct_size). */
HAL_API hal_result_t hal_moe_routing_get_info(hal_moe_routing_t routing,
                                              hal_moe_routing_info_t* out_info);

/* Writes the received rows per local expert to out_counts (host memory,
 * |count| entries, count = num_local_experts). Thread-safe.
 * Errors: HAL_ERROR_INVALID_HANDLE, HAL_ERROR_DESTROYED_HANDLE,
 * HAL_ERROR_NULL_POINTER, HAL_ERROR_INVALID_ARGUMENT (count is not
 * num_local_experts). */
HAL_API hal_result_t hal_moe_routing_get_expert_counts(hal_moe_routing_t routing, uint32_t count,
                                                       size_t* out_counts);

/* Frees |routing| once the work enqueued on its device is done (as
 * hal_mem_free). hal_moe_routing_destroy(NULL) is a no-op.
 * Errors: HAL_ERROR_INVALID_HANDLE, HAL_ERROR_DESTROYED_HANDLE. */
HAL_API hal_result_t hal_moe_routing_destroy(hal_moe_routing_t routing);

/* recv_tokens[offsets[l] + i] = w * tokens[t] for the i-th (token t, slot j)
 * routed to local expert l (ordered by source rank, then by t and j), w =
 * weights[t, j] of the sending rank, or 1 when weights is NULL.
 * tokens: [num_tokens, hidden] of dtype (f32, f16 or bf16); weights:
 * [num_tokens, top_k] of dtype, or NULL; recv_tokens: [num_recv_rows,
 * hidden] of dtype. All device memory of the communicator's device.
 * Stream-ordered; every rank calls it with the same hidden and dtype. Calls
 * on one routing use its workspace: order them (one stream, or events).
 * Errors: the common ones of collective.h, plus HAL_ERROR_NULL_POINTER,
 * HAL_ERROR_INVALID_ARGUMENT (hidden 0, dtype not f32/f16/bf16, a buffer not
 * in an allocation of the device, overlapping buffers), HAL_ERROR_UNSUPPORTED
 * (the device serves neither HAL_OP_EMBEDDING nor the collectives),
 * HAL_ERROR_ARGUMENT_MISMATCH (asynchronous: ranks with different hidden). */
HAL_API hal_result_t hal_moe_dispatch(hal_moe_routing_t routing, const void* tokens,
                                      const void* weights, size_t hidden, hal_dtype_t dtype,
                                      void* recv_tokens, hal_stream_t stream);

/* The inverse: out_tokens[t] = sum over j of w * expert_rows[row of (t, j)],
 * w = weights[t, j] or 1 when weights is NULL, summed in f32 and rounded
 * once (the products are rounded to dtype first when weighted).
 * expert_rows: [num_recv_rows, hidden] in dispatch's layout; out_tokens:
 * [num_tokens, hidden]. Rules and errors as hal_moe_dispatch. */
HAL_API hal_result_t hal_moe_combine(hal_moe_routing_t routing, const void* expert_rows,
                                     const void* weights, size_t hidden, hal_dtype_t dtype,
                                     void* out_tokens, hal_stream_t stream);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* HAL_MOE_H_ */
