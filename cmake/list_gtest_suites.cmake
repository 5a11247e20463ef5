# Note [Unit test binaries] (unit_tests.cmake): run after a LibTorch test
# binary links. Writes SUITES_FILE: one CTest test per test suite of
# TEST_BINARY (named "Suite.*", the filter it runs), in WORKING_DIRECTORY,
# with TIMEOUT, reported as not run when every test of the suite skipped
# (runtime/testing/unit_test_main.cc then exits with the code this sets in
# DSLAUNCH_ALL_SKIPPED_EXIT_CODE). Suites whose tests are all disabled are
# left out. A suite named *SerialTest runs alone (RUN_SERIAL: no other test
# beside it), for a test that measures wall-clock overlap (the pipeline's
# bubble).
cmake_minimum_required(VERSION 3.25)
foreach(var TEST_BINARY SUITES_FILE WORKING_DIRECTORY TIMEOUT)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "list_gtest_suites.cmake: ${var} is not set")
  endif()
endforeach()
execute_process(COMMAND ${TEST_BINARY} --gtest_list_tests
  OUTPUT_VARIABLE listing ERROR_VARIABLE errors RESULT_VARIABLE result TIMEOUT 120)
if(NOT result EQUAL 0)
  message(FATAL_ERROR "${TEST_BINARY} --gtest_list_tests failed (${result}):\n${listing}${errors}")
endif()
# A parameter printed after '#' may hold any character; only the names matter.
string(REPLACE ";" "," listing "${listing}")
string(REPLACE "\n" ";" lines "${listing}")
set(suites "")
set(suite "")
foreach(line IN LISTS lines)
  if(line MATCHES "^([^ #][^ ]*)\\.( |$)")
    set(suite ${CMAKE_MATCH_1})
  elseif(line MATCHES "^  ([^ ]+)" AND NOT suite STREQUAL "")
    set(test ${CMAKE_MATCH_1})
    if(NOT suite MATCHES "(^|/)DISABLED_" AND NOT test MATCHES "^DISABLED_" AND NOT suite IN_LIST suites)
      list(APPEND suites ${suite})
    endif()
  endif()
endforeach()
if(suites STREQUAL "")
  message(FATAL_ERROR "${TEST_BINARY} lists no test suite:\n${listing}")
endif()
set(script "")
foreach(suite IN LISTS suites)
  set(serial "")
  if(suite MATCHES "SerialTest$")
    set(serial " RUN_SERIAL TRUE")
  endif()
  string(APPEND script
    "add_test([==[${suite}.*]==] [==[${TEST_BINARY}]==] [==[--gtest_filter=${suite}.*]==])\n"
    "set_tests_properties([==[${suite}.*]==] PROPERTIES WORKING_DIRECTORY [==[${WORKING_DIRECTORY}]==]"
    " TIMEOUT ${TIMEOUT} SKIP_RETURN_CODE 77 ENVIRONMENT DSLAUNCH_ALL_SKIPPED_EXIT_CODE=77${serial})\n")
endforeach()
file(WRITE ${SUITES_FILE} "${script}")
