// The names of OpenCL error codes, and the HAL results they map to.
#include "opencl.hpp"

namespace hal::opencl {

std::string cl_error_text(cl_int code) {
  const char* name = "an OpenCL error";
  switch (code) {
    case CL_DEVICE_NOT_FOUND:
      name = "CL_DEVICE_NOT_FOUND";
      break;
    case CL_OUT_OF_RESOURCES:
      name = "CL_OUT_OF_RESOURCES";
      break;
    case CL_OUT_OF_HOST_MEMORY:
      name = "CL_OUT_OF_HOST_MEMORY";
      break;
    case CL_BUILD_PROGRAM_FAILURE:
      name = "CL_BUILD_PROGRAM_FAILURE";
      break;
    case CL_INVALID_VALUE:
      name = "CL_INVALID_VALUE";
      break;
    case CL_INVALID_KERNEL_NAME:
      name = "CL_INVALID_KERNEL_NAME";
      break;
    case CL_INVALID_KERNEL_ARGS:
      name = "CL_INVALID_KERNEL_ARGS";
      break;
    case CL_INVALID_ARG_SIZE:
      name = "CL_INVALID_ARG_SIZE";
      break;
    case CL_INVALID_ARG_VALUE:
      name = "CL_INVALID_ARG_VALUE";
      break;
    case CL_INVALID_WORK_GROUP_SIZE:
      name = "CL_INVALID_WORK_GROUP_SIZE";
      break;
    case CL_INVALID_WORK_ITEM_SIZE:
      name = "CL_INVALID_WORK_ITEM_SIZE";
      break;
    case CL_INVALID_GLOBAL_WORK_SIZE:
      name = "CL_INVALID_GLOBAL_WORK_SIZE";
      break;
    case CL_INVALID_EVENT:
      name = "CL_INVALID_EVENT";
      break;
    case CL_PROFILING_INFO_NOT_AVAILABLE:
      name = "CL_PROFILING_INFO_NOT_AVAILABLE";
      break;
    case -1001:
      name = "CL_PLATFORM_NOT_FOUND_KHR";
      break;
    default:
      break;
  }
  return std::string(name) + " (" + std::to_string(code) + ")";
}

hal_result_t result_of(cl_int code) {
  switch (code) {
    case CL_OUT_OF_HOST_MEMORY:
    case CL_MEM_OBJECT_ALLOCATION_FAILURE:
      return HAL_ERROR_OUT_OF_MEMORY;
    case CL_OUT_OF_RESOURCES:
    case CL_INVALID_WORK_GROUP_SIZE:
    case CL_INVALID_WORK_ITEM_SIZE:
    case CL_INVALID_GLOBAL_WORK_SIZE:
      return HAL_ERROR_INVALID_LAUNCH;
    default:
      return HAL_ERROR_INTERNAL;
  }
}

}  // namespace hal::opencl
