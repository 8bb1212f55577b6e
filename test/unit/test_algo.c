/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The collectives' host logic that needs no GPU: algorithm selection and grids (the all-reduce's fcclAlgoSelect,
 * and fcclMoveSelect of all-gather, reduce-scatter and broadcast), FCCL_ALGO and FCCL_ALLGATHER_ALGO parsing, the
 * slot layout, epoch advance across the 32-bit wrap, the fused norm's form (FCCL_FUSED_ALGO and the automatic
 * choice), and the argument checks of every collective that come before any CUDA call (on a hand-made
 * communicator without device state).
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
  /* 2 ranks: LL up to 256 KiB, LL128 up to 1 MiB, plain one-shot up to 8 MiB (one staging chunk), two-shot beyond;
   * registered: two-shot after LL128. */
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
        for (int form = -1; form < fcclAllReduceAlgos.count; form++) {
          fcclAlgoQuery q = query(bytes, nranks, registered);
          q.forced = form < 0 ? -1 : fcclAllReduceAlgos.algos[form];
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
  q.forced = FCCL_ALGO_IDS; /* no algorithm at all */
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
  /* FCCL_ALGO takes every all-reduce algorithm by its name, and lists them all in its message. */
  for (int form = 0; form < fcclAllReduceAlgos.count; form++) {
    const int algo = fcclAllReduceAlgos.algos[form];
    EXPECT_EQ_INT(fcclAlgoParseRequest(fcclAlgoName(algo)), algo);
    EXPECT_STR_CONTAINS(fcclAllReduceAlgos.requestNames, fcclAlgoName(algo));
  }
  EXPECT_STR_CONTAINS(fcclAllReduceAlgos.requestNames, "auto, oneshot, twoshot, ll, oneshot_push");
  EXPECT(strcmp(fcclAlgoName(FCCL_KERNEL_BARRIER), "barrier") == 0);
  EXPECT(strcmp(fcclAlgoName(FCCL_KERNEL_FUSED_NORM), "fused_norm") == 0);
  EXPECT(strcmp(fcclAlgoName(77), "unknown") == 0);
  EXPECT(strcmp(fcclAlgoName(FCCL_ALGO_IDS), "unknown") == 0);
  EXPECT(strcmp(fcclAlgoName(-1), "unknown") == 0);
}

