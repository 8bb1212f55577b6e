/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The one kernel list (src/include/kernel_list.h) and what is generated from it, without a GPU: the kernel ids are
 * kernels and nothing else, the forms with no kernel of their own follow them, every algorithm is a form of exactly
 * one collective (the barrier, the fused norm and the MoE kernels, with launchers of their own, of none) under a name
 * of its own, each collective's set is its forms in FCCL_MOVE_* order with the FCCL_*ALGO values and names the docs
 * state, each struct fcclCollective points at its set, and the variable collectives' kernels are told apart (they
 * take other arguments).
 */
#include "algo.h"
#include "device_host.h"
#include "device_variable.h"
#include "enqueue.h"
#include "test.h"

#include <stdio.h>
#include <string.h>

static const fcclAlgoSet* const kSets[] = {&fcclAllReduceAlgos, &fcclAllGatherAlgos,  &fcclReduceScatterAlgos,
                                           &fcclBroadcastAlgos, &fcclReduceAlgos,     &fcclGatherAlgos,
                                           &fcclScatterAlgos,   &fcclAllGatherVAlgos, &fcclReduceScatterVAlgos};
#define SETS (sizeof(kSets) / sizeof(kSets[0]))

static void testIds(void) {
  int forms = 0;
  for (size_t m = 0; m < SETS; m++) forms += kSets[m]->count;
  EXPECT_EQ_INT(forms + 3, FCCL_ALGO_IDS); /* + the barrier, the fused norm and the MoE kernels */
  EXPECT(FCCL_KERNEL_BARRIER < FCCL_KERNEL_COUNT && FCCL_KERNEL_FUSED_NORM < FCCL_KERNEL_COUNT &&
         FCCL_KERNEL_MOE < FCCL_KERNEL_COUNT);
  EXPECT(FCCL_FORM_ALLGATHER_COPY >= FCCL_KERNEL_COUNT && FCCL_FORM_ALLGATHER_COPY < FCCL_ALGO_IDS);
  EXPECT(FCCL_FORM_BROADCAST_COPY >= FCCL_KERNEL_COUNT && FCCL_FORM_BROADCAST_COPY < FCCL_ALGO_IDS);
  EXPECT(FCCL_ALGO_IDS <= FCCL_PRINT_FORM_FUSED_STAGED);
  for (int id = 0; id < FCCL_ALGO_IDS; id++) {
    int in = 0;
    for (size_t m = 0; m < SETS; m++) in += fcclAlgoSetForm(kSets[m], id) >= 0;
    const int own = id == FCCL_KERNEL_BARRIER || id == FCCL_KERNEL_FUSED_NORM || id == FCCL_KERNEL_MOE;
    EXPECT_MSG(in == (own ? 0 : 1), "%s (%d) is a form of %d collectives", fcclAlgoName(id), id, in);
    EXPECT((fcclAlgoSetOf(id) == NULL) == own);
    if (!own) EXPECT(fcclAlgoSetForm(fcclAlgoSetOf(id), id) >= 0);
    EXPECT_MSG(strcmp(fcclAlgoName(id), "unknown") != 0, "id %d has no name", id);
    for (int other = 0; other < id; other++)
      EXPECT_MSG(strcmp(fcclAlgoName(id), fcclAlgoName(other)) != 0, "ids %d and %d are both %s", other, id,
                 fcclAlgoName(id));
  }
  EXPECT(fcclAlgoSetOf(FCCL_ALGO_IDS) == NULL && fcclAlgoSetOf(-1) == NULL);
  EXPECT_EQ_INT(fcclAlgoSetForm(NULL, FCCL_ALGO_LL), -1);
}

