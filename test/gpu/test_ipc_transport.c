/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The transport layer across two processes (forked ranks, one GPU each; with one GPU both share it), driven
 * through fcclTransportInitWithExchange with a shared-memory exchange in place of the bootstrap:
 *   basic     - peer slots mapped and P2P-checked; data written into a peer's slot is read by its owner
 *   reinit    - re-initialisation as an application replacing its communicator does it: init comm_i while
 *               comm_{i-1} lives, exchange flags through comm_i, destroy comm_{i-1}; FCCLTEST_ROUNDS rounds (1000);
 *               open mappings equal after round 1 and the last
 *   cycles    - FCCLTEST_CYCLES init/destroy cycles (10000): mappings back to zero, device memory back where it was
 *   two       - two communicators alive at once over the same GPUs, used alternately on two streams
 *   register  - fcclCommRegister of the same buffer twice, two sub-ranges of one cudaMalloc allocation, an
 *               fcclMemAlloc buffer, a cudaMalloc buffer and a run of two cuMem allocations (expandable segments):
 *               the peer reads the right bytes at the right offsets; deregistration errors
 * Environment for other paths: FCCL_FD_PASSING=socket, FCCL_CUMEM_ENABLE=0 (legacy IPC).
 */
#include "arena.h"
#include "cudawrap.h"
#include "test_cycles.h"
#include "test_ipc_common.h"
#include "transport.h"

#define NRANKS 2
#define SLOT_BYTES (256u << 10)

struct rankCtx {
  struct testShmRank shmRank;
  struct fcclTransportExchange ex;
  int rank, nranks, dev;
  volatile int abortFlag;
  uint64_t seed;
};

static int commCreate(struct rankCtx* ctx, struct fcclComm* comm, const char* name) {
  testCommMake(comm, ctx->rank, ctx->nranks, ctx->dev, name, &ctx->abortFlag);
  fcclResult_t res = testTransportInit(comm, SLOT_BYTES, &ctx->ex);
  EXPECT_MSG(res == fcclSuccess, "rank %d: transport init of %s failed: %s", ctx->rank, name,
             fcclGetLastError(NULL));
  return res == fcclSuccess;
}

static void commDestroy(struct fcclComm* comm) {
  fcclResult_t res = testTransportFini(comm);
  EXPECT_MSG(res == fcclSuccess, "transport fini of %s failed: %s", comm->name, fcclGetLastError(NULL));
  pthread_mutex_destroy(&comm->errorLock);
}

static fcclMemStats_t stats(struct fcclComm* comm) {
  fcclMemStats_t s;
  memset(&s, 0, sizeof(s));
  s.size = sizeof(s);
  EXPECT_EQ_INT(fcclCommGetMemStats(comm, &s), fcclSuccess);
  return s;
}

/* Every rank writes value into word `rank` (after `base` words) of every peer's slot; after a barrier each owner
 * finds every peer's value in its own slot. Host copies through the mappings, like an application's host-side flag
 * exchange. */
static int flagExchange(struct rankCtx* ctx, struct fcclComm* comm, uint64_t value, size_t base, int skew) {
  int ok = 1;
  if (skew) usleep(200); /* one rank a little late, as real ranks are */
  for (int p = 0; p < ctx->nranks; p++) {
    uint64_t* slot = fcclTransportPeerSlot((comm)->transport, p);
    if (!slot) return 0;
    uint64_t mine = value + (uint64_t)ctx->rank;
    ok &= cudaMemcpy(slot + base + ctx->rank, &mine, sizeof(mine), cudaMemcpyHostToDevice) == cudaSuccess;
  }
  /* A copy from pageable memory may return before its DMA has landed: wait for it before telling the peer. */
  ok &= cudaDeviceSynchronize() == cudaSuccess;
  ok &= testShmBarrier(ctx->shmRank.shm, ctx->rank) == TEST_SHM_OK;
  uint64_t seen[NRANKS];
  uint64_t* own = fcclTransportPeerSlot((comm)->transport, ctx->rank);
  ok &= cudaMemcpy(seen, own + base, sizeof(seen), cudaMemcpyDeviceToHost) == cudaSuccess;
  for (int p = 0; p < ctx->nranks; p++)
    EXPECT_MSG(seen[p] == value + (uint64_t)p, "rank %d, comm %s: word of rank %d is %llx, expected %llx", ctx->rank,
               comm->name, p, (unsigned long long)seen[p], (unsigned long long)(value + (uint64_t)p));
  ok &= testShmBarrier(ctx->shmRank.shm, ctx->rank) == TEST_SHM_OK;
  return ok;
}