static void testLayout(void) {
  for (int n = 1; n <= FCCL_DEVICE_MAX_RANKS; n++) {
    fcclSlotLayout l;
    fcclSlotLayoutCompute(n, 32u << 20, &l);
    EXPECT(l.signalAOffset >= sizeof(fcclSlotHeader));
    EXPECT_EQ_INT(l.signalBOffset - l.signalAOffset, FCCL_DEVICE_MAX_BLOCKS * FCCL_DEVICE_MAX_RANKS * FCCL_PAD_BYTES);
    EXPECT(l.llOffset >= l.signalBOffset + FCCL_DEVICE_MAX_BLOCKS * FCCL_DEVICE_MAX_RANKS * FCCL_PAD_BYTES);
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
  EXPECT_EQ_INT(fcclAllReduceAlgo(fake, fake, 4, fcclFloat32, fcclSum, &comm, NULL, FCCL_ALGO_IDS),
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

/* ---- all-gather, reduce-scatter, broadcast: fcclMoveSelect --------------------------------------------------- */

/* The three collectives' sets (their forms are FCCL_MOVE_LL / _DIRECT / _STAGED, and _COPY for the all-gather and
 * the broadcast). */
static const fcclAlgoSet* const kMoveSets[] = {&fcclAllGatherAlgos, &fcclReduceScatterAlgos, &fcclBroadcastAlgos};
#define MOVE_COLLECTIVES 3

static int movePick(uint64_t bytes, int nranks, int registered, const fcclAlgoSet* set) {
  fcclAlgoQuery q = query(bytes, nranks, registered);
  fcclAlgoChoice c;
  if (fcclMoveSelect(&q, set, &c) != fcclSuccess) return -1;
  return fcclAlgoSetForm(set, c.algo);
}

/* The automatic choice: LL packets for a block up to the all-reduce's LL limit of the rank count (256 KiB for 1
 * and 2 ranks, 32 KiB for 3 and 4, 16 KiB for 5 to 8), beyond it direct on registered buffers and staged on plain
 * ones; the same table for the three collectives, whatever the form of the other buffers. */
static void testMoveTable(void) {
  const struct {
    int nranks;
    uint64_t llMax;
  } rows[] = {{1, 256 << 10}, {2, 256 << 10}, {3, 32 << 10}, {4, 32 << 10}, {5, 16 << 10}, {8, 16 << 10}};
  for (int m = 0; m < MOVE_COLLECTIVES; m++) {
    const fcclAlgoSet* set = kMoveSets[m];
    for (size_t r = 0; r < sizeof(rows) / sizeof(rows[0]); r++) {
      const int n = rows[r].nranks;
      const uint64_t llMax = rows[r].llMax;
      for (int registered = 0; registered < 2; registered++) {
        const int beyond = registered ? FCCL_MOVE_DIRECT : FCCL_MOVE_STAGED;
        EXPECT_MSG(movePick(1, n, registered, set) == FCCL_MOVE_LL, "%s, %d ranks: 1 byte", set->collective, n);
        EXPECT_MSG(movePick(llMax, n, registered, set) == FCCL_MOVE_LL, "%s, %d ranks: %llu bytes", set->collective, n,
                   (unsigned long long)llMax);
        EXPECT_MSG(movePick(llMax + 1, n, registered, set) == beyond, "%s, %d ranks, registered %d: %llu bytes",
                   set->collective, n, registered, (unsigned long long)llMax + 1);
        EXPECT_MSG(movePick(1ull << 30, n, registered, set) == beyond, "%s, %d ranks: 1 GiB", set->collective, n);
      }
    }
    /* The LL area bounds the table: a block that does not fit it goes by the other forms, even below llMax. */
    fcclAlgoQuery q = query(8 << 10, 2, 0);
    q.llBytes = 4 << 10;
    fcclAlgoChoice c;
    EXPECT_EQ_INT(fcclMoveSelect(&q, set, &c), fcclSuccess);
    EXPECT_EQ_INT(c.algo, set->algos[FCCL_MOVE_STAGED]);
    q.registered = 1;
    EXPECT_EQ_INT(fcclMoveSelect(&q, set, &c), fcclSuccess);
    EXPECT_EQ_INT(c.algo, set->algos[FCCL_MOVE_DIRECT]);
    /* In place or not, LL128 allowed or not, the copy engines' threshold: none of them changes the choice. */
    q = query(1 << 20, 2, 1);
    q.inPlace = 1;
    q.ll128Auto = 1;
    q.copyScatterMin = 1;
    EXPECT_EQ_INT(fcclMoveSelect(&q, set, &c), fcclSuccess);
    EXPECT_EQ_INT(c.algo, set->algos[FCCL_MOVE_DIRECT]);
    EXPECT_EQ_INT(c.scatter, FCCL_SCATTER_PULL);
  }
}

/* Every form of every collective at sizes from 1 byte to 4 GiB, on 1 to 8 ranks: a grid the kernels can run. Blocks
 * within the device and FCCL_DEVICE_MAX_BLOCKS; threads a multiple of 32 in [32, 512] and at least one per rank
 * (thread p signals peer p, and the broadcast's LL tokens go from thread p of block 0); LL within its packets per
 * pass; staged rounds of one staging chunk. */
static void testMoveGrids(void) {
  for (int m = 0; m < MOVE_COLLECTIVES; m++) {
    const fcclAlgoSet* set = kMoveSets[m];
    for (int nranks = 1; nranks <= FCCL_DEVICE_MAX_RANKS; nranks++) {
      for (uint64_t bytes = 1; bytes <= (1ull << 32); bytes = bytes * 3 + 1) {
        for (int registered = 0; registered < 2; registered++) {
          for (int forced = -1; forced < set->count; forced++) {
            fcclAlgoQuery q = query(bytes, nranks, registered);
            q.forced = forced < 0 ? -1 : set->algos[forced];
            q.strict = 0;
            fcclAlgoChoice c;
            memset(&c, 0xff, sizeof(c));
            EXPECT_EQ_INT(fcclMoveSelect(&q, set, &c), fcclSuccess);
            const int form = fcclAlgoSetForm(set, c.algo);
            EXPECT(form >= FCCL_MOVE_LL && form < set->count);
            EXPECT(c.blocks >= 1 && c.blocks <= FCCL_DEVICE_MAX_BLOCKS && c.blocks <= q.smCount);
            EXPECT(c.threads >= 32 && c.threads <= FCCL_DEVICE_THREADS && c.threads % 32 == 0);
            EXPECT(c.threads >= nranks);
            EXPECT_EQ_INT(c.scatter, FCCL_SCATTER_PULL);
            const uint64_t units = (bytes + FCCL_UNIT_BYTES - 1) / FCCL_UNIT_BYTES;
            switch (form) {
              case FCCL_MOVE_LL: {
                const uint64_t packets = (bytes + FCCL_LL_DATA_BYTES - 1) / FCCL_LL_DATA_BYTES;
                EXPECT(bytes <= q.llBytes);
                EXPECT(c.threads <= FCCL_LL_THREADS);
                EXPECT((uint64_t)c.blocks * FCCL_LL_THREADS <= 32768 || (uint64_t)c.blocks == 1);
                EXPECT((uint64_t)(c.blocks - 1) * (uint64_t)c.threads < packets); /* no block without a packet */
                EXPECT_EQ_INT(c.roundUnits, 0);
                break;
              }
              case FCCL_MOVE_DIRECT:
                EXPECT(registered);
                EXPECT((uint64_t)(c.blocks - 1) * FCCL_DEVICE_THREADS < units);
                EXPECT_EQ_INT(c.roundUnits, 0);
                break;
              case FCCL_MOVE_COPY: /* only when forced here (copyMoveMin 0); the two barriers' grid */
                EXPECT(registered);
                EXPECT_EQ_INT(forced, FCCL_MOVE_COPY);
                EXPECT_EQ_INT(c.blocks, 1);
                EXPECT_EQ_INT(c.threads, FCCL_DEVICE_BARRIER_THREADS);
                EXPECT_EQ_INT(c.roundUnits, 0);
                break;
              default:
                EXPECT_EQ_INT(c.roundUnits, q.chunkBytes / FCCL_UNIT_BYTES);
                EXPECT((uint64_t)(c.blocks - 1) * FCCL_DEVICE_THREADS < (units < c.roundUnits ? units : c.roundUnits));
                EXPECT((units + c.roundUnits - 1) / c.roundUnits + 2 <= FCCL_MAX_STEPS);
                break;
            }
            /* A form that can run is the one forced; the choice is a pure function of the query. */
            const int registeredForm = forced == FCCL_MOVE_DIRECT || forced == FCCL_MOVE_COPY;
            if (forced == FCCL_MOVE_STAGED || (registeredForm && registered) ||
                (forced == FCCL_MOVE_LL && bytes <= q.llBytes))
              EXPECT_EQ_INT(form, forced);
            fcclAlgoChoice again;
            EXPECT_EQ_INT(fcclMoveSelect(&q, set, &again), fcclSuccess);
            EXPECT(again.algo == c.algo && again.blocks == c.blocks && again.threads == c.threads &&
                   again.roundUnits == c.roundUnits);
          }
        }
      }
    }
  }
  /* Large blocks fill the device, one block of 512 threads per SM: direct and staged alike. */
  fcclAlgoQuery q = query(256u << 20, 2, 1);
  fcclAlgoChoice c;
  EXPECT_EQ_INT(fcclMoveSelect(&q, &fcclAllGatherAlgos, &c), fcclSuccess);
  EXPECT_EQ_INT(c.algo, FCCL_KERNEL_ALLGATHER_DIRECT);
  EXPECT_EQ_INT(c.blocks, 132);
  EXPECT_EQ_INT(c.threads, 512);
  q = query(256u << 20, 2, 0);
  EXPECT_EQ_INT(fcclMoveSelect(&q, &fcclReduceScatterAlgos, &c), fcclSuccess);
  EXPECT_EQ_INT(c.algo, FCCL_KERNEL_REDUCESCATTER_STAGED);
  EXPECT_EQ_INT(c.blocks, 132);
  EXPECT_EQ_INT(c.roundUnits, (8u << 20) / 16); /* one 8 MiB chunk per round (32 MiB of staging, 2 ranks) */
  /* A small staging chunk: rounds of it, and no more blocks than a round has units for. */
  q.chunkBytes = 4096;
  EXPECT_EQ_INT(fcclMoveSelect(&q, &fcclBroadcastAlgos, &c), fcclSuccess);
  EXPECT_EQ_INT(c.algo, FCCL_KERNEL_BROADCAST_STAGED);
  EXPECT_EQ_INT(c.roundUnits, 256);
  EXPECT_EQ_INT(c.blocks, 1);
  /* Tiny blocks: one warp of one block. */
  q = query(40, 2, 0);
  EXPECT_EQ_INT(fcclMoveSelect(&q, &fcclBroadcastAlgos, &c), fcclSuccess);
  EXPECT_EQ_INT(c.algo, FCCL_KERNEL_BROADCAST_LL);
  EXPECT_EQ_INT(c.blocks, 1);
  EXPECT_EQ_INT(c.threads, 32);
  /* The whole LL area of 2 ranks (32768 packets): 128 blocks of 256 threads, one packet each. */
  q = query(256 << 10, 2, 0);
  EXPECT_EQ_INT(fcclMoveSelect(&q, &fcclAllGatherAlgos, &c), fcclSuccess);
  EXPECT_EQ_INT(c.algo, FCCL_KERNEL_ALLGATHER_LL);
  EXPECT_EQ_INT(c.blocks, 128);
  EXPECT_EQ_INT(c.threads, FCCL_LL_THREADS);
}

/* Forced forms (the internal entry points force strictly; FCCL_ALLGATHER_ALGO and its kin do not): a form that
 * cannot run the call is fcclInvalidArgument with the reason when strict, the table's choice otherwise; a kernel of
 * another collective is refused either way. */
static void testMoveForced(void) {
  for (int m = 0; m < MOVE_COLLECTIVES; m++) {
    const fcclAlgoSet* set = kMoveSets[m];
    fcclAlgoChoice c;
    /* LL beyond the LL area (256 KiB for 2 ranks). */
    fcclAlgoQuery q = query((256 << 10) + 8, 2, 0);
    q.forced = set->algos[FCCL_MOVE_LL];
    q.strict = 1;
    EXPECT_EQ_INT(fcclMoveSelect(&q, set, &c), fcclInvalidArgument);
    EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "LL area");
    EXPECT_STR_CONTAINS(fcclGetLastError(NULL), fcclAlgoName(set->algos[FCCL_MOVE_LL]));
    q.strict = 0;
    EXPECT_EQ_INT(fcclMoveSelect(&q, set, &c), fcclSuccess);
    EXPECT_EQ_INT(c.algo, set->algos[FCCL_MOVE_STAGED]);
    /* ...but forced, LL runs a block above the table's limit that still fits the area (3 ranks: 32 KiB limit,
     * 168 KiB area). */
    q = query(100 << 10, 3, 0);
    q.forced = set->algos[FCCL_MOVE_LL];
    q.strict = 1;
    EXPECT_EQ_INT(fcclMoveSelect(&q, set, &c), fcclSuccess);
    EXPECT_EQ_INT(c.algo, set->algos[FCCL_MOVE_LL]);
    /* Direct on plain buffers. */
    q = query(4 << 20, 2, 0);
    q.forced = set->algos[FCCL_MOVE_DIRECT];
    q.strict = 1;
    EXPECT_EQ_INT(fcclMoveSelect(&q, set, &c), fcclInvalidArgument);
    EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "not registered");
    q.strict = 0;
    EXPECT_EQ_INT(fcclMoveSelect(&q, set, &c), fcclSuccess);
    EXPECT_EQ_INT(c.algo, set->algos[FCCL_MOVE_STAGED]);
    q = query(1000, 2, 0); /* falls back to the table: LL at this size */
    q.forced = set->algos[FCCL_MOVE_DIRECT];
    EXPECT_EQ_INT(fcclMoveSelect(&q, set, &c), fcclSuccess);
    EXPECT_EQ_INT(c.algo, set->algos[FCCL_MOVE_LL]);
    /* Direct, staged and copy at LL sizes, LL and staged on registered buffers: forced, they run. */
    q = query(1000, 2, 1);
    q.strict = 1;
    for (int form = FCCL_MOVE_LL; form < set->count; form++) {
      q.forced = set->algos[form];
      EXPECT_EQ_INT(fcclMoveSelect(&q, set, &c), fcclSuccess);
      EXPECT_EQ_INT(c.algo, set->algos[form]);
    }
    /* Staged without staging, and with more rounds than a signal counts (+2 for the broadcast's ready step). */
    q = query(4 << 20, 2, 0);
    q.chunkBytes = 0;
    q.forced = set->algos[FCCL_MOVE_STAGED];
    q.strict = 1;
    EXPECT_EQ_INT(fcclMoveSelect(&q, set, &c), fcclInvalidArgument);
    EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "no staging");
    q.forced = -1; /* the table has nothing else for plain buffers: refused, not launched */
    EXPECT_EQ_INT(fcclMoveSelect(&q, set, &c), fcclInvalidArgument);
    q = query(1, 2, 0);
    q.chunkBytes = 4096; /* 256 units per round */
    const uint64_t maxRounds = FCCL_MAX_STEPS - 2;
    q.bytes = maxRounds * 4096;
    EXPECT_EQ_INT(fcclMoveSelect(&q, set, &c), fcclSuccess);
    EXPECT_EQ_INT(c.algo, set->algos[FCCL_MOVE_STAGED]);
    q.bytes += 1;
    EXPECT_EQ_INT(fcclMoveSelect(&q, set, &c), fcclInvalidArgument);
    EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "too many staging rounds");
    q.registered = 1; /* direct has no rounds */
    EXPECT_EQ_INT(fcclMoveSelect(&q, set, &c), fcclSuccess);
    EXPECT_EQ_INT(c.algo, set->algos[FCCL_MOVE_DIRECT]);
    /* Every algorithm and kernel that is not this collective's, and ids that are none: refused, strict or not. */
    for (int foreign = 0; foreign <= FCCL_ALGO_IDS + 1; foreign++) {
      if (fcclAlgoSetForm(set, foreign) >= 0) continue;
      q = query(1000, 2, 1);
      q.forced = foreign;
      for (int strict = 0; strict < 2; strict++) {
        q.strict = strict;
        EXPECT_MSG(fcclMoveSelect(&q, set, &c) == fcclInvalidArgument, "%s forced on %s", fcclAlgoName(foreign),
                   set->collective);
        EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "not one of this collective's");
      }
    }
    /* Not a query. */
    q = query(0, 2, 0);
    EXPECT_EQ_INT(fcclMoveSelect(&q, set, &c), fcclInternalError);
    q = query(8, 0, 0);
    EXPECT_EQ_INT(fcclMoveSelect(&q, set, &c), fcclInternalError);
    q = query(8, FCCL_DEVICE_MAX_RANKS + 1, 0);
    EXPECT_EQ_INT(fcclMoveSelect(&q, set, &c), fcclInternalError);
    EXPECT_EQ_INT(fcclMoveSelect(NULL, set, &c), fcclInternalError);
    q = query(8, 2, 0);
    EXPECT_EQ_INT(fcclMoveSelect(&q, set, NULL), fcclInternalError);
  }
  /* The all-reduce does not take the other collectives' kernels. */
  fcclAlgoQuery q = query(1000, 2, 1);
  fcclAlgoChoice c;
  q.forced = FCCL_KERNEL_ALLGATHER_LL;
  EXPECT_EQ_INT(fcclAlgoSelect(&q, &c), fcclInvalidArgument);
}

