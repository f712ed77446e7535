/* Test-only queries and modes of the stand-in NCCL (libnccl.so.2 built in the
 * test tree, never installed). A test reaches the queries with dlsym on the
 * library the plugin opened (HAL_CUDA_NCCL_PATH).
 *
 * Modes, read from the environment at each call:
 * - HAL_FAKE_NCCL_FAIL="<function>:<code>": that NCCL function returns the
 *   ncclResult_t <code> ("ncclAllReduce:2").
 * - HAL_FAKE_NCCL_ASYNC_ERROR=<code>: after a rank's collective has run, its
 *   ncclCommGetAsyncError answers <code> (a failure NCCL found later).
 * - HAL_FAKE_NCCL_IN_PROGRESS=<n>: every non-blocking call answers
 *   ncclInProgress, and ncclCommGetAsyncError then answers ncclInProgress <n>
 *   times before the real state.
 * - HAL_FAKE_NCCL_HANG_RANK=<r>: rank r's collectives never take part (a hung
 *   peer): they hold r's stream until r is aborted, and send nothing.
 * - HAL_FAKE_NCCL_INIT_HANG=1: no communicator ever finishes its init. */
#ifndef HAL_TESTS_CUDA_FAKE_NCCL_H_
#define HAL_TESTS_CUDA_FAKE_NCCL_H_

#ifdef __cplusplus
extern "C" {
#endif

/* How many times ncclCommAbort was called since the library was loaded. */
typedef long (*fake_nccl_abort_count_fn)(void);
/* Communicators made and not yet destroyed or aborted. */
typedef long (*fake_nccl_live_comms_fn)(void);
/* How many calls of the collective or point-to-point |function| ("ncclSend")
 * were accepted since the library was loaded. */
typedef long (*fake_nccl_call_count_fn)(const char* function);

#ifdef __cplusplus
}
#endif

#endif /* HAL_TESTS_CUDA_FAKE_NCCL_H_ */