/* The collectives' sets, what fcclEnqueue lets a call force and what their FCCL_*ALGO variables accept. */
static void testSets(void) {
  EXPECT(fcclCollAllReduce.algos == &fcclAllReduceAlgos);
  EXPECT(fcclCollAllGather.algos == &fcclAllGatherAlgos);
  EXPECT(fcclCollReduceScatter.algos == &fcclReduceScatterAlgos);
  EXPECT(fcclCollBroadcast.algos == &fcclBroadcastAlgos);
  EXPECT(fcclCollBcast.algos == &fcclBroadcastAlgos); /* the broadcast in place, under its own name */
  EXPECT(strcmp(fcclCollBcast.name, "fcclBcast") == 0);
  EXPECT(fcclCollReduce.algos == &fcclReduceAlgos);
  EXPECT(fcclCollGather.algos == &fcclGatherAlgos);
  EXPECT(fcclCollScatter.algos == &fcclScatterAlgos);
  EXPECT(fcclCollBarrier.algos == NULL);
  /* The all-reduce's forms are its algorithms, named and forced by the same word. */
  EXPECT_EQ_INT(fcclAllReduceAlgos.count, 6);
  for (int form = 0; form < fcclAllReduceAlgos.count; form++)
    EXPECT(strcmp(fcclAllReduceAlgos.requests[form], fcclAlgoName(fcclAllReduceAlgos.algos[form])) == 0);
  EXPECT(strcmp(fcclAllReduceAlgos.requestNames,
                "auto, oneshot, twoshot, ll, oneshot_push, oneshot_pull, twoshot_staged, twoshot_reg, ll128") == 0);
  /* copy: the all-gather's and the broadcast's, not the reduce-scatter's (a copy cannot reduce). */
  EXPECT_EQ_INT(fcclAllGatherAlgos.count, 4);
  EXPECT_EQ_INT(fcclReduceScatterAlgos.count, 3);
  EXPECT_EQ_INT(fcclBroadcastAlgos.count, 4);
  EXPECT(strcmp(fcclAllGatherAlgos.requestNames, "auto, ll, direct, staged, copy") == 0);
  EXPECT(strcmp(fcclBroadcastAlgos.requestNames, "auto, ll, direct, staged, copy") == 0);
  EXPECT(strcmp(fcclReduceScatterAlgos.requestNames, "auto, ll, direct, staged") == 0);
  /* The rooted collectives: LL, direct, staged; no copy form. */
  EXPECT_EQ_INT(fcclReduceAlgos.count, 3);
  EXPECT_EQ_INT(fcclGatherAlgos.count, 3);
  EXPECT_EQ_INT(fcclScatterAlgos.count, 3);
  EXPECT(strcmp(fcclReduceAlgos.requestNames, "auto, ll, direct, staged") == 0);
  EXPECT(strcmp(fcclGatherAlgos.requestNames, "auto, ll, direct, staged") == 0);
  EXPECT(strcmp(fcclScatterAlgos.requestNames, "auto, ll, direct, staged") == 0);
  /* The variable collectives: the all-gather's and reduce-scatter's kernel forms, no copy form. */
  EXPECT_EQ_INT(fcclAllGatherVAlgos.count, 3);
  EXPECT_EQ_INT(fcclReduceScatterVAlgos.count, 3);
  EXPECT(strcmp(fcclAllGatherVAlgos.requestNames, "auto, ll, direct, staged") == 0);
  EXPECT(strcmp(fcclReduceScatterVAlgos.requestNames, "auto, ll, direct, staged") == 0);
  /* The moving collectives list their forms in FCCL_MOVE_* order, each named "<collective>_<request>". */
  static const char* const requests[] = {"ll", "direct", "staged", "copy"};
  for (size_t m = 1; m < SETS; m++) {
    const fcclAlgoSet* set = kSets[m];
    for (int form = FCCL_MOVE_LL; form < set->count; form++) {
      char name[64];
      snprintf(name, sizeof(name), "%s_%s", set->collective, requests[form]);
      EXPECT_MSG(strcmp(set->requests[form], requests[form]) == 0, "%s form %d is %s", set->collective, form,
                 set->requests[form]);
      EXPECT_MSG(strcmp(fcclAlgoName(set->algos[form]), name) == 0, "%s is not %s", fcclAlgoName(set->algos[form]),
                 name);
      EXPECT(fcclAlgoSetOf(set->algos[form]) == set);
    }
  }
}