/* Graph registration of captured plain buffers: where registered buffers would run the direct form. */
static void testMoveRegisteredPays(void) {
  for (int m = 0; m < MOVE_COLLECTIVES; m++) {
    const fcclAlgoSet* set = kMoveSets[m];
    fcclAlgoQuery q = query(256 << 10, 2, 1); /* LL either way */
    EXPECT_EQ_INT(fcclMoveRegisteredPays(&q, set), 0);
    q.bytes = (256 << 10) + 2;
    EXPECT_EQ_INT(fcclMoveRegisteredPays(&q, set), 1);
    q = query(20 << 10, 8, 1); /* beyond 8 ranks' 16 KiB LL limit */
    EXPECT_EQ_INT(fcclMoveRegisteredPays(&q, set), 1);
    /* FCCL_*_ALGO forcing a form (non-strict): registered buffers pay only when it is direct. */
    q = query(4 << 20, 2, 1);
    q.forced = set->algos[FCCL_MOVE_STAGED];
    EXPECT_EQ_INT(fcclMoveRegisteredPays(&q, set), 0);
    q.forced = set->algos[FCCL_MOVE_DIRECT];
    EXPECT_EQ_INT(fcclMoveRegisteredPays(&q, set), 1);
    q.forced = set->algos[FCCL_MOVE_LL]; /* does not fit the LL area: the table, direct */
    EXPECT_EQ_INT(fcclMoveRegisteredPays(&q, set), 1);
    q = query(1000, 2, 1);
    q.forced = set->algos[FCCL_MOVE_DIRECT]; /* direct at an LL size */
    EXPECT_EQ_INT(fcclMoveRegisteredPays(&q, set), 1);
    q = query(0, 2, 1); /* a query that selection refuses never pays */
    EXPECT_EQ_INT(fcclMoveRegisteredPays(&q, set), 0);
  }
}