static void testBasic(struct rankCtx* ctx) {
  struct fcclComm comm;
  if (!commCreate(ctx, &comm, "basic")) return;
  EXPECT_EQ_INT(fcclTransportSlotBytes((&comm)->transport), SLOT_BYTES);
  EXPECT(fcclTransportSlotIndex((&comm)->transport) >= 0);
  for (int p = 0; p < ctx->nranks; p++) EXPECT(fcclTransportPeerSlot((&comm)->transport, p) != NULL);
  EXPECT(fcclTransportPeerSlot((&comm)->transport, ctx->nranks) == NULL);
  EXPECT(fcclTransportPeerSlot((&comm)->transport, -1) == NULL);
  fcclMemStats_t s = stats(&comm);
  EXPECT_EQ_INT(s.openMappings, ctx->nranks - 1); /* one chunk per peer process */
  EXPECT_EQ_INT(s.mappingReferences, ctx->nranks - 1);
  EXPECT(s.commDeviceBytes >= SLOT_BYTES);
  /* A first communicator allocates its own slot's chunk only (within the 2 MiB granularity), and maps its peers'. */
  EXPECT(s.commDeviceBytes < SLOT_BYTES + (2u << 20) + 4096);
  EXPECT_EQ_INT(s.arenaChunks, 1);
  EXPECT_EQ_INT(s.arenaBytes, s.commDeviceBytes);
  EXPECT_EQ_INT(s.commPeerBytes, (uint64_t)(ctx->nranks - 1) * s.commDeviceBytes);
  EXPECT_EQ_INT(s.bytesMapped, s.commPeerBytes);
  EXPECT(flagExchange(ctx, &comm, 0x1000, 0, 0));
  /* The last bytes of the slot are reachable too. */
  EXPECT(flagExchange(ctx, &comm, 0x2000, SLOT_BYTES / 8 - NRANKS, 1));
  commDestroy(&comm);
  s = stats(NULL);
  EXPECT_EQ_INT(s.openMappings, 0);
  EXPECT_EQ_INT(s.totalOpens, s.totalCloses);
}

static void testReinit(struct rankCtx* ctx) {
  long rounds = testEnvLong("FCCLTEST_ROUNDS", 1000);
  struct fcclComm comms[2];
  char name[32];
  if (!commCreate(ctx, &comms[0], "reinit-0")) return;
  int ok = flagExchange(ctx, &comms[0], 1ull << 32, 0, 0);
  fcclMemStats_t first = {0}, last = {0};
  int distinct = 1, failures = 0;
  for (long round = 1; round <= rounds && failures < 5; round++) {
    struct fcclComm* next = &comms[round % 2];
    struct fcclComm* prev = &comms[(round - 1) % 2];
    snprintf(name, sizeof(name), "reinit-%ld", round);
    /* init again without destroying the previous communicator */
    if (!commCreate(ctx, next, name)) {
      failures++;
      break;
    }
    distinct &= fcclTransportSlotIndex((next)->transport) != fcclTransportSlotIndex((prev)->transport);
    int exchanged = flagExchange(ctx, next, ((uint64_t)round + 1) << 32, 0, (int)(round % 3 == 0) && ctx->rank == 1);
    if (!exchanged) failures++;
    ok &= exchanged;
    if (round == 1) first = stats(next);
    if (round == rounds) last = stats(next);
    commDestroy(prev);
  }
  EXPECT_MSG(ok && failures == 0, "rank %d: %d failed rounds", ctx->rank, failures);
  EXPECT_MSG(distinct, "a new communicator took the slot of the one still alive");
  EXPECT_EQ_INT(first.openMappings, last.openMappings);
  EXPECT_EQ_INT(first.mappingReferences, last.mappingReferences);
  EXPECT_EQ_INT(last.openMappings, 2 * (ctx->nranks - 1)); /* two communicators alive: a chunk each */
  EXPECT_EQ_INT(last.arenaChunks, 2);
  EXPECT_EQ_INT(last.totalOpens, first.totalOpens); /* nothing was mapped after round 1 */
  printf("rank %d: %ld rounds of init-without-destroy: %llu mappings open after round 1 and after round %ld, "
         "%llu opened in all\n", ctx->rank, rounds, (unsigned long long)first.openMappings, rounds,
         (unsigned long long)last.totalOpens);
  commDestroy(&comms[rounds % 2]);
  EXPECT_EQ_INT(stats(NULL).openMappings, 0);
}

