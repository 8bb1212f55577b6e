/*
 * The collectives' host logic that needs no GPU: algorithm selection and grids, FCCL_ALGO parsing, the slot
 * layout, epoch advance across the 32-bit wrap, and the argument checks of fcclAllReduce / fcclBarrier that come
 * before any CUDA call (on a hand-made communicator without device state).
 */
#include "comm.h"
#include "algo.h"
#include "device.h"
#include "device_state.h"
#include "enqueue.h"
#include "param.h"
#include "test.h"

#include <pthread.h>

static fcclAlgoQuery query(uint64_t bytes, int nranks, int registered) {
  fcclSlotLayout layout;
  fcclSlotLayoutCompute(nranks, 32u << 20, &layout);
  return fcclAlgoQueryMake(bytes, nranks, registered, 0, 132, &layout, 1, 64ull << 20);
}

static int pick(uint64_t bytes, int nranks, int registered) {
  fcclAlgoQuery q = query(bytes, nranks, registered);
  fcclAlgoChoice c;
  if (fcclAlgoSelect(&q, &c) != fcclSuccess) return -1;
  return c.algo;
}

static void testTable(void) {
  /* 2 ranks: LL up to 256 KiB, LL128 up to 1 MiB, plain one-shot up to 8 MiB (one staging chunk), two-shot beyond; registered:
   * two-shot after LL128. */
  EXPECT_EQ_INT(pick(8, 2, 0), FCCL_ALGO_LL);
  EXPECT_EQ_INT(pick(256 << 10, 2, 0), FCCL_ALGO_LL);
  EXPECT_EQ_INT(pick((256 << 10) + 1, 2, 0), FCCL_ALGO_LL128);
  EXPECT_EQ_INT(pick(1 << 20, 2, 1), FCCL_ALGO_LL128);
  EXPECT_EQ_INT(pick((1 << 20) + 1, 2, 0), FCCL_ALGO_ONESHOT_PUSH);
  EXPECT_EQ_INT(pick((1 << 20) + 1, 2, 1), FCCL_ALGO_TWOSHOT_REG);
  EXPECT_EQ_INT(pick(4 << 20, 2, 0), FCCL_ALGO_ONESHOT_PUSH);
  EXPECT_EQ_INT(pick(8 << 20, 2, 0), FCCL_ALGO_ONESHOT_PUSH);
  EXPECT_EQ_INT(pick((8 << 20) + 2, 2, 0), FCCL_ALGO_TWOSHOT_STAGED);
  EXPECT_EQ_INT(pick(1ull << 30, 2, 0), FCCL_ALGO_TWOSHOT_STAGED);
  EXPECT_EQ_INT(pick(4 << 10, 2, 1), FCCL_ALGO_LL);
  EXPECT_EQ_INT(pick((256 << 10) + 2, 2, 1), FCCL_ALGO_LL128);
  EXPECT_EQ_INT(pick(4 << 20, 2, 1), FCCL_ALGO_TWOSHOT_REG);
  /* More ranks: smaller one-shot limits. */
  EXPECT_EQ_INT(pick(16 << 10, 8, 0), FCCL_ALGO_LL);
  EXPECT_EQ_INT(pick(20 << 10, 8, 0), FCCL_ALGO_ONESHOT_PUSH);
  EXPECT_EQ_INT(pick(200 << 10, 8, 0), FCCL_ALGO_TWOSHOT_STAGED);
  EXPECT_EQ_INT(pick(200 << 10, 4, 1), FCCL_ALGO_ONESHOT_PULL);
  EXPECT_EQ_INT(pick(300 << 10, 4, 1), FCCL_ALGO_TWOSHOT_REG);
  EXPECT_EQ_INT(pick(100, 3, 0), FCCL_ALGO_LL);
  EXPECT_EQ_INT(pick(100, 1, 0), FCCL_ALGO_LL);
  /* FCCL_LL128=0: the table skips LL128; forcing it still works. */
  fcclAlgoQuery off = query(1 << 20, 2, 0);
  off.ll128Auto = 0;
  fcclAlgoChoice offChoice;
  EXPECT_EQ_INT(fcclAlgoSelect(&off, &offChoice), fcclSuccess);
  EXPECT_EQ_INT(offChoice.algo, FCCL_ALGO_ONESHOT_PUSH);
  off.registered = 1;
  EXPECT_EQ_INT(fcclAlgoSelect(&off, &offChoice), fcclSuccess);
  EXPECT_EQ_INT(offChoice.algo, FCCL_ALGO_TWOSHOT_REG);
  off.forced = FCCL_ALGO_LL128;
  EXPECT_EQ_INT(fcclAlgoSelect(&off, &offChoice), fcclSuccess);
  EXPECT_EQ_INT(offChoice.algo, FCCL_ALGO_LL128);
  /* Registered two-shot, 2 ranks out of place: reduce-scatter by push from 16 MiB (into the owner's inbox while
   * a share fits one staging chunk, 8 MiB here) and by the copy engines from copyScatterMin (64 MiB in these
   * queries), also when forced; never by copy with copyScatterMin 0; by pull in place, below 16 MiB and for more
   * ranks. */
  const uint64_t copyMin = 64ull << 20;
  const struct {
    uint64_t bytes;
    int nranks;
    int inPlace;
    int forced;
    fcclScatter_t scatter;
  } scatter[] = {{16 << 20, 2, 0, -1, FCCL_SCATTER_INBOX},
                 {(16 << 20) + 2, 2, 0, -1, FCCL_SCATTER_PUSH},
                 {(16 << 20) + 16, 2, 0, -1, FCCL_SCATTER_PUSH},
                 {16 << 20, 2, 0, FCCL_ALGO_TWOSHOT_REG, FCCL_SCATTER_INBOX},
                 {copyMin - 2, 2, 0, -1, FCCL_SCATTER_PUSH},
                 {copyMin, 2, 0, -1, FCCL_SCATTER_COPY},
                 {1ull << 30, 2, 0, -1, FCCL_SCATTER_COPY},
                 {(16 << 20) - 2, 2, 0, -1, FCCL_SCATTER_PULL},
                 {16 << 20, 2, 1, -1, FCCL_SCATTER_PULL},
                 {1ull << 30, 2, 1, -1, FCCL_SCATTER_PULL},
                 {1ull << 30, 4, 0, -1, FCCL_SCATTER_PULL},
                 {1ull << 30, 8, 0, -1, FCCL_SCATTER_PULL},
                 {32 << 20, 2, 0, FCCL_ALGO_TWOSHOT_REG, FCCL_SCATTER_PUSH},
                 {copyMin, 2, 0, FCCL_ALGO_TWOSHOT_REG, FCCL_SCATTER_COPY},
                 {32 << 20, 2, 0, FCCL_ALGO_TWOSHOT_STAGED, FCCL_SCATTER_PULL}};
  for (size_t i = 0; i < sizeof(scatter) / sizeof(scatter[0]); i++) {
    fcclAlgoQuery r = query(scatter[i].bytes, scatter[i].nranks, 1);
    r.inPlace = scatter[i].inPlace;
    r.forced = scatter[i].forced;
    fcclAlgoChoice rc;
    EXPECT_EQ_INT(fcclAlgoSelect(&r, &rc), fcclSuccess);
    EXPECT_EQ_INT(rc.algo, scatter[i].forced >= 0 ? scatter[i].forced : FCCL_ALGO_TWOSHOT_REG);
    EXPECT_MSG(rc.scatter == scatter[i].scatter, "case %zu: scatter %d", i, (int)rc.scatter);
    /* FCCL_COPY_SCATTER_MIN=0: push wherever copy would run. */
    r.copyScatterMin = 0;
    EXPECT_EQ_INT(fcclAlgoSelect(&r, &rc), fcclSuccess);
    EXPECT_MSG(rc.scatter == (scatter[i].scatter == FCCL_SCATTER_COPY ? FCCL_SCATTER_PUSH : scatter[i].scatter),
               "case %zu without copy: scatter %d", i, (int)rc.scatter);
  }
  /* The inbox follows the staging chunk: with 16 MiB chunks, 32 MiB fits (share 16 MiB) and 32 MiB + 16 does not. */
  fcclAlgoQuery wide = query(32 << 20, 2, 1);
  wide.chunkBytes = 16 << 20;
  fcclAlgoChoice wideChoice;
  EXPECT_EQ_INT(fcclAlgoSelect(&wide, &wideChoice), fcclSuccess);
  EXPECT_EQ_INT(wideChoice.scatter, FCCL_SCATTER_INBOX);
  wide.bytes += 16;
  EXPECT_EQ_INT(fcclAlgoSelect(&wide, &wideChoice), fcclSuccess);
  EXPECT_EQ_INT(wideChoice.scatter, FCCL_SCATTER_PUSH);
  /* A one-shot size beyond a small staging chunk goes two-shot. */
  fcclAlgoQuery q = query(2 << 20, 2, 0);
  q.chunkBytes = 64 << 10;
  fcclAlgoChoice c;
  EXPECT_EQ_INT(fcclAlgoSelect(&q, &c), fcclSuccess);
  EXPECT_EQ_INT(c.algo, FCCL_ALGO_TWOSHOT_STAGED);
  EXPECT_EQ_INT(c.roundUnits, (64 << 10) / 16);
}