/* The copy form of the all-gather and the broadcast: the automatic choice takes it on registered buffers from
 * copyMoveMin (FCCL_COPY_MOVE_MIN; 0, the default, never), beyond the LL sizes; forced, it runs any size on
 * registered buffers and is refused (strict) or replaced by the table (FCCL_*_ALGO) on plain ones; the
 * reduce-scatter has none. */
static void testMoveCopy(void) {
  const fcclAlgoSet* const copying[] = {&fcclAllGatherAlgos, &fcclBroadcastAlgos};
  for (size_t m = 0; m < sizeof(copying) / sizeof(copying[0]); m++) {
    const fcclAlgoSet* set = copying[m];
    fcclAlgoChoice c;
    for (int n = 1; n <= FCCL_DEVICE_MAX_RANKS; n++) {
      fcclAlgoQuery q = query(1ull << 30, n, 1); /* copyMoveMin 0: never by the table */
      EXPECT_EQ_INT(fcclMoveSelect(&q, set, &c), fcclSuccess);
      EXPECT_EQ_INT(c.algo, set->algos[FCCL_MOVE_DIRECT]);
      q.copyMoveMin = 1u << 20;
      q.bytes = (1u << 20) - 1;
      EXPECT_EQ_INT(fcclMoveSelect(&q, set, &c), fcclSuccess);
      EXPECT_EQ_INT(c.algo, set->algos[FCCL_MOVE_DIRECT]);
      q.bytes = 1u << 20;
      EXPECT_EQ_INT(fcclMoveSelect(&q, set, &c), fcclSuccess);
      EXPECT_MSG(c.algo == set->algos[FCCL_MOVE_COPY], "%s, %d ranks: 1 MiB from 1 MiB", set->collective, n);
      EXPECT_EQ_INT(c.blocks, 1);
      EXPECT_EQ_INT(c.threads, FCCL_DEVICE_BARRIER_THREADS);
      EXPECT_EQ_INT(fcclMoveRegisteredPays(&q, set), 1);
      q.bytes = 1ull << 32;
      EXPECT_EQ_INT(fcclMoveSelect(&q, set, &c), fcclSuccess);
      EXPECT_EQ_INT(c.algo, set->algos[FCCL_MOVE_COPY]);
      q.registered = 0; /* plain: staged, whatever the threshold */
      EXPECT_EQ_INT(fcclMoveSelect(&q, set, &c), fcclSuccess);
      EXPECT_EQ_INT(c.algo, set->algos[FCCL_MOVE_STAGED]);
      /* The LL sizes stay LL, even with the smallest threshold. */
      q = query(1000, n, 1);
      q.copyMoveMin = 1;
      EXPECT_EQ_INT(fcclMoveSelect(&q, set, &c), fcclSuccess);
      EXPECT_EQ_INT(c.algo, set->algos[FCCL_MOVE_LL]);
      EXPECT_EQ_INT(fcclMoveRegisteredPays(&q, set), 0);
    }
    /* Forced: any size on registered buffers, in place or not. */
    fcclAlgoQuery q = query(1, 2, 1);
    q.forced = set->algos[FCCL_MOVE_COPY];
    q.strict = 1;
    for (int inPlace = 0; inPlace < 2; inPlace++) {
      q.inPlace = inPlace;
      EXPECT_EQ_INT(fcclMoveSelect(&q, set, &c), fcclSuccess);
      EXPECT_EQ_INT(c.algo, set->algos[FCCL_MOVE_COPY]);
    }
    /* Plain buffers: refused with the reason when strict, the table's choice otherwise. */
    q = query(4 << 20, 2, 0);
    q.forced = set->algos[FCCL_MOVE_COPY];
    q.strict = 1;
    EXPECT_EQ_INT(fcclMoveSelect(&q, set, &c), fcclInvalidArgument);
    EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "not registered");
    EXPECT_STR_CONTAINS(fcclGetLastError(NULL), fcclAlgoName(set->algos[FCCL_MOVE_COPY]));
    q.strict = 0;
    EXPECT_EQ_INT(fcclMoveSelect(&q, set, &c), fcclSuccess);
    EXPECT_EQ_INT(c.algo, set->algos[FCCL_MOVE_STAGED]);
    q.bytes = 1000;
    EXPECT_EQ_INT(fcclMoveSelect(&q, set, &c), fcclSuccess);
    EXPECT_EQ_INT(c.algo, set->algos[FCCL_MOVE_LL]);
    /* FCCL_*_ALGO=copy at an LL size: registered buffers run another form, so a captured call registers them. */
    q = query(1000, 2, 1);
    q.forced = set->algos[FCCL_MOVE_COPY];
    EXPECT_EQ_INT(fcclMoveRegisteredPays(&q, set), 1);
  }
  /* The reduce-scatter: no copy form, whatever the threshold; the all-gather's is not its own. */
  EXPECT_EQ_INT(fcclReduceScatterAlgos.count, FCCL_MOVE_COPY);
  fcclAlgoQuery q = query(1ull << 30, 2, 1);
  q.copyMoveMin = 1;
  fcclAlgoChoice c;
  EXPECT_EQ_INT(fcclMoveSelect(&q, &fcclReduceScatterAlgos, &c), fcclSuccess);
  EXPECT_EQ_INT(c.algo, FCCL_KERNEL_REDUCESCATTER_DIRECT);
  q.forced = FCCL_FORM_ALLGATHER_COPY;
  EXPECT_EQ_INT(fcclMoveSelect(&q, &fcclReduceScatterAlgos, &c), fcclInvalidArgument);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "not one of this collective's");
}