/* One cycle of testCycles: transport init and fini, with a flag exchange through the slots every 1000 cycles. */
struct cycleCtx {
  struct rankCtx* rank;
  struct fcclComm comm;
};

static int cycleCreate(void* arg, long cycle) {
  struct cycleCtx* c = arg;
  return commCreate(c->rank, &c->comm, cycle == 0 ? "cycle-0" : "cycle");
}

static int cycleUse(void* arg, long cycle) {
  struct cycleCtx* c = arg;
  return cycle == 0 || cycle % 1000 != 0 || flagExchange(c->rank, &c->comm, (uint64_t)cycle << 16, 0, 0);
}

static void cycleDestroy(void* arg, long cycle) {
  struct cycleCtx* c = arg;
  (void)cycle;
  commDestroy(&c->comm);
}

static void testCycles(struct rankCtx* ctx) {
  const struct testCycleOps ops = {"init/destroy", cycleCreate, cycleUse, cycleDestroy};
  struct cycleCtx cycle;
  cycle.rank = ctx;
  struct testCycleResult result;
  testCyclesRun(ctx->shmRank.shm, ctx->rank, testEnvLong("FCCLTEST_CYCLES", 10000), 2ll << 20, &ops, &cycle, &result);
  if (!result.measured) return;
  /* Every counted cycle mapped each peer's chunk once, and the arena gave its memory back when the last
   * communicator of the device went. */
  EXPECT_EQ_INT(result.after.totalOpens - result.before.totalOpens, result.done * (ctx->nranks - 1));
  struct fcclArena* arena = NULL;
  EXPECT_EQ_INT(fcclArenaProcess(ctx->dev, SLOT_BYTES, &arena), fcclSuccess);
  struct fcclArenaStats arenaStats;
  fcclArenaGetStats(arena, &arenaStats);
  EXPECT_EQ_INT(arenaStats.chunks, 0);
}

static void testTwoComms(struct rankCtx* ctx) {
  struct fcclComm a, b;
  if (!commCreate(ctx, &a, "two-a")) return;
  if (!commCreate(ctx, &b, "two-b")) {
    commDestroy(&a);
    return;
  }
  EXPECT(fcclTransportSlotIndex((&a)->transport) != fcclTransportSlotIndex((&b)->transport));
  EXPECT(fcclTransportPeerSlot((&a)->transport, ctx->rank) != fcclTransportPeerSlot((&b)->transport, ctx->rank));
  /* Each slot is a chunk of its own: two of every peer's mapped, two of this rank's allocated. */
  fcclMemStats_t both = stats(NULL);
  EXPECT_EQ_INT(both.openMappings, 2 * (ctx->nranks - 1));
  EXPECT_EQ_INT(both.arenaChunks, 2);
  cudaStream_t streams[2];
  EXPECT_EQ_INT(cudaStreamCreateWithFlags(&streams[0], cudaStreamNonBlocking), cudaSuccess);
  EXPECT_EQ_INT(cudaStreamCreateWithFlags(&streams[1], cudaStreamNonBlocking), cudaSuccess);
  uint64_t* host = NULL;
  EXPECT_EQ_INT(cudaMallocHost((void**)&host, 4 * 1024 * sizeof(uint64_t)), cudaSuccess);
  struct fcclComm* comms[2] = {&a, &b};
  int bad = 0;
  for (int iteration = 0; iteration < 200; iteration++) {
    int which = iteration % 2; /* alternate between the communicators */
    struct fcclComm* comm = comms[which];
    uint64_t* out = host + which * 1024;
    for (int i = 0; i < 512; i++) out[i] = testWord(ctx->seed, ctx->rank, iteration, (size_t)i * 8);
    for (int p = 0; p < ctx->nranks; p++) {
      uint64_t* slot = (uint64_t*)fcclTransportPeerSlot((comm)->transport, p) + 512 * ctx->rank;
      bad += cudaMemcpyAsync(slot, out, 512 * 8, cudaMemcpyHostToDevice, streams[which]) != cudaSuccess;
    }
    bad += cudaStreamSynchronize(streams[which]) != cudaSuccess;
    bad += testShmBarrier(ctx->shmRank.shm, ctx->rank) != TEST_SHM_OK;
    uint64_t* in = host + 2048;
    uint64_t* own = fcclTransportPeerSlot((comm)->transport, ctx->rank);
    bad += cudaMemcpyAsync(in, own, (size_t)ctx->nranks * 512 * 8, cudaMemcpyDeviceToHost, streams[which]) !=
           cudaSuccess;
    bad += cudaStreamSynchronize(streams[which]) != cudaSuccess;
    for (int p = 0; p < ctx->nranks; p++)
      for (int i = 0; i < 512; i++) bad += in[p * 512 + i] != testWord(ctx->seed, p, iteration, (size_t)i * 8);
    /* The other communicator's slot still holds what was written into it last. */
    if (iteration > 0) {
      struct fcclComm* other = comms[1 - which];
      uint64_t check = 0;
      uint64_t* otherOwn = fcclTransportPeerSlot((other)->transport, ctx->rank);
      bad += cudaMemcpy(&check, otherOwn, 8, cudaMemcpyDeviceToHost) != cudaSuccess;
      bad += check != testWord(ctx->seed, 0, iteration - 1, 0);
    }
    bad += testShmBarrier(ctx->shmRank.shm, ctx->rank) != TEST_SHM_OK;
  }
  EXPECT_MSG(bad == 0, "rank %d: %d mismatches between two live communicators", ctx->rank, bad);
  cudaFreeHost(host);
  cudaStreamDestroy(streams[0]);
  cudaStreamDestroy(streams[1]);
  commDestroy(&b);
  commDestroy(&a);
}

