# The replay of the fuzz corpora in the normal build: each target's code with
# fuzz/replay_main.cpp instead of libFuzzer, run over fuzz/corpus/<target>/
# (the seeds) and fuzz/regressions/<target>/ (every crash found, kept).
# Included by tests/layers/CMakeLists.txt.
include("${CMAKE_CURRENT_LIST_DIR}/targets.cmake")
foreach(target IN LISTS hal_fuzz_targets)
  add_executable(fuzz_replay_${target} ${hal_fuzz_${target}_sources} "${hal_fuzz_dir}/replay_main.cpp")
  target_link_libraries(fuzz_replay_${target} PRIVATE hal ${hal_fuzz_${target}_libraries})
  hal_test_paths(fuzz_replay_${target} ${hal_fuzz_${target}_definitions})
  add_dependencies(fuzz_replay_${target} ${hal_fuzz_${target}_depends})
  set(inputs "${hal_fuzz_dir}/corpus/${target}")
  if(EXISTS "${hal_fuzz_dir}/regressions/${target}")
    list(APPEND inputs "${hal_fuzz_dir}/regressions/${target}")
  endif()
  add_test(NAME fuzz.replay_${target} COMMAND fuzz_replay_${target} ${inputs})
  set_tests_properties(fuzz.replay_${target} PROPERTIES
    ENVIRONMENT "HAL_PLUGINS=;HAL_PLUGIN_PATH=;HAL_LOG=0")
  hal_test_expects_output(fuzz.replay_${target} "inputs ran without a crash")
  hal_test_tier(unit fuzz.replay_${target})
endforeach()
