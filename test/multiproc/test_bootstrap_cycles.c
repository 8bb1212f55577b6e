/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Creating and destroying bootstraps over and over leaks nothing: 10,000 one-rank cycles through the whole TCP path
 * (unique id, root thread, hello, welcome, join) and a few hundred two-rank cycles (ring connections, ranks as
 * threads) leave the same open file descriptors and no running root thread. Bytes are checked by the ASan build's
 * leak checker at exit.
 */
#include "bootstrap.h"
#include "check.h"
#include "test.h"
#include "test_bootstrap_util.h"

#include <pthread.h>
#include <stdlib.h>

#define SINGLE_CYCLES 10000
#define PAIR_CYCLES 300

static int oneRankCycle(int cycle) {
  fcclUniqueId id;
  struct fcclBootstrap* b = NULL;
  if (fcclBootstrapGetUniqueId(&id, 5000) != fcclSuccess) return 0;
  if (fcclBootstrapTcpInit(&id, 0, 1, 5000, NULL, &b) != fcclSuccess) return 0;
  uint64_t value = (uint64_t)cycle;
  int ok = fcclBootstrapAllGather(b, &value, sizeof(value)) == fcclSuccess && value == (uint64_t)cycle &&
           fcclBootstrapBarrier(b) == fcclSuccess;
  fcclBootstrapDestroy(b);
  return ok;
}

struct pairRank {
  fcclUniqueId id;
  int rank;
  int ok;
};

static void* pairRankMain(void* arg) {
  struct pairRank* p = arg;
  struct fcclBootstrap* b = NULL;
  p->ok = 0;
  if (fcclBootstrapTcpInit(&p->id, p->rank, 2, 5000, NULL, &b) != fcclSuccess) return NULL;
  uint32_t values[2] = {0, 0};
  values[p->rank] = 100u + (uint32_t)p->rank;
  p->ok = fcclBootstrapAllGather(b, values, sizeof(values[0])) == fcclSuccess && values[0] == 100 &&
          values[1] == 101 && fcclBootstrapBarrier(b) == fcclSuccess;
  fcclBootstrapDestroy(b);
  return NULL;
}

int main(void) {
  int fdsBefore = bootCountFds();
  int64_t start = bootNowMs();
  int failures = 0;
  for (int cycle = 0; cycle < SINGLE_CYCLES && failures < 5; cycle++) {
    if (!oneRankCycle(cycle)) {
      failures++;
      fprintf(stderr, "cycle %d failed: %s\n", cycle, fcclGetLastError(NULL));
    }
  }
  EXPECT_EQ_INT(failures, 0);
  int64_t singleMs = bootNowMs() - start;
  EXPECT_EQ_INT(fcclBootstrapRootsWait(0), 0); /* each cycle's rank joined its root */
  EXPECT_EQ_INT(bootCountFds(), fdsBefore);
  printf("%d one-rank cycles in %lld ms (%.1f us each)\n", SINGLE_CYCLES, (long long)singleMs,
         1000.0 * (double)singleMs / SINGLE_CYCLES);

  start = bootNowMs();
  failures = 0;
  for (int cycle = 0; cycle < PAIR_CYCLES && failures < 5; cycle++) {
    struct pairRank ranks[2];
    pthread_t threads[2];
    if (fcclBootstrapGetUniqueId(&ranks[0].id, 5000) != fcclSuccess) {
      failures++;
      continue;
    }
    ranks[1].id = ranks[0].id;
    for (int r = 0; r < 2; r++) {
      ranks[r].rank = r;
      pthread_create(&threads[r], NULL, pairRankMain, &ranks[r]);
    }
    for (int r = 0; r < 2; r++) pthread_join(threads[r], NULL);
    if (!ranks[0].ok || !ranks[1].ok) {
      failures++;
      fprintf(stderr, "pair cycle %d failed\n", cycle);
    }
  }
  EXPECT_EQ_INT(failures, 0);
  EXPECT_EQ_INT(fcclBootstrapRootsWait(0), 0);
  EXPECT_EQ_INT(bootCountFds(), fdsBefore);
  printf("%d two-rank cycles in %lld ms\n", PAIR_CYCLES, (long long)(bootNowMs() - start));
  return testSummary("bootstrap_cycles");
}