/* ---- registration ---- */

struct testBuffer {
  const char* what;
  char* dev;      /* what this rank registered */
  size_t bytes;
  int id;         /* data id: the content is testWord(seed, rank, id, offset) */
  fcclRegHandle_t handle;
};

/* The peer's copy, read through the registration at a few offsets, holds the peer's data. */
static int checkPeerReads(struct rankCtx* ctx, struct fcclComm* comm, const struct testBuffer* buf) {
  int bad = 0;
  uint64_t state = ctx->seed + (uint64_t)buf->id;
  uint64_t host[512];
  for (int trial = 0; trial < 8; trial++) {
    size_t span = sizeof(host);
    size_t offset = trial == 0 ? 0 : trial == 1 ? buf->bytes - span : testRandom(&state) % (buf->bytes - span) / 8 * 8;
    void* peerPtrs[NRANKS] = {0};
    if (!fcclTransportLookup((comm)->transport, buf->dev + offset, span, peerPtrs)) {
      EXPECT_MSG(0, "rank %d: %s at offset %zu is not found registered", ctx->rank, buf->what, offset);
      return 1;
    }
    EXPECT(peerPtrs[ctx->rank] == buf->dev + offset);
    for (int p = 0; p < ctx->nranks; p++) {
      if (cudaMemcpy(host, peerPtrs[p], span, cudaMemcpyDeviceToHost) != cudaSuccess) {
        bad++;
        continue;
      }
      for (size_t i = 0; i < span / 8; i++) bad += host[i] != testWord(ctx->seed, p, buf->id, offset + i * 8);
    }
  }
  EXPECT_MSG(bad == 0, "rank %d: %d wrong words reading %s through the registration", ctx->rank, bad, buf->what);
  /* Beyond the registered bytes: not registered. */
  void* peerPtrs[NRANKS];
  EXPECT_EQ_INT(fcclTransportLookup((comm)->transport, buf->dev + buf->bytes - 8, 16, peerPtrs), 0);
  return bad;
}

static int fillDevice(struct rankCtx* ctx, char* dev, size_t bytes, int id) {
  uint64_t* host = malloc(bytes);
  if (!host) return 0;
  testFill(host, bytes, ctx->seed, ctx->rank, id);
  int ok = cudaMemcpy(dev, host, bytes, cudaMemcpyHostToDevice) == cudaSuccess;
  free(host);
  return ok;
}

/* Two cuMem allocations mapped back to back with POSIX descriptor export, like PyTorch's expandable segments. */
struct segments {
  CUdeviceptr va;
  size_t granularity;
  CUmemGenericAllocationHandle handles[2];
};

