/* A C caller that passes raw 32-bit values where the ABI takes an enum: C
 * converts any integer to an enum type, so -1 or INT32_MIN are values a
 * conforming C program can pass. Compiled as C99; called by
 * enum_range_test.cpp, which checks that each is refused (and, under UBSan,
 * that the library never reads one as an out-of-range C++ enum). */
#include <hal.h>

#include <string.h>

const char* c_result_string(int32_t raw);
hal_result_t c_mem_alloc(hal_device_t device, int32_t raw_kind, void** out);
hal_result_t c_module_load(hal_device_t device, int32_t raw_format, hal_module_t* out);
hal_result_t c_kernel_get(hal_module_t module, int32_t raw_arg_type, hal_kernel_t* out);

const char* c_result_string(int32_t raw) {
  return hal_result_string((hal_result_t)raw);
}

hal_result_t c_mem_alloc(hal_device_t device, int32_t raw_kind, void** out) {
  return hal_mem_alloc(device, (hal_memory_kind_t)raw_kind, 64, 0, out);
}

hal_result_t c_module_load(hal_device_t device, int32_t raw_format, hal_module_t* out) {
  static const char kText[] = "kernel";
  hal_module_desc_t desc;
  memset(&desc, 0, sizeof desc);
  desc.struct_size = sizeof desc;
  desc.format = (hal_module_format_t)raw_format;
  desc.data = kText;
  desc.size = sizeof kText - 1;
  return hal_module_load(device, &desc, out);
}

hal_result_t c_kernel_get(hal_module_t module, int32_t raw_arg_type, hal_kernel_t* out) {
  hal_arg_type_t types[3];
  hal_kernel_desc_t desc;
  types[0] = HAL_ARG_POINTER;
  types[1] = HAL_ARG_U32;
  types[2] = (hal_arg_type_t)raw_arg_type;
  memset(&desc, 0, sizeof desc);
  desc.struct_size = sizeof desc;
  desc.name = "scale";
  desc.arg_count = 3;
  desc.arg_types = types;
  return hal_kernel_get(module, &desc, out);
}
