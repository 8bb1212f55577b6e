/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Call fingerprints without a GPU (docs/errors.md#out-of-step): the bit layout of fcclPrintMake (every field where
 * device_host.h puts it, never 0, the barrier's constant), the host's prints of each collective's forms, decoding
 * back into words, the field that differs for each kind of mismatch, and the whole out-of-step message.
 */
#include "device.h"
#include "device_variable.h"
#include "fingerprint.h"
#include "test.h"

#include <stdint.h>
#include <string.h>

/* The message for rank 0's call 17 (mine) against rank 1's (theirs). */
static const char* message(uint32_t mine, uint32_t theirs) {
  static char buf[1024];
  fcclPrintMismatchMessage(0, 17, mine, 1, theirs, buf, sizeof(buf));
  return buf;
}

static const char* difference(uint32_t mine, uint32_t theirs) {
  static char buf[256];
  fcclPrintDifference(mine, theirs, buf, sizeof(buf));
  return buf;
}

static const char* describe(uint32_t print) {
  static char buf[256];
  fcclPrintDescribe(print, buf, sizeof(buf));
  return buf;
}

static void testLayout(void) {
  /* Each field in its bits, the form stored plus one. */
  const uint32_t p = fcclPrintMake(FCCL_ALGO_LL128, fcclBfloat16, fcclMax, 12345);
  EXPECT_EQ_INT(p & 63u, FCCL_ALGO_LL128 + 1);
  EXPECT_EQ_INT((p >> FCCL_PRINT_TYPE_SHIFT) & 15u, fcclBfloat16);
  EXPECT_EQ_INT((p >> FCCL_PRINT_ARG_SHIFT) & 7u, fcclMax);
  EXPECT_EQ_INT(p >> FCCL_PRINT_COUNT_SHIFT, fcclPrintCountHash(12345));
  EXPECT_EQ_INT(p & ~FCCL_PRINT_MASK, 0);
  EXPECT_EQ_INT(FCCL_PRINT_COUNT_SHIFT + 7, FCCL_PRINT_BITS);
  EXPECT(fcclPrintCountHash(~0ull) < 128u);
  EXPECT(FCCL_PRINT_FORMS + 1 <= (1 << FCCL_PRINT_FORM_BITS));
  /* The barrier's constant is what the host would compute for it. */
  EXPECT_EQ_INT(FCCL_PRINT_BARRIER, fcclPrintMake(FCCL_KERNEL_BARRIER, 0, 0, 0));
  /* Never 0, whatever the fields: 0 is a cleared LL packet. */
  for (uint32_t form = 0; form < FCCL_PRINT_FORMS; form++)
    for (uint32_t type = 0; type < fcclNumTypes; type++)
      for (uint64_t count = 0; count < 64; count++) EXPECT(fcclPrintMake(form, type, 0, count) != 0);
  /* An LL flag (12 bits of epoch above the print) and a tag keep the print in their low bits. */
  EXPECT_EQ_INT(FCCL_LL_EPOCH_BITS + FCCL_PRINT_BITS, 32);
  EXPECT_EQ_INT(FCCL_LL_EPOCH_MASK, 0xfff);
}

static void testCountHash(void) {
  /* Counts next to each other, doubled, and the byte counts of common types all differ from the count asked
   * for: the mistakes ranks out of step make. Over many neighbours the hash misses about 1 in 128. */
  int same = 0, pairs = 0;
  for (uint64_t count = 1; count < 70000; count += 97) {
    const uint64_t others[] = {count + 1, count - 1, 2 * count, count / 2, 4 * count, count + 1024};
    for (size_t i = 0; i < sizeof(others) / sizeof(others[0]); i++) {
      if (others[i] == count) continue;
      pairs++;
      same += fcclPrintCountHash(count) == fcclPrintCountHash(others[i]);
    }
  }
  EXPECT_MSG(same * 64 < pairs, "%d of %d neighbouring counts share a hash", same, pairs);
  EXPECT(fcclPrintCountHash(1000) != fcclPrintCountHash(1001));
  EXPECT(fcclPrintCountHash(1000) != fcclPrintCountHash(2000));
}

static void testForms(void) {
  EXPECT_EQ_INT(fcclPrintForm(FCCL_ALGO_TWOSHOT_REG, FCCL_SCATTER_PULL), FCCL_ALGO_TWOSHOT_REG);
  EXPECT_EQ_INT(fcclPrintForm(FCCL_ALGO_TWOSHOT_REG, FCCL_SCATTER_PUSH), FCCL_PRINT_FORM_SCATTER_PUSH);
  EXPECT_EQ_INT(fcclPrintForm(FCCL_ALGO_TWOSHOT_REG, FCCL_SCATTER_INBOX), FCCL_PRINT_FORM_SCATTER_INBOX);
  EXPECT_EQ_INT(fcclPrintForm(FCCL_ALGO_TWOSHOT_REG, FCCL_SCATTER_COPY), FCCL_PRINT_FORM_SCATTER_COPY);
  /* Other kernels ignore the scatter field (it is 0 there, but need not be). */
  EXPECT_EQ_INT(fcclPrintForm(FCCL_ALGO_LL, FCCL_SCATTER_COPY), FCCL_ALGO_LL);
  EXPECT_EQ_INT(fcclPrintForm(FCCL_KERNEL_BROADCAST_STAGED, 0), FCCL_KERNEL_BROADCAST_STAGED);
  /* The fused norm's two forms differ, and so do shapes of the same element count. */
  const uint32_t reg = fcclFusedPrint(1, 0, fcclBfloat16, fcclScaleNone, 8, 4096);
  EXPECT(reg != fcclFusedPrint(0, 0, fcclBfloat16, fcclScaleNone, 8, 4096));
  EXPECT(reg != fcclFusedPrint(1, 0, fcclBfloat16, fcclScaleNone, 8, 2048));
  EXPECT(reg != fcclFusedPrint(1, 0, fcclBfloat16, fcclScaleNone, 16, 2048));
  EXPECT(reg != fcclFusedPrint(1, 0, fcclBfloat16, fcclScaleDynamic, 8, 4096));
  EXPECT_EQ_INT(reg, fcclFusedPrint(1, 0, fcclBfloat16, fcclScaleNone, 8, 4096));
  /* The one-shot and two-shot forms use different flags: a rank in each is out of step. */
  EXPECT(reg != fcclFusedPrint(1, 1, fcclBfloat16, fcclScaleNone, 8, 4096));
  EXPECT(fcclFusedPrint(0, 0, fcclBfloat16, fcclScaleNone, 8, 4096) !=
         fcclFusedPrint(0, 1, fcclBfloat16, fcclScaleNone, 8, 4096));
  /* The copy forms of the all-gather and the broadcast are their collectives. */
  EXPECT_STR_CONTAINS(describe(fcclCallPrint(FCCL_FORM_ALLGATHER_COPY, fcclInt8, 0, 5)), "all-gather, int8");
  EXPECT_STR_CONTAINS(describe(fcclCallPrint(FCCL_FORM_BROADCAST_COPY, fcclInt8, 0, 5)), "broadcast, int8");
}

static void testDescribe(void) {
  EXPECT_STR_CONTAINS(describe(fcclCallPrint(FCCL_ALGO_LL, fcclFloat32, fcclSum, 1000)),
                      "all-reduce, float32, sum, algorithm ll, count hash 0x");
  EXPECT_STR_CONTAINS(describe(fcclCallPrint(FCCL_PRINT_FORM_SCATTER_COPY, fcclBfloat16, fcclAvg, 1 << 20)),
                      "all-reduce, bfloat16, avg, algorithm twoshot_reg, copy-engine scatter");
  EXPECT_STR_CONTAINS(describe(fcclCallPrint(FCCL_KERNEL_ALLGATHER_STAGED, fcclInt8, 0, 5)),
                      "all-gather, int8, algorithm allgather_staged");
  EXPECT_STR_CONTAINS(describe(fcclCallPrint(FCCL_KERNEL_REDUCESCATTER_DIRECT, fcclFloat16, fcclMin, 5)),
                      "reduce-scatter, float16, min, algorithm reducescatter_direct");
  EXPECT_STR_CONTAINS(describe(fcclCallPrint(FCCL_KERNEL_BROADCAST_LL, fcclUint64, 3, 5)),
                      "broadcast, uint64, root 3, algorithm broadcast_ll");
  EXPECT_STR_CONTAINS(describe(fcclFusedPrint(0, 0, fcclBfloat16, fcclScaleDynamic, 8, 4096)),
                      "fused all-reduce + RMSNorm, bfloat16, dynamic FP8 scale, form one-shot, staged, "
                      "tokens x hidden hash");
  EXPECT_STR_CONTAINS(describe(FCCL_PRINT_BARRIER), "barrier");
  EXPECT_STR_CONTAINS(describe(fcclCallPrint(FCCL_KERNEL_REDUCE_LL, fcclFloat32, fcclAvg, 5)),
                      "reduce, float32, avg, algorithm reduce_ll, count and root hash");
  EXPECT_STR_CONTAINS(describe(fcclCallPrint(FCCL_KERNEL_REDUCE_STAGED, fcclBfloat16, FCCL_DEVICE_OP_PREMULSUM, 5)),
                      "reduce, bfloat16, pre-multiplied sum, algorithm reduce_staged");
  EXPECT_STR_CONTAINS(describe(fcclCallPrint(FCCL_ALGO_LL, fcclFloat16, FCCL_DEVICE_OP_PREMULSUM, 5)),
                      "all-reduce, float16, pre-multiplied sum, algorithm ll");
  EXPECT_STR_CONTAINS(describe(fcclCallPrint(FCCL_KERNEL_GATHER_DIRECT, fcclInt32, 2, 5)),
                      "gather, int32, root 2, algorithm gather_direct");
  EXPECT_STR_CONTAINS(describe(fcclCallPrint(FCCL_KERNEL_SCATTER_STAGED, fcclUint8, 7, 5)),
                      "scatter, uint8, root 7, algorithm scatter_staged");
  /* A print no host makes (form 62) says so instead of naming a collective. */
  EXPECT_STR_CONTAINS(describe(63u), "unknown call (fingerprint 0x0003f)");
  /* A print no host makes (form field 0) says so instead of naming a collective. */
  EXPECT_STR_CONTAINS(describe(0u), "unknown call (fingerprint 0x00000)");
  /* The variable collectives: their count hash is of every rank's count. */
  EXPECT_STR_CONTAINS(describe(fcclCallPrint(FCCL_KERNEL_ALLGATHERV_LL, fcclBfloat16, 0, 77)),
                      "variable all-gather, bfloat16, algorithm allgatherv_ll, counts hash 0x");
  EXPECT_STR_CONTAINS(describe(fcclCallPrint(FCCL_KERNEL_REDUCESCATTERV_STAGED, fcclFloat32, fcclAvg, 77)),
                      "variable reduce-scatter, float32, avg, algorithm reducescatterv_staged, counts hash 0x");
  /* The count hash printed is the one in the print. */
  char expected[64];
  snprintf(expected, sizeof(expected), "count hash 0x%02x", fcclPrintCountHash(777));
  EXPECT_STR_CONTAINS(describe(fcclCallPrint(FCCL_ALGO_ONESHOT_PUSH, fcclInt32, fcclProd, 777)), expected);
}

static void testDifference(void) {
  const uint32_t base = fcclCallPrint(FCCL_ALGO_ONESHOT_PUSH, fcclFloat32, fcclSum, 1000);
  EXPECT_STR_CONTAINS(difference(base, base), "nothing");
  EXPECT_STR_CONTAINS(difference(base, fcclCallPrint(FCCL_ALGO_ONESHOT_PUSH, fcclFloat32, fcclSum, 1001)),
                      "another count");
  EXPECT_STR_CONTAINS(difference(base, fcclCallPrint(FCCL_ALGO_ONESHOT_PUSH, fcclBfloat16, fcclSum, 1000)),
                      "another datatype");
  EXPECT_STR_CONTAINS(difference(base, fcclCallPrint(FCCL_ALGO_ONESHOT_PUSH, fcclFloat32, fcclMax, 1000)),
                      "another op");
  EXPECT_STR_CONTAINS(difference(base, fcclCallPrint(FCCL_ALGO_ONESHOT_PULL, fcclFloat32, fcclSum, 1000)),
                      "another algorithm");
  /* Several fields at once, listed in order. */
  EXPECT_STR_CONTAINS(difference(base, fcclCallPrint(FCCL_ALGO_LL, fcclFloat32, fcclSum, 1001)),
                      "another algorithm and count");
  EXPECT_STR_CONTAINS(difference(base, fcclCallPrint(FCCL_ALGO_LL, fcclInt8, fcclMin, 1001)),
                      "another algorithm, datatype, op and count");
  /* Another collective says only that: its fields mean other things. */
  EXPECT_STR_CONTAINS(difference(base, fcclCallPrint(FCCL_KERNEL_ALLGATHER_LL, fcclFloat32, 0, 1000)),
                      "another collective");
  EXPECT_STR_CONTAINS(difference(base, FCCL_PRINT_BARRIER), "another collective");
  /* The copy-engine scatter's barrier carries the all-reduce's print: against a plain barrier, another collective. */
  EXPECT_STR_CONTAINS(difference(fcclCallPrint(FCCL_PRINT_FORM_SCATTER_COPY, fcclFloat32, fcclSum, 1 << 22),
                                 FCCL_PRINT_BARRIER),
                      "another collective");
  /* The arg field is named for the collective. */
  const uint32_t bc = fcclCallPrint(FCCL_KERNEL_BROADCAST_LL, fcclFloat32, 0, 1000);
  EXPECT_STR_CONTAINS(difference(bc, fcclCallPrint(FCCL_KERNEL_BROADCAST_LL, fcclFloat32, 1, 1000)), "another root");
  const uint32_t ga = fcclCallPrint(FCCL_KERNEL_GATHER_LL, fcclFloat32, 0, 1000);
  EXPECT_STR_CONTAINS(difference(ga, fcclCallPrint(FCCL_KERNEL_GATHER_LL, fcclFloat32, 3, 1000)), "another root");
  EXPECT_STR_CONTAINS(difference(ga, fcclCallPrint(FCCL_KERNEL_SCATTER_LL, fcclFloat32, 0, 1000)),
                      "another collective");
  /* The reduce has its op in the arg field and its root in the count's hash. */
  const uint32_t rd = fcclCallPrint(FCCL_KERNEL_REDUCE_LL, fcclFloat32, fcclSum, 1000);
  EXPECT_STR_CONTAINS(difference(rd, fcclCallPrint(FCCL_KERNEL_REDUCE_LL, fcclFloat32, FCCL_DEVICE_OP_PREMULSUM, 1000)),
                      "another op");
  EXPECT_STR_CONTAINS(difference(rd, fcclCallPrint(FCCL_KERNEL_REDUCE_LL, fcclFloat32, fcclSum, 1000 ^ (1ull << 58))),
                      "another count or root");
  const uint32_t fused = fcclFusedPrint(1, 0, fcclBfloat16, fcclScaleNone, 8, 4096);
  EXPECT_STR_CONTAINS(difference(fused, fcclFusedPrint(1, 0, fcclBfloat16, fcclScaleNone, 8, 2048)),
                      "another token count or hidden size");
  EXPECT_STR_CONTAINS(difference(fused, fcclFusedPrint(1, 0, fcclBfloat16, fcclScaleStatic, 8, 4096)),
                      "another scale mode");
  EXPECT_STR_CONTAINS(difference(fused, fcclFusedPrint(0, 0, fcclBfloat16, fcclScaleNone, 8, 4096)), "another form");
}

/* The variable collectives' prints: the fold of the counts (device_variable.h) is in the count field, which the
 * kernel of a call with counts in device memory replaces with the fold of the counts it reads. */
static void testVariable(void) {
  const size_t counts[4] = {5, 0, 7, 1};
  uint64_t fold = FCCL_VARIABLE_HOST_SEED;
  for (int r = 0; r < 4; r++) fold = fcclVariableFold(fold, counts[r]);
  /* Any one count changed, or two swapped, changes the fold. */
  uint64_t other = FCCL_VARIABLE_HOST_SEED, swapped = FCCL_VARIABLE_HOST_SEED;
  const size_t changed[4] = {5, 1, 7, 1}, order[4] = {0, 5, 7, 1};
  for (int r = 0; r < 4; r++) {
    other = fcclVariableFold(other, changed[r]);
    swapped = fcclVariableFold(swapped, order[r]);
  }
  EXPECT(fold != other && fold != swapped);
  const uint32_t print = fcclCallPrint(FCCL_KERNEL_REDUCESCATTERV_LL, fcclFloat16, fcclMax, fold);
  EXPECT_EQ_INT(fcclVariablePrint(print, fold), print);
  const uint32_t replaced = fcclVariablePrint(print, other);
  EXPECT_EQ_INT(replaced, fcclCallPrint(FCCL_KERNEL_REDUCESCATTERV_LL, fcclFloat16, fcclMax, other));
  EXPECT_STR_CONTAINS(difference(print, fcclCallPrint(FCCL_KERNEL_REDUCESCATTERV_LL, fcclFloat16, fcclMax, fold + 1)),
                      "another counts");
  EXPECT_STR_CONTAINS(difference(print, fcclCallPrint(FCCL_KERNEL_REDUCESCATTER_LL, fcclFloat16, fcclMax, 5)),
                      "another collective");
  /* The two seeds: the same numbers as host and as device counts give other folds. */
  EXPECT(fcclVariableFold(FCCL_VARIABLE_HOST_SEED, 3) != fcclVariableFold(FCCL_VARIABLE_DEVICE_SEED, 3));
}

static void testMessage(void) {
  const uint32_t mine = fcclCallPrint(FCCL_ALGO_LL, fcclFloat32, fcclSum, 1000);
  const uint32_t theirs = fcclCallPrint(FCCL_ALGO_LL, fcclFloat32, fcclSum, 1024);
  const char* m = message(mine, theirs);
  EXPECT_STR_CONTAINS(m, "ranks out of step: rank 0's call 17 (all-reduce, float32, sum, algorithm ll, count hash");
  EXPECT_STR_CONTAINS(m, "does not match rank 1's call 17 (all-reduce, float32, sum, algorithm ll, count hash");
  EXPECT_STR_CONTAINS(m, "): another count");
  EXPECT(strstr(m, "registered") == NULL);
  /* Only the algorithm differs: the likely cause is said. */
  m = message(fcclCallPrint(FCCL_ALGO_ONESHOT_PULL, fcclFloat32, fcclSum, 1 << 20),
              fcclCallPrint(FCCL_ALGO_ONESHOT_PUSH, fcclFloat32, fcclSum, 1 << 20));
  EXPECT_STR_CONTAINS(m, "another algorithm (are the buffers registered on some ranks only");
  /* Another collective: both described in full. */
  m = message(fcclCallPrint(FCCL_ALGO_LL, fcclFloat32, fcclSum, 1000),
              fcclCallPrint(FCCL_KERNEL_BROADCAST_LL, fcclFloat32, 2, 1000));
  EXPECT_STR_CONTAINS(m, "rank 1's call 17 (broadcast, float32, root 2, algorithm broadcast_ll");
  EXPECT_STR_CONTAINS(m, "another collective");
  /* A small buffer is cut, never overrun, and always terminated. */
  char small[16];
  memset(small, 'x', sizeof(small));
  fcclPrintMismatchMessage(0, 17, mine, 1, theirs, small, sizeof(small));
  EXPECT_EQ_INT(strlen(small), sizeof(small) - 1);
  char tiny[4];
  fcclPrintDifference(mine, fcclCallPrint(FCCL_ALGO_LL128, fcclInt8, fcclMin, 3), tiny, sizeof(tiny));
  EXPECT_EQ_INT(strlen(tiny), 3);
}

int main(void) {
  testLayout();
  testCountHash();
  testForms();
  testDescribe();
  testDifference();
  testVariable();
  testMessage();
  return testSummary("fingerprint");
}
