/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The one list of the collectives' kernels and forms, read by host C and by nvcc. Everything that names a kernel
 * is generated from it: the kernel ids (fcclDevKernel_t, device_host.h), their names (fcclAlgoName), the launch
 * table (src/device/launch.cu) and the declarations of the device files' instantiation tables
 * (src/device/kernels.cuh), and each collective's set of forms (fcclAlgoSet, src/core/coll/algo.c).
 *
 * Rows, in each collective's form order (a form is its position: FCCL_MOVE_* for every collective but the
 * all-reduce):
 *   KERNEL(id, request, name, kernel)  a form run by a kernel of its own. id: its fcclDevKernel_t enumerator;
 *       request: the FCCL_ALGO (FCCL_ALLGATHER_ALGO, ...) value that forces it; name: what the logs, error
 *       reports and fccl-info call it; kernel: the __global__ template in src/device/ whose instantiations
 *       kernel##Instance returns (defined there with FCCL_KERNEL_TABLE, FCCL_RANKED_KERNEL_TABLE or
 *       FCCL_SIZED_KERNEL_TABLE of kernels.cuh).
 *   COPY(id, request, name)  a form with no kernel of its own: copy-engine copies between two barrier kernels,
 *       enqueued by its collective's launch (src/core/coll/). Its id is not a kernel: the ids follow the kernels'.
 *   OWN(id, name)  a kernel with a launcher of its own, outside the collectives' sets: the barrier, the fused
 *       all-reduce + RMSNorm (whose one-shot, one-rank, two-shot and legacy one-shot kernels report under one id),
 *       and the mixture-of-experts dispatch and combine (src/device/moe_*.cu, one id for both).
 *
 * Adding a form: a row here, its kernel in its device file (src/device/<collective>_<form>.cu, or the collective's
 * file), its rule in the selection (src/core/coll/algo.c). A collective with kernels of its own: its FCCL_<NAME>_FORMS
 * in FCCL_KERNEL_LIST and its set in algo.c (FCCL_DEFINE_SET_). docs/collectives.md#kernels.
 */
#ifndef FCCL_KERNEL_LIST_H_
#define FCCL_KERNEL_LIST_H_

/* fcclAllReduce (FCCL_ALGO). */
#define FCCL_ALLREDUCE_FORMS(KERNEL, COPY)                                                     \
  KERNEL(FCCL_ALGO_LL, "ll", "ll", allReduceLL)                                                \
  KERNEL(FCCL_ALGO_ONESHOT_PUSH, "oneshot_push", "oneshot_push", allReduceOneshotPush)         \
  KERNEL(FCCL_ALGO_ONESHOT_PULL, "oneshot_pull", "oneshot_pull", allReduceOneshotPull)         \
  KERNEL(FCCL_ALGO_TWOSHOT_STAGED, "twoshot_staged", "twoshot_staged", allReduceTwoshotStaged) \
  KERNEL(FCCL_ALGO_TWOSHOT_REG, "twoshot_reg", "twoshot_reg", allReduceTwoshotReg)             \
  KERNEL(FCCL_ALGO_LL128, "ll128", "ll128", allReduceLL128)

/* fcclAllGather (FCCL_ALLGATHER_ALGO), in FCCL_MOVE_* order. */
#define FCCL_ALLGATHER_FORMS(KERNEL, COPY)                                            \
  KERNEL(FCCL_KERNEL_ALLGATHER_LL, "ll", "allgather_ll", allGatherLL)                 \
  KERNEL(FCCL_KERNEL_ALLGATHER_DIRECT, "direct", "allgather_direct", allGatherDirect) \
  KERNEL(FCCL_KERNEL_ALLGATHER_STAGED, "staged", "allgather_staged", allGatherStaged) \
  COPY(FCCL_FORM_ALLGATHER_COPY, "copy", "allgather_copy")

/* fcclReduceScatter (FCCL_REDUCESCATTER_ALGO), in FCCL_MOVE_* order: no copy form (a copy cannot reduce). */
#define FCCL_REDUCESCATTER_FORMS(KERNEL, COPY)                                                    \
  KERNEL(FCCL_KERNEL_REDUCESCATTER_LL, "ll", "reducescatter_ll", reduceScatterLL)                 \
  KERNEL(FCCL_KERNEL_REDUCESCATTER_DIRECT, "direct", "reducescatter_direct", reduceScatterDirect) \
  KERNEL(FCCL_KERNEL_REDUCESCATTER_STAGED, "staged", "reducescatter_staged", reduceScatterStaged)

