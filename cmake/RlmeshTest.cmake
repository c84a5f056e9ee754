include(GoogleTest)

# rlmesh_add_test(NAME name SOURCES a.cc ... LIBS lib ... [LABELS unit|integration|e2e] [TIMEOUT s]
#                 [WHOLE])
# One GoogleTest binary, each TEST a ctest entry. Discovery happens when ctest runs, so a
# build does not execute test binaries. Unit tests carry the label "unit" (see `make asan`).
# WHOLE makes the binary one ctest entry instead, for tests that share an expensive
# SetUpTestSuite (each ctest entry is a process of its own).
function(rlmesh_add_test)
  cmake_parse_arguments(T "WHOLE" "NAME;TIMEOUT" "SOURCES;LIBS;LABELS" ${ARGN})
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
  if(T_WHOLE)
    add_test(NAME ${T_NAME} COMMAND ${T_NAME} WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
    set_tests_properties(${T_NAME} PROPERTIES LABELS "${T_LABELS}" TIMEOUT ${T_TIMEOUT}
      ENVIRONMENT "RLMESH_SOURCE_DIR=${PROJECT_SOURCE_DIR}")
    return()
  endif()
  gtest_discover_tests(${T_NAME}
    DISCOVERY_MODE PRE_TEST
    WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}
    PROPERTIES LABELS "${T_LABELS}" TIMEOUT ${T_TIMEOUT}
      ENVIRONMENT "RLMESH_SOURCE_DIR=${PROJECT_SOURCE_DIR}")
endfunction()

# Adds every subfolder of the current source folder that has a CMakeLists.txt (tests/,
# tests/integration/, tests/bench/: one folder per area). A macro, so the subfolders are
# added from the caller's scope as if it listed them.
macro(rlmesh_add_subfolders)
  file(GLOB _rlmesh_children LIST_DIRECTORIES true CONFIGURE_DEPENDS
       ${CMAKE_CURRENT_SOURCE_DIR}/*)
  foreach(_rlmesh_child ${_rlmesh_children})
    if(IS_DIRECTORY ${_rlmesh_child} AND EXISTS ${_rlmesh_child}/CMakeLists.txt)
      add_subdirectory(${_rlmesh_child})
    endif()
  endforeach()
endmacro()
