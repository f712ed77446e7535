# The fuzz targets' shared definitions, used by the libFuzzer build
# (fuzz/CMakeLists.txt) and by the replay tests of the normal build
# (fuzz/replay.cmake). Defines, for each target <name>:
#   hal_fuzz_<name>_sources, hal_fuzz_<name>_definitions, hal_fuzz_<name>_depends,
#   hal_fuzz_<name>_libraries (linked besides hal)
set(hal_fuzz_dir "${CMAKE_CURRENT_LIST_DIR}")
set(hal_fuzz_targets api_sequence plugin_discovery dialect_frontend store_protocol)

# A copy of the loader tests' minimal plugin: the template the discovery
# target mutates.
if(NOT TARGET hal_fuzz_template_plugin)
  add_library(hal_fuzz_template_plugin MODULE "${hal_fuzz_dir}/../tests/loader/plugins/minimal.c")
  set_target_properties(hal_fuzz_template_plugin PROPERTIES PREFIX "" C_STANDARD 11
    OUTPUT_NAME hal_fuzz_template_plugin LIBRARY_OUTPUT_DIRECTORY "${CMAKE_CURRENT_BINARY_DIR}")
  target_compile_definitions(hal_fuzz_template_plugin PRIVATE MINIMAL_PLUGIN_NAME="fuzzed")
  target_link_libraries(hal_fuzz_template_plugin PRIVATE hal_headers)
  target_link_options(hal_fuzz_template_plugin PRIVATE
    "LINKER:--version-script=${hal_fuzz_dir}/../plugins/common/plugin.map")
endif()
# The kernel api_sequence launches: an empty one (its own accesses are unchecked by contract).
if(NOT TARGET hal_fuzz_empty_kernel)
  add_library(hal_fuzz_empty_kernel MODULE "${hal_fuzz_dir}/../bench/kernels/empty_kernel.c")
  set_target_properties(hal_fuzz_empty_kernel PROPERTIES PREFIX ""
    OUTPUT_NAME hal_fuzz_empty_kernel LIBRARY_OUTPUT_DIRECTORY "${CMAKE_CURRENT_BINARY_DIR}")
  target_link_libraries(hal_fuzz_empty_kernel PRIVATE hal_headers)
endif()

set(hal_fuzz_api_sequence_sources "${hal_fuzz_dir}/api_sequence.cpp")
set(hal_fuzz_api_sequence_definitions
  HAL_FUZZ_CPU_PLUGIN_PATH="$<TARGET_FILE:hal_plugin_cpu>"
  HAL_FUZZ_EMPTY_KERNEL_PATH="$<TARGET_FILE:hal_fuzz_empty_kernel>")
set(hal_fuzz_api_sequence_depends hal_plugin_cpu hal_fuzz_empty_kernel)

set(hal_fuzz_plugin_discovery_sources "${hal_fuzz_dir}/plugin_discovery.cpp")
set(hal_fuzz_plugin_discovery_definitions
  HAL_FUZZ_TEMPLATE_PLUGIN_PATH="$<TARGET_FILE:hal_fuzz_template_plugin>")
set(hal_fuzz_plugin_discovery_depends hal_fuzz_template_plugin)

set(hal_fuzz_dialect_frontend_sources "${hal_fuzz_dir}/dialect_frontend.cpp")
set(hal_fuzz_dialect_frontend_depends hal_dialect)
set(hal_fuzz_dialect_frontend_libraries hal_dialect)

set(hal_fuzz_store_protocol_sources "${hal_fuzz_dir}/store_protocol.cpp")
set(hal_fuzz_store_protocol_depends hal_collective_store)
set(hal_fuzz_store_protocol_libraries hal_collective_store)
