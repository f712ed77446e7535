# The ABI check must catch a layout change: copies the public headers, swaps
# two fields of hal_launch_config_t in the copy, and expects
# scripts/abi_check.sh to fail naming the moved field.
set(copy "${WORK_DIR}/planted_api")
file(REMOVE_RECURSE "${copy}")
file(COPY "${SOURCE_DIR}/api/" DESTINATION "${copy}")
file(READ "${copy}/hal/kernel.h" header)
string(REPLACE "  uint32_t grid[3];             /* blocks per dimension, each >= 1 */\n"
               "@GRID@" header "${header}")
string(REPLACE "  uint32_t block[3];            /* threads per block per dimension, each >= 1 */\n"
               "  uint32_t grid[3];\n" header "${header}")
string(REPLACE "@GRID@" "  uint32_t block[3];\n" header "${header}")
if(NOT header MATCHES "uint32_t block\\[3\\];\n  uint32_t grid\\[3\\];")
  message(FATAL_ERROR "could not plant the change: hal_launch_config_t no longer reads as expected")
endif()
file(WRITE "${copy}/hal/kernel.h" "${header}")
execute_process(COMMAND "${SOURCE_DIR}/scripts/abi_check.sh" --include "${copy}"
  RESULT_VARIABLE failed OUTPUT_VARIABLE output ERROR_VARIABLE errors)
if(NOT failed)
  message(FATAL_ERROR "the ABI check passed a reordered hal_launch_config_t:\n${output}${errors}")
endif()
if(NOT output MATCHES "BREAK changed: field hal_launch_config.grid: offset=16 size=12 -> offset=28")
  message(FATAL_ERROR "the ABI check failed, but without naming the moved field:\n${output}${errors}")
endif()
message(STATUS "the ABI check caught the planted change:\n${output}")
