/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fcclAllReduceAddRMSNorm, one-shot form (every rank computes every row; the two-shot form, where each rank
 * computes the rows it owns, is fused_norm_twoshot.cu) and one rank: the sum over ranks of every token row, the
 * residual add and the RMSNorm (and the FP8 quantisation) in one kernel. Each row is the row kernel's
 * (fused_norm.cuh): one group of threads reduces it in rank order with the all-reduce's own arithmetic, adds the
 * residual and normalises it from registers, in an order that depends on the row's size only, so that a row's bits
 * depend on nothing but its own data: not on the token count, the grid or the form (docs/fused.md#batch-invariance).
 *
 *   one rank  (fused_norm_local.cu) no peers and no flags: rows in batches, no staging rounds.
 *   registered (the input lies in registered memory on every rank) each group pulls its rows from every rank's
 *          input in place, as the one-shot pull does:
 *     ready  (pad A step 1, relaxed post, one acquire load once seen) a peer reached the call: its input is final.
 *     done   (pad B step 1, release) a peer finished reading our input; we may return.
 *   staged (plain input) in rounds of a.roundRows rows, as the staged all-gather moves its blocks: round k
 *          (staging parity (epoch + k) & 1) of our rows goes into our inbox region of every peer's slot, each row
 *          at a 16-byte pitch, announced by pad A step k + 1 (release); every rank reduces and normalises all the
 *          round's rows from its own input and its inbox, then posts pad B step k + 1 ("consumed"), which a writer
 *          waits for before round k + 2 reuses the parity. Round k + 1 is pushed while round k is reduced, and the
 *          call ends once every peer consumed our last round, so that the next call finds every inbox free.
 * Rows go to blocks in batches (fused::forEachRow) and flags go between blocks of the same index, so the grid
 * must be the same on every rank (core/coll/fused_norm.c computes it from the call's arguments and the GPU only).
 */
#include "fused_norm.cuh"
#include "kernels.cuh"

namespace fccl {

using fused::RowGroup;

template <int DT, bool FP8, int NR, bool VEC>
__global__ void __launch_bounds__(FCCL_FUSED_MAX_BLOCK_THREADS) fusedNorm(fcclDevComm c, fcclFusedArgs a) {
  using TT = TypeTraits<DT>;
  using IO = UnitIO<TT, 16>;
  __shared__ fused::Scratch scratch;
  gridDependencyEnter();
  const uint64_t epoch = epochBegin(c, a.print);
  const int n = c.nranks;
  const int me = c.rank;
  const int kernel = FCCL_KERNEL_FUSED_NORM;
  const uint64_t rowBytes = a.hidden * sizeof(typename TT::Bits);
  const uint64_t pitch = divUp(rowBytes, FCCL_UNIT_BYTES) * FCCL_UNIT_BYTES;
  /* Written by stream work before this kernel, read once. */
  const float staticScale = FP8 && a.scaleMode == fcclScaleStatic ? *ptr<const float>(a.scale) : 1.0f;
  RowGroup g(fcclFusedShapeOf(rowBytes).rowThreads);

  if (a.registered) {
    postPeers(c, c.layout.signalAOffset, sigValue(epoch, 1), false);
    if (waitPeers(c, c.layout.signalAOffset, sigValue(epoch, 1), true, kernel, FCCL_PHASE_READY, epoch)) {
      epochEnd(c, epoch);
      return;
    }
    fused::forEachRow(a.tokens, g, [&](uint64_t row) {
      uint64_t bases[FCCL_DEVICE_MAX_RANKS] = {};
#pragma unroll
      for (int r = 0; r < NR; r++)
        if (r < n) bases[r] = a.peerInput[r] + row * rowBytes;
      fused::normRow<TT, FP8, NR, VEC, false>(a, bases, n, row, staticScale, g, scratch, nullptr);
    });
    __syncthreads();
    postPeers(c, c.layout.signalBOffset, sigValue(epoch, 1), true);
    (void)waitPeers(c, c.layout.signalBOffset, sigValue(epoch, 1), false, kernel, FCCL_PHASE_DONE, epoch);
    epochEnd(c, epoch);
    return;
  }

  /* Our rows of round k into our inbox region of every peer; all of round k's rows reduced and normalised from our
   * input and every writer's inbox region. */
  auto fill = [&](uint64_t k) {
    const StagedRound r(k, a.tokens, a.roundRows, epoch);
    uint64_t outbound[FCCL_DEVICE_MAX_RANKS] = {};
    peerRegionsOutbound<NR>(c, c.layout.inboxOffset, r.parity, outbound);
    fused::forEachRow(r.len, g, [&](uint64_t i) {
      uint64_t rows[FCCL_DEVICE_MAX_RANKS] = {};
#pragma unroll
      for (int p = 0; p < NR; p++)
        if (outbound[p]) rows[p] = outbound[p] + i * pitch;
      fused::pushRow<IO, NR>(a.input + (r.start + i) * rowBytes, rowBytes, rows, g);
    });
  };
  auto consume = [&](uint64_t k) {
    const StagedRound r(k, a.tokens, a.roundRows, epoch);
    uint64_t inbound[FCCL_DEVICE_MAX_RANKS] = {};
    peerRegionsInbound<NR>(c, c.layout.inboxOffset, r.parity, inbound);
    fused::forEachRow(r.len, g, [&](uint64_t i) {
      uint64_t bases[FCCL_DEVICE_MAX_RANKS] = {};
#pragma unroll
      for (int w = 0; w < NR; w++)
        if (w < n) bases[w] = w == me ? a.input + (r.start + i) * rowBytes : inbound[w] + i * pitch;
      fused::normRow<TT, FP8, NR, VEC, false>(a, bases, n, r.start + i, staticScale, g, scratch, nullptr);
    });
  };
  stagedRounds(c, divUp(a.tokens, a.roundRows), epoch, kernel, fill, consume);
  epochEnd(c, epoch);
}

/* The one-shot kernel for (datatype, FP8 output or not, rank bound, vector path); NULL for a type without one. The
 * general path (unaligned buffers, rows of a partial unit) comes in the largest rank bound only: it is there to be
 * right, the vector path to be fast. */
const void* fusedNormInstance(fcclDataType_t type, bool fp8, int rankBound, bool vec) {
#define FCCL_FUSED_ENTRY_(dt, f8, nr, v)                      \
  if (type == dt && fp8 == f8 && rankBound == nr && vec == v) \
    return reinterpret_cast<const void*>(&fusedNorm<dt, f8, nr, v>);
#define FCCL_FUSED_FOR_BOUNDS_(dt, f8)                   \
  FCCL_FUSED_ENTRY_(dt, f8, 2, true)                     \
  FCCL_FUSED_ENTRY_(dt, f8, 4, true)                     \
  FCCL_FUSED_ENTRY_(dt, f8, FCCL_DEVICE_MAX_RANKS, true) \
  FCCL_FUSED_ENTRY_(dt, f8, FCCL_DEVICE_MAX_RANKS, false)
#define FCCL_FUSED_FOR_OUT_(dt) FCCL_FUSED_FOR_BOUNDS_(dt, false) FCCL_FUSED_FOR_BOUNDS_(dt, true)
  FCCL_FUSED_FOR_OUT_(fcclFloat16)
  FCCL_FUSED_FOR_OUT_(fcclBfloat16)
  FCCL_FUSED_FOR_OUT_(fcclFloat32)
#undef FCCL_FUSED_FOR_OUT_
#undef FCCL_FUSED_FOR_BOUNDS_
#undef FCCL_FUSED_ENTRY_
  return nullptr;
}

}  // namespace fccl
