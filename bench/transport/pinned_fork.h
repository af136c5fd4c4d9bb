/* Force-included into ../shared/floor/floor.c (cc -include) by run.sh so
 * that the floor's two processes sit on the same cores as the benchmarks'
 * senders and receivers, while floor.c itself stays as it is: its fork()
 * becomes one that pins parent and child as FERRY_FORK_PLACEMENT says, one
 * "parent:child" CPU pair per fork in order, e.g. "0:0,0:1" = the first fork
 * (floor.c's futex ping-pong) on one core, the second (its spin ping-pong) on
 * two. Forks beyond the list, or without the variable, are left unpinned. */
#ifndef FERRY_BENCH_PINNED_FORK_H_
#define FERRY_BENCH_PINNED_FORK_H_

#define _GNU_SOURCE
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static inline pid_t ferry_pinned_fork(void) {
  static int forks = 0;
  const int index = forks++;
  pid_t child = fork();
  const char* pair = getenv("FERRY_FORK_PLACEMENT");
  for (int i = 0; pair && i < index; i++) {
    pair = strchr(pair, ',');
    if (pair) pair++;
  }
  int parent_cpu, child_cpu;
  if (!pair || sscanf(pair, "%d:%d", &parent_cpu, &child_cpu) != 2) return child;
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  CPU_SET(child == 0 ? child_cpu : parent_cpu, &cpus);
  sched_setaffinity(0, sizeof(cpus), &cpus);
  return child;
}
#define fork ferry_pinned_fork

#endif /* FERRY_BENCH_PINNED_FORK_H_ */
