# What `cmake --install` puts under a prefix: the public headers, the static
# libraries behind one CMake target per part (Ferry::base, Ferry::exchange,
# Ferry::flow, Ferry::fleet) with a package config for find_package(Ferry),
# pkg-config files (ferry-<part>.pc), the `ferry` command, and the Python
# package that Python nodes started by an installed `ferry run` import
# (lib/ferry/python). Included from the top-level CMakeLists.txt.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(FERRY_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/Ferry)
set(FERRY_INSTALL_PYTHONDIR ${CMAKE_INSTALL_LIBDIR}/ferry/python)

# ferry_install_part(NAME part LIBRARIES lib... PKG_REQUIRES "pc modules" SUMMARY "text")
# Installs the part's static libraries and an interface target Ferry::<part>
# that links them in dependency order, and writes ferry-<part>.pc.
function(ferry_install_part)
  cmake_parse_arguments(ARG "" "NAME;SUMMARY;PKG_REQUIRES" "LIBRARIES;PKG_PARTS" ${ARGN})
  set(part_target ferry_part_${ARG_NAME})
  add_library(${part_target} INTERFACE)
  target_link_libraries(${part_target} INTERFACE ${ARG_LIBRARIES})
  set_target_properties(${part_target} PROPERTIES EXPORT_NAME ${ARG_NAME})
  add_library(Ferry::${ARG_NAME} ALIAS ${part_target})
  install(TARGETS ${ARG_LIBRARIES} ${part_target} EXPORT FerryTargets
          ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
  # pkg-config: the part's own libraries, then the parts it builds on.
  set(FERRY_PC_NAME ${ARG_NAME})
  set(FERRY_PC_SUMMARY ${ARG_SUMMARY})
  set(FERRY_PC_LIBS "")
  foreach(lib ${ARG_LIBRARIES})
    string(APPEND FERRY_PC_LIBS " -l${lib}")
  endforeach()
  set(FERRY_PC_REQUIRES "")
  foreach(other ${ARG_PKG_PARTS})
    string(APPEND FERRY_PC_REQUIRES " ferry-${other}")
  endforeach()
  string(APPEND FERRY_PC_REQUIRES " ${ARG_PKG_REQUIRES}")
  configure_file(${PROJECT_SOURCE_DIR}/cmake/ferry.pc.in
                 ${PROJECT_BINARY_DIR}/pkgconfig/ferry-${ARG_NAME}.pc @ONLY)
  install(FILES ${PROJECT_BINARY_DIR}/pkgconfig/ferry-${ARG_NAME}.pc
          DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
endfunction()

ferry_install_part(NAME base SUMMARY "Ferry's base layer: Status/Result, telemetry, YAML, hashing"
  LIBRARIES ferry_base PKG_REQUIRES "yaml-cpp libcrypto")
# Whether the device layer was built with OpenCL (find_package(OpenCL) ran in
# its own directory, so ask the target).
get_target_property(_ferry_device_links ferry_device INTERFACE_LINK_LIBRARIES)
set(_ferry_device_pc "")
set(FERRY_WITH_OPENCL FALSE)
if("OpenCL::OpenCL" IN_LIST _ferry_device_links)
  set(_ferry_device_pc "OpenCL")
  set(FERRY_WITH_OPENCL TRUE)
endif()
ferry_install_part(NAME exchange
  SUMMARY "Ferry exchange: zero-copy Arrow C Data and Device Data hand-off, devices, C API"
  LIBRARIES ferry_capi ferry_device ferry_exchange PKG_PARTS base
  PKG_REQUIRES "${_ferry_device_pc}")
ferry_install_part(NAME flow
  SUMMARY "Ferry flow: the shared-memory transport, the node API and the operator ABI"
  LIBRARIES ferry_node ferry_operator ferry_flow_protocol ferry_flow PKG_PARTS exchange base
  PKG_REQUIRES "nlohmann_json")
ferry_install_part(NAME fleet SUMMARY "Ferry fleet: the job model and the REST API client"
  LIBRARIES ferry_fleet_client ferry_fleet_model PKG_PARTS base
  PKG_REQUIRES "nlohmann_json cpp-httplib libssl")

install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/ferry DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT FerryTargets NAMESPACE Ferry:: DESTINATION ${FERRY_INSTALL_CMAKEDIR})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/FerryConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/FerryConfig.cmake
                              INSTALL_DESTINATION ${FERRY_INSTALL_CMAKEDIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/FerryConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/FerryConfig.cmake ${PROJECT_BINARY_DIR}/FerryConfigVersion.cmake
        DESTINATION ${FERRY_INSTALL_CMAKEDIR})

install(TARGETS ferry RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
if(TARGET _ferry)
  install(TARGETS _ferry LIBRARY DESTINATION ${FERRY_INSTALL_PYTHONDIR}/ferry)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/python/ferry/ DESTINATION ${FERRY_INSTALL_PYTHONDIR}/ferry
          FILES_MATCHING PATTERN "*.py" PATTERN "__pycache__" EXCLUDE)
endif()