static void testGrids(void) {
  for (int nranks = 1; nranks <= FCCL_DEVICE_MAX_RANKS; nranks++) {
    for (uint64_t bytes = 1; bytes <= (1ull << 32); bytes = bytes * 3 + 1) {
      for (int registered = 0; registered < 2; registered++) {
        for (int algo = -1; algo < FCCL_ALGO_COUNT; algo++) {
          fcclAlgoQuery q = query(bytes, nranks, registered);
          q.forced = algo;
          q.strict = 0;
          fcclAlgoChoice c;
          EXPECT_EQ_INT(fcclAlgoSelect(&q, &c), fcclSuccess);
          EXPECT(c.blocks >= 1 && c.blocks <= FCCL_DEVICE_MAX_BLOCKS && c.blocks <= q.smCount);
          EXPECT(c.threads >= 32 && c.threads <= FCCL_DEVICE_THREADS && c.threads % 32 == 0);
          EXPECT(c.threads >= nranks);
          EXPECT(fcclAlgoApplicable(c.algo, &q, NULL));
          if (c.algo == FCCL_ALGO_LL) EXPECT(bytes <= q.llBytes);
          if (c.algo == FCCL_ALGO_LL128) EXPECT(bytes <= q.ll128Bytes && nranks > 1);
          if (c.algo == FCCL_ALGO_ONESHOT_PULL || c.algo == FCCL_ALGO_TWOSHOT_REG) EXPECT(registered);
        }
      }
    }
  }
  /* Large messages fill the device: one block of 512 threads per SM. */
  fcclAlgoQuery q = query(256u << 20, 2, 1);
  fcclAlgoChoice c;
  EXPECT_EQ_INT(fcclAlgoSelect(&q, &c), fcclSuccess);
  EXPECT_EQ_INT(c.blocks, 132);
  EXPECT_EQ_INT(c.threads, 512);
  q = query(256u << 20, 2, 0);
  EXPECT_EQ_INT(fcclAlgoSelect(&q, &c), fcclSuccess);
  EXPECT_EQ_INT(c.algo, FCCL_ALGO_TWOSHOT_STAGED);
  EXPECT_EQ_INT(c.blocks, 132);
  /* Tiny LL messages: one block, one warp. */
  q = query(40, 2, 0);
  EXPECT_EQ_INT(fcclAlgoSelect(&q, &c), fcclSuccess);
  EXPECT_EQ_INT(c.blocks, 1);
  EXPECT_EQ_INT(c.threads, 32);
}