static void testMoveNames(void) {
  for (int m = 0; m < MOVE_COLLECTIVES; m++) {
    const fcclAlgoSet* set = kMoveSets[m];
    EXPECT_EQ_INT(fcclMoveParseRequest(NULL, set), FCCL_MOVE_REQUEST_AUTO);
    EXPECT_EQ_INT(fcclMoveParseRequest("", set), FCCL_MOVE_REQUEST_AUTO);
    EXPECT_EQ_INT(fcclMoveParseRequest("auto", set), FCCL_MOVE_REQUEST_AUTO);
    EXPECT_EQ_INT(fcclMoveParseRequest("ll", set), FCCL_MOVE_LL);
    EXPECT_EQ_INT(fcclMoveParseRequest("direct", set), FCCL_MOVE_DIRECT);
    EXPECT_EQ_INT(fcclMoveParseRequest("staged", set), FCCL_MOVE_STAGED);
    /* Exact names only: the all-reduce's names, the kernels' log names, case and spaces are not forms. */
    const char* const refused[] = {"LL", "Direct", "staged ", " ll", "ll128", "oneshot", "twoshot", "oneshot_push",
                                   "allgather_ll", "broadcast_direct", "allgather_copy", "Copy", "copy ", "reg",
                                   "none", "0", "1"};
    for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++)
      EXPECT_MSG(fcclMoveParseRequest(refused[i], set) == -1, "\"%s\" parsed as a form", refused[i]);
  }
  /* copy: the all-gather's and the broadcast's, not the reduce-scatter's (a copy cannot reduce). */
  EXPECT_EQ_INT(fcclMoveParseRequest("copy", &fcclAllGatherAlgos), FCCL_MOVE_COPY);
  EXPECT_EQ_INT(fcclMoveParseRequest("copy", &fcclBroadcastAlgos), FCCL_MOVE_COPY);
  EXPECT_EQ_INT(fcclMoveParseRequest("copy", &fcclReduceScatterAlgos), -1);
  for (int m = 0; m < MOVE_COLLECTIVES; m++) {
    const fcclAlgoSet* set = kMoveSets[m];
    EXPECT_EQ_INT(fcclMoveResolveRequest(FCCL_MOVE_REQUEST_AUTO, set), -1);
    EXPECT_EQ_INT(fcclMoveResolveRequest(-1, set), -1);
    EXPECT_EQ_INT(fcclMoveResolveRequest(set->count, set), -1);
    for (int form = FCCL_MOVE_LL; form < set->count; form++)
      EXPECT_EQ_INT(fcclMoveResolveRequest(form, set), set->algos[form]);
  }
  EXPECT_EQ_INT(fcclMoveResolveRequest(FCCL_MOVE_COPY, &fcclReduceScatterAlgos), -1);
}