/* fcclBroadcast (FCCL_BROADCAST_ALGO), in FCCL_MOVE_* order. */
#define FCCL_BROADCAST_FORMS(KERNEL, COPY)                                            \
  KERNEL(FCCL_KERNEL_BROADCAST_LL, "ll", "broadcast_ll", broadcastLL)                 \
  KERNEL(FCCL_KERNEL_BROADCAST_DIRECT, "direct", "broadcast_direct", broadcastDirect) \
  KERNEL(FCCL_KERNEL_BROADCAST_STAGED, "staged", "broadcast_staged", broadcastStaged) \
  COPY(FCCL_FORM_BROADCAST_COPY, "copy", "broadcast_copy")

/* fcclReduce, in FCCL_MOVE_* order: every rank's input reduced into the root's output. */
#define FCCL_REDUCE_FORMS(KERNEL, COPY)                                      \
  KERNEL(FCCL_KERNEL_REDUCE_LL, "ll", "reduce_ll", reduceLL)                 \
  KERNEL(FCCL_KERNEL_REDUCE_DIRECT, "direct", "reduce_direct", reduceDirect) \
  KERNEL(FCCL_KERNEL_REDUCE_STAGED, "staged", "reduce_staged", reduceStaged)

/* fcclGather, in FCCL_MOVE_* order: every rank's block into the root's output. */
#define FCCL_GATHER_FORMS(KERNEL, COPY)                                      \
  KERNEL(FCCL_KERNEL_GATHER_LL, "ll", "gather_ll", gatherLL)                 \
  KERNEL(FCCL_KERNEL_GATHER_DIRECT, "direct", "gather_direct", gatherDirect) \
  KERNEL(FCCL_KERNEL_GATHER_STAGED, "staged", "gather_staged", gatherStaged)

/* fcclScatter, in FCCL_MOVE_* order: the root's block r into rank r's output. */
#define FCCL_SCATTER_FORMS(KERNEL, COPY)                                        \
  KERNEL(FCCL_KERNEL_SCATTER_LL, "ll", "scatter_ll", scatterLL)                 \
  KERNEL(FCCL_KERNEL_SCATTER_DIRECT, "direct", "scatter_direct", scatterDirect) \
  KERNEL(FCCL_KERNEL_SCATTER_STAGED, "staged", "scatter_staged", scatterStaged)
/* fcclAllGatherV and fcclReduceScatterV (FCCL_ALLGATHER_ALGO, FCCL_REDUCESCATTER_ALGO), in FCCL_MOVE_* order: the
 * all-gather's and the reduce-scatter's forms with a count per rank. Their kernels take fcclDevVArgs
 * (device_variable.h), launched by fcclDeviceLaunchVariable. */
#define FCCL_ALLGATHERV_FORMS(KERNEL, COPY)                                              \
  KERNEL(FCCL_KERNEL_ALLGATHERV_LL, "ll", "allgatherv_ll", allGatherVLL)                 \
  KERNEL(FCCL_KERNEL_ALLGATHERV_DIRECT, "direct", "allgatherv_direct", allGatherVDirect) \
  KERNEL(FCCL_KERNEL_ALLGATHERV_STAGED, "staged", "allgatherv_staged", allGatherVStaged)
#define FCCL_REDUCESCATTERV_FORMS(KERNEL, COPY)                                                      \
  KERNEL(FCCL_KERNEL_REDUCESCATTERV_LL, "ll", "reducescatterv_ll", reduceScatterVLL)                 \
  KERNEL(FCCL_KERNEL_REDUCESCATTERV_DIRECT, "direct", "reducescatterv_direct", reduceScatterVDirect) \
  KERNEL(FCCL_KERNEL_REDUCESCATTERV_STAGED, "staged", "reducescatterv_staged", reduceScatterVStaged)

/* Every kernel and form: the collectives' forms, then the kernels with launchers of their own. */
#define FCCL_KERNEL_LIST(KERNEL, COPY, OWN) \
  FCCL_ALLREDUCE_FORMS(KERNEL, COPY)        \
  FCCL_ALLGATHER_FORMS(KERNEL, COPY)        \
  FCCL_REDUCESCATTER_FORMS(KERNEL, COPY)    \
  FCCL_BROADCAST_FORMS(KERNEL, COPY)        \
  FCCL_REDUCE_FORMS(KERNEL, COPY)           \
  FCCL_GATHER_FORMS(KERNEL, COPY)           \
  FCCL_SCATTER_FORMS(KERNEL, COPY)          \
  FCCL_ALLGATHERV_FORMS(KERNEL, COPY)       \
  FCCL_REDUCESCATTERV_FORMS(KERNEL, COPY)   \
  OWN(FCCL_KERNEL_BARRIER, "barrier")       \
  OWN(FCCL_KERNEL_FUSED_NORM, "fused_norm") \
  OWN(FCCL_KERNEL_MOE, "moe")

/* Row macros for expansions that skip a kind of row. */
#define FCCL_LIST_SKIP2_(a, b)
#define FCCL_LIST_SKIP3_(a, b, c)
#define FCCL_LIST_SKIP4_(a, b, c, d)

#endif /* FCCL_KERNEL_LIST_H_ */