static void testForced(void) {
  fcclAlgoQuery q = query(2 << 20, 2, 0);
  fcclAlgoChoice c;
  q.forced = FCCL_ALGO_LL;
  q.strict = 1;
  EXPECT_EQ_INT(fcclAlgoSelect(&q, &c), fcclInvalidArgument);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "LL area");
  q.strict = 0; /* FCCL_ALGO: falls back to the table */
  EXPECT_EQ_INT(fcclAlgoSelect(&q, &c), fcclSuccess);
  EXPECT_EQ_INT(c.algo, FCCL_ALGO_ONESHOT_PUSH);
  q.forced = FCCL_ALGO_TWOSHOT_REG;
  q.strict = 1;
  EXPECT_EQ_INT(fcclAlgoSelect(&q, &c), fcclInvalidArgument);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "not registered");
  q.forced = FCCL_ALGO_TWOSHOT_STAGED;
  EXPECT_EQ_INT(fcclAlgoSelect(&q, &c), fcclSuccess);
  EXPECT_EQ_INT(c.algo, FCCL_ALGO_TWOSHOT_STAGED);
  q.forced = FCCL_ALGO_COUNT;
  EXPECT_EQ_INT(fcclAlgoSelect(&q, &c), fcclInvalidArgument);
  /* More rounds than a signal can count: refused, not wrapped. */
  q = query(1ull << 40, 2, 0);
  q.chunkBytes = 4096;
  EXPECT_EQ_INT(fcclAlgoSelect(&q, &c), fcclInvalidArgument);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "too many staging rounds");
  /* In-place one-shot pull: passes are steps too. */
  q = query(1ull << 40, 2, 1);
  q.inPlace = 1;
  q.smCount = 1;
  EXPECT(!fcclAlgoApplicable(FCCL_ALGO_ONESHOT_PULL, &q, NULL));
  q.inPlace = 0;
  EXPECT(fcclAlgoApplicable(FCCL_ALGO_ONESHOT_PULL, &q, NULL));
  /* A query that is not one. */
  q = query(0, 2, 0);
  EXPECT_EQ_INT(fcclAlgoSelect(&q, &c), fcclInternalError);
  q = query(8, 9, 0);
  EXPECT_EQ_INT(fcclAlgoSelect(&q, &c), fcclInternalError);
}

