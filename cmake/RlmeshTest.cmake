include(GoogleTest)

# rlmesh_add_test(NAME name SOURCES a.cc ... LIBS lib ... [LABELS unit|integration|e2e] [TIMEOUT s])
# One GoogleTest binary, each TEST a ctest entry. Discovery happens when ctest runs, so a
# build does not execute test binaries. Unit tests carry the label "unit" (see `make asan`).
function(rlmesh_add_test)
  cmake_parse_arguments(T "" "NAME;TIMEOUT" "SOURCES;LIBS;LABELS" ${ARGN})
  if(NOT T_LABELS)
    set(T_LABELS unit)
  endif()
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 600)
  endif()
  add_executable(${T_NAME} ${T_SOURCES})
  target_link_libraries(${T_NAME} PRIVATE ${T_LIBS} GTest::gmock GTest::gtest_main)
  # ctest's ENVIRONMENT property takes one entry through gtest_discover_tests (its list is
  # split), so the folders also reach the test as compile definitions.
  target_compile_definitions(${T_NAME} PRIVATE RLMESH_TEST_SOURCE_DIR="${PROJECT_SOURCE_DIR}"
    RLMESH_TEST_BUILD_DIR="${CMAKE_BINARY_DIR}")
  set_target_properties(${T_NAME} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  gtest_discover_tests(${T_NAME}
    DISCOVERY_MODE PRE_TEST
    WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}
    PROPERTIES LABELS "${T_LABELS}" TIMEOUT ${T_TIMEOUT}
      ENVIRONMENT "RLMESH_SOURCE_DIR=${PROJECT_SOURCE_DIR}")
endfunction()
