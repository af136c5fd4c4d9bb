# ferry_add_library(NAME SOURCES a.cc b.cc DEPS x y)
# A static, position-independent library with the public include directory.
function(ferry_add_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_library(${name} STATIC ${ARG_SOURCES})
  target_include_directories(${name} PUBLIC $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
                                            $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>
                                     PRIVATE ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(${name} PUBLIC ${ARG_DEPS})
endfunction()

# ferry_add_test(NAME SOURCES a_test.cc DEPS lib)
# A GoogleTest executable whose tests CTest discovers one by one.
function(ferry_add_test name)
  if(NOT FERRY_BUILD_TESTS)
    return()
  endif()
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} GTest::gtest GTest::gtest_main GTest::gmock)
  include(GoogleTest)
  gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60 PROPERTIES TIMEOUT 300)
endfunction()

# ferry_lsan_suppressions(test_target ...)
# In sanitizer builds, the discovered tests of each target run with the
# LeakSanitizer suppressions of src/exchange/device/lsan.supp (the OpenCL
# runtime's own allocations). Discovered tests exist only at CTest time,
# hence the include script. Call it in the directory that adds the targets.
function(ferry_lsan_suppressions)
  if(NOT FERRY_SANITIZE OR NOT FERRY_BUILD_TESTS)
    return()
  endif()
  set(supp ${PROJECT_SOURCE_DIR}/src/exchange/device/lsan.supp)
  foreach(target ${ARGN})
    set(script ${CMAKE_CURRENT_BINARY_DIR}/${target}_lsan.cmake)
    file(WRITE ${script}
      "if(${target}_TESTS)\n"
      "  set_tests_properties(\${${target}_TESTS} PROPERTIES ENVIRONMENT\n"
      "    \"LSAN_OPTIONS=suppressions=${supp}\")\n"
      "endif()\n")
    set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES ${script})
  endforeach()
endfunction()