static void testNames(void) {
  EXPECT_EQ_INT(fcclAlgoParseRequest(""), FCCL_ALGO_REQUEST_AUTO);
  EXPECT_EQ_INT(fcclAlgoParseRequest(NULL), FCCL_ALGO_REQUEST_AUTO);
  EXPECT_EQ_INT(fcclAlgoParseRequest("auto"), FCCL_ALGO_REQUEST_AUTO);
  EXPECT_EQ_INT(fcclAlgoParseRequest("ll"), FCCL_ALGO_LL);
  EXPECT_EQ_INT(fcclAlgoParseRequest("oneshot"), FCCL_ALGO_REQUEST_ONESHOT);
  EXPECT_EQ_INT(fcclAlgoParseRequest("twoshot"), FCCL_ALGO_REQUEST_TWOSHOT);
  EXPECT_EQ_INT(fcclAlgoParseRequest("twoshot_reg"), FCCL_ALGO_TWOSHOT_REG);
  EXPECT_EQ_INT(fcclAlgoParseRequest("oneshot_push"), FCCL_ALGO_ONESHOT_PUSH);
  EXPECT_EQ_INT(fcclAlgoParseRequest("ring"), -1);
  EXPECT_EQ_INT(fcclAlgoResolveRequest(FCCL_ALGO_REQUEST_AUTO, 0), -1);
  EXPECT_EQ_INT(fcclAlgoResolveRequest(FCCL_ALGO_REQUEST_ONESHOT, 0), FCCL_ALGO_ONESHOT_PUSH);
  EXPECT_EQ_INT(fcclAlgoResolveRequest(FCCL_ALGO_REQUEST_ONESHOT, 1), FCCL_ALGO_ONESHOT_PULL);
  EXPECT_EQ_INT(fcclAlgoResolveRequest(FCCL_ALGO_REQUEST_TWOSHOT, 0), FCCL_ALGO_TWOSHOT_STAGED);
  EXPECT_EQ_INT(fcclAlgoResolveRequest(FCCL_ALGO_REQUEST_TWOSHOT, 1), FCCL_ALGO_TWOSHOT_REG);
  EXPECT_EQ_INT(fcclAlgoResolveRequest(FCCL_ALGO_LL, 1), FCCL_ALGO_LL);
  for (int algo = 0; algo < FCCL_ALGO_COUNT; algo++) EXPECT_EQ_INT(fcclAlgoParseRequest(fcclAlgoName(algo)), algo);
  EXPECT(strcmp(fcclAlgoName(FCCL_KERNEL_BARRIER), "barrier") == 0);
  EXPECT(strcmp(fcclAlgoName(77), "unknown") == 0);
}

