/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The result functions of all_gather_perf, reduce_scatter_perf, broadcast_perf, sendrecv_perf, alltoall_perf and the
 * variable all_gather_v_perf and reduce_scatter_v_perf, and
 * those ready for reduce, gather and scatter (tools/bench/check.c), with the benchmark's checker, on results built on
 * the host from the ranks' input pattern: a right result has no wrong element, whole or read back in pieces; one
 * changed element is one wrong element; a block in another rank's place, another rank's slice of the reduction, a
 * non-root's own input instead of the root's, the rank's own input instead of its neighbour's, are many; what no rule
 * fixes (a reduce's or a gather's result off the root) is never wrong.
 */
#include "bench.h"
#include "test.h"

#include <math.h>

static const int kTypes[] = {benchInt8, benchUint8, benchInt32, benchUint64, benchFloat16, benchFloat32,
                             benchFloat64, benchBfloat16};
static const int kRanks[] = {1, 2, 3, 8};

/* Stores an exact small integer in type's encoding. */
static void storeInteger(int type, long long value, unsigned char* dst) {
  switch (type) {
    case benchInt8: case benchUint8: { uint8_t v = (uint8_t)value; memcpy(dst, &v, 1); break; }
    case benchInt32: case benchUint32: { uint32_t v = (uint32_t)value; memcpy(dst, &v, 4); break; }
    case benchInt64: case benchUint64: { uint64_t v = (uint64_t)value; memcpy(dst, &v, 8); break; }
    case benchFloat16: { uint16_t v = benchFloatToHalf((float)value); memcpy(dst, &v, 2); break; }
    case benchFloat32: { float v = (float)value; memcpy(dst, &v, 4); break; }
    case benchFloat64: { double v = (double)value; memcpy(dst, &v, 8); break; }
    default: { uint16_t v = benchFloatToBf16((float)value); memcpy(dst, &v, 2); break; }
  }
}

/* Every rank's input of elems elements, rank after rank. */
static unsigned char* inputs(int type, int op, int nranks, uint64_t seed, size_t elems) {
  const size_t size = benchTypeSize(type);
  unsigned char* all = malloc(elems * size * (size_t)nranks);
  for (int rank = 0; rank < nranks; rank++)
    benchFillInput(all + (size_t)rank * elems * size, elems, 0, type, op, rank, nranks, seed);
  return all;
}

/* Wrong elements of got (n elements), checked whole and as two pieces read back separately. */
static int64_t countBoth(benchChecker_t* checker, const unsigned char* got, size_t n, size_t size, int64_t* pieces) {
  const size_t split = n / 2 + 3 < n ? n / 2 + 3 : n;
  *pieces = benchCheckerCount(checker, got, split, 0) +
            benchCheckerCount(checker, got + split * size, n - split, split);
  return benchCheckerCount(checker, got, n, 0);
}

static void testAllGather(int type, int nranks) {
  const size_t count = BENCH_PATTERN_PERIOD + 11, size = benchTypeSize(type), total = count * (size_t)nranks;
  const uint64_t seed = 5;
  unsigned char* gathered = inputs(type, BENCH_NO_OP, nranks, seed, count); /* rank q's block at q x count */
  benchChecker_t checker;
  EXPECT_EQ_INT(benchCheckerInit(&checker, type, BENCH_NO_OP, nranks, seed), 0);
  for (int rank = 0; rank < nranks; rank++) {
    benchCheckerSetResult(&checker, benchAllGatherResult, count, rank, -1);
    int64_t pieces = -1;
    EXPECT_MSG(countBoth(&checker, gathered, total, size, &pieces) == 0 && pieces == 0,
               "all-gather %s, %d ranks, rank %d: a right result counts wrong", benchTypeName(type), nranks, rank);
  }
  gathered[(total - 2) * size] ^= 0x40;
  EXPECT_EQ_INT(benchCheckerCount(&checker, gathered, total, 0), 1);
  gathered[(total - 2) * size] ^= 0x40;
  if (nranks > 1) {
    memcpy(gathered + count * size, gathered, count * size); /* rank 0's block where rank 1's belongs */
    const int64_t wrong = benchCheckerCount(&checker, gathered, total, 0);
    EXPECT_MSG(wrong > (int64_t)count / 2, "all-gather %s: rank 0's block in rank 1's place: %lld wrong",
               benchTypeName(type), (long long)wrong);
  }
  benchCheckerFree(&checker);
  free(gathered);
}

