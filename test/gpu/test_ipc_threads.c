/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Ranks in one process (one thread per GPU, as fcclCommInitAll runs them): they use each other's arena chunks
 * directly through peer access, with no IPC mapping at all; registrations of cudaMalloc and fcclMemAlloc memory
 * work between them; re-creating communicators reuses the chunks; and two ranks on one GPU in one process are
 * refused with fcclInvalidUsage on both.
 */
#include "arena.h"
#include "test_ipc_common.h"
#include "transport.h"

#define SLOT_BYTES (128u << 10)

struct threadCtx {
  struct testShmRank shmRank;
  struct fcclTransportExchange ex;
  int rank, nranks, dev;
  volatile int abortFlag;
  fcclResult_t sharedDeviceResult;
  char* registered; /* this thread's registered buffer, for the peer to compare pointers */
  void* ownSlot;
};

static struct threadCtx threads[2];

static int create(struct threadCtx* ctx, struct fcclComm* comm, const char* name) {
  testCommMake(comm, ctx->rank, ctx->nranks, ctx->dev, name, &ctx->abortFlag);
  fcclResult_t res = testTransportInit(comm, SLOT_BYTES, &ctx->ex);
  EXPECT_MSG(res == fcclSuccess, "rank %d: init of %s failed: %s", ctx->rank, name, fcclGetLastError(NULL));
  return res == fcclSuccess;
}

static void destroy(struct fcclComm* comm) {
  EXPECT_EQ_INT(testTransportFini(comm), fcclSuccess);
  pthread_mutex_destroy(&comm->errorLock);
}