static void testLayout(void) {
  for (int n = 1; n <= FCCL_DEVICE_MAX_RANKS; n++) {
    fcclSlotLayout l;
    fcclSlotLayoutCompute(n, 32u << 20, &l);
    EXPECT(l.signalAOffset >= sizeof(fcclSlotHeader));
    EXPECT_EQ_INT(l.signalBOffset - l.signalAOffset, FCCL_DEVICE_MAX_BLOCKS * FCCL_DEVICE_MAX_RANKS * 8);
    EXPECT(l.llOffset >= l.signalBOffset + FCCL_DEVICE_MAX_BLOCKS * FCCL_DEVICE_MAX_RANKS * 8);
    EXPECT(4 * (uint64_t)n * l.llBytes <= FCCL_LL_AREA_BYTES);
    EXPECT(l.llBytes >= 64 << 10); /* the table's LL limits fit */
    EXPECT_EQ_INT(l.ll128Offset, l.llOffset + FCCL_LL_AREA_BYTES);
    EXPECT_EQ_INT(l.inboxOffset, l.ll128Offset + (n > 1 ? FCCL_LL128_AREA_BYTES : 0));
    EXPECT(2 * (uint64_t)(n > 1 ? n - 1 : 0) * l.ll128Lines * FCCL_LL128_LINE_BYTES <= FCCL_LL128_AREA_BYTES);
    EXPECT(l.ll128Offset % FCCL_SLOT_ALIGN == 0);
    const uint64_t peers = n > 1 ? (uint64_t)n - 1 : 1;
    EXPECT_EQ_INT(l.resultOffset, l.inboxOffset + 2 * peers * l.chunkBytes);
    EXPECT_EQ_INT(l.totalBytes, l.resultOffset + 2 * peers * l.chunkBytes);
    EXPECT(4 * peers * l.chunkBytes <= (32u << 20));
    EXPECT(4 * peers * l.chunkBytes > (32u << 20) - 4 * peers * FCCL_SLOT_ALIGN); /* no staging left unused */
    EXPECT(l.chunkBytes % FCCL_SLOT_ALIGN == 0 && l.llBytes % FCCL_SLOT_ALIGN == 0);
    EXPECT(l.llOffset % FCCL_SLOT_ALIGN == 0 && l.inboxOffset % FCCL_SLOT_ALIGN == 0);
    EXPECT_EQ_INT(fcclDeviceSlotBytes(n), l.totalBytes); /* FCCL_STAGING_BYTES at its default */
  }
  fcclSlotLayout two;
  fcclSlotLayoutCompute(2, 32u << 20, &two);
  EXPECT_EQ_INT(two.llBytes, 256 << 10);
  EXPECT_EQ_INT(two.chunkBytes, 8 << 20);
  EXPECT_EQ_INT(two.ll128Lines * FCCL_LL128_LINE_DATA, 1920 << 10); /* 1.875 MiB of data per peer */
  EXPECT(two.ll128Lines * FCCL_LL128_LINE_DATA >= 1 << 20);             /* the table's LL128 limit fits */
}

/* fcclPeerRegion numbers the other ranks' regions of both parities 0 .. 2 (n - 1) - 1 in every receiver's slot,
 * each (parity, writer) once: the staging regions and LL128 regions built on it never overlap. */
static void testPeerRegions(void) {
  for (int n = 2; n <= FCCL_DEVICE_MAX_RANKS; n++) {
    for (int receiver = 0; receiver < n; receiver++) {
      int seen[2 * FCCL_DEVICE_MAX_RANKS] = {0};
      for (uint64_t parity = 0; parity < 2; parity++) {
        for (int writer = 0; writer < n; writer++) {
          if (writer == receiver) continue;
          const uint64_t region = fcclPeerRegion(n, parity, writer, receiver);
          EXPECT_MSG(region < 2 * (uint64_t)(n - 1), "n %d parity %d writer %d receiver %d: region %llu", n,
                     (int)parity, writer, receiver, (unsigned long long)region);
          if (region < 2 * (uint64_t)(n - 1)) seen[region]++;
        }
      }
      for (int r = 0; r < 2 * (n - 1); r++) EXPECT_MSG(seen[r] == 1, "n %d receiver %d: region %d used %d times", n,
                                                      receiver, r, seen[r]);
    }
  }
  EXPECT_EQ_INT(fcclPeerRegion(1, 0, 0, 0), 0);
  EXPECT_EQ_INT(fcclPeerRegion(1, 1, 0, 0), 1);
}