static void testReduceScatter(int type, int op, int nranks) {
  const size_t count = 2 * BENCH_PATTERN_PERIOD + 3, size = benchTypeSize(type), total = count * (size_t)nranks;
  const uint64_t seed = 9;
  unsigned char* in = inputs(type, op, nranks, seed, total);
  /* The reduction, exact: the pattern's values are small integers. */
  unsigned char* reduced = malloc(total * size);
  for (size_t i = 0; i < total; i++) {
    long long acc = (long long)benchLoadAsDouble(in, i, type);
    for (int rank = 1; rank < nranks; rank++) {
      const long long v = (long long)benchLoadAsDouble(in + (size_t)rank * total * size, i, type);
      acc = op == benchSum ? acc + v : op == benchMax ? (v > acc ? v : acc) : (v < acc ? v : acc);
    }
    storeInteger(type, acc, reduced + i * size);
  }
  benchChecker_t checker;
  EXPECT_EQ_INT(benchCheckerInit(&checker, type, op, nranks, seed), 0);
  for (int rank = 0; rank < nranks; rank++) {
    benchCheckerSetResult(&checker, benchReduceScatterResult, count, rank, -1);
    const unsigned char* mine = reduced + (size_t)rank * count * size;
    int64_t pieces = -1;
    EXPECT_MSG(countBoth(&checker, mine, count, size, &pieces) == 0 && pieces == 0,
               "reduce-scatter %s %s, %d ranks, rank %d: a right result counts wrong", benchTypeName(type),
               benchOpName(op), nranks, rank);
    if (nranks > 1) {
      /* (max and min of 8 ranks agree at many places: their results crowd at the pattern's ends) */
      const unsigned char* other = reduced + (size_t)((rank + 1) % nranks) * count * size;
      const int64_t wrong = benchCheckerCount(&checker, other, count, 0);
      EXPECT_MSG(wrong > (int64_t)count / 8, "reduce-scatter %s %s: another rank's slice: %lld wrong",
                 benchTypeName(type), benchOpName(op), (long long)wrong);
    }
  }
  benchCheckerFree(&checker);
  free(reduced);
  free(in);
}

/* all_gather_v_perf: rank q's benchVariableCount block after the blocks before it; past their sum nothing is fixed. */
static void testAllGatherV(int type, int nranks) {
  const size_t count = BENCH_PATTERN_PERIOD + 11, size = benchTypeSize(type), room = count * (size_t)nranks;
  const uint64_t seed = 6;
  unsigned char* in = inputs(type, BENCH_NO_OP, nranks, seed, 2 * count); /* rank q's input at q x 2 count */
  unsigned char* gathered = malloc(room * size);
  memset(gathered, BENCH_POISON_BYTE, room * size);
  size_t total = 0;
  for (int q = 0; q < nranks; q++) {
    const size_t block = benchVariableCount(count, q, nranks);
    EXPECT_EQ_INT((long long)benchVariableOffset(count, q, nranks), (long long)total);
    if (total + block > room) break; /* a wrong skew: reported below, never written past the buffer */
    memcpy(gathered + total * size, in + (size_t)q * 2 * count * size, block * size);
    total += block;
  }
  EXPECT_MSG(total <= room && total + (size_t)nranks >= room, "all-gather-v: blocks add up to %zu of %zu", total, room);
  benchChecker_t checker;
  EXPECT_EQ_INT(benchCheckerInit(&checker, type, BENCH_NO_OP, nranks, seed), 0);
  for (int rank = 0; rank < nranks; rank++) {
    benchCheckerSetResult(&checker, benchAllGatherVResult, count, rank, -1);
    int64_t pieces = -1;
    EXPECT_MSG(countBoth(&checker, gathered, room, size, &pieces) == 0 && pieces == 0,
               "all-gather-v %s, %d ranks, rank %d: a right result counts wrong", benchTypeName(type), nranks, rank);
  }
  gathered[(total - 2) * size] ^= 0x40;
  EXPECT_EQ_INT(benchCheckerCount(&checker, gathered, room, 0), 1);
  gathered[(total - 2) * size] ^= 0x40;
  if (nranks > 1) {
    /* the last block one element early: every element of it is another element's value */
    const size_t last = benchVariableOffset(count, nranks - 1, nranks);
    memmove(gathered + (last - 1) * size, gathered + last * size, (total - last) * size);
    const int64_t wrong = benchCheckerCount(&checker, gathered, room, 0);
    EXPECT_MSG(wrong > (int64_t)count / 2, "all-gather-v %s: the last block shifted: %lld wrong", benchTypeName(type),
               (long long)wrong);
  }
  benchCheckerFree(&checker);
  free(gathered);
  free(in);
}

