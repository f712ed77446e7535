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

# 3. The installed samples run from the prefix with no HAL variable: vector_add finds its CPU
# kernel module under <prefix>/<libdir>/hal/samples, train trains two steps.
run(${clean_env} "${prefix}/bin/vector_add")
if(NOT last_output MATCHES "vector_add: [1-9][0-9]* device\\(s\\) ran, 0 failed")
  message(FATAL_ERROR "installed vector_add:\n${last_output}")
endif()
run(${clean_env} "${prefix}/bin/train" --layers 1 --width 16 --heads 2 --context 16 --batch 2
    --steps 2 --warmup 1 --eval-every 0 --devices 1 --quiet)
if(NOT last_output MATCHES "step    2/2  loss [0-9.]+")
  message(FATAL_ERROR "installed train:\n${last_output}")
endif()
message(STATUS "installed samples: vector_add and train ran")

# 4. The samples as a project of their own against the installed HAL (find_package(hal)):
# the CMakeLists a user copies. Only the C samples are built: train's C++ sources are the
# same that the build above compiled, and building them again here doubles this test's time.
run(${CMAKE_COMMAND} -S "${SAMPLES_SOURCE_DIR}" -B "${WORK_DIR}/samples-build" -G "${GENERATOR}"
    "-DCMAKE_PREFIX_PATH=${prefix}" "-DCMAKE_C_FLAGS=${flags}" "-DCMAKE_CXX_FLAGS=${flags}"
    "-DCMAKE_EXE_LINKER_FLAGS=${flags}" "-DCMAKE_SHARED_LINKER_FLAGS=${flags}"
    "-DCMAKE_MODULE_LINKER_FLAGS=${flags}")
run(${CMAKE_COMMAND} --build "${WORK_DIR}/samples-build" --target vector_add dialect_kernels)
run(${clean_env} "${WORK_DIR}/samples-build/vector_add")
if(NOT last_output MATCHES "vector_add: [1-9][0-9]* device\\(s\\) ran, 0 failed")
  message(FATAL_ERROR "out-of-tree vector_add:\n${last_output}")
endif()
message(STATUS "samples built against the install: ${last_output}")
