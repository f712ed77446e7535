# Runs coverage_check.py over every record the CI set of certifications wrote
# (RECORDS and its reference/ folder): their names are known only after they
# ran, so the list is globbed here, not at configure time.
file(GLOB records "${RECORDS}/*.json" "${RECORDS}/reference/*.json")
list(FILTER records EXCLUDE REGEX "selftest")
if(NOT records)
  message(FATAL_ERROR "no certification record in ${RECORDS}")
endif()
execute_process(COMMAND "${PYTHON}" "${CHECK}" ${records} RESULT_VARIABLE result)
if(NOT result EQUAL 0)
  message(FATAL_ERROR "coverage_check.py failed")
endif()
