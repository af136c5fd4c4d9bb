# Tests of the policy pieces (policy.h).
ferry_add_test(ferry_fleet_policy_tests
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/policy_test.cc
  DEPS ferry_fleet_sched)