/* Every writer's LL128 region of each parity in a receiver's slot: inside the area, line-aligned, and disjoint from
 * every other writer's and parity's (a write into a shared region would tear another writer's lines). */
static void testLL128Regions(void) {
  for (int n = 2; n <= FCCL_DEVICE_MAX_RANKS; n++) {
    fcclSlotLayout l;
    fcclSlotLayoutCompute(n, 32u << 20, &l);
    const uint64_t regionBytes = l.ll128Lines * FCCL_LL128_LINE_BYTES;
    EXPECT(regionBytes > 0);
    for (int receiver = 0; receiver < n; receiver++) {
      uint64_t starts[2 * FCCL_DEVICE_MAX_RANKS];
      int count = 0;
      for (uint64_t parity = 0; parity < 2; parity++) {
        for (int writer = 0; writer < n; writer++) {
          if (writer == receiver) continue;
          const uint64_t start = fcclLL128RegionOffset(&l, n, parity, writer, receiver);
          EXPECT(start >= l.ll128Offset && start + regionBytes <= l.ll128Offset + FCCL_LL128_AREA_BYTES);
          EXPECT(start % FCCL_LL128_LINE_BYTES == 0);
          for (int i = 0; i < count; i++)
            EXPECT_MSG(start + regionBytes <= starts[i] || starts[i] + regionBytes <= start,
                       "%d ranks, receiver %d: writer %d parity %d overlaps another region", n, receiver, writer,
                       (int)parity);
          starts[count++] = start;
        }
      }
      EXPECT_EQ_INT(count, 2 * (n - 1));
    }
  }
}

static void testEpochs(void) {
  EXPECT_EQ_INT(fcclEpochNext(0), 1);
  EXPECT_EQ_INT(fcclEpochNext(1), 2);
  EXPECT_EQ_INT(fcclEpochNext(0xffffffffull), 0x100000002ull);
  uint64_t e = (1ull << 32) - 8;
  for (int i = 0; i < 16; i++) {
    uint64_t next = fcclEpochNext(e);
    EXPECT(next > e);
    EXPECT_EQ_INT((uint32_t)next == 0, 0);  /* the LL flag of a cleared area is never expected */
    EXPECT_EQ_INT((next ^ e) & 1, 1);        /* consecutive calls alternate LL/staging parity */
    e = next;
  }
  /* Signal values of the largest epoch and step fit 64 bits without wrapping. */
  EXPECT(((1ull << (64 - FCCL_STEP_BITS)) - 1) > (1ull << 40));
}

