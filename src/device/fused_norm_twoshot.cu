/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fcclAllReduceAddRMSNorm, two-shot form (docs/fused.md#how-the-data-moves), for many tokens: each rank reduces and
 * normalises only the rows it owns, then the rows' results (r', the output row, the dynamic scale) go to every
 * other rank. In rounds of up to n x a.roundRows rows; round k (staging parity (epoch + k) & 1) is split into n
 * contiguous owner shares of divUp(len, n) rows (the last ones shorter or empty):
 *
 *   push(k)  staged input: our rows of every other owner's share into its inbox [parity][me], then pad A step k + 1
 *            (release). Registered input: nothing; the owner reads every rank's input in place.
 *   wait A   staged: every writer's rows of our share arrived (acquire).
 *   norm(k)  our share, each row by one group of threads (fused_norm.cuh: the row kernel, as in the one-shot form,
 *            so the same bits): r', the output row and the scale go into our buffers and, from the same registers,
 *            into our region [parity][me] of every peer's result area; then pad B step k + 1 (release).
 *   wait B   every owner's results of round k arrived (acquire); copied into our residual, output and scales.
 *
 * Row i of a share is handled by the block of its batch (fused::forEachRow) on every rank, in pushing, normalising
 * and copying out alike (the grid and the batches are the same everywhere: core/coll/fused_norm.c computes the grid
 * from the call's arguments and the GPU, the batch from the row's size), and flags go between blocks of the same
 * index, so a block waits only for the rows it handles.
 *
 * Staging reuse. Staged input: as the staged two-shot all-reduce (allreduce_twoshot_staged.cu): push(k + 1) is issued
 * after wait A of round k, an owner writes our result area of a parity again only after our push of the round after the
 * one we copied out of it, and round 1 (the parity a one-shot call before may still be reading) is pushed only once
 * every peer reached this call. Registered input pushes nothing, so pad A says instead:
 *   ready   (step 1, relaxed post, acquire once seen) a peer reached the call: its input is final, and its result
 *           area is free for rounds 0 and 1.
 *   copied  (step k + 2, release, after copying round k out) our result area of round k's parity is free again; an
 *           owner waits for it before it writes round k + 2.
 * Either way a rank leaves once every owner's last results arrived, each posted after the owner read every rank's
 * rows of its share: nobody reads our input or inbox any more, nothing more is written into our staging, and the
 * next call's first writes into our result area wait for our first flag of that call.
 */
#include "fused_norm.cuh"
#include "kernels.cuh"