/* The room the variable programs give a block (benchVariableRoom): every rank's block fits, and it never grows faster
 * than count times its room at count 1, the driver's buffers' unit (tools/bench/collective.h), which the largest
 * block does (count x (2n - 1) / n rounded down: 1 at count 1, 3 at count 2 for two ranks). */
static void testVariableRoom(void) {
  for (int nranks = 1; nranks <= 9; nranks++) {
    const size_t unit = benchVariableRoom(1, nranks);
    EXPECT_EQ_INT((long long)unit, nranks == 1 ? 1 : 2);
    int bad = 0;
    for (size_t count = 0; count < 5000 && !bad; count++) {
      const size_t room = benchVariableRoom(count, nranks);
      size_t largest = 0;
      for (int q = 0; q < nranks; q++) {
        const size_t block = benchVariableCount(count, q, nranks);
        largest = block > largest ? block : largest;
      }
      if (room < largest || room > largest + 1 || room > count * unit) {
        bad = 1;
        testFail(__FILE__, __LINE__, "%d ranks, count %zu: room %zu for a largest block of %zu (unit %zu)", nranks,
                 count, room, largest, unit);
      }
    }
    const size_t big = ((size_t)1 << 40) + 7;
    EXPECT(benchVariableRoom(big, nranks) >= benchVariableCount(big, nranks - 1, nranks));
    EXPECT(benchVariableRoom(big, nranks) <= big * unit);
  }
  /* The blocks themselves outgrow their count-1 value: why the programs use the room. */
  EXPECT(benchVariableCount(2, 1, 2) > 2 * benchVariableCount(1, 1, 2));
  EXPECT_EQ_INT((long long)benchVariableRoom(0, 0), 0);
}

/* reduce_scatter_v_perf: rank r holds the reduction of its benchVariableCount block; past it nothing is fixed. */
static void testReduceScatterV(int type, int nranks) {
  const size_t count = BENCH_PATTERN_PERIOD + 5, size = benchTypeSize(type), total = count * (size_t)nranks;
  const uint64_t seed = 10;
  unsigned char* in = inputs(type, benchSum, nranks, seed, total);
  unsigned char* reduced = malloc(total * size);
  for (size_t i = 0; i < total; i++) {
    long long acc = 0;
    for (int rank = 0; rank < nranks; rank++)
      acc += (long long)benchLoadAsDouble(in + (size_t)rank * total * size, i, type);
    storeInteger(type, acc, reduced + i * size);
  }
  const size_t room = benchVariableRoom(count, nranks); /* the program's output buffer */
  unsigned char* got = malloc(room * size);
  benchChecker_t checker;
  EXPECT_EQ_INT(benchCheckerInit(&checker, type, benchSum, nranks, seed), 0);
  for (int rank = 0; rank < nranks; rank++) {
    const size_t mine = benchVariableCount(count, rank, nranks), at = benchVariableOffset(count, rank, nranks);
    memset(got, BENCH_POISON_BYTE, room * size);
    memcpy(got, reduced + at * size, mine * size);
    benchCheckerSetResult(&checker, benchReduceScatterVResult, count, rank, -1);
    int64_t pieces = -1;
    EXPECT_MSG(countBoth(&checker, got, room, size, &pieces) == 0 && pieces == 0,
               "reduce-scatter-v %s, %d ranks, rank %d: a right result counts wrong", benchTypeName(type), nranks,
               rank);
    if (mine > 2) {
      got[(mine - 2) * size] ^= 0x40;
      EXPECT_EQ_INT(benchCheckerCount(&checker, got, room, 0), 1);
    }
    /* The block one element late, or early for the last block, which ends where the reduced data does. */
    const int late = at + mine < total;
    if (nranks > 1 && mine > 0 && (late || at > 0)) {
      memcpy(got, reduced + (late ? at + 1 : at - 1) * size, mine * size);
      const int64_t wrong = benchCheckerCount(&checker, got, room, 0);
      EXPECT_MSG(wrong > (int64_t)mine / 2, "reduce-scatter-v %s: a shifted block: %lld wrong", benchTypeName(type),
                 (long long)wrong);
    }
  }
  benchCheckerFree(&checker);
  free(got);
  free(reduced);
  free(in);
}

