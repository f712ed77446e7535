# Prints the LSAN_OPTIONS that the tree's test environment (SCRIPT) gives a ctest run started
# without any (tests/sanitizers/CMakeLists.txt).
unset(ENV{LSAN_OPTIONS})
include("${SCRIPT}")
message("LSAN_OPTIONS=$ENV{LSAN_OPTIONS}")
