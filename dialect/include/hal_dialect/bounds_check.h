/* Bounds-checked dialect kernels (SPEC.md §14.1, the cpu plugin). Shared by the
 * plugin and the code it translates (the C++ prelude embeds this text): the
 * plugin passes one record per launch as the kernel's hidden last argument;
 * every access through a `global` pointer is checked against the allocation
 * of the argument the pointer came from, and the first one outside it is
 * recorded here. The access itself then does not happen: a read gives 0, a
 * write is dropped, so the kernel corrupts nothing while it is reported. */
#ifndef HAL_DIALECT_BOUNDS_CHECK_H_
#define HAL_DIALECT_BOUNDS_CHECK_H_

#include <stdint.h>

/* Where one argument may reach: the bytes [begin, end) of the allocation that
 * holds its pointer. begin == end == 0: not checked (not a pointer, NULL, or
 * memory the plugin did not allocate). */
typedef struct hal_bounds_range {
  uintptr_t begin;
  uintptr_t end;
} hal_bounds_range_t;

typedef struct hal_bounds_record {
  const hal_bounds_range_t* ranges; /* one per kernel argument */
  uint32_t arg_count;
  uint32_t claimed;      /* 0 until the first bad access sets it to 1 (atomically) */
  uint64_t bad_accesses; /* every bad access of the launch (atomically) */
  /* The first bad access, written by the access that claimed the record: */
  uint32_t arg_index;     /* the argument whose pointer it came from */
  uint32_t element_bytes; /* the size of the element accessed */
  int64_t element_index;  /* from the argument's own pointer, in elements of that size */
  uint32_t read_only;     /* 1: through a const pointer (a read); 0: a read or a write */
  uint32_t reserved;
} hal_bounds_record_t;

#endif /* HAL_DIALECT_BOUNDS_CHECK_H_ */
