# Tests of the cycle driver (scheduler.cc, core_*.cc): scenario files,
# property tests over random snapshots, bad input.
ferry_add_test(ferry_fleet_sched_scenario_tests
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/scenario_test.cc
  DEPS ferry_fleet_sched yaml-cpp)
if(TARGET ferry_fleet_sched_scenario_tests)
  target_compile_definitions(ferry_fleet_sched_scenario_tests PRIVATE
    FERRY_SCHED_SCENARIOS="${CMAKE_CURRENT_SOURCE_DIR}/scenarios")
endif()
ferry_add_test(ferry_fleet_sched_core_tests
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/property_test.cc ${CMAKE_CURRENT_SOURCE_DIR}/core_test.cc
  DEPS ferry_fleet_sched)
