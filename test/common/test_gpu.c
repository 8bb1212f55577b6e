/* SPDX-License-Identifier: Apache-2.0 */
#include "test.h"

#include <cuda_runtime.h>
#include <sys/wait.h>
#include <unistd.h>

/*
 * Counted in a child process: initialising CUDA in the parent and then forking ranks leaves the children with a
 * driver state they cannot use, so the parent must not touch CUDA before it forks.
 */
int testGpuCount(void) {
  fflush(stdout);
  fflush(stderr);
  pid_t child = fork();
  if (child == 0) {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) count = 0;
    _exit(count > 100 ? 100 : count);
  }
  int status = 0;
  if (child < 0 || waitpid(child, &status, 0) != child || !WIFEXITED(status)) return 0;
  return WEXITSTATUS(status);
}

void testRequireGpus(int minGpus) {
  int count = testGpuCount();
  if (count < minGpus) {
    printf("SKIP: needs %d GPU(s), found %d\n", minGpus, count);
    exit(TEST_SKIP);
  }
}
