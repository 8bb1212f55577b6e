/* SPDX-License-Identifier: Apache-2.0 */
/*
 * An all-reduce with fccl, start to finish: the parent makes a unique id and forks one process per rank; each rank
 * takes a GPU (ranks share GPUs when there are fewer GPUs than ranks), joins the communicator, sums random floats
 * across the ranks and checks every sum against one in double on the host.
 *   usage: allreduce [NRANKS]      (2 by default, 1 to 8; exits 77 when there is no GPU)
 */
#include <cuda_runtime.h>
#include <fccl.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#define COUNT ((size_t)1 << 20)
#define CHECK(ok, what) \
  if (!(ok)) return fprintf(stderr, "rank %d: %s failed: %s\n", rank, what, fcclGetLastError(NULL)), 1

/* Rank r's element i: a pseudo-random float in [-1, 1), which every rank can compute again for the host's sum. */
static float input(int r, size_t i) {
  uint32_t h = ((uint32_t)i * 2654435761u) ^ ((uint32_t)(r + 1) * 2246822519u);
  h = (h ^ (h >> 15)) * 2246822519u;
  return (float)((h ^ (h >> 13)) >> 8) / 8388608.0f - 1.0f;
}

static int runRank(int rank, int nranks, fcclUniqueId id) {
  int gpus = 0;
  if (cudaGetDeviceCount(&gpus) != cudaSuccess || gpus == 0) return 77;
  CHECK(cudaSetDevice(rank % gpus) == cudaSuccess, "cudaSetDevice");
  fcclConfig_t config = FCCL_CONFIG_INITIALIZER;
  config.allowSharedDevice = gpus < nranks; /* more ranks than GPUs: the processes share them */
  fcclComm_t comm;
  CHECK(fcclCommInitRankConfig(&comm, nranks, id, rank, &config) == fcclSuccess, "fcclCommInitRankConfig");

  float *host = malloc(COUNT * sizeof(float)), *data;
  CHECK(host != NULL && cudaMalloc((void**)&data, COUNT * sizeof(float)) == cudaSuccess, "allocation");
  for (size_t i = 0; i < COUNT; i++) host[i] = input(rank, i);
  CHECK(cudaMemcpy(data, host, COUNT * sizeof(float), cudaMemcpyHostToDevice) == cudaSuccess, "upload");
  CHECK(fcclAllReduce(data, data, COUNT, fcclFloat32, fcclSum, comm, NULL) == fcclSuccess, "fcclAllReduce");
  CHECK(cudaMemcpy(host, data, COUNT * sizeof(float), cudaMemcpyDeviceToHost) == cudaSuccess, "download");

  size_t wrong = 0;
  for (size_t i = 0; i < COUNT; i++) {
    double sum = 0, magnitude = 0;
    for (int r = 0; r < nranks; r++) sum += input(r, i), magnitude += fabs(input(r, i));
    wrong += fabs(host[i] - sum) > 1e-6 * magnitude; /* more than float rounding of nranks terms */
  }
  printf("rank %d of %d: %zu of %zu sums wrong\n", rank, nranks, wrong, COUNT);
  CHECK(cudaFree(data) == cudaSuccess && fcclCommDestroy(comm) == fcclSuccess, "teardown");
  free(host);
  return wrong != 0;
}

int main(int argc, char** argv) {
  const int nranks = argc > 1 ? atoi(argv[1]) : 2;
  if (nranks < 1 || nranks > 8) return fprintf(stderr, "usage: allreduce [NRANKS, 1 to 8]\n"), 2;
  fcclUniqueId id; /* the parent holds the rendezvous open while the ranks meet; it never touches CUDA */
  if (fcclGetUniqueId(&id) != fcclSuccess) return fprintf(stderr, "%s\n", fcclGetLastError(NULL)), 1;
  int failed = 0, skipped = 0, status;
  for (int rank = 0; rank < nranks; rank++) {
    const pid_t pid = fork();
    if (pid == 0) exit(runRank(rank, nranks, id));
    failed += pid < 0; /* the other ranks then stop at their init's timeout */
  }
  while (wait(&status) > 0) {
    skipped += WIFEXITED(status) && WEXITSTATUS(status) == 77;
    failed += !WIFEXITED(status) || (WEXITSTATUS(status) != 0 && WEXITSTATUS(status) != 77);
  }
  if (skipped == nranks) printf("no GPU: nothing to run\n");
  return failed ? 1 : skipped == nranks ? 77 : 0;
}
