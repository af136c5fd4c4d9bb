/* The C API of an installed Ferry, built with pkg-config (ferry-exchange). */
#include <stdio.h>

#include "ferry/c/ferry.h"

int main(void) {
  int count = ferry_telemetry_count();
  printf("capi: %d telemetry counters, first %s\n", count,
         count > 0 ? ferry_telemetry_name(0) : "-");
  return count > 0 ? 0 : 1;
}
