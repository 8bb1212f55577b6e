/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The SM budget without a GPU: fcclCtaClamp itself; the grids the selection gives every form of every collective
 * at every size, rank count and registration under budgets (within them, exactly the maximum where more was wanted,
 * raised to the minimum where less was, and unchanged without one); FCCL_MIN_CTAS and FCCL_MAX_CTAS over the config's
 * fields (fcclDeviceCtaBound); the config's fields read from a config of this header's size, and not from one of
 * an older fcclConfig_t's size (a caller compiled with the older header), which is still taken; and the budget a
 * child of a split or a shrink inherits.
 */
#include "algo.h"
#include "device_state.h"
#include "init.h"
#include "param.h"
#include "test.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

static void testClamp(void) {
  EXPECT_EQ_INT(fcclCtaClamp(100, 132, 0, 0), 100);    /* no budget */
  EXPECT_EQ_INT(fcclCtaClamp(100, 132, 0, 8), 8);      /* the maximum */
  EXPECT_EQ_INT(fcclCtaClamp(5, 132, 0, 8), 5);        /* under it: unchanged */
  EXPECT_EQ_INT(fcclCtaClamp(1, 132, 4, 0), 4);        /* raised to the minimum */
  EXPECT_EQ_INT(fcclCtaClamp(1, 2, 4, 0), 2);          /* never past what the kernel may take */
  EXPECT_EQ_INT(fcclCtaClamp(1, 132, 16, 8), 8);       /* the maximum wins over the minimum */
  EXPECT_EQ_INT(fcclCtaClamp(50, 132, 16, 64), 50);    /* between the two: unchanged */
  EXPECT_EQ_INT(fcclCtaClamp(300, 132, 0, 1000), 132); /* a maximum above the SMs does not bind */
  EXPECT_EQ_INT(fcclCtaClamp(0, 0, 0, 0), 1);          /* at least one block */
}

/* Every grid of every form under budgets (min, max) against the one without a budget. */
static void testGrids(void) {
  const int budgets[][2] = {{0, 0}, {0, 1}, {0, 3}, {0, 16}, {4, 0}, {5, 6}, {8, 8}, {200, 0}};
  const fcclAlgoSet* sets[] = {&fcclAllReduceAlgos, &fcclAllGatherAlgos, &fcclReduceScatterAlgos, &fcclBroadcastAlgos,
                               &fcclReduceAlgos,    &fcclGatherAlgos,    &fcclScatterAlgos};
  const int ranks[] = {1, 2, 3, 4, 8};
  int checked = 0;
  for (size_t si = 0; si < sizeof(sets) / sizeof(sets[0]); si++) {
    const fcclAlgoSet* set = sets[si];
    for (size_t ri = 0; ri < sizeof(ranks) / sizeof(ranks[0]); ri++) {
      fcclSlotLayout layout;
      fcclSlotLayoutCompute(ranks[ri], 32u << 20, &layout);
      for (uint64_t bytes = 8; bytes <= (1ull << 30); bytes *= 4) {
        for (int registered = 0; registered < 2; registered++) {
          for (int form = -1; form < set->count; form++) {
            fcclAlgoChoice free_, bounded;
            fcclAlgoQuery q = fcclAlgoQueryMake(bytes, ranks[ri], registered, 0, 132, &layout, 1, 64ull << 20);
            q.forced = form < 0 ? -1 : set->algos[form];
            const int isAllReduce = set == &fcclAllReduceAlgos;
            fcclResult_t res = isAllReduce ? fcclAlgoSelect(&q, &free_) : fcclMoveSelect(&q, set, &free_);
            if (res != fcclSuccess) continue;
            /* The copy forms' grid is their barrier kernel's: one warp, no budget. */
            const int copy = free_.algo == FCCL_FORM_ALLGATHER_COPY || free_.algo == FCCL_FORM_BROADCAST_COPY;
            for (size_t b = 0; b < sizeof(budgets) / sizeof(budgets[0]); b++) {
              q.minCtas = budgets[b][0];
              q.maxCtas = budgets[b][1];
              res = isAllReduce ? fcclAlgoSelect(&q, &bounded) : fcclMoveSelect(&q, set, &bounded);
              EXPECT_EQ_INT(res, fcclSuccess);
              /* The budget changes the grid, never the algorithm (nor its threads). */
              EXPECT_EQ_INT(bounded.algo, free_.algo);
              EXPECT_EQ_INT(bounded.threads, free_.threads);
              const int most = q.maxCtas > 0 && q.maxCtas < 132 ? q.maxCtas : 132;
              int want = free_.blocks;
              if (!copy) {
                if (want > most) want = most;
                const int least = q.minCtas > most ? most : q.minCtas;
                if (want < least) want = least;
                /* LL's own bound: 128 blocks (the 2-rank area in one pass) */
                if ((free_.algo == FCCL_ALGO_LL || fcclAlgoSetForm(set, free_.algo) == FCCL_MOVE_LL) && want > 128)
                  want = 128;
              }
              EXPECT_MSG(bounded.blocks == want,
                         "%s %s, %d ranks, %llu bytes, %s, budget %d..%d: %d blocks, want %d "
                         "(%d without a budget)",
                         set->collective, fcclAlgoName(free_.algo), ranks[ri], (unsigned long long)bytes,
                         registered ? "registered" : "plain", q.minCtas, q.maxCtas, bounded.blocks, want, free_.blocks);
              checked++;
            }
          }
        }
      }
    }
  }
  EXPECT(checked > 5000);
}

