/* HAL public C API: result codes and error detail.
 *
 * Every HAL function returns one hal_result_t. The code is small, closed and
 * stable; the detail of the last failure on the calling thread (a sentence
 * naming the argument and values, the plugin, the vendor's native code) is
 * available through hal_error_get_detail(). */
#ifndef HAL_RESULT_H_
#define HAL_RESULT_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/*===------------------------------------------------------------------===*
 * Export and version macros
 *===------------------------------------------------------------------===*/

/* Linux/ELF only in v1: every public function has default visibility and
 * libhal's version script exports nothing else. */
#define HAL_API __attribute__((visibility("default")))

/* Semantic version of the C ABI. The major version is the SONAME
 * (libhal.so.1); minor releases only append functions, struct fields and
 * table entries. */
#define HAL_ABI_VERSION_MAJOR 1
#define HAL_ABI_VERSION_MINOR 1
#define HAL_ABI_VERSION_PATCH 0
#define HAL_MAKE_VERSION(major, minor, patch) \
  (((uint32_t)(major) << 22) | ((uint32_t)(minor) << 12) | (uint32_t)(patch))
#define HAL_VERSION_MAJOR(version) ((uint32_t)(version) >> 22)
#define HAL_VERSION_MINOR(version) (((uint32_t)(version) >> 12) & 0x3ffu)
#define HAL_VERSION_PATCH(version) ((uint32_t)(version)&0xfffu)
#define HAL_ABI_VERSION \
  HAL_MAKE_VERSION(HAL_ABI_VERSION_MAJOR, HAL_ABI_VERSION_MINOR, HAL_ABI_VERSION_PATCH)

/* Every enum of the ABI is declared `enum name HAL_ENUM_TYPE {`. C sees a
 * plain enum; C++ the same enum with the fixed underlying type int32_t. A C
 * caller (or a plugin) may pass any 32-bit value where the ABI takes an enum,
 * and in C++ reading a value outside the range of an enum without a fixed
 * type is undefined behaviour (UBSan's -fsanitize=enum reports -1, say). With
 * it every such value is one the callee can check and reject. Size, alignment
 * and argument passing are those of the C enum (32 bits; every enumerator
 * fits in int32_t). */
#ifdef __cplusplus
#define HAL_ENUM_TYPE : int32_t
#else
#define HAL_ENUM_TYPE
#endif

/*===------------------------------------------------------------------===*
 * Types and enums
 *===------------------------------------------------------------------===*/

/* The closed set of results. Values are stable across releases; new values
 * are only appended. */
typedef enum hal_result HAL_ENUM_TYPE {
  HAL_SUCCESS = 0,                /* the call did what it says */
  HAL_NOT_READY = 1,              /* a query: the work is not complete yet (not an error) */
  HAL_ERROR_INVALID_ARGUMENT = 2, /* a value is outside its documented range */
  HAL_ERROR_NULL_POINTER = 3,     /* a required pointer argument is NULL */
  HAL_ERROR_INVALID_HANDLE = 4,   /* NULL, foreign, or of the wrong handle type */
  HAL_ERROR_DESTROYED_HANDLE = 5, /* the handle was destroyed (use after destroy, double destroy) */
  HAL_ERROR_INVALID_SIZE = 6,     /* a size is zero where it must not be, or overflows */
  HAL_ERROR_OUT_OF_BOUNDS = 7,    /* a range overruns the allocation it starts in */
  HAL_ERROR_OUT_OF_MEMORY = 8,    /* the device or host could not provide the memory */
  HAL_ERROR_UNSUPPORTED = 9,      /* the plugin or device does not implement this */
  HAL_ERROR_NOT_INITIALIZED = 10, /* hal_init has not succeeded (or hal_shutdown ran) */
  HAL_ERROR_PLUGIN_LOAD = 11,     /* a plugin named in HAL_PLUGINS could not be loaded */
  HAL_ERROR_ABI_MISMATCH = 12,    /* incompatible ABI versions between loader and plugin */
  HAL_ERROR_INVALID_MODULE = 13,  /* a module image is not of its declared format, or broken */
  HAL_ERROR_NOT_FOUND = 14,       /* no such kernel entry, device index or allocation */
  HAL_ERROR_INVALID_LAUNCH = 15,  /* grid, block or shared-memory configuration not allowed */
  HAL_ERROR_ARGUMENT_MISMATCH = 16, /* kernel arguments do not match the kernel's signature */
  HAL_ERROR_DEVICE_MISMATCH = 17,   /* objects or pointers belong to incompatible devices */
  HAL_ERROR_INVALID_STATE = 18,     /* the object is not in a state that allows the call */
  HAL_ERROR_TIMEOUT = 19,           /* a deadline passed */
  HAL_ERROR_DEVICE_LOST = 20,       /* earlier asynchronous work failed; the stream is unusable */
  HAL_ERROR_INTERNAL = 21,          /* a plugin or loader bug; the detail says where */
  HAL_ERROR_REMOTE = 22,            /* a peer of a communicator failed, died or aborted */
  HAL_RESULT_MAX_ENUM = 0x7fffffff
} hal_result_t;

/* The detail of the last failed HAL call on the calling thread. Strings are
 * owned by the loader and stay valid until the next failing HAL call on this
 * thread. A successful call does not clear the detail. */
typedef struct hal_error_detail {
  size_t struct_size;   /* [in] sizeof(hal_error_detail_t) as the caller knows it */
  const void* next;     /* [in] extension chain, NULL */
  hal_result_t result;  /* the result the failing call returned */
  const char* function; /* the public function that failed, e.g. "hal_memcpy_async" */
  const char* message;  /* one sentence with the argument names and values */
  const char* plugin;   /* the plugin that reported it, or "loader" */
  int64_t native_code;  /* the vendor's own code (CUresult, cl_int, errno...), 0 if none */
} hal_error_detail_t;

/*===------------------------------------------------------------------===*
 * Functions
 *===------------------------------------------------------------------===*/

/* Returns a static, human-readable name of |result|, e.g. "HAL_ERROR_OUT_OF_BOUNDS".
 * Unknown values give "HAL_RESULT_UNKNOWN". Thread-safe. Never fails. */
HAL_API const char* hal_result_string(hal_result_t result);

/* Fills |out_detail| with the detail of the last failed call on this thread.
 * |out_detail->struct_size| must be set by the caller; only that many bytes
 * are written. Returns HAL_ERROR_NULL_POINTER if |out_detail| is NULL,
 * HAL_ERROR_INVALID_ARGUMENT if its struct_size is smaller than the v1.0
 * struct, HAL_ERROR_NOT_FOUND if no call has failed on this thread.
 * Thread-safe (per-thread state). Works before hal_init. */
HAL_API hal_result_t hal_error_get_detail(hal_error_detail_t* out_detail);

/* Returns the message of the last failed call on this thread, or "" when none.
 * The pointer is valid until the next failing HAL call on this thread.
 * Thread-safe. Never fails. */
HAL_API const char* hal_error_last_message(void);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* HAL_RESULT_H_ */