static int segmentsCreate(int dev, struct segments* seg) {
  if (fcclCudaDriverLoad() != fcclSuccess) return 0;
  CUmemAllocationProp prop;
  memset(&prop, 0, sizeof(prop));
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = dev;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  if (pfn_cuMemGetAllocationGranularity(&seg->granularity, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED)) return 0;
  if (pfn_cuMemAddressReserve(&seg->va, 2 * seg->granularity, 0, 0, 0)) return 0;
  for (int i = 0; i < 2; i++) {
    if (pfn_cuMemCreate(&seg->handles[i], seg->granularity, &prop, 0)) return 0;
    if (pfn_cuMemMap(seg->va + i * seg->granularity, seg->granularity, 0, seg->handles[i], 0)) return 0;
  }
  CUmemAccessDesc access = {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = dev},
                            .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  return pfn_cuMemSetAccess(seg->va, 2 * seg->granularity, &access, 1) == CUDA_SUCCESS;
}

static void segmentsFree(struct segments* seg) {
  for (int i = 0; i < 2; i++) {
    (void)pfn_cuMemUnmap(seg->va + i * seg->granularity, seg->granularity);
    (void)pfn_cuMemRelease(seg->handles[i]);
  }
  (void)pfn_cuMemAddressFree(seg->va, 2 * seg->granularity);
}

static void testRegister(struct rankCtx* ctx) {
  struct fcclComm comm;
  if (!commCreate(ctx, &comm, "register")) return;
  const int peers = ctx->nranks - 1;
  fcclMemStats_t base = stats(&comm);
  char *big = NULL, *big2 = NULL, *plain = NULL;
  void* pooled = NULL;
  EXPECT_EQ_INT(cudaMalloc((void**)&big, 8u << 20), cudaSuccess);
  EXPECT_EQ_INT(cudaMalloc((void**)&big2, 4u << 20), cudaSuccess);
  EXPECT_EQ_INT(cudaMalloc((void**)&plain, 3u << 20), cudaSuccess);
  EXPECT_EQ_INT(fcclMemAlloc(&pooled, 3u << 20), fcclSuccess);
  struct segments seg;
  memset(&seg, 0, sizeof(seg));
  int haveSegments = segmentsCreate(ctx->dev, &seg);
  EXPECT_MSG(haveSegments, "rank %d: could not build two cuMem allocations back to back", ctx->rank);

  struct testBuffer bufs[] = {
      {"a cudaMalloc buffer (first registration)", big, 8u << 20, 1, NULL},
      {"the same buffer registered again", big, 8u << 20, 1, NULL},
      {"sub-range [0, 1 MiB) of one allocation", big2, 1u << 20, 2, NULL},
      {"sub-range [2 MiB, 3 MiB) of the same allocation", big2 + (2u << 20), 1u << 20, 3, NULL},
      {"a cudaMalloc buffer", plain + 4096, (3u << 20) - 8192, 4, NULL},
      {"an fcclMemAlloc (cuMem) buffer", (char*)pooled, 3u << 20, 5, NULL},
      {"a range over two cuMem allocations", (char*)(uintptr_t)(seg.va + seg.granularity / 2), seg.granularity, 6,
       NULL},
  };
  const int nbufs = haveSegments ? 7 : 6;
  EXPECT(fillDevice(ctx, big, 8u << 20, 1));
  /* big2 holds two data sets: ids 2 and 3 at the offsets the sub-ranges start */
  uint64_t* host = malloc(4u << 20);
  testFill(host, 1u << 20, ctx->seed, ctx->rank, 2);
  testFill(host + (2u << 20) / 8, 1u << 20, ctx->seed, ctx->rank, 3);
  EXPECT_EQ_INT(cudaMemcpy(big2, host, 4u << 20, cudaMemcpyHostToDevice), cudaSuccess);
  free(host);
  EXPECT(fillDevice(ctx, bufs[4].dev, bufs[4].bytes, 4));
  EXPECT(fillDevice(ctx, bufs[5].dev, bufs[5].bytes, 5));
  if (haveSegments) EXPECT(fillDevice(ctx, bufs[6].dev, bufs[6].bytes, 6));
  EXPECT_EQ_INT(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ_INT(testShmBarrier(ctx->shmRank.shm, ctx->rank), TEST_SHM_OK);

  for (int i = 0; i < nbufs; i++) {
    fcclResult_t res = fcclCommRegister(&comm, bufs[i].dev, bufs[i].bytes, &bufs[i].handle);
    EXPECT_MSG(res == fcclSuccess, "rank %d: registering %s failed: %s", ctx->rank, bufs[i].what,
               fcclGetLastError(NULL));
    fcclMemStats_t s = stats(&comm);
    if (i == 1) {
      EXPECT(bufs[1].handle != bufs[0].handle);
      EXPECT_EQ_INT(s.openMappings, base.openMappings + peers); /* the second registration maps nothing */
    }
    if (i == 3) EXPECT_EQ_INT(s.openMappings, base.openMappings + 2 * peers); /* both sub-ranges: one mapping */
    EXPECT_EQ_INT(s.commRegistrations, i + 1);
  }
  for (int i = 0; i < nbufs; i++)
    if (bufs[i].handle) checkPeerReads(ctx, &comm, &bufs[i]);
  fcclMemStats_t s = stats(&comm);
  EXPECT_EQ_INT(s.openMappings, base.openMappings + (uint64_t)(nbufs - 2) * peers);
  EXPECT_EQ_INT(s.mappingReferences, base.mappingReferences + (uint64_t)nbufs * peers);

  /* Host memory cannot be registered: every rank gets an error, nothing stays registered. */
  char hostBuffer[64];
  fcclRegHandle_t bad = NULL;
  EXPECT(fcclCommRegister(&comm, hostBuffer, sizeof(hostBuffer), &bad) != fcclSuccess);
  EXPECT(bad == NULL);
  EXPECT_EQ_INT(stats(&comm).commRegistrations, nbufs);

  EXPECT_EQ_INT(fcclCommDeregister(&comm, bufs[0].handle), fcclSuccess);
  EXPECT_EQ_INT(stats(&comm).openMappings, s.openMappings); /* the second registration still holds it */
  EXPECT_EQ_INT(fcclCommDeregister(&comm, bufs[0].handle), fcclInvalidArgument); /* released already */
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "not a live registration");
  EXPECT_EQ_INT(fcclCommDeregister(&comm, (fcclRegHandle_t)(uintptr_t)0x1234), fcclInvalidArgument);
  for (int i = 1; i < nbufs; i++)
    EXPECT_EQ_INT(fcclCommDeregister(&comm, bufs[i].handle), fcclSuccess);
  s = stats(&comm);
  EXPECT_EQ_INT(s.openMappings, base.openMappings);
  EXPECT_EQ_INT(s.commRegistrations, 0);

  /* A registration left behind is released by the teardown. */
  fcclRegHandle_t leftover = NULL;
  EXPECT_EQ_INT(fcclCommRegister(&comm, plain, 3u << 20, &leftover), fcclSuccess);
  EXPECT_EQ_INT(fcclMemFree(big), fcclInvalidArgument); /* not from fcclMemAlloc */
  commDestroy(&comm);
  EXPECT_EQ_INT(stats(NULL).openMappings, 0);
  EXPECT_EQ_INT(fcclMemFree(pooled), fcclSuccess);
  EXPECT_EQ_INT(fcclMemFree(pooled), fcclInvalidArgument);
  EXPECT_EQ_INT(fcclMemFree(NULL), fcclSuccess);
  if (haveSegments) segmentsFree(&seg);
  cudaFree(big);
  cudaFree(big2);
  cudaFree(plain);
}