/* fcclAllReduceAddRMSNorm's form: two-shot exactly where fcclAllReduce's own table runs a two-shot algorithm on the
 * same query (whatever FCCL_ALGO forces), one-shot below it and for one rank; FCCL_FUSED_ALGO's exact names. */
static void testFusedForm(void) {
  for (int nranks = 1; nranks <= FCCL_DEVICE_MAX_RANKS; nranks++)
    for (int registered = 0; registered < 2; registered++)
      for (uint64_t bytes = 16; bytes <= (1ull << 30); bytes *= 2)
        for (int delta = bytes > 16 ? -16 : 0; delta <= 16; delta += 16) {
          fcclAlgoQuery q = query(bytes + (uint64_t)(int64_t)delta, nranks, registered && nranks > 1);
          const int algo = pick(q.bytes, nranks, q.registered);
          const int twoshot = nranks > 1 && (algo == FCCL_ALGO_TWOSHOT_STAGED || algo == FCCL_ALGO_TWOSHOT_REG);
          EXPECT_MSG(fcclFusedAutoForm(&q) == (twoshot ? FCCL_FUSED_TWOSHOT : FCCL_FUSED_ONESHOT),
                     "%d ranks, %llu bytes, registered %d: form %s, the all-reduce runs %s", nranks,
                     (unsigned long long)q.bytes, q.registered, fcclFusedFormName(fcclFusedAutoForm(&q)),
                     fcclAlgoName(algo));
          q.forced = FCCL_ALGO_LL; /* FCCL_ALGO does not move the fused form's threshold */
          EXPECT_EQ_INT(fcclFusedAutoForm(&q), twoshot ? FCCL_FUSED_TWOSHOT : FCCL_FUSED_ONESHOT);
        }
  /* The thresholds as docs/fused.md states them: 2 ranks plain from 8 MiB + 1 byte, registered past LL128's 1 MiB;
   * 8 ranks past 128 KiB either way. */
  fcclAlgoQuery q = query(8u << 20, 2, 0);
  EXPECT_EQ_INT(fcclFusedAutoForm(&q), FCCL_FUSED_ONESHOT);
  q = query((8u << 20) + 16, 2, 0);
  EXPECT_EQ_INT(fcclFusedAutoForm(&q), FCCL_FUSED_TWOSHOT);
  q = query(1u << 20, 2, 1);
  EXPECT_EQ_INT(fcclFusedAutoForm(&q), FCCL_FUSED_ONESHOT);
  q = query((1u << 20) + 16, 2, 1);
  EXPECT_EQ_INT(fcclFusedAutoForm(&q), FCCL_FUSED_TWOSHOT);
  q = query(128u << 10, 8, 0);
  EXPECT_EQ_INT(fcclFusedAutoForm(&q), FCCL_FUSED_ONESHOT);
  q = query((128u << 10) + 16, 8, 1);
  EXPECT_EQ_INT(fcclFusedAutoForm(&q), FCCL_FUSED_TWOSHOT);
  q = query(1ull << 30, 1, 0);
  EXPECT_EQ_INT(fcclFusedAutoForm(&q), FCCL_FUSED_ONESHOT);
  EXPECT_EQ_INT(fcclFusedAutoForm(NULL), FCCL_FUSED_ONESHOT);

  EXPECT_EQ_INT(fcclFusedParseRequest(NULL), FCCL_FUSED_REQUEST_AUTO);
  EXPECT_EQ_INT(fcclFusedParseRequest(""), FCCL_FUSED_REQUEST_AUTO);
  EXPECT_EQ_INT(fcclFusedParseRequest("auto"), FCCL_FUSED_REQUEST_AUTO);
  EXPECT_EQ_INT(fcclFusedParseRequest("oneshot"), FCCL_FUSED_ONESHOT);
  EXPECT_EQ_INT(fcclFusedParseRequest("twoshot"), FCCL_FUSED_TWOSHOT);
  const char* const refused[] = {"OneShot", "twoshot ", "two-shot", "twoshot_reg", "oneshot_push", "staged",
                                 "ll", "0", "1", "none"};
  for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++)
    EXPECT_MSG(fcclFusedParseRequest(refused[i]) == -1, "\"%s\" parsed as a fused form", refused[i]);
  EXPECT(strcmp(fcclFusedFormName(FCCL_FUSED_ONESHOT), "oneshot") == 0);
  EXPECT(strcmp(fcclFusedFormName(FCCL_FUSED_TWOSHOT), "twoshot") == 0);
  EXPECT(strcmp(fcclFusedFormName(7), "unknown") == 0);
}

