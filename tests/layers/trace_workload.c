/* A small HAL program for the tracing tests: every kind of stream operation
 * on device 0 of the cpu plugin, an operator among them, run under
 * HAL_TRACE / HAL_TRACE_SUMMARY. */
#include <hal.h>

#include <stdio.h>
#include <string.h>

#define CHECK(call)                                                                  \
  do {                                                                               \
    hal_result_t check_result = (call);                                              \
    if (check_result != HAL_SUCCESS) {                                               \
      fprintf(stderr, "%s failed: %s: %s\n", #call, hal_result_string(check_result), \
              hal_error_last_message());                                             \
      return 1;                                                                      \
    }                                                                                \
  } while (0)

static void count_calls(void* user_data) {
  ++*(int*)user_data;
}

int main(void) {
  enum { kBytes = 4096 };
  static unsigned char host[kBytes];
  memset(host, 7, sizeof host);
  hal_device_t device = NULL;
  hal_stream_t stream = NULL;
  hal_event_t event = NULL;
  void* memory = NULL;
  int calls = 0;
  CHECK(hal_init(NULL));
  CHECK(hal_device_get(0, &device));
  CHECK(hal_stream_create(device, 0, &stream));
  CHECK(hal_event_create(device, 0, &event));
  CHECK(hal_mem_alloc(device, HAL_MEMORY_DEVICE, kBytes, 0, &memory));
  CHECK(hal_memcpy_async(memory, host, kBytes, stream));
  CHECK(hal_memset_async(memory, 0, kBytes / 2, stream));
  CHECK(hal_stream_enqueue_host_fn(stream, count_calls, &calls));
  CHECK(hal_event_record(event, stream));
  CHECK(hal_stream_wait_event(stream, event));
  CHECK(hal_memcpy_async(host, memory, kBytes, stream));
  {
    /* out = a + b on 256 floats inside |memory|: one op execution, one span
     * named after the op and its implementation, whatever kernels serve it. */
    hal_op_binary_desc_t add;
    hal_op_plan_t plan = NULL;
    const int64_t shape[1] = {256};
    float* floats = (float*)memory;
    void* operands[3];
    hal_op_exec_args_t args;
    memset(&add, 0, sizeof add);
    add.header.struct_size = sizeof add;
    add.header.kind = HAL_OP_BINARY;
    add.op = HAL_BINARY_ADD;
    add.alpha = 1.0f;
    hal_tensor_desc_contiguous(&add.a, HAL_DTYPE_F32, 1, shape);
    add.b = add.a;
    add.out = add.a;
    CHECK(hal_op_plan_create(device, &add.header, 0, &plan));
    operands[0] = floats;
    operands[1] = floats + 256;
    operands[2] = floats + 512;
    memset(&args, 0, sizeof args);
    args.struct_size = sizeof args;
    args.operand_count = 3;
    args.operands = operands;
    CHECK(hal_op_execute(plan, &args, stream));
    CHECK(hal_op_plan_destroy(plan)); /* before the execution ends: the span keeps its name */
  }
  CHECK(hal_stream_synchronize(stream));
  /* A failing call is traced with its result. */
  if (hal_memcpy_async(NULL, host, 1, stream) != HAL_ERROR_NULL_POINTER) return 1;
  CHECK(hal_mem_free(memory));
  CHECK(hal_event_destroy(event));
  CHECK(hal_stream_destroy(stream));
  CHECK(hal_shutdown());
  if (calls != 1 || host[0] != 0 || host[kBytes - 1] != 7) {
    fprintf(stderr, "trace_workload: wrong results\n");
    return 1;
  }
  return 0;
}