static int rankMain(int rank, int nranks, void* argp) {
  struct testIpcArgs* args = argp;
  struct rankCtx ctx = {.rank = rank, .nranks = nranks, .dev = rank % args->gpus};
  ctx.shmRank = (struct testShmRank){.shm = args->shm, .rank = rank};
  ctx.ex = testShmExchange(&ctx.shmRank);
  const char* fixed = getenv("FCCLTEST_SEED");
  ctx.seed = fixed ? strtoull(fixed, NULL, 0) : 0x5eedf00dull; /* both ranks must agree: not from the clock */
  if (cudaSetDevice(ctx.dev) != cudaSuccess) {
    EXPECT_MSG(0, "rank %d: cudaSetDevice(%d) failed", rank, ctx.dev);
    return testSummary("ipc_transport rank");
  }
  const char* mode = args->mode;
  if (!strcmp(mode, "basic") || !strcmp(mode, "all")) testBasic(&ctx);
  if (!strcmp(mode, "two") || !strcmp(mode, "all")) testTwoComms(&ctx);
  if (!strcmp(mode, "register") || !strcmp(mode, "all")) testRegister(&ctx);
  if (!strcmp(mode, "reinit") || !strcmp(mode, "all")) testReinit(&ctx);
  if (!strcmp(mode, "cycles") || !strcmp(mode, "all")) testCycles(&ctx);
  char name[64];
  snprintf(name, sizeof(name), "ipc_transport %s rank %d (device %d)", mode, rank, ctx.dev);
  return testSummary(name);
}

int main(int argc, char** argv) {
  return testIpcMain(argc, argv, "ipc_transport", 60000, 550, rankMain);
}
