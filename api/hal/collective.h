/* HAL public C API: communicators and collectives, in NCCL's shape.
 *
 * A communicator (hal_comm_t) is one rank of a group that exchanges data:
 * several devices of one process (hal_comm_init_all) or one device per
 * process (hal_comm_init_rank with a unique id, a TCP store or MPI). Every
 * collective is stream-ordered: it returns once enqueued and runs when the
 * stream reaches it. Counts are in elements; a call whose send and receive
 * buffers are the same pointer runs in place.
 *
 * Failure model: every call, init included, has a deadline (the config's
 * timeout_ms). A rank that does not take part in time makes the others fail
 * with HAL_ERROR_TIMEOUT, a rank that dies or aborts with HAL_ERROR_REMOTE;
 * an asynchronous failure fails the stream (hal_stream_synchronize returns
 * HAL_ERROR_DEVICE_LOST) and is kept by the communicator
 * (hal_comm_get_async_error). hal_comm_abort is local and bounded. */
#ifndef HAL_COLLECTIVE_H_
#define HAL_COLLECTIVE_H_

#include "hal/dtype.h"
#include "hal/stream.h"

#ifdef __cplusplus
extern "C" {
#endif

/*===------------------------------------------------------------------===*
 * Types and enums
 *===------------------------------------------------------------------===*/

/* One rank of a communicator. Owned by the caller: hal_comm_destroy or
 * hal_comm_abort frees it. */
typedef struct hal_comm_s* hal_comm_t;

#define HAL_COMM_UNIQUE_ID_BYTES 128

/* Names one communicator-to-be: made by hal_comm_get_unique_id on one
 * process and sent to the others out of band (a private file, a pipe,
 * MPI_Bcast). Plain bytes, but a credential: it holds the store's secret,
 * so keep it off command lines and out of logs. */
typedef struct hal_comm_unique_id {
  uint8_t bytes[HAL_COMM_UNIQUE_ID_BYTES];
} hal_comm_unique_id_t;

typedef enum hal_reduce_op HAL_ENUM_TYPE {
  HAL_REDUCE_SUM = 0,
  HAL_REDUCE_PROD = 1,
  HAL_REDUCE_MIN = 2,
  HAL_REDUCE_MAX = 3,
  HAL_REDUCE_AVG = 4, /* the sum divided by the rank count (integers: truncated) */
  HAL_REDUCE_OP_COUNT = 5,
  HAL_REDUCE_OP_MAX_ENUM = 0x7fffffff
} hal_reduce_op_t;

/* How the ranks of hal_comm_init_rank find each other. */
typedef enum hal_comm_bootstrap HAL_ENUM_TYPE {
  /* The TCP store that hal_comm_get_unique_id started, named in the id. */
  HAL_COMM_BOOTSTRAP_UNIQUE_ID = 0,
  /* A TCP store at config->store_address ("host:port"): rank 0 serves it,
   * the others connect; the unique id is ignored. For launches without
   * mpirun (the torchrun model). */
  HAL_COMM_BOOTSTRAP_TCP_STORE = 1,
  /* MPI_COMM_WORLD of a process started by mpirun: nranks and rank must be
   * MPI's; the unique id is ignored. Needs a plugin built with MPI. */
  HAL_COMM_BOOTSTRAP_MPI = 2,
  HAL_COMM_BOOTSTRAP_MAX_ENUM = 0x7fffffff
} hal_comm_bootstrap_t;

/* The deadline of init and of every call when the config gives none. */
#define HAL_COMM_DEFAULT_TIMEOUT_MS 300000u

/* Options of a communicator. NULL means all defaults. */
typedef struct hal_comm_config {
  size_t struct_size;             /* [in] sizeof(hal_comm_config_t) */
  const void* next;               /* [in] extension chain, NULL */
  uint32_t timeout_ms;            /* deadline of init and of each call; 0: the default */
  hal_comm_bootstrap_t bootstrap; /* hal_comm_init_rank only */
  const char* store_address;      /* "host:port" for HAL_COMM_BOOTSTRAP_TCP_STORE */
} hal_comm_config_t;

#define HAL_COMM_CONFIG_INIT \
  { sizeof(hal_comm_config_t), NULL, 0u, HAL_COMM_BOOTSTRAP_UNIQUE_ID, NULL }

/*===------------------------------------------------------------------===*
 * Communicators
 *===------------------------------------------------------------------===*/

/* Starts a TCP store in this process (on 127.0.0.1, or the host of
 * HAL_COMM_STORE_HOST) and writes an id naming it, a fresh session and a
 * fresh secret. The store stops when this process's communicators that
 * joined through it are destroyed, else at the last hal_shutdown. Thread-safe.
 * Errors: HAL_ERROR_NOT_INITIALIZED, HAL_ERROR_NULL_POINTER, HAL_ERROR_INTERNAL
 * (no socket could be opened; the detail has errno). */
HAL_API hal_result_t hal_comm_get_unique_id(hal_comm_unique_id_t* out_id);

/* Creates rank |rank| of |nranks| on |device|, meeting the other ranks
 * through |config->bootstrap| within the config's deadline. Every rank must
 * call it (one per process or thread). |config| may be NULL.
 * Errors: HAL_ERROR_INVALID_HANDLE (device), HAL_ERROR_NULL_POINTER (id with
 * the unique-id bootstrap, out_comm), HAL_ERROR_INVALID_ARGUMENT (nranks 0,
 * rank >= nranks, unknown bootstrap, bad store address, a corrupt id, a
 * store that does not prove this rank's secret, TCP_STORE without
 * HAL_COMM_STORE_SECRET(_FILE), a secret below SPEC §13.6's strength rule, a
 * secret file that is not a private regular file), HAL_ERROR_ARGUMENT_MISMATCH
 * (the ranks disagree on nranks or a rank is taken twice), HAL_ERROR_TIMEOUT,
 * HAL_ERROR_REMOTE (a peer or the store went away, a store frame failed its
 * integrity check), HAL_ERROR_UNSUPPORTED (the bootstrap is not available). */
HAL_API hal_result_t hal_comm_init_rank(hal_device_t device, uint32_t nranks,
                                        const hal_comm_unique_id_t* id, uint32_t rank,
                                        const hal_comm_config_t* config, hal_comm_t* out_comm);

/* Creates one communicator over |count| devices of this process; out_comms[i]
 * is rank i on devices[i]. The devices must belong to one plugin and be
 * distinct. Collectives on them may be enqueued from one thread (see
 * hal_group_start for the rule on blocking plugins). Thread-safe.
 * Errors: HAL_ERROR_NULL_POINTER, HAL_ERROR_INVALID_ARGUMENT (count 0, a
 * device twice), HAL_ERROR_INVALID_HANDLE, HAL_ERROR_DEVICE_MISMATCH (two
 * plugins), HAL_ERROR_OUT_OF_MEMORY. */
HAL_API hal_result_t hal_comm_init_all(uint32_t count, const hal_device_t* devices,
                                       const hal_comm_config_t* config, hal_comm_t* out_comms);

/* Frees |comm|. Calls already enqueued keep what they need and finish (or
 * fail at their deadline); a call in progress on another thread (the
 * loader's blocking host-staged path) is waited for, and calls made after
 * the destroy get HAL_ERROR_DESTROYED_HANDLE. hal_comm_destroy(NULL) is a
 * no-op.
 * Errors: HAL_ERROR_INVALID_HANDLE, HAL_ERROR_DESTROYED_HANDLE. */
HAL_API hal_result_t hal_comm_destroy(hal_comm_t comm);

/* Aborts and frees |comm|: calls of this rank in progress or enqueued fail
 * promptly (their async error is HAL_ERROR_INVALID_STATE, "aborted"), and
 * peers see this rank gone (HAL_ERROR_REMOTE, or HAL_ERROR_TIMEOUT where the
 * transport cannot tell).
 * Local and bounded: never waits for a peer. May be called from any thread,
 * also while another thread is blocked in a call on |comm|: that call is
 * made to fail first, and the handle is freed once it has returned. Of a
 * racing destroy and abort one succeeds, the other gets
 * HAL_ERROR_DESTROYED_HANDLE.
 * Errors: HAL_ERROR_INVALID_HANDLE, HAL_ERROR_DESTROYED_HANDLE. */
HAL_API hal_result_t hal_comm_abort(hal_comm_t comm);

/* The first asynchronous failure of |comm| (HAL_SUCCESS when none): what a
 * stream-ordered call met after it was enqueued. Thread-safe.
 * Errors: HAL_ERROR_INVALID_HANDLE, HAL_ERROR_DESTROYED_HANDLE, HAL_ERROR_NULL_POINTER. */
HAL_API hal_result_t hal_comm_get_async_error(hal_comm_t comm, hal_result_t* out_error);

/* The rank count, this rank and the device of |comm|. Thread-safe.
 * Errors: HAL_ERROR_INVALID_HANDLE, HAL_ERROR_DESTROYED_HANDLE, HAL_ERROR_NULL_POINTER. */
HAL_API hal_result_t hal_comm_count(hal_comm_t comm, uint32_t* out_count);
HAL_API hal_result_t hal_comm_rank(hal_comm_t comm, uint32_t* out_rank);
HAL_API hal_result_t hal_comm_get_device(hal_comm_t comm, hal_device_t* out_device);

/*===------------------------------------------------------------------===*
 * Collectives
 *
 * Common rules: |stream| is on the communicator's device; buffers that are
 * HAL allocations must be of that device and hold the bytes the call
 * touches; host memory is accepted as with hal_memcpy_async. Every rank
 * makes the same calls in the same order with the same count, dtype, op and
 * root; a mismatch fails on every rank with HAL_ERROR_ARGUMENT_MISMATCH.
 * Local errors (returned by the call itself): HAL_ERROR_INVALID_HANDLE /
 * DESTROYED_HANDLE (comm, stream), HAL_ERROR_NULL_POINTER (a buffer with
 * count > 0), HAL_ERROR_INVALID_ARGUMENT (dtype, op, root or peer out of
 * range; avg on integers is allowed), HAL_ERROR_INVALID_SIZE (count * size
 * overflows), HAL_ERROR_OUT_OF_BOUNDS, HAL_ERROR_DEVICE_MISMATCH (stream or
 * buffer on another device), HAL_ERROR_INVALID_STATE (the communicator
 * failed earlier: its async error says why). Thread-safe per communicator:
 * calls on one communicator from several threads are ordered as they
 * arrive, which is only meaningful if the peers see the same order.
 *===------------------------------------------------------------------===*/

/* recvbuf[i] = op over ranks of sendbuf[i], on every rank. */
HAL_API hal_result_t hal_allreduce(const void* sendbuf, void* recvbuf, size_t count,
                                   hal_dtype_t dtype, hal_reduce_op_t op, hal_comm_t comm,
                                   hal_stream_t stream);

/* recvbuf = root's sendbuf on every rank (sendbuf is read on the root only). */
HAL_API hal_result_t hal_broadcast(const void* sendbuf, void* recvbuf, size_t count,
                                   hal_dtype_t dtype, uint32_t root, hal_comm_t comm,
                                   hal_stream_t stream);

/* recvbuf (root only) = op over ranks of sendbuf. */
HAL_API hal_result_t hal_reduce(const void* sendbuf, void* recvbuf, size_t count, hal_dtype_t dtype,
                                hal_reduce_op_t op, uint32_t root, hal_comm_t comm,
                                hal_stream_t stream);

/* recvbuf[r * sendcount + i] = sendbuf[i] of rank r. In place when sendbuf
 * is recvbuf + rank * sendcount elements. */
HAL_API hal_result_t hal_allgather(const void* sendbuf, void* recvbuf, size_t sendcount,
                                   hal_dtype_t dtype, hal_comm_t comm, hal_stream_t stream);

/* recvbuf[i] = op over ranks of sendbuf[rank * recvcount + i]. In place when
 * recvbuf is sendbuf + rank * recvcount elements. */
HAL_API hal_result_t hal_reduce_scatter(const void* sendbuf, void* recvbuf, size_t recvcount,
                                        hal_dtype_t dtype, hal_reduce_op_t op, hal_comm_t comm,
                                        hal_stream_t stream);

/* recvbuf[r * count + i] = sendbuf[rank * count + i] of rank r. Not in place. */
HAL_API hal_result_t hal_alltoall(const void* sendbuf, void* recvbuf, size_t count,
                                  hal_dtype_t dtype, hal_comm_t comm, hal_stream_t stream);

/* Uneven all-to-all (MPI_Alltoallv's shape): sendcounts[r] elements from
 * element sdispls[r] of sendbuf go to rank r, and recvcounts[r] elements
 * from rank r land at element rdispls[r] of recvbuf. The arrays hold one
 * entry per rank, live in host memory and are read during the call only;
 * sdispls or rdispls NULL means packed in rank order (the exclusive prefix
 * sums of the counts). Counts may be 0. Every rank's recvcounts[r] must
 * equal rank r's sendcounts[rank]: where any pair differs, every rank fails
 * with HAL_ERROR_ARGUMENT_MISMATCH and no data moves. The receive ranges may
 * not overlap each other or the send ranges (not in place). To learn the
 * receive counts first, exchange them with hal_alltoall of one count per
 * rank. Errors: the common ones, plus HAL_ERROR_NULL_POINTER (sendcounts,
 * recvcounts), HAL_ERROR_INVALID_SIZE (a displacement plus its count
 * overflows), HAL_ERROR_INVALID_ARGUMENT (overlapping ranges),
 * HAL_ERROR_UNSUPPORTED (the device lacks HAL_DEVICE_CAP_ALLTOALLV: its
 * plugin's own collectives do not implement it). */
HAL_API hal_result_t hal_alltoallv(const void* sendbuf, const size_t* sendcounts,
                                   const size_t* sdispls, void* recvbuf, const size_t* recvcounts,
                                   const size_t* rdispls, hal_dtype_t dtype, hal_comm_t comm,
                                   hal_stream_t stream);

/* Point to point: |count| elements to or from rank |peer|. A send and its
 * recv match in call order; inside a group they progress together, so an
 * exchange (send to p and recv from p) cannot deadlock. */
HAL_API hal_result_t hal_send(const void* sendbuf, size_t count, hal_dtype_t dtype, uint32_t peer,
                              hal_comm_t comm, hal_stream_t stream);
HAL_API hal_result_t hal_recv(void* recvbuf, size_t count, hal_dtype_t dtype, uint32_t peer,
                              hal_comm_t comm, hal_stream_t stream);

/* Groups: calls between hal_group_start and the matching hal_group_end (on
 * the calling thread; groups nest, the outermost end submits) are checked
 * when made and submitted together at the end, per communicator, as one
 * fused operation whose parts progress concurrently. One thread driving
 * several ranks of an hal_comm_init_all communicator must group the calls
 * when the plugin runs collectives through the loader's blocking fallback.
 * hal_group_end returns the first failure of the submissions.
 * Errors: HAL_ERROR_INVALID_STATE (hal_group_end without a start). */
HAL_API hal_result_t hal_group_start(void);
HAL_API hal_result_t hal_group_end(void);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* HAL_COLLECTIVE_H_ */