static void testBroadcast(int type, int nranks) {
  const size_t count = BENCH_PATTERN_PERIOD * 2 + 7, size = benchTypeSize(type);
  const uint64_t seed = 3;
  unsigned char* in = inputs(type, BENCH_NO_OP, nranks, seed, count);
  benchChecker_t checker;
  EXPECT_EQ_INT(benchCheckerInit(&checker, type, BENCH_NO_OP, nranks, seed), 0);
  for (int root = 0; root < nranks; root++) {
    const unsigned char* message = in + (size_t)root * count * size;
    for (int rank = 0; rank < nranks; rank++) {
      benchCheckerSetResult(&checker, benchBroadcastResult, count, rank, root);
      int64_t pieces = -1;
      EXPECT_MSG(countBoth(&checker, message, count, size, &pieces) == 0 && pieces == 0,
                 "broadcast %s, %d ranks, root %d, rank %d: a right result counts wrong", benchTypeName(type), nranks,
                 root, rank);
      if (rank != root) {
        /* An in-place call that did not run leaves the rank's own input. */
        const int64_t wrong = benchCheckerCount(&checker, in + (size_t)rank * count * size, count, 0);
        EXPECT_MSG(wrong > (int64_t)count / 2, "broadcast %s: rank %d's own input for root %d's: %lld wrong",
                   benchTypeName(type), rank, root, (long long)wrong);
      }
    }
  }
  benchCheckerFree(&checker);
  free(in);
}

/* send/recv: rank r holds rank r - 1's input (the ring), for any op's pattern. */
static void testSendRecv(int type, int op, int nranks) {
  const size_t count = BENCH_PATTERN_PERIOD + 5, size = benchTypeSize(type);
  const uint64_t seed = 11;
  unsigned char* in = inputs(type, op, nranks, seed, count);
  benchChecker_t checker;
  EXPECT_EQ_INT(benchCheckerInit(&checker, type, op, nranks, seed), 0);
  for (int rank = 0; rank < nranks; rank++) {
    benchCheckerSetResult(&checker, benchSendRecvResult, count, rank, -1);
    const unsigned char* received = in + (size_t)((rank + nranks - 1) % nranks) * count * size;
    int64_t pieces = -1;
    EXPECT_MSG(countBoth(&checker, received, count, size, &pieces) == 0 && pieces == 0,
               "send/recv %s %s, %d ranks, rank %d: a right result counts wrong", benchTypeName(type), benchOpName(op),
               nranks, rank);
    if (nranks > 1) {
      /* (the 8-bit types' inputs take few values, so two ranks' agree at many places) */
      const int64_t wrong = benchCheckerCount(&checker, in + (size_t)rank * count * size, count, 0);
      EXPECT_MSG(wrong > (int64_t)count / 10, "send/recv %s: rank %d's own input: %lld wrong", benchTypeName(type),
                 rank, (long long)wrong);
    }
  }
  benchCheckerFree(&checker);
  free(in);
}

/* All-to-all: rank r's block p is rank p's block r (each rank's input covers nranks x count elements). */
static void testAllToAll(int type, int nranks) {
  const size_t count = BENCH_PATTERN_PERIOD / 2 + 9, size = benchTypeSize(type), total = count * (size_t)nranks;
  const uint64_t seed = 13;
  unsigned char* in = inputs(type, BENCH_NO_OP, nranks, seed, total);
  unsigned char* out = malloc(total * size);
  benchChecker_t checker;
  EXPECT_EQ_INT(benchCheckerInit(&checker, type, BENCH_NO_OP, nranks, seed), 0);
  for (int rank = 0; rank < nranks; rank++) {
    for (int peer = 0; peer < nranks; peer++)
      memcpy(out + (size_t)peer * count * size, in + ((size_t)peer * total + (size_t)rank * count) * size,
             count * size);
    benchCheckerSetResult(&checker, benchAllToAllResult, count, rank, -1);
    int64_t pieces = -1;
    EXPECT_MSG(countBoth(&checker, out, total, size, &pieces) == 0 && pieces == 0,
               "all-to-all %s, %d ranks, rank %d: a right result counts wrong", benchTypeName(type), nranks, rank);
    out[(total - 1) * size] ^= 0x40;
    EXPECT_EQ_INT(benchCheckerCount(&checker, out, total, 0), 1);
    if (nranks > 1) {
      /* The rank's own send buffer: every block in the wrong place. */
      const int64_t wrong = benchCheckerCount(&checker, in + (size_t)rank * total * size, total, 0);
      EXPECT_MSG(wrong > (int64_t)total / 10, "all-to-all %s: the send buffer as the result: %lld wrong",
                 benchTypeName(type), (long long)wrong);
    }
  }
  benchCheckerFree(&checker);
  free(out);
  free(in);
}

