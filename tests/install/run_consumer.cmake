# Driven by install.out_of_tree_consumer; see CMakeLists.txt beside it.
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    string(REPLACE ";" " " cmd "${ARGN}")
    message(FATAL_ERROR "failed (${rc}): ${cmd}\n${out}\n${err}")
  endif()
  set(last_output "${out}" PARENT_SCOPE)
endfunction()

set(prefix "${WORK_DIR}/prefix")
file(REMOVE_RECURSE "${WORK_DIR}")
run(${CMAKE_COMMAND} --install "${HAL_BUILD_DIR}" --prefix "${prefix}")

# No HAL_* variable may help the consumer find its plugins.
set(clean_env ${CMAKE_COMMAND} -E env --unset=HAL_PLUGINS --unset=HAL_PLUGIN_PATH
    --unset=HAL_CPU_DEVICES --unset=LD_LIBRARY_PATH)
set(flags "")
if(SANITIZE)
  set(flags "-fsanitize=${SANITIZE}")
endif()

# 1. CMake package.
run(${CMAKE_COMMAND} -S "${CONSUMER_SOURCE_DIR}" -B "${WORK_DIR}/cmake-build" -G "${GENERATOR}"
    "-DCMAKE_PREFIX_PATH=${prefix}" "-DCMAKE_C_FLAGS=${flags}" "-DCMAKE_EXE_LINKER_FLAGS=${flags}")
run(${CMAKE_COMMAND} --build "${WORK_DIR}/cmake-build")
run(${clean_env} "${WORK_DIR}/cmake-build/consumer" "${prefix}")
message(STATUS "find_package consumer: ${last_output}")

# 2. pkg-config: hal.pc must locate the moved prefix by itself.
file(GLOB_RECURSE pc_file "${prefix}/*/hal.pc")
get_filename_component(pc_dir "${pc_file}" DIRECTORY)
run(${CMAKE_COMMAND} -E env "PKG_CONFIG_PATH=${pc_dir}" pkg-config --cflags --libs hal)
string(STRIP "${last_output}" pc_flags)
separate_arguments(pc_flags UNIX_COMMAND "${pc_flags}")
string(REGEX MATCH "-L[^ ;]+" libdir_flag "${pc_flags}")
string(SUBSTRING "${libdir_flag}" 2 -1 libdir)
run(cc -std=c99 -Wall -Werror ${flags} "${CONSUMER_SOURCE_DIR}/consumer.c" -o
    "${WORK_DIR}/pc-consumer" ${pc_flags} "-Wl,-rpath,${libdir}")
run(${clean_env} "${WORK_DIR}/pc-consumer" "${prefix}")
message(STATUS "pkg-config consumer: ${last_output}")
