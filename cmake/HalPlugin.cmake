# hal_add_plugin: builds a HAL plugin the way the loader expects it (SPEC.md §10).
#
#   hal_add_plugin(<name> [OUTPUT_DIRECTORY <dir>]
#                  [INSTALL_DESTINATION <dir> | NO_INSTALL] <sources>...)
#
# makes the MODULE target hal_plugin_<name>, a file hal_plugin_<name>.so that
# exports only hal_plugin_entry (the version script hal_plugin.map), links with
# --no-undefined (a plugin does not link libhal; every symbol it needs must
# resolve at link time, not when the loader dlopens it), and sees the plugin
# ABI headers and the plugin SDK (target hal::plugin_sdk: <hal_plugin.h>,
# <hal_plugin_sdk/*.hpp>). OUTPUT_DIRECTORY defaults to
# HAL_PLUGIN_OUTPUT_DIRECTORY when set; INSTALL_DESTINATION, defaulting to
# HAL_PLUGIN_INSTALL_DESTINATION when set, adds an install rule; NO_INSTALL
# adds none.
#
# In HAL's own tree the top CMakeLists.txt includes this file; an installed
# HAL provides it through find_package(hal).
include_guard(GLOBAL)

# hal_link_no_undefined(<target>): the shared object resolves every symbol at link time, not
# when it is loaded. Where a sanitizer's runtime is linked into executables only (clang's
# ThreadSanitizer has no shared runtime; fuzzing builds), the runtime's symbols are left to the
# executable that loads the object: HAL_SANITIZER_RUNTIME_IN_EXECUTABLE turns the check off.
function(hal_link_no_undefined target)
  if(NOT HAL_SANITIZER_RUNTIME_IN_EXECUTABLE)
    target_link_options(${target} PRIVATE "LINKER:--no-undefined")
  endif()
endfunction()

# The export map lies beside this file when installed; HAL's tree sets it first.
if(NOT DEFINED HAL_PLUGIN_MAP)
  set(HAL_PLUGIN_MAP "${CMAKE_CURRENT_LIST_DIR}/hal_plugin.map")
endif()

function(hal_add_plugin name)
  cmake_parse_arguments(PARSE_ARGV 1 arg "NO_INSTALL" "OUTPUT_DIRECTORY;INSTALL_DESTINATION" "")
  if(NOT arg_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "hal_add_plugin(${name}): no source files")
  endif()
  if(NOT name MATCHES "^[a-z0-9_]+$")
    message(FATAL_ERROR "hal_add_plugin(${name}): a plugin name is lower case letters, digits and '_'")
  endif()
  if(NOT DEFINED arg_OUTPUT_DIRECTORY AND DEFINED HAL_PLUGIN_OUTPUT_DIRECTORY)
    set(arg_OUTPUT_DIRECTORY "${HAL_PLUGIN_OUTPUT_DIRECTORY}")
  endif()
  if(NOT DEFINED arg_INSTALL_DESTINATION AND DEFINED HAL_PLUGIN_INSTALL_DESTINATION)
    set(arg_INSTALL_DESTINATION "${HAL_PLUGIN_INSTALL_DESTINATION}")
  endif()

  set(target hal_plugin_${name})
  add_library(${target} MODULE ${arg_UNPARSED_ARGUMENTS})
  set_target_properties(${target} PROPERTIES
    PREFIX ""
    OUTPUT_NAME "${target}"
    C_VISIBILITY_PRESET hidden
    CXX_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON
    LINK_DEPENDS "${HAL_PLUGIN_MAP}")
  if(arg_OUTPUT_DIRECTORY)
    set_target_properties(${target} PROPERTIES LIBRARY_OUTPUT_DIRECTORY "${arg_OUTPUT_DIRECTORY}")
  endif()
  target_compile_features(${target} PRIVATE cxx_std_20)
  target_link_libraries(${target} PRIVATE hal::plugin_sdk)
  target_link_options(${target} PRIVATE "LINKER:--version-script=${HAL_PLUGIN_MAP}")
  hal_link_no_undefined(${target})
  if(arg_INSTALL_DESTINATION AND NOT arg_NO_INSTALL)
    install(TARGETS ${target} LIBRARY DESTINATION "${arg_INSTALL_DESTINATION}")
  endif()
endfunction()
