# Note [Unit test binaries]: every GoogleTest binary is registered with
# dslaunch_unit_tests(TARGET [LIBTORCH] [TIMEOUT SECONDS]) and nothing else:
#  - It compiles at -O0. A test binary's own code is assertions and set-up
#    around the libraries it tests, which compile optimized as they ship;
#    unoptimized, a LibTorch test file compiles in about half the time (one
#    compile of model_tests' largest unit: 29.6 s -> 16.8 s), and test code
#    was over a third of a fresh build's CPU (692 of 1,917 s).
#  - LIBTORCH: for binaries that link LibTorch. They reuse the precompiled
#    header of dslaunch_test_pch (<torch/torch.h>, gtest and gmock at -O0;
#    runtime/CMakeLists.txt), and CTest runs one process per test suite
#    rather than one per test: loading LibTorch costs each process about
#    0.7 s of CPU (its operator registry initializes), which over ~380 tests
#    was four minutes of CPU in a CI run. Under CTest the binary's main
#    (runtime/testing/unit_test_main.cc) exits 77 when every test it ran was
#    skipped (a GPU suite on a CPU host), which CTest reports as not run;
#    run by hand or by a script it exits as GoogleTest's main does. On a
#    crash it prints the test, the faulting address and registers, the stack
#    and the executable mappings before dying of the same signal (how the
#    LibTorch 2.11 crashes on the GPU host were found).
#    The suites are listed after each link (cmake/list_gtest_suites.cmake).
#  - Others start in milliseconds and keep one CTest test per test case
#    (gtest_discover_tests).
# TIMEOUT (default 300 s, the suite's hang guard) bounds each CTest test.
set(DSLAUNCH_LIST_GTEST_SUITES ${CMAKE_CURRENT_LIST_DIR}/list_gtest_suites.cmake)

function(dslaunch_unit_tests target)
  cmake_parse_arguments(PARSE_ARGV 1 arg "LIBTORCH" "TIMEOUT" "")
  if(arg_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "dslaunch_unit_tests(${target}): unknown arguments ${arg_UNPARSED_ARGUMENTS}")
  endif()
  if(NOT arg_TIMEOUT)
    set(arg_TIMEOUT 300)
  endif()
  target_compile_options(${target} PRIVATE -O0)
  if(NOT arg_LIBTORCH)
    target_link_libraries(${target} PRIVATE GTest::gtest_main)
    gtest_discover_tests(${target} DISCOVERY_TIMEOUT 60 PROPERTIES TIMEOUT ${arg_TIMEOUT})
    return()
  endif()
  # Deferred to the end of the top directory: kernels/ comes before runtime/,
  # which defines dslaunch_test_pch.
  # (EVAL: a deferred call reads its variables when it runs.)
  cmake_language(EVAL CODE "cmake_language(DEFER DIRECTORY [[${PROJECT_SOURCE_DIR}]]
    CALL target_precompile_headers [[${target}]] REUSE_FROM dslaunch_test_pch)")
  target_link_libraries(${target} PRIVATE dslaunch_unit_test_main)
  set(suites_file ${CMAKE_CURRENT_BINARY_DIR}/${target}_suites.cmake)
  add_custom_command(TARGET ${target} POST_BUILD
    COMMAND ${CMAKE_COMMAND} -D TEST_BINARY=$<TARGET_FILE:${target}> -D SUITES_FILE=${suites_file}
            -D WORKING_DIRECTORY=${CMAKE_CURRENT_BINARY_DIR} -D TIMEOUT=${arg_TIMEOUT}
            -P ${DSLAUNCH_LIST_GTEST_SUITES}
    BYPRODUCTS ${suites_file}
    VERBATIM)
  # CTest reads this when it starts; a binary not built yet shows as a
  # failing test named after it.
  set(include_file ${CMAKE_CURRENT_BINARY_DIR}/${target}_include.cmake)
  file(WRITE ${include_file}
    "if(EXISTS \"${suites_file}\")\n"
    "  include(\"${suites_file}\")\n"
    "else()\n"
    "  add_test(${target}_NOT_BUILT ${target}_NOT_BUILT)\n"
    "endif()\n")
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES ${include_file})
endfunction()