static void* twoGpus(void* arg) {
  struct threadCtx* ctx = arg;
  EXPECT_EQ_INT(cudaSetDevice(ctx->dev), cudaSuccess);
  struct fcclComm comm;
  if (!create(ctx, &comm, "threads")) return NULL;
  const int peer = 1 - ctx->rank;
  ctx->ownSlot = fcclTransportPeerSlot((&comm)->transport, ctx->rank);
  EXPECT_EQ_INT(testShmBarrier(ctx->shmRank.shm, ctx->rank), TEST_SHM_OK);
  /* Direct use: the peer slot is the peer's own pointer, and nothing went through the process's mappings. */
  EXPECT(fcclTransportPeerSlot((&comm)->transport, peer) == threads[peer].ownSlot);
  fcclMemStats_t stats = {.size = sizeof(stats)};
  EXPECT_EQ_INT(fcclCommGetMemStats(&comm, &stats), fcclSuccess);
  EXPECT_EQ_INT(stats.openMappings, 0);

  uint64_t value = 0xfeed0000ull + (uint64_t)ctx->rank, seen = 0;
  EXPECT_EQ_INT(cudaMemcpy((uint64_t*)fcclTransportPeerSlot((&comm)->transport, peer) + ctx->rank, &value, 8,
                           cudaMemcpyHostToDevice), cudaSuccess);
  EXPECT_EQ_INT(cudaDeviceSynchronize(), cudaSuccess); /* a pageable copy may return before its DMA lands */
  EXPECT_EQ_INT(testShmBarrier(ctx->shmRank.shm, ctx->rank), TEST_SHM_OK);
  EXPECT_EQ_INT(cudaMemcpy(&seen, (uint64_t*)ctx->ownSlot + peer, 8, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ_INT(seen, 0xfeed0000ull + (uint64_t)peer);

  /* Registrations between threads: a cudaMalloc buffer and an fcclMemAlloc one. */
  char* plain = NULL;
  void* pooled = NULL;
  EXPECT_EQ_INT(cudaMalloc((void**)&plain, 1u << 20), cudaSuccess);
  EXPECT_EQ_INT(fcclMemAlloc(&pooled, 1u << 20), fcclSuccess);
  uint64_t* host = malloc(1u << 20);
  testFill(host, 1u << 20, 7, ctx->rank, 1);
  EXPECT_EQ_INT(cudaMemcpy(plain, host, 1u << 20, cudaMemcpyHostToDevice), cudaSuccess);
  testFill(host, 1u << 20, 7, ctx->rank, 2);
  EXPECT_EQ_INT(cudaMemcpy(pooled, host, 1u << 20, cudaMemcpyHostToDevice), cudaSuccess);
  fcclRegHandle_t handles[2] = {NULL, NULL};
  EXPECT_EQ_INT(fcclCommRegister(&comm, plain, 1u << 20, &handles[0]), fcclSuccess);
  EXPECT_EQ_INT(fcclCommRegister(&comm, pooled, 1u << 20, &handles[1]), fcclSuccess);
  char* bufs[2] = {plain, pooled};
  for (int b = 0; b < 2; b++) {
    void* peerPtrs[2] = {0};
    size_t offset = 4096 * (size_t)(b + 1);
    EXPECT_EQ_INT(fcclTransportLookup((&comm)->transport, bufs[b] + offset, 8192, peerPtrs), 1);
    EXPECT_EQ_INT(cudaMemcpy(host, peerPtrs[peer], 8192, cudaMemcpyDeviceToHost), cudaSuccess);
    int bad = 0;
    for (int i = 0; i < 1024; i++) bad += host[i] != testWord(7, peer, b + 1, offset + (size_t)i * 8);
    EXPECT_MSG(bad == 0, "rank %d: %d wrong words in the peer thread's buffer %d", ctx->rank, bad, b);
  }
  EXPECT_EQ_INT(fcclCommGetMemStats(&comm, &stats), fcclSuccess);
  EXPECT_EQ_INT(stats.openMappings, 0);
  EXPECT_EQ_INT(stats.commRegistrations, 2);
  EXPECT_EQ_INT(fcclCommDeregister(&comm, handles[0]), fcclSuccess);
  EXPECT_EQ_INT(fcclCommDeregister(&comm, handles[1]), fcclSuccess);
  free(host);

  /* Re-init without destroy, 100 rounds: round 1 adds the second slot's chunk (two communicators alive at once);
   * from then on the chunks are reused, nothing is allocated. */
  struct fcclArena* arena = NULL;
  EXPECT_EQ_INT(fcclArenaProcess(ctx->dev, SLOT_BYTES, &arena), fcclSuccess);
  struct fcclArenaStats before, after;
  memset(&before, 0, sizeof(before));
  struct fcclComm comms[2];
  comms[0] = comm;
  int ok = 1;
  for (int round = 1; round <= 100 && ok; round++) {
    ok &= create(ctx, &comms[round % 2], "threads-again");
    uint64_t flag = ((uint64_t)round << 8) | (uint64_t)ctx->rank;
    uint64_t got = 0;
    ok &= cudaMemcpy(fcclTransportPeerSlot((&comms[round % 2])->transport, peer), &flag, 8, cudaMemcpyHostToDevice) ==
          cudaSuccess;
    ok &= cudaDeviceSynchronize() == cudaSuccess;
    ok &= testShmBarrier(ctx->shmRank.shm, ctx->rank) == TEST_SHM_OK;
    ok &= cudaMemcpy(&got, fcclTransportPeerSlot((&comms[round % 2])->transport, ctx->rank), 8,
                     cudaMemcpyDeviceToHost) == cudaSuccess;
    ok &= got == (((uint64_t)round << 8) | (uint64_t)peer);
    ok &= testShmBarrier(ctx->shmRank.shm, ctx->rank) == TEST_SHM_OK;
    destroy(&comms[(round - 1) % 2]);
    if (round == 1) fcclArenaGetStats(arena, &before);
  }
  EXPECT(ok);
  fcclArenaGetStats(arena, &after);
  EXPECT_EQ_INT(before.chunks, 2);
  EXPECT_EQ_INT(after.chunksCreated, before.chunksCreated);
  destroy(&comms[100 % 2]);
  fcclArenaGetStats(arena, &after);
  EXPECT_EQ_INT(after.chunks, 0); /* both devices' last communicator gone: memory returned */
  EXPECT_EQ_INT(after.borrowed, 0);
  EXPECT_EQ_INT(fcclMemFree(pooled), fcclSuccess);
  cudaFree(plain);
  return NULL;
}

static void* sameGpu(void* arg) {
  struct threadCtx* ctx = arg;
  if (cudaSetDevice(ctx->dev) != cudaSuccess) return NULL;
  struct fcclComm comm;
  testCommMake(&comm, ctx->rank, ctx->nranks, ctx->dev, "same-gpu", &ctx->abortFlag);
  ctx->sharedDeviceResult = testTransportInit(&comm, SLOT_BYTES, &ctx->ex);
  if (ctx->sharedDeviceResult == fcclSuccess) (void)testTransportFini(&comm);
  return NULL;
}

static void runPair(void* (*fn)(void*), int dev0, int dev1) {
  struct testShm* shm = testShmCreate(2, TEST_IPC_RECORD_BYTES, 0, 30000);
  EXPECT(shm != NULL);
  if (!shm) return;
  pthread_t ids[2];
  for (int r = 0; r < 2; r++) {
    memset(&threads[r], 0, sizeof(threads[r]));
    threads[r].rank = r;
    threads[r].nranks = 2;
    threads[r].dev = r == 0 ? dev0 : dev1;
    threads[r].shmRank = (struct testShmRank){.shm = shm, .rank = r};
    threads[r].ex = testShmExchange(&threads[r].shmRank);
    pthread_create(&ids[r], NULL, fn, &threads[r]);
  }
  for (int r = 0; r < 2; r++) pthread_join(ids[r], NULL);
  testShmDestroy(shm);
}

int main(void) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count < 1) {
    printf("SKIP: needs a GPU\n");
    return TEST_SKIP;
  }
  runPair(sameGpu, 0, 0);
  for (int r = 0; r < 2; r++) {
    EXPECT_EQ_INT(threads[r].sharedDeviceResult, fcclInvalidUsage);
  }
  if (count >= 2) {
    int canAccess = 0;
    cudaDeviceCanAccessPeer(&canAccess, 0, 1);
    if (canAccess)
      runPair(twoGpus, 0, 1);
    else
      printf("note: GPUs 0 and 1 have no peer access: same-process mapping not tested\n");
  } else {
    printf("note: one GPU: same-process ranks on two GPUs not tested\n");
  }
  return testSummary("ipc_threads");
}