/* Reduce (sum), gather and scatter with root 1 (0 for one rank): the root's result checked, the others' not. */
static void testRooted(int type, int nranks) {
  const size_t count = BENCH_PATTERN_PERIOD + 17, size = benchTypeSize(type), total = count * (size_t)nranks;
  const int root = nranks > 1 ? 1 : 0;
  const uint64_t seed = 17;
  unsigned char* in = inputs(type, benchSum, nranks, seed, total);
  unsigned char* reduced = malloc(count * size);
  for (size_t i = 0; i < count; i++) {
    long long acc = 0;
    for (int rank = 0; rank < nranks; rank++)
      acc += (long long)benchLoadAsDouble(in + (size_t)rank * total * size, i, type);
    storeInteger(type, acc, reduced + i * size);
  }
  unsigned char* garbage = malloc(total * size);
  memset(garbage, BENCH_POISON_BYTE, total * size);
  benchChecker_t checker;
  EXPECT_EQ_INT(benchCheckerInit(&checker, type, benchSum, nranks, seed), 0);
  for (int rank = 0; rank < nranks; rank++) {
    int64_t pieces = -1;
    benchCheckerSetResult(&checker, benchReduceResult, count, rank, root);
    if (rank == root) {
      EXPECT_MSG(countBoth(&checker, reduced, count, size, &pieces) == 0 && pieces == 0,
                 "reduce %s, %d ranks: the root's right result counts wrong", benchTypeName(type), nranks);
      EXPECT_EQ_INT(benchCheckerCount(&checker, garbage, count, 0), (int64_t)count);
    } else {
      EXPECT_EQ_INT(benchCheckerCount(&checker, garbage, count, 0), 0);
    }
    /* Gather: rank q's first count elements at q x count on the root. */
    unsigned char* gathered = malloc(total * size);
    for (int q = 0; q < nranks; q++)
      memcpy(gathered + (size_t)q * count * size, in + (size_t)q * total * size, count * size);
    benchCheckerSetResult(&checker, benchGatherResult, count, rank, root);
    EXPECT_EQ_INT(benchCheckerCount(&checker, rank == root ? gathered : garbage, total, 0), 0);
    if (rank == root) EXPECT_EQ_INT(benchCheckerCount(&checker, garbage, total, 0), (int64_t)total);
    free(gathered);
    /* Scatter: the root's block r on rank r. */
    benchCheckerSetResult(&checker, benchScatterResult, count, rank, root);
    const unsigned char* block = in + ((size_t)root * total + (size_t)rank * count) * size;
    EXPECT_MSG(countBoth(&checker, block, count, size, &pieces) == 0 && pieces == 0,
               "scatter %s, %d ranks, rank %d: a right result counts wrong", benchTypeName(type), nranks, rank);
    if (nranks > 1) {
      const unsigned char* otherBlock = in + ((size_t)root * total + (size_t)((rank + 1) % nranks) * count) * size;
      EXPECT_MSG(benchCheckerCount(&checker, otherBlock, count, 0) > (int64_t)count / 10,
                 "scatter %s: another rank's block counts right", benchTypeName(type));
    }
  }
  benchCheckerFree(&checker);
  free(garbage);
  free(reduced);
  free(in);
}

int main(void) {
  testVariableRoom();
  for (size_t t = 0; t < sizeof(kTypes) / sizeof(kTypes[0]); t++) {
    for (size_t r = 0; r < sizeof(kRanks) / sizeof(kRanks[0]); r++) {
      testAllGather(kTypes[t], kRanks[r]);
      testAllGatherV(kTypes[t], kRanks[r]);
      testReduceScatterV(kTypes[t], kRanks[r]);
      testBroadcast(kTypes[t], kRanks[r]);
      static const int ops[] = {benchSum, benchMax, benchMin};
      for (size_t o = 0; o < sizeof(ops) / sizeof(ops[0]); o++) testReduceScatter(kTypes[t], ops[o], kRanks[r]);
      testSendRecv(kTypes[t], benchSum, kRanks[r]);
      testSendRecv(kTypes[t], benchProd, kRanks[r]);
      testAllToAll(kTypes[t], kRanks[r]);
      testRooted(kTypes[t], kRanks[r]);
    }
  }
  return testSummary("bench_results");
}