/* The variables override the config's fields, as NCCL's do; values <= 0 are no bound. */
static void testBounds(void) {
  unsetenv("FCCL_MIN_CTAS");
  unsetenv("FCCL_MAX_CTAS");
  fcclParamResetForTest();
  EXPECT_EQ_INT(fcclDeviceCtaBound(-1, FCCL_PARAM_MAX_CTAS), 0);
  EXPECT_EQ_INT(fcclDeviceCtaBound(12, FCCL_PARAM_MAX_CTAS), 12);
  EXPECT_EQ_INT(fcclDeviceCtaBound(3, FCCL_PARAM_MIN_CTAS), 3);
  setenv("FCCL_MAX_CTAS", "7", 1);
  setenv("FCCL_MIN_CTAS", "0", 1);
  fcclParamResetForTest();
  EXPECT_EQ_INT(fcclDeviceCtaBound(12, FCCL_PARAM_MAX_CTAS), 7);
  EXPECT_EQ_INT(fcclDeviceCtaBound(-1, FCCL_PARAM_MAX_CTAS), 7);
  EXPECT_EQ_INT(fcclDeviceCtaBound(3, FCCL_PARAM_MIN_CTAS), 3); /* 0: the config's */
  unsetenv("FCCL_MIN_CTAS");
  unsetenv("FCCL_MAX_CTAS");
  fcclParamResetForTest();
}

/* The config's budget: read when the config's size holds it, left undefined for a config of the first size. */
static void testConfig(void) {
  struct fcclCommSettings settings;
  fcclConfig_t config = FCCL_CONFIG_INITIALIZER;
  EXPECT_EQ_INT(config.minCTAs, FCCL_CONFIG_UNDEF_INT);
  EXPECT_EQ_INT(config.maxCTAs, FCCL_CONFIG_UNDEF_INT);
  config.minCTAs = 2;
  config.maxCTAs = 24;
  EXPECT_EQ_INT(fcclCommResolveConfig(&config, "test", &settings), fcclSuccess);
  EXPECT_EQ_INT(settings.minCtas, 2);
  EXPECT_EQ_INT(settings.maxCtas, 24);
  /* A caller compiled with the first header: its struct ends at allowSharedDevice, what follows is not its. */
  config.size = offsetof(fcclConfig_t, allowSharedDevice) + sizeof(int);
  config.minCTAs = -77; /* stands for whatever lies past the caller's struct */
  EXPECT_EQ_INT(fcclCommResolveConfig(&config, "test", &settings), fcclSuccess);
  EXPECT_EQ_INT(settings.minCtas, FCCL_CONFIG_UNDEF_INT);
  EXPECT_EQ_INT(settings.maxCtas, FCCL_CONFIG_UNDEF_INT);
  config.splitShare = 77; /* past the first struct too: neither read nor refused */
  EXPECT_EQ_INT(fcclCommResolveConfig(&config, "test", &settings), fcclSuccess);
  EXPECT_EQ_INT(settings.splitShare, FCCL_CONFIG_UNDEF_INT);
  /* A caller compiled with the header that appended splitShare and not yet the budget. */
  config.size = offsetof(fcclConfig_t, splitShare) + sizeof(int);
  config.splitShare = 1;
  EXPECT_EQ_INT(fcclCommResolveConfig(&config, "test", &settings), fcclSuccess);
  EXPECT_EQ_INT(settings.splitShare, 1);
  EXPECT_EQ_INT(settings.minCtas, FCCL_CONFIG_UNDEF_INT);
  EXPECT_EQ_INT(settings.maxCtas, FCCL_CONFIG_UNDEF_INT);
  /* No config: undefined too. */
  EXPECT_EQ_INT(fcclCommResolveConfig(NULL, "test", &settings), fcclSuccess);
  EXPECT_EQ_INT(settings.maxCtas, FCCL_CONFIG_UNDEF_INT);
}

/* A child of fcclCommSplit or fcclCommShrink made without a config takes its parent's budget (NCCL's rule). */
static void testInherited(void) {
  static struct fcclComm parent; /* zeroed: only the fields the inherited config reads matter */
  snprintf(parent.name, sizeof(parent.name), "parent");
  parent.blocking = 1;
  parent.timeoutMs = 5000;
  parent.splitShare = FCCL_CONFIG_UNDEF_INT;
  parent.minCtas = 3;
  parent.maxCtas = 9;
  fcclConfig_t config;
  fcclCommInheritedConfig(&parent, &config);
  EXPECT_EQ_INT(config.minCTAs, 3);
  EXPECT_EQ_INT(config.maxCTAs, 9);
  struct fcclCommSettings settings;
  EXPECT_EQ_INT(fcclCommResolveConfig(&config, "test", &settings), fcclSuccess);
  EXPECT_EQ_INT(settings.minCtas, 3);
  EXPECT_EQ_INT(settings.maxCtas, 9);
  parent.minCtas = parent.maxCtas = FCCL_CONFIG_UNDEF_INT; /* a parent without a budget: none for the child */
  fcclCommInheritedConfig(&parent, &config);
  EXPECT_EQ_INT(fcclCommResolveConfig(&config, "test", &settings), fcclSuccess);
  EXPECT_EQ_INT(settings.maxCtas, FCCL_CONFIG_UNDEF_INT);
}

int main(void) {
  testClamp();
  testGrids();
  testBounds();
  testConfig();
  testInherited();
  return testSummary("sm_budget");
}
