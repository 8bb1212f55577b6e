/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A small NCCL program, written against nccl.h as any NCCL user writes one; the porting test renames it with
 * sed 's/nccl/fccl/g; s/NCCL/FCCL/g' and builds and runs it against fccl (test/porting/check_ported.sh). One rank per
 * GPU, forked processes, at most argv[1] (2 by default): the ranks beyond the GPU count sit out (exit 77). Each rank
 * checks, on a communicator made with an SM budget (config.maxCTAs), an all-reduce (float), an all-gather (half,
 * bit for bit), a broadcast and a reduce-scatter (float), the same calls in a group; a reduce, an in-place broadcast
 * (ncclBcast), a gather and a scatter to and from a root; an all-reduce with a pre-multiplied sum
 * (ncclRedOpCreatePreMulSum); and an all-reduce on a communicator split by parity with keys reversed; then
 * finalizes and destroys its communicators.
 */
#include <cuda_runtime.h>
#include <nccl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#define COUNT 4096

#define NCCL_OK(call)                                                                                              \
  do {                                                                                                             \
    ncclResult_t result_ = (call);                                                                                 \
    if (result_ != ncclSuccess) {                                                                                  \
      fprintf(stderr, "rank %d: %s: %s (%s)\n", rank, #call, ncclGetErrorString(result_), ncclGetLastError(NULL)); \
      return 1;                                                                                                    \
    }                                                                                                              \
  } while (0)
#define CUDA_OK(call)                                                                \
  do {                                                                               \
    cudaError_t error_ = (call);                                                     \
    if (error_ != cudaSuccess) {                                                     \
      fprintf(stderr, "rank %d: %s: %s\n", rank, #call, cudaGetErrorString(error_)); \
      return 1;                                                                      \
    }                                                                                \
  } while (0)

/* Rank r's float element i: small integers, so every sum is exact. */
static float input(int r, int i) { return (float)(i % 61 + 3 * r + 1); }
/* Rank r's half element i, as bits: a finite half whatever r and i are. */
static uint16_t halfBits(int r, int i) { return (uint16_t)(0x3c00 + ((r * 131 + i) & 0x3ff)); }

static int checkSums(int rank, const float* got, int n, int first, const int* members, int count, const char* what) {
  for (int i = 0; i < n; i++) {
    float sum = 0;
    for (int m = 0; m < count; m++) sum += input(members[m], first + i);
    if (got[i] != sum) {
      fprintf(stderr, "rank %d: %s: element %d is %g, expected %g\n", rank, what, i, got[i], sum);
      return 1;
    }
  }
  return 0;
}

static int runRank(int rank, int nranks, ncclUniqueId id) {
  int gpus = 0;
  if (cudaGetDeviceCount(&gpus) != cudaSuccess || gpus == 0) return 77; /* no GPU here */
  if (nranks > gpus) nranks = gpus;
  if (rank >= nranks) return 77; /* one rank per GPU: this one sits out */
  CUDA_OK(cudaSetDevice(rank));
  cudaStream_t stream;
  CUDA_OK(cudaStreamCreate(&stream));
  ncclComm_t comm, parity;
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.maxCTAs = 16; /* leave the rest of the GPU to the application's kernels */
  NCCL_OK(ncclCommInitRankConfig(&comm, nranks, id, rank, &config));
  int count = 0;
  NCCL_OK(ncclCommCount(comm, &count));
  if (count != nranks) return fprintf(stderr, "rank %d: ncclCommCount says %d\n", rank, count), 1;

  float *send, *recv, *host = malloc((size_t)nranks * COUNT * sizeof(float));
  uint16_t *halfSend, *halfRecv, *halfHost = malloc((size_t)nranks * COUNT * sizeof(uint16_t));
  if (!host || !halfHost) return 1;
  CUDA_OK(cudaMalloc((void**)&send, (size_t)nranks * COUNT * sizeof(float)));
  CUDA_OK(cudaMalloc((void**)&recv, (size_t)nranks * COUNT * sizeof(float)));
  CUDA_OK(cudaMalloc((void**)&halfSend, COUNT * sizeof(uint16_t)));
  CUDA_OK(cudaMalloc((void**)&halfRecv, (size_t)nranks * COUNT * sizeof(uint16_t)));
  for (int i = 0; i < nranks * COUNT; i++) host[i] = input(rank, i);
  for (int i = 0; i < COUNT; i++) halfHost[i] = halfBits(rank, i);
  CUDA_OK(cudaMemcpy(send, host, (size_t)nranks * COUNT * sizeof(float), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(halfSend, halfHost, COUNT * sizeof(uint16_t), cudaMemcpyHostToDevice));
  int everyone[64];
  for (int r = 0; r < nranks; r++) everyone[r] = r;

  for (int grouped = 0; grouped < 2; grouped++) {
    if (grouped) NCCL_OK(ncclGroupStart());
    NCCL_OK(ncclAllReduce(send, recv, COUNT, ncclFloat, ncclSum, comm, stream));
    if (grouped) NCCL_OK(ncclGroupEnd());
    CUDA_OK(cudaMemcpy(host, recv, COUNT * sizeof(float), cudaMemcpyDeviceToHost));
    if (checkSums(rank, host, COUNT, 0, everyone, nranks, "all-reduce")) return 1;

    if (grouped) NCCL_OK(ncclGroupStart());
    NCCL_OK(ncclAllGather(halfSend, halfRecv, COUNT, ncclHalf, comm, stream));
    NCCL_OK(ncclBroadcast(send, recv, COUNT, ncclFloat, nranks - 1, comm, stream));
    if (grouped) NCCL_OK(ncclGroupEnd());
    CUDA_OK(cudaMemcpy(halfHost, halfRecv, (size_t)nranks * COUNT * sizeof(uint16_t), cudaMemcpyDeviceToHost));
    for (int i = 0; i < nranks * COUNT; i++)
      if (halfHost[i] != halfBits(i / COUNT, i % COUNT))
        return fprintf(stderr, "rank %d: all-gather: element %d is 0x%04x\n", rank, i, halfHost[i]), 1;
    CUDA_OK(cudaMemcpy(host, recv, COUNT * sizeof(float), cudaMemcpyDeviceToHost));
    for (int i = 0; i < COUNT; i++)
      if (host[i] != input(nranks - 1, i)) return fprintf(stderr, "rank %d: broadcast: element %d\n", rank, i), 1;

    NCCL_OK(ncclReduceScatter(send, recv, COUNT, ncclFloat, ncclSum, comm, stream));
    CUDA_OK(cudaMemcpy(host, recv, COUNT * sizeof(float), cudaMemcpyDeviceToHost));
    if (checkSums(rank, host, COUNT, rank * COUNT, everyone, nranks, "reduce-scatter")) return 1;
  }

  /* Rooted calls: a reduce to the last rank, an in-place broadcast from it, a gather to rank 0 and a scatter from
   * it. Every element is a small integer (or its half), so every result is exact. */
  const int last = nranks - 1;
  NCCL_OK(ncclReduce(send, recv, COUNT, ncclFloat, ncclSum, last, comm, stream));
  CUDA_OK(cudaMemcpy(host, recv, COUNT * sizeof(float), cudaMemcpyDeviceToHost));
  if (rank == last && checkSums(rank, host, COUNT, 0, everyone, nranks, "reduce")) return 1;
  CUDA_OK(cudaMemcpy(recv, send, COUNT * sizeof(float), cudaMemcpyDeviceToDevice));
  NCCL_OK(ncclBcast(recv, COUNT, ncclFloat, last, comm, stream));
  CUDA_OK(cudaMemcpy(host, recv, COUNT * sizeof(float), cudaMemcpyDeviceToHost));
  for (int i = 0; i < COUNT; i++)
    if (host[i] != input(last, i)) return fprintf(stderr, "rank %d: bcast: element %d\n", rank, i), 1;
  NCCL_OK(ncclGather(send, recv, COUNT, ncclFloat, 0, comm, stream));
  CUDA_OK(cudaMemcpy(host, recv, (size_t)nranks * COUNT * sizeof(float), cudaMemcpyDeviceToHost));
  for (int i = 0; rank == 0 && i < nranks * COUNT; i++)
    if (host[i] != input(i / COUNT, i % COUNT)) return fprintf(stderr, "rank %d: gather: element %d\n", rank, i), 1;
  NCCL_OK(ncclScatter(send, recv, COUNT, ncclFloat, 0, comm, stream));
  CUDA_OK(cudaMemcpy(host, recv, COUNT * sizeof(float), cudaMemcpyDeviceToHost));
  for (int i = 0; i < COUNT; i++)
    if (host[i] != input(0, rank * COUNT + i)) return fprintf(stderr, "rank %d: scatter: element %d\n", rank, i), 1;

  /* Every rank's input halved, then summed: FSDP's average of gradients, here exact. */
  float half = 0.5f;
  ncclRedOp_t halved;
  NCCL_OK(ncclRedOpCreatePreMulSum(&halved, &half, ncclFloat, ncclScalarHostImmediate, comm));
  NCCL_OK(ncclAllReduce(send, recv, COUNT, ncclFloat, halved, comm, stream));
  NCCL_OK(ncclRedOpDestroy(halved, comm));
  CUDA_OK(cudaMemcpy(host, recv, COUNT * sizeof(float), cudaMemcpyDeviceToHost));
  for (int i = 0; i < COUNT; i++) host[i] *= 2; /* exact: the halves of small integers */
  if (checkSums(rank, host, COUNT, 0, everyone, nranks, "pre-multiplied all-reduce")) return 1;

  /* By parity, keys reversed: the highest rank of each parity comes first. */
  NCCL_OK(ncclCommSplit(comm, rank % 2, -rank, &parity, NULL));
  int members[64], n = 0, place = -1;
  for (int r = nranks - 1; r >= 0; r--)
    if (r % 2 == rank % 2) members[n++] = r;
  NCCL_OK(ncclCommUserRank(parity, &place));
  if (members[place] != rank) return fprintf(stderr, "rank %d: placed at %d of its parity\n", rank, place), 1;
  NCCL_OK(ncclAllReduce(send, recv, COUNT, ncclFloat, ncclSum, parity, stream));
  CUDA_OK(cudaMemcpy(host, recv, COUNT * sizeof(float), cudaMemcpyDeviceToHost));
  if (checkSums(rank, host, COUNT, 0, members, n, "all-reduce of the split")) return 1;

  CUDA_OK(cudaStreamSynchronize(stream));
  NCCL_OK(ncclCommFinalize(parity));
  NCCL_OK(ncclCommDestroy(parity));
  NCCL_OK(ncclCommFinalize(comm));
  NCCL_OK(ncclCommDestroy(comm));
  cudaFree(send);
  cudaFree(recv);
  cudaFree(halfSend);
  cudaFree(halfRecv);
  free(host);
  free(halfHost);
  printf(
      "rank %d of %d: all-reduce, all-gather, broadcast, reduce-scatter, groups, reduce, bcast, gather, scatter, "
      "pre-multiplied sum and split checked\n",
      rank, nranks);
  return 0;
}

int main(int argc, char** argv) {
  const int nranks = argc > 1 ? atoi(argv[1]) : 2;
  if (nranks < 1 || nranks > 8) return fprintf(stderr, "usage: %s [ranks, 1 to 8]\n", argv[0]), 2;
  ncclUniqueId id; /* made before the fork; the parent itself never touches CUDA */
  if (ncclGetUniqueId(&id) != ncclSuccess) return fprintf(stderr, "ncclGetUniqueId failed\n"), 1;
  int failed = 0, skipped = 0, status = 0;
  for (int rank = 0; rank < nranks; rank++) {
    const pid_t pid = fork();
    if (pid == 0) exit(runRank(rank, nranks, id));
    failed += pid < 0;
  }
  while (wait(&status) > 0) {
    skipped += WIFEXITED(status) && WEXITSTATUS(status) == 77;
    failed += !WIFEXITED(status) || (WEXITSTATUS(status) != 0 && WEXITSTATUS(status) != 77);
  }
  return failed ? 1 : skipped == nranks ? 77 : 0;
}