/* The new calls' argument checks, before any CUDA call (a communicator of 2 ranks without device state: whatever
 * passes the checks stops at "no device state", fcclInvalidUsage). */
static void testMoveArguments(void) {
  struct fcclComm comm;
  memset(&comm, 0, sizeof(comm));
  comm.magic = FCCL_COMM_MAGIC;
  comm.rank = 0;
  comm.nranks = 2;
  comm.asyncError = fcclSuccess;
  pthread_mutex_init(&comm.errorLock, NULL);
  float* fake = (float*)(uintptr_t)0x10000; /* never dereferenced */
  float* fake2 = (float*)(uintptr_t)0x20000;

  /* Invalid handles. */
  EXPECT_EQ_INT(fcclAllGather(fake, fake2, 4, fcclFloat32, NULL, NULL), fcclInvalidArgument);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "fcclAllGather: invalid communicator");
  EXPECT_EQ_INT(fcclReduceScatter(fake, fake2, 4, fcclFloat32, fcclSum, NULL, NULL), fcclInvalidArgument);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "fcclReduceScatter: invalid communicator");
  EXPECT_EQ_INT(fcclBroadcast(fake, fake2, 4, fcclFloat32, 0, NULL, NULL), fcclInvalidArgument);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "fcclBroadcast: invalid communicator");
  /* Types and ops. */
  EXPECT_EQ_INT(fcclAllGather(fake, fake2, 4, (fcclDataType_t)fcclNumTypes, &comm, NULL), fcclInvalidArgument);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "datatype");
  EXPECT_EQ_INT(fcclAllGather(fake, fake2, 4, (fcclDataType_t)-1, &comm, NULL), fcclInvalidArgument);
  EXPECT_EQ_INT(fcclReduceScatter(fake, fake2, 4, (fcclDataType_t)42, fcclSum, &comm, NULL), fcclInvalidArgument);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "datatype");
  EXPECT_EQ_INT(fcclReduceScatter(fake, fake2, 4, fcclFloat32, (fcclRedOp_t)fcclNumOps, &comm, NULL),
                fcclInvalidArgument);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "op");
  EXPECT_EQ_INT(fcclReduceScatter(fake, fake2, 4, fcclFloat32, (fcclRedOp_t)-1, &comm, NULL), fcclInvalidArgument);
  EXPECT_EQ_INT(fcclBroadcast(fake, fake2, 4, (fcclDataType_t)11, 0, &comm, NULL), fcclInvalidArgument);
  /* Roots. */
  EXPECT_EQ_INT(fcclBroadcast(fake, fake2, 4, fcclFloat32, 2, &comm, NULL), fcclInvalidArgument);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "root 2 outside 0..1");
  EXPECT_EQ_INT(fcclBroadcast(fake, fake2, 4, fcclFloat32, -1, &comm, NULL), fcclInvalidArgument);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "root");
  /* NULL buffers with a count. */
  EXPECT_EQ_INT(fcclAllGather(NULL, fake2, 4, fcclFloat32, &comm, NULL), fcclInvalidArgument);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "sendbuf is NULL");
  EXPECT_EQ_INT(fcclAllGather(fake, NULL, 4, fcclFloat32, &comm, NULL), fcclInvalidArgument);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "recvbuf is NULL");
  EXPECT_EQ_INT(fcclReduceScatter(NULL, fake2, 4, fcclInt8, fcclMax, &comm, NULL), fcclInvalidArgument);
  EXPECT_EQ_INT(fcclReduceScatter(fake, NULL, 4, fcclInt8, fcclMax, &comm, NULL), fcclInvalidArgument);
  EXPECT_EQ_INT(fcclBroadcast(fake, NULL, 4, fcclFloat32, 1, &comm, NULL), fcclInvalidArgument);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "is NULL");
  /* Root's sendbuf is read: NULL there is an error; elsewhere sendbuf is not read, NULL passes the checks. */
  EXPECT_EQ_INT(fcclBroadcast(NULL, fake2, 4, fcclFloat32, 0, &comm, NULL), fcclInvalidArgument);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "sendbuf is NULL");
  EXPECT_EQ_INT(fcclBroadcast(NULL, fake2, 4, fcclFloat32, 1, &comm, NULL), fcclInvalidUsage);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "no device state");
  EXPECT_EQ_INT(fcclBroadcast((char*)fake + 1, fake2, 4, fcclFloat32, 1, &comm, NULL), fcclInvalidUsage);
  /* Misaligned elements. */
  EXPECT_EQ_INT(fcclAllGather((char*)fake + 2, fake2, 4, fcclFloat32, &comm, NULL), fcclInvalidArgument);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "sendbuf");
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "not aligned");
  EXPECT_EQ_INT(fcclAllGather(fake, (char*)fake2 + 4, 4, fcclFloat64, &comm, NULL), fcclInvalidArgument);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "recvbuf");
  EXPECT_EQ_INT(fcclReduceScatter((char*)fake + 1, fake2, 4, fcclBfloat16, fcclSum, &comm, NULL),
                fcclInvalidArgument);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "not aligned");
  EXPECT_EQ_INT(fcclBroadcast(fake, (char*)fake2 + 2, 4, fcclInt32, 0, &comm, NULL), fcclInvalidArgument);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "not aligned");
  /* Byte elements are never misaligned: these pass the checks. */
  EXPECT_EQ_INT(fcclAllGather((char*)fake + 1, (char*)fake2 + 3, 4, fcclUint8, &comm, NULL), fcclInvalidUsage);
  /* Counts whose buffers overflow a size: the larger buffer (nranks x count) counts. */
  EXPECT_EQ_INT(fcclAllGather(fake, fake2, SIZE_MAX / 4 / 2 + 1, fcclFloat32, &comm, NULL), fcclInvalidArgument);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "overflows");
  EXPECT_EQ_INT(fcclReduceScatter(fake, fake2, SIZE_MAX / 8 / 2 + 1, fcclFloat64, fcclSum, &comm, NULL),
                fcclInvalidArgument);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "overflows");
  EXPECT_EQ_INT(fcclBroadcast(fake, fake2, SIZE_MAX / 2, fcclInt32, 0, &comm, NULL), fcclInvalidArgument);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "overflows");
  /* The largest count that fits passes the checks. */
  EXPECT_EQ_INT(fcclAllGather(fake, fake2, SIZE_MAX / 4 / 2, fcclFloat32, &comm, NULL), fcclInvalidUsage);
  /* Forced kernels of another collective (the internal entry points). */
  EXPECT_EQ_INT(fcclAllGatherAlgo(fake, fake2, 4, fcclFloat32, &comm, NULL, FCCL_KERNEL_REDUCESCATTER_LL),
                fcclInvalidArgument);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "unknown algorithm");
  EXPECT_EQ_INT(fcclAllGatherAlgo(fake, fake2, 4, fcclFloat32, &comm, NULL, FCCL_ALGO_LL), fcclInvalidArgument);
  EXPECT_EQ_INT(fcclReduceScatterAlgo(fake, fake2, 4, fcclFloat32, fcclSum, &comm, NULL, FCCL_KERNEL_BROADCAST_LL),
                fcclInvalidArgument);
  EXPECT_EQ_INT(fcclReduceScatterAlgo(fake, fake2, 4, fcclFloat32, fcclSum, &comm, NULL, FCCL_ALGO_TWOSHOT_REG),
                fcclInvalidArgument);
  EXPECT_EQ_INT(fcclBroadcastAlgo(fake, fake2, 4, fcclFloat32, 0, &comm, NULL, FCCL_KERNEL_ALLGATHER_STAGED),
                fcclInvalidArgument);
  EXPECT_EQ_INT(fcclBroadcastAlgo(fake, fake2, 4, fcclFloat32, 0, &comm, NULL, FCCL_KERNEL_BARRIER),
                fcclInvalidArgument);
  EXPECT_EQ_INT(fcclAllReduceAlgo(fake, fake2, 4, fcclFloat32, fcclSum, &comm, NULL, FCCL_KERNEL_ALLGATHER_LL),
                fcclInvalidArgument);
  /* Their own kernels pass the checks. */
  EXPECT_EQ_INT(fcclAllGatherAlgo(fake, fake2, 4, fcclFloat32, &comm, NULL, FCCL_KERNEL_ALLGATHER_STAGED),
                fcclInvalidUsage);
  EXPECT_EQ_INT(fcclReduceScatterAlgo(fake, fake2, 4, fcclFloat32, fcclAvg, &comm, NULL,
                                      FCCL_KERNEL_REDUCESCATTER_DIRECT),
                fcclInvalidUsage);
  EXPECT_EQ_INT(fcclBroadcastAlgo(fake, fake2, 4, fcclFloat32, 1, &comm, NULL, FCCL_KERNEL_BROADCAST_LL),
                fcclInvalidUsage);
  /* The errors are kept on the communicator too. */
  EXPECT_EQ_INT(fcclBroadcast(fake, fake2, 4, fcclFloat32, 5, &comm, NULL), fcclInvalidArgument);
  EXPECT_STR_CONTAINS(fcclGetLastError(&comm), "root 5");
  /* A non-blocking init still running, and a freed handle. */
  comm.asyncError = fcclInProgress;
  EXPECT_EQ_INT(fcclAllGather(fake, fake2, 4, fcclFloat32, &comm, NULL), fcclInvalidUsage);
  EXPECT_STR_CONTAINS(fcclGetLastError(NULL), "non-blocking init");
  comm.asyncError = fcclSuccess;
  comm.magic = 0;
  EXPECT_EQ_INT(fcclReduceScatter(fake, fake2, 4, fcclFloat32, fcclSum, &comm, NULL), fcclInvalidArgument);
  pthread_mutex_destroy(&comm.errorLock);
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
  testMoveTable();
  testMoveGrids();
  testMoveForced();
  testMoveRegisteredPays();
  testMoveCopy();
  testMoveNames();
  testMoveArguments();
  testFusedForm();
  return testSummary("algo");
}
