# Driven by conformance.null.out_of_tree; see CMakeLists.txt beside it. A
# vendor's first day: install HAL, copy plugins/null somewhere else, build it
# with nothing but find_package(hal), certify it with the installed halconform.
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    string(REPLACE ";" " " cmd "${ARGN}")
    message(FATAL_ERROR "failed (${rc}): ${cmd}\n${out}\n${err}")
  endif()
  set(last_output "${out}" PARENT_SCOPE)
endfunction()

set(prefix "${WORK_DIR}/prefix")
set(source "${WORK_DIR}/my_plugin")
set(build "${WORK_DIR}/my_plugin-build")
file(REMOVE_RECURSE "${WORK_DIR}")
run(${CMAKE_COMMAND} --install "${HAL_BUILD_DIR}" --prefix "${prefix}")

# The kit is installed: SDK headers, the export map, hal_add_plugin.
foreach(file include/hal_plugin.h include/hal_plugin_sdk/negotiate.hpp
    include/hal_plugin_sdk/report.hpp include/hal_plugin_sdk/versioned_struct.hpp
    include/hal_plugin_sdk/signature.hpp include/hal_util/arg_types.hpp)
  if(NOT EXISTS "${prefix}/${file}")
    message(FATAL_ERROR "the install lacks ${file}")
  endif()
endforeach()
file(GLOB_RECURSE kit_cmake "${prefix}/*/cmake/hal/HalPlugin.cmake")
file(GLOB_RECURSE kit_map "${prefix}/*/cmake/hal/hal_plugin.map")
if(NOT kit_cmake OR NOT kit_map)
  message(FATAL_ERROR "the install lacks HalPlugin.cmake or hal_plugin.map")
endif()
# A template is not a device: the install must not carry the null plugin.
file(GLOB_RECURSE stray "${prefix}/*hal_plugin_null*")
if(stray)
  message(FATAL_ERROR "the install carries the null plugin: ${stray}")
endif()

# The copy, away from HAL's tree: only the installed package can help it.
file(COPY "${PLUGIN_SOURCE_DIR}/" DESTINATION "${source}")
set(flags "")
if(SANITIZE)
  set(flags "-fsanitize=${SANITIZE}")
endif()
run(${CMAKE_COMMAND} -S "${source}" -B "${build}" -G "${GENERATOR}"
    "-DCMAKE_PREFIX_PATH=${prefix}" "-DCMAKE_CXX_FLAGS=${flags}"
    "-DCMAKE_MODULE_LINKER_FLAGS=${flags}")
run(${CMAKE_COMMAND} --build "${build}")
set(plugin "${build}/hal_plugin_null.so")
if(NOT EXISTS "${plugin}")
  message(FATAL_ERROR "the build made no ${plugin}")
endif()

# The export map held: the plugin exports hal_plugin_entry and nothing else.
run(nm -D --defined-only "${plugin}")
string(REGEX MATCHALL "[^\n]* [TDBRVW] [^\n]*" exported "${last_output}")
foreach(line IN LISTS exported)
  if(NOT line MATCHES " hal_plugin_entry$")
    message(FATAL_ERROR "the plugin exports more than hal_plugin_entry: ${line}")
  endif()
endforeach()

file(GLOB halconform "${prefix}/bin/halconform")
if(NOT halconform)
  message(FATAL_ERROR "the install has no bin/halconform")
endif()
run(${CMAKE_COMMAND} -E env --unset=HAL_PLUGINS --unset=HAL_PLUGIN_PATH --unset=LD_LIBRARY_PATH
    "${halconform}" --plugin "${plugin}" --profile core --timeout ${CONFORMANCE_TIMEOUT})
message(STATUS "out-of-tree null plugin: ${last_output}")