static void testArguments(void) {
  struct fcclComm comm;
  memset(&comm, 0, sizeof(comm));
  comm.magic = FCCL_COMM_MAGIC;
  comm.rank = 0;
  comm.nranks = 2;
  comm.asyncError = fcclSuccess;
  pthread_mutex_init(&comm.errorLock, NULL);
  float* fake = (float*)(uintptr_t)0x10000; /* never dereferenced: every check fails before use */

  EXPECT_EQ_INT(fcclAllReduce(fake, fake, 4, fcclFloat32, fcclSum, NULL, NULL), fcclInvalidArgument);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "invalid communicator");
  EXPECT_EQ_INT(fcclAllReduce(fake, fake, 4, (fcclDataType_t)10, fcclSum, &comm, NULL), fcclInvalidArgument);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "datatype");
  EXPECT_STR_CONTAINS(fcclGetLastError(&comm), "datatype"); /* kept on the communicator too */
  EXPECT_EQ_INT(fcclAllReduce(fake, fake, 4, fcclFloat32, (fcclRedOp_t)5, &comm, NULL), fcclInvalidArgument);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "op");
  EXPECT_EQ_INT(fcclAllReduce(NULL, fake, 4, fcclFloat32, fcclSum, &comm, NULL), fcclInvalidArgument);
  EXPECT_EQ_INT(fcclAllReduce(fake, NULL, 4, fcclFloat32, fcclSum, &comm, NULL), fcclInvalidArgument);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "recvbuf is NULL");
  EXPECT_EQ_INT(fcclAllReduce((char*)fake + 1, fake, 4, fcclFloat16, fcclSum, &comm, NULL), fcclInvalidArgument);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "not aligned");
  EXPECT_EQ_INT(fcclAllReduce(fake, (char*)fake + 4, 4, fcclFloat64, fcclMax, &comm, NULL), fcclInvalidArgument);
  EXPECT_EQ_INT(fcclAllReduce(fake, fake, SIZE_MAX / 4, fcclInt64, fcclSum, &comm, NULL), fcclInvalidArgument);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "overflows");
  EXPECT_EQ_INT(fcclAllReduceAlgo(fake, fake, 4, fcclFloat32, fcclSum, &comm, NULL, FCCL_ALGO_COUNT),
                fcclInvalidArgument);
  /* Valid arguments, but the communicator has no device state. */
  EXPECT_EQ_INT(fcclAllReduce(fake, fake, 4, fcclFloat32, fcclSum, &comm, NULL), fcclInvalidUsage);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "no device state");
  EXPECT_EQ_INT(fcclBarrier(&comm, NULL), fcclInvalidUsage);
  EXPECT_EQ_INT(fcclBarrier(NULL, NULL), fcclInvalidArgument);
  comm.asyncError = fcclInProgress;
  EXPECT_EQ_INT(fcclBarrier(&comm, NULL), fcclInvalidUsage);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "non-blocking init");
  /* A freed handle. */
  comm.magic = 0;
  EXPECT_EQ_INT(fcclBarrier(&comm, NULL), fcclInvalidArgument);
  pthread_mutex_destroy(&comm.errorLock);

  EXPECT_EQ_INT(fcclDeviceSetEpochForTest(NULL, 5), fcclInvalidArgument);
  EXPECT_EQ_INT(fcclTypeSize(fcclInt8), 1);
  EXPECT_EQ_INT(fcclTypeSize(fcclBfloat16), 2);
  EXPECT_EQ_INT(fcclTypeSize(fcclUint32), 4);
  EXPECT_EQ_INT(fcclTypeSize(fcclFloat64), 8);
  EXPECT_EQ_INT(fcclTypeSize(fcclNumTypes), 0);
}

/* The init-time check that a GPU can run what was built, with faked capabilities. */
static void testArchRunnable(void) {
  char why[256] = "";
  const int runnable[] = {80, 86, 89, 90, 100, 103, 120};
  for (size_t i = 0; i < sizeof(runnable) / sizeof(runnable[0]); i++)
    EXPECT_MSG(fcclDeviceArchRunnable(runnable[i], "80 90", 90, why, sizeof(why)),
               "compute capability %d with SASS 80 90 and PTX 90", runnable[i]);
  EXPECT(!fcclDeviceArchRunnable(75, "80 90", 90, why, sizeof(why)));
  EXPECT_STR_CONTAINS(why, "7.5");
  EXPECT_STR_CONTAINS(why, "-Dgpu_archs='7.5'");
  /* SASS for 9.0 only, no PTX: an A100 or a B200 can run nothing; an H100, H200 or H20 can. */
  EXPECT(!fcclDeviceArchRunnable(80, "90", 0, why, sizeof(why)));
  EXPECT_STR_CONTAINS(why, "no PTX");
  EXPECT(!fcclDeviceArchRunnable(100, "90", 0, why, sizeof(why)));
  EXPECT(fcclDeviceArchRunnable(90, "90", 0, why, sizeof(why)));
  /* A minor above the device's is another chip's code. */
  EXPECT(!fcclDeviceArchRunnable(80, "86", 0, why, sizeof(why)));
  EXPECT(fcclDeviceArchRunnable(86, "80,86", 0, why, sizeof(why)));
  EXPECT(!fcclDeviceArchRunnable(90, "", 0, why, sizeof(why)));
}

int main(void) {
  testArchRunnable();
  testTable();
  testGrids();
  testForced();
  testNames();
  testLayout();
  testPeerRegions();
  testLL128Regions();
  testEpochs();
  testArguments();
  return testSummary("algo");
}