namespace fccl {

namespace {

/* Round k: rows [start, start + len), owner s's share [start + s * share, + ownerLen(s)). */
struct RowRound {
  uint64_t start, len, share, parity;
  __device__ __forceinline__ RowRound(uint64_t k, uint64_t tokens, uint64_t cap, int n, uint64_t epoch) {
    start = k * cap;
    len = tokens - start < cap ? tokens - start : cap;
    share = divUp(len, (uint64_t)n);
    parity = (epoch + k) & 1;
  }
  __device__ __forceinline__ uint64_t ownerStart(int s) const { return start + (uint64_t)s * share; }
  __device__ __forceinline__ uint64_t ownerLen(int s) const {
    const uint64_t begin = (uint64_t)s * share;
    if (begin >= len) return 0;
    return len - begin < share ? len - begin : share;
  }
};

/* Bytes one 16-byte unit of a 1-byte element type moves: the FP8 output rows, copied out of the result area. */
using ByteIO = UnitIO<MoveTraits<1>, 16>;

}  // namespace

template <int DT, bool FP8, int NR, bool VEC>
__global__ void __launch_bounds__(FCCL_FUSED_MAX_BLOCK_THREADS) fusedNormTwoshot(fcclDevComm c, fcclFusedArgs a) {
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
  const uint64_t outRowBytes = FP8 ? a.hidden : rowBytes;
  const uint64_t outPitch = divUp(outRowBytes, FCCL_UNIT_BYTES) * FCCL_UNIT_BYTES;
  const bool dynamic = FP8 && a.scaleMode == fcclScaleDynamic;
  /* An owner's region of the result area: roundRows rows of r' (with a residual), of output, then the scales. */
  const uint64_t resPitch = a.residual ? pitch : 0;
  const uint64_t outAt = a.roundRows * resPitch;
  const uint64_t scaleAt = a.roundRows * (resPitch + outPitch);
  const uint64_t cap = a.roundRows * (uint64_t)n;
  const uint64_t rounds = divUp(a.tokens, cap);
  const float staticScale = FP8 && a.scaleMode == fcclScaleStatic ? *ptr<const float>(a.scale) : 1.0f;
  fused::RowGroup g(fcclFusedShapeOf(rowBytes).rowThreads);

  if (a.registered) {
    postPeers(c, c.layout.signalAOffset, sigValue(epoch, 1), false);
    if (waitPeers(c, c.layout.signalAOffset, sigValue(epoch, 1), true, kernel, FCCL_PHASE_READY, epoch)) {
      epochEnd(c, epoch);
      return;
    }
  }

  /* Our rows of every other owner's share of round k into its inbox, then "inbox full". */
  auto push = [&](uint64_t k) {
    const RowRound r(k, a.tokens, cap, n, epoch);
    uint64_t outbound[FCCL_DEVICE_MAX_RANKS] = {};
    peerRegionsOutbound<NR>(c, c.layout.inboxOffset, r.parity, outbound);
#pragma unroll
    for (int s = 0; s < NR; s++) {
      if (s >= n || s == me) continue;
      const uint64_t first = r.ownerStart(s);
      fused::forEachRow(r.ownerLen(s), g, [&](uint64_t i) {
        uint64_t rows[FCCL_DEVICE_MAX_RANKS] = {};
        rows[s] = outbound[s] + i * pitch;
        fused::pushRow<IO, NR>(a.input + (first + i) * rowBytes, rowBytes, rows, g);
      });
    }
    __syncthreads();
    postPeers(c, c.layout.signalAOffset, sigValue(epoch, (uint32_t)k + 1), true);
  };

  if (!a.registered && rounds > 0) push(0);
  for (uint64_t k = 0; k < rounds; k++) {
    const RowRound r(k, a.tokens, cap, n, epoch);
    if (!a.registered) {
      if (waitPeers(c, c.layout.signalAOffset, sigValue(epoch, (uint32_t)k + 1), true, kernel, FCCL_PHASE_INBOX,
                    epoch))
        break;
      if (k + 1 < rounds) push(k + 1);
    } else if (k >= 2 && waitPeers(c, c.layout.signalAOffset, sigValue(epoch, (uint32_t)k), true, kernel,
                                   FCCL_PHASE_CONSUMED, epoch)) {
      break;
    }

    /* Our share: every rank's rows from our input, the inboxes or (registered) every rank's input. */
    {
      uint64_t inbound[FCCL_DEVICE_MAX_RANKS] = {};
      if (!a.registered) peerRegionsInbound<NR>(c, c.layout.inboxOffset, r.parity, inbound);
      fused::RowCopies copies = {};
      peerRegionsOutbound<NR>(c, c.layout.resultOffset, r.parity, copies.base);
      const uint64_t first = r.ownerStart(me);
      fused::forEachRow(r.ownerLen(me), g, [&](uint64_t i) {
        const uint64_t row = first + i;
        uint64_t bases[FCCL_DEVICE_MAX_RANKS] = {};
#pragma unroll
        for (int w = 0; w < NR; w++)
          if (w < n)
            bases[w] = a.registered ? a.peerInput[w] + row * rowBytes
                                    : w == me ? a.input + row * rowBytes : inbound[w] + i * pitch;
        copies.residual = i * pitch;
        copies.output = outAt + i * outPitch;
        copies.scale = scaleAt + i * sizeof(float);
        fused::normRow<TT, FP8, NR, VEC, true>(a, bases, n, row, staticScale, g, scratch, &copies);
      });
    }
    __syncthreads();
    postPeers(c, c.layout.signalBOffset, sigValue(epoch, (uint32_t)k + 1), true);
    if (waitPeers(c, c.layout.signalBOffset, sigValue(epoch, (uint32_t)k + 1), true, kernel, FCCL_PHASE_RESULT,
                  epoch))
      break;

    /* Every other owner's results into our residual, output and scales. */
#pragma unroll
    for (int s = 0; s < NR; s++) {
      if (s >= n || s == me) continue;
      const uint64_t region = stagingRegion(c, c.layout.resultOffset, r.parity, s, me);
      const uint64_t first = r.ownerStart(s);
      fused::forEachRow(r.ownerLen(s), g, [&](uint64_t i) {
        const uint64_t row = first + i;
        if (a.residual) fused::copyRow<IO>(region + i * pitch, a.residual + row * rowBytes, rowBytes, g);
        if constexpr (FP8)
          fused::copyRow<ByteIO>(region + outAt + i * outPitch, a.output + row * outRowBytes, outRowBytes, g);
        else
          fused::copyRow<IO>(region + outAt + i * outPitch, a.output + row * outRowBytes, outRowBytes, g);
        if (dynamic && g.lane == 0) ptr<float>(a.scale)[row] = *ptr<const float>(region + scaleAt + i * sizeof(float));
      });
    }
    /* Registered: our result area of this parity is free for round k + 2. */
    if (a.registered && k + 2 < rounds) {
      __syncthreads();
      postPeers(c, c.layout.signalAOffset, sigValue(epoch, (uint32_t)k + 2), true);
    }
  }
  epochEnd(c, epoch);
}

/* The two-shot kernel for (datatype, FP8 output or not, rank bound, vector path); NULL for a type without one. The
 * general path comes in the largest rank bound only, as the one-shot form's (fused_norm_oneshot.cu). */
const void* fusedNormTwoshotInstance(fcclDataType_t type, bool fp8, int rankBound, bool vec) {
#define FCCL_FUSED_ENTRY_(dt, f8, nr, v)                      \
  if (type == dt && fp8 == f8 && rankBound == nr && vec == v) \
    return reinterpret_cast<const void*>(&fusedNormTwoshot<dt, f8, nr, v>);
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