/* The names in the logs, error reports and fccl-info, and which are all-reduce algorithms (FCCL_ALGO). */
static void testNames(void) {
  const struct {
    int algo;
    const char* name;
  } names[] = {{FCCL_ALGO_LL, "ll"},
               {FCCL_ALGO_ONESHOT_PUSH, "oneshot_push"},
               {FCCL_ALGO_ONESHOT_PULL, "oneshot_pull"},
               {FCCL_ALGO_TWOSHOT_STAGED, "twoshot_staged"},
               {FCCL_ALGO_TWOSHOT_REG, "twoshot_reg"},
               {FCCL_ALGO_LL128, "ll128"},
               {FCCL_KERNEL_ALLGATHER_LL, "allgather_ll"},
               {FCCL_KERNEL_ALLGATHER_DIRECT, "allgather_direct"},
               {FCCL_KERNEL_ALLGATHER_STAGED, "allgather_staged"},
               {FCCL_FORM_ALLGATHER_COPY, "allgather_copy"},
               {FCCL_KERNEL_REDUCESCATTER_LL, "reducescatter_ll"},
               {FCCL_KERNEL_REDUCESCATTER_DIRECT, "reducescatter_direct"},
               {FCCL_KERNEL_REDUCESCATTER_STAGED, "reducescatter_staged"},
               {FCCL_KERNEL_BROADCAST_LL, "broadcast_ll"},
               {FCCL_KERNEL_BROADCAST_DIRECT, "broadcast_direct"},
               {FCCL_KERNEL_BROADCAST_STAGED, "broadcast_staged"},
               {FCCL_FORM_BROADCAST_COPY, "broadcast_copy"},
               {FCCL_KERNEL_REDUCE_LL, "reduce_ll"},
               {FCCL_KERNEL_REDUCE_DIRECT, "reduce_direct"},
               {FCCL_KERNEL_REDUCE_STAGED, "reduce_staged"},
               {FCCL_KERNEL_GATHER_LL, "gather_ll"},
               {FCCL_KERNEL_GATHER_DIRECT, "gather_direct"},
               {FCCL_KERNEL_GATHER_STAGED, "gather_staged"},
               {FCCL_KERNEL_SCATTER_LL, "scatter_ll"},
               {FCCL_KERNEL_SCATTER_DIRECT, "scatter_direct"},
               {FCCL_KERNEL_SCATTER_STAGED, "scatter_staged"},
               {FCCL_KERNEL_ALLGATHERV_LL, "allgatherv_ll"},
               {FCCL_KERNEL_ALLGATHERV_DIRECT, "allgatherv_direct"},
               {FCCL_KERNEL_ALLGATHERV_STAGED, "allgatherv_staged"},
               {FCCL_KERNEL_REDUCESCATTERV_LL, "reducescatterv_ll"},
               {FCCL_KERNEL_REDUCESCATTERV_DIRECT, "reducescatterv_direct"},
               {FCCL_KERNEL_REDUCESCATTERV_STAGED, "reducescatterv_staged"},
               {FCCL_KERNEL_BARRIER, "barrier"},
               {FCCL_KERNEL_FUSED_NORM, "fused_norm"},
               {FCCL_KERNEL_MOE, "moe"}};
  EXPECT_EQ_INT((int)(sizeof(names) / sizeof(names[0])), FCCL_ALGO_IDS);
  for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
    EXPECT_MSG(strcmp(fcclAlgoName(names[i].algo), names[i].name) == 0, "algorithm %d is named %s", names[i].algo,
               fcclAlgoName(names[i].algo));
    const int allReduce = fcclAlgoSetOf(names[i].algo) == &fcclAllReduceAlgos;
    EXPECT_EQ_INT(fcclAlgoParseRequest(names[i].name), allReduce ? names[i].algo : -1);
  }
}

/* The variable collectives' kernels take fcclDevVArgs: exactly their sets' forms say so (fcclDeviceLaunch refuses
 * them, fcclDeviceLaunchVariable takes only them). */
static void testVariableKernels(void) {
  for (int id = 0; id < FCCL_ALGO_IDS; id++) {
    const fcclAlgoSet* set = fcclAlgoSetOf(id);
    EXPECT_EQ_INT(fcclKernelIsVariable(id), set == &fcclAllGatherVAlgos || set == &fcclReduceScatterVAlgos);
  }
  EXPECT_EQ_INT(fcclKernelIsVariable(-1), 0);
  EXPECT_EQ_INT(fcclKernelIsVariable(FCCL_ALGO_IDS), 0);
}

int main(void) {
  testIds();
  testVariableKernels();
  testSets();
  testNames();
  return testSummary("kernel_list");
}
