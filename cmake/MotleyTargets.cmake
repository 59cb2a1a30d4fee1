# Helpers so that each folder under src/ declares its library and tests in a few lines.
#
#   motley_library(NAME SOURCES a.cc b.cc DEPS motley_core ...)
#     -> static library target NAME with src/ as include root, motley warnings on.
#   motley_test(NAME SOURCES x_test.cc DEPS motley_spec LABELS unit)
#     -> gtest executable, tests discovered into CTest with the given labels.

function(motley_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_library(${name} STATIC ${ARG_SOURCES})
  target_include_directories(${name} PUBLIC ${PROJECT_SOURCE_DIR}/src)
  target_compile_options(${name} PRIVATE ${MOTLEY_WARNINGS})
  target_link_libraries(${name} PUBLIC ${ARG_DEPS})
endfunction()

function(motley_test name)
  if(NOT MOTLEY_BUILD_TESTS)
    return()
  endif()
  cmake_parse_arguments(ARG "" "TIMEOUT" "SOURCES;DEPS;LABELS" ${ARGN})
  if(NOT ARG_LABELS)
    set(ARG_LABELS unit)
  endif()
  # The timeout only guards against a hang. Under the sanitizers a test runs several times
  # slower: the planner-driven tests of tests/parallel and tests/plan_vs_runtime took 218 s and
  # 270 s of the 300 under ASan alone on a 2-core machine, and timed out with a second suite
  # running beside them.
  if(NOT ARG_TIMEOUT)
    if(MOTLEY_SANITIZE)
      set(ARG_TIMEOUT 900)
    else()
      set(ARG_TIMEOUT 300)
    endif()
  endif()
  add_executable(${name} ${ARG_SOURCES})
  target_compile_options(${name} PRIVATE ${MOTLEY_WARNINGS})
  target_include_directories(${name} PRIVATE ${MOTLEY_GENERATED_DIR})  # motley_source_dir.h
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} GTest::gtest GTest::gtest_main)
  # OMP_WAIT_POLICY=PASSIVE: idle OpenMP workers sleep instead of spinning against OpenBLAS's
  # threads (backend/cpu/cpu_runtime_env.h explains the measurement).
  gtest_discover_tests(${name} PROPERTIES TIMEOUT ${ARG_TIMEOUT}
                       ENVIRONMENT OMP_WAIT_POLICY=PASSIVE DISCOVERY_TIMEOUT 60)
  # The labels are set by a file CTest reads after the discovered tests (which it lists in
  # ${name}_TESTS): gtest_discover_tests's PROPERTIES flatten a list value, so with LABELS
  # "unit;fault" every test got the label unit alone and "fault" was read as a property name.
  set(labels_file ${CMAKE_CURRENT_BINARY_DIR}/${name}_labels.cmake)
  file(WRITE ${labels_file}
       "foreach(test IN LISTS ${name}_TESTS)\n"
       "  set_tests_properties(\"\${test}\" PROPERTIES LABELS \"${ARG_LABELS}\")\n"
       "endforeach()\n")
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES ${labels_file})
endfunction()
