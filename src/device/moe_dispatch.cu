/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The mixture-of-experts dispatch (fcclMoeDispatch; docs/moe.md#dispatch): every token goes once to each rank that
 * holds one of its top-k experts, and each rank receives its rows grouped by local expert. One kernel of G blocks
 * (the SM budget) per rank, in steps separated by grid barriers (moe_common.cuh):
 *
 *   1. route    block b takes tokens [b x chunk, (b + 1) x chunk); its warp 0 validates the routing (an index
 *               outside [-1, experts) or repeated in its row is dropped and reported) and ranks, in token order,
 *               each token among the block's tokens for each rank and each entry among the block's entries of
 *               its expert; the block's totals go to the scratch.
 *   2. bases    each block adds the totals of the blocks before it: every token's slot in each receiver's staging
 *               and every entry's position among this rank's rows of its expert follow the order of the tokens,
 *               never the timing. Block 0 also has this rank's totals.
 *   3. free     every block waits until each receiver has read its staging of the layout's previous call.
 *   4. counts   block 0 writes each receiver its rows per expert of the receiver, the slots it will fill and the
 *               first invalid entry, then posts COUNTS.
 *   5. push     each block copies its tokens' rows (and FP8 scales) with their routing (the local expert, the
 *               position, the weight of every entry) into the slots of every receiver, one read of each row; after
 *               a grid barrier block 0 posts DATA.
 *   6. place    each block waits for every source's COUNTS and places the local experts: rows per expert, where
 *               each expert's rows start (packed: one after the other, each start aligned; padded: at e x stride),
 *               where each source's rows of it start (sources in rank order). Block 0 writes the counts and
 *               offsets and keeps them for the combine; an invalid entry of any source is noted here, by every
 *               rank, and recorded at the end of the call, naming that source (fcclInvalidArgument).
 *   7. expand   source by source (ours first), once its DATA is in, the grid's warps copy each slot's row to its
 *               place for each of its local experts, with the weight, the source token and where the combine must
 *               send the expert's output back (the scratch's rowSource).
 *   8. end      after a grid barrier block 0 posts FREE to every rank and records the call's epoch.
 * A failed wait (timeout, abort, a peer out of step) ends the block's steps; the others end at their next wait.
 */
#include "kernels.cuh"
#include "moe_common.cuh"

namespace fccl {

/* Routing entry `entry` of topkIdx, widened. */
__device__ __forceinline__ int64_t moeLoadIndex(const fcclMoeArgs& a, uint64_t entry) {
  if (a.idx64) return ptr<const int64_t>(a.topkIdx)[entry];
  return (int64_t)ptr<const int32_t>(a.topkIdx)[entry];
}

/*
 * Step 1 for tokens [t0, t1) by one warp: every entry validated into entryExpert, each token's rank among the
 * block's tokens for each rank it goes to (tokenSlot; counts[numExperts + rank] its tokens for that rank), and each
 * entry's rank among the block's entries of its expert (entryIntra; counts[expert] its entries). Tokens and entries
 * are taken in order, 32 at a time. Returns the first invalid entry (fcclMoeBadEntry) on lane 0.
 */
__device__ uint64_t moeRoute(const fcclMoeArgs& a, uint64_t t0, uint64_t t1, int* counts) {
  const fcclMoeShape& s = a.shape;
  const int k = s.topk, numExperts = s.numExperts, local = s.localExperts, lane = threadIdx.x & 31;
  int32_t* entryExpert = moeScratch<int32_t>(a, s.entryExpertOffset);
  int32_t* entryIntra = moeScratch<int32_t>(a, s.entryIntraOffset);
  int32_t* tokenSlot = moeScratch<int32_t>(a, s.tokenSlotOffset);
  int* rankCounts = counts + numExperts;
  uint64_t bad = FCCL_MOE_NO_BAD_ENTRY;
  for (uint64_t first = t0; first < t1; first += 32) {
    const uint64_t t = first + lane;
    uint32_t ranks = 0;
    if (t < t1) {
      int32_t expert[FCCL_MOE_MAX_TOPK];
#pragma unroll
      for (int j = 0; j < FCCL_MOE_MAX_TOPK; j++) {
        expert[j] = -1;
        if (j >= k) continue;
        const int64_t value = moeLoadIndex(a, t * k + j);
        bool invalid = value < -1 || value >= numExperts;
        if (value >= 0 && !invalid) {
#pragma unroll
          for (int i = 0; i < j; i++) invalid |= expert[i] == (int32_t)value;
        }
        if (invalid) {
          const uint64_t entry = fcclMoeBadEntry(t, (uint32_t)j, value);
          bad = entry < bad ? entry : bad;
        } else {
          expert[j] = (int32_t)value;
        }
        entryExpert[t * k + j] = expert[j];
        if (expert[j] >= 0) ranks |= 1u << (expert[j] / local);
      }
    }
    for (int d = 0; d < s.nranks; d++) {
      const bool goes = (ranks >> d) & 1u;
      const uint32_t ballot = __ballot_sync(0xffffffffu, goes);
      if (goes) tokenSlot[t * FCCL_DEVICE_MAX_RANKS + d] = rankCounts[d] + __popc(ballot & lanesBelow());
      __syncwarp();
      if (lane == 0) rankCounts[d] += __popc(ballot);
      __syncwarp();
    }
  }
  __syncwarp(); /* entryExpert as this warp wrote it */
  const uint64_t q1 = t1 * (uint64_t)k;
  for (uint64_t first = t0 * (uint64_t)k; first < q1; first += 32) {
    const uint64_t q = first + lane;
    const int expert = q < q1 ? entryExpert[q] : -1;
    const uint32_t same = __match_any_sync(0xffffffffu, expert);
    const int before = expert >= 0 ? counts[expert] : 0;
    __syncwarp();
    if (expert >= 0 && lane == __ffs(same) - 1) counts[expert] = before + __popc(same);
    __syncwarp();
    if (expert >= 0) entryIntra[q] = before + __popc(same & lanesBelow());
  }
#pragma unroll
  for (int d = 16; d > 0; d >>= 1) {
    const uint64_t other = __shfl_down_sync(0xffffffffu, bad, d);
    bad = other < bad ? other : bad;
  }
  return bad;
}

/* Step 5 for this block's tokens [t0, t1): each token's row into its slot of every rank it goes to. bases holds
 * the block's first position per expert, then its first slot per rank. */
__device__ void moePush(const fcclDevComm& c, const fcclMoeArgs& a, uint64_t t0, uint64_t t1, const int* bases) {
  const fcclMoeShape& s = a.shape;
  const int k = s.topk, local = s.localExperts, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int32_t* entryExpert = moeScratch<int32_t>(a, s.entryExpertOffset);
  const int32_t* entryIntra = moeScratch<int32_t>(a, s.entryIntraOffset);
  const int32_t* tokenSlot = moeScratch<int32_t>(a, s.tokenSlotOffset);
  const uint64_t rowBytes = fcclMoeRowBytes(&s, a.elemBytes), units = rowBytes / FCCL_UNIT_BYTES;
  const uint64_t scales = a.elemBytes == 1 ? fcclMoeScaleCount(&s) : 0;
  const MoeSplit split(t1 - t0, units, FCCL_MOE_WARPS);
  for (uint64_t item = warp; item < split.total(t1 - t0); item += FCCL_MOE_WARPS) {
    uint64_t row, begin, end;
    split.range(item, units, row, begin, end);
    const uint64_t t = t0 + row;
    const int expert = lane < k ? entryExpert[t * k + lane] : -1;
    const uint32_t ranks = __reduce_or_sync(0xffffffffu, expert >= 0 ? 1u << (expert / local) : 0u);
    uint64_t slot[FCCL_DEVICE_MAX_RANKS];
#pragma unroll
    for (int d = 0; d < FCCL_DEVICE_MAX_RANKS; d++)
      slot[d] = (ranks >> d) & 1u
                    ? a.workspace[d] + s.stagingOffset +
                          ((uint64_t)c.rank * s.maxTokens +
                           (uint64_t)(bases[s.numExperts + d] + tokenSlot[t * FCCL_DEVICE_MAX_RANKS + d])) *
                              s.dispatchPitch
                    : 0;
    if (begin == 0) {
      /* The first part of the row writes its routing, as each receiver reads it, and the FP8 scales. */
      const int position = expert >= 0 ? bases[expert] + entryIntra[t * k + lane] : 0;
      const float weight = a.topkWeights != 0 && lane < k ? ptr<const float>(a.topkWeights)[t * k + lane] : 0.0f;
#pragma unroll
      for (int d = 0; d < FCCL_DEVICE_MAX_RANKS; d++) {
        if (slot[d] == 0) continue;
        if (lane < k) {
          const bool here = expert >= 0 && expert / local == d;
          *ptr<int32_t>(slot[d] + FCCL_MOE_META_LOCAL + 4 * lane) = here ? expert - d * local : -1;
          *ptr<int32_t>(slot[d] + FCCL_MOE_META_POS + 4 * lane) = here ? position : 0;
          *ptr<float>(slot[d] + FCCL_MOE_META_WEIGHT + 4 * lane) = weight;
        }
        if (lane == 0) *ptr<int32_t>(slot[d]) = (int32_t)t;
      }
      for (uint64_t i = lane; i < scales; i += 32) {
        const float scale = ptr<const float>(a.inputScales)[t * scales + i];
#pragma unroll
        for (int d = 0; d < FCCL_DEVICE_MAX_RANKS; d++)
          if (slot[d] != 0) *ptr<float>(slot[d] + FCCL_MOE_META_BYTES + rowBytes + 4 * i) = scale;
      }
    }
    const uint64_t source = a.input + t * rowBytes;
    for (uint64_t u = begin + lane; u < end; u += 4 * 32) {
      uint64_t lo[4], hi[4];
#pragma unroll
      for (int r = 0; r < 4; r++)
        if (u + 32 * r < end) ld_data16(ptr<const void>(source + (u + 32 * r) * FCCL_UNIT_BYTES), lo[r], hi[r]);
#pragma unroll
      for (int d = 0; d < FCCL_DEVICE_MAX_RANKS; d++) {
        if (slot[d] == 0) continue;
#pragma unroll
        for (int r = 0; r < 4; r++)
          if (u + 32 * r < end)
            st_data16(ptr<void>(slot[d] + FCCL_MOE_META_BYTES + (u + 32 * r) * FCCL_UNIT_BYTES), lo[r], hi[r]);
      }
    }
  }
}

/*
 * Step 7 for one source: its `sent` slots in our staging, shared by the grid's warps, each row copied to its place
 * for each of its local experts. starts: each local expert's first row; offsets: [source][expert] the first row of
 * the source's rows among the expert's. Returns false when a slot names a row outside the output (recorded).
 */
__device__ bool moeExpand(const fcclDevComm& c, const fcclMoeArgs& a, int source, int sent, const int* starts,
                          const int* offsets, uint64_t epoch) {
  const fcclMoeShape& s = a.shape;
  const int k = s.topk, local = s.localExperts, lane = threadIdx.x & 31;
  int32_t* rowSource = moeScratch<int32_t>(a, s.rowSourceOffset);
  const uint64_t rowBytes = fcclMoeRowBytes(&s, a.elemBytes), units = rowBytes / FCCL_UNIT_BYTES;
  const uint64_t scales = a.elemBytes == 1 ? fcclMoeScaleCount(&s) : 0;
  const uint64_t warps = (uint64_t)gridDim.x * FCCL_MOE_WARPS;
  const MoeSplit split((uint64_t)sent, units, warps);
  bool ok = true;
  for (uint64_t item = (uint64_t)blockIdx.x * FCCL_MOE_WARPS + (threadIdx.x >> 5); item < split.total(sent);
       item += warps) {
    uint64_t index, begin, end;
    split.range(item, units, index, begin, end);
    const uint64_t slot = a.workspace[c.rank] + s.stagingOffset +
                          ((uint64_t)source * s.maxTokens + index) * s.dispatchPitch;
    const int token = *ptr<const int32_t>(slot);
    int64_t target = -1;
    float weight = 0.0f;
    if (lane < k) {
      const int expert = *ptr<const int32_t>(slot + FCCL_MOE_META_LOCAL + 4 * lane);
      const int position = *ptr<const int32_t>(slot + FCCL_MOE_META_POS + 4 * lane);
      weight = *ptr<const float>(slot + FCCL_MOE_META_WEIGHT + 4 * lane);
      if (expert >= 0) {
        target = expert < local && position >= 0 ? (int64_t)starts[expert] + offsets[source * local + expert] + position
                                                 : (int64_t)s.recvRows;
        if (target >= (int64_t)s.recvRows || token < 0 || (uint64_t)token >= s.maxTokens) {
          /* Only a broken protocol gets here; recorded rather than written out of bounds. */
          recordError(c.state, c.hostWords, fcclInternalError, c.rank, FCCL_KERNEL_MOE, FCCL_PHASE_MOE_DATA, source,
                      epoch, 0, 0);
          target = -1;
          ok = false;
        }
      }
    }
    int64_t rows[FCCL_MOE_MAX_TOPK];
#pragma unroll
    for (int j = 0; j < FCCL_MOE_MAX_TOPK; j++) rows[j] = __shfl_sync(0xffffffffu, target, j);
    if (begin == 0) {
      if (target >= 0) {
        if (a.recvWeights != 0) ptr<float>(a.recvWeights)[target] = weight;
        if (a.recvSources != 0) ptr<int32_t>(a.recvSources)[target] = (int32_t)(source * s.maxTokens + token);
        rowSource[target] = (int32_t)((((uint64_t)token * k + lane) << 3) | (uint64_t)source);
      }
      for (uint64_t i = lane; i < scales; i += 32) {
        const float scale = *ptr<const float>(slot + FCCL_MOE_META_BYTES + rowBytes + 4 * i);
#pragma unroll
        for (int j = 0; j < FCCL_MOE_MAX_TOPK; j++)
          if (rows[j] >= 0) ptr<float>(a.outputScales)[(uint64_t)rows[j] * scales + i] = scale;
      }
    }
    for (uint64_t u = begin + lane; u < end; u += 4 * 32) {
      uint64_t lo[4], hi[4];
#pragma unroll
      for (int r = 0; r < 4; r++)
        if (u + 32 * r < end)
          ld_data16(ptr<const void>(slot + FCCL_MOE_META_BYTES + (u + 32 * r) * FCCL_UNIT_BYTES), lo[r], hi[r]);
#pragma unroll
      for (int j = 0; j < FCCL_MOE_MAX_TOPK; j++) {
        if (rows[j] < 0) continue;
#pragma unroll
        for (int r = 0; r < 4; r++)
          if (u + 32 * r < end)
            st_data16(ptr<void>(a.output + (uint64_t)rows[j] * rowBytes + (u + 32 * r) * FCCL_UNIT_BYTES), lo[r],
                      hi[r]);
      }
    }
  }
  return __syncthreads_and(ok) != 0;
}

__global__ void __launch_bounds__(FCCL_MOE_THREADS, 1) moeDispatchKernel(fcclDevComm c, fcclMoeArgs a) {
  /* Route: the block's rows per expert, then its tokens per rank. Bases: the block's first position per expert and
   * first slot per rank. Totals: this rank's (block 0), then the received rows per local expert. */
  __shared__ int counts[FCCL_MOE_MAX_EXPERTS + FCCL_DEVICE_MAX_RANKS];
  __shared__ int bases[FCCL_MOE_MAX_EXPERTS + FCCL_DEVICE_MAX_RANKS];
  __shared__ int totals[FCCL_MOE_MAX_EXPERTS + FCCL_DEVICE_MAX_RANKS];
  /* Place: [source][local expert] rows, then where the source's rows of the expert start; each expert's first row. */
  __shared__ int offsets[FCCL_MOE_MAX_EXPERTS];
  __shared__ int starts[FCCL_MOE_MAX_EXPERTS];
  __shared__ int sent[FCCL_DEVICE_MAX_RANKS];
  __shared__ uint64_t badOf[FCCL_DEVICE_MAX_RANKS];
  __shared__ int64_t rowsEnd;
  __shared__ int badSource; /* block 0: the first source with invalid routing, recorded once the call is done */

  gridDependencyEnter();
  const uint64_t epoch = epochBegin(c, a.print);
  announceCall(c); /* for a peer in another call at this epoch (Spin::check) */
  const fcclMoeShape& s = a.shape;
  const int n = c.nranks, me = c.rank, numExperts = s.numExperts, local = s.localExperts;
  const int tid = threadIdx.x;
  if (tid == 0) badSource = -1;
  fcclMoeScratchHeader* header = moeHeader(a);
  const uint64_t lastEpoch = header->lastEpoch;
  int32_t* blockCounts = moeScratch<int32_t>(a, s.blockCountsOffset);
  const uint64_t stride = s.blockCountsStride;
  const uint64_t chunk = divUp(a.tokens, gridDim.x);
  const uint64_t t0 = min(a.tokens, (uint64_t)blockIdx.x * chunk), t1 = min(a.tokens, t0 + chunk);
  const int columns = numExperts + n;

  /* 1. route */
  for (int i = tid; i < columns; i += blockDim.x) counts[i] = 0;
  __syncthreads();
  if (tid < 32) {
    const uint64_t bad = moeRoute(a, t0, t1, counts);
    if (tid == 0 && bad != FCCL_MOE_NO_BAD_ENTRY) atomicMin((unsigned long long*)&header->badEntry, bad);
  }
  __syncthreads();
  for (int i = tid; i < columns; i += blockDim.x) blockCounts[blockIdx.x * stride + i] = counts[i];
  bool failed = moeGridSync(c, a, epoch);

  /* 2. bases */
  if (!failed) {
    for (int i = tid; i < columns; i += blockDim.x) {
      int base = 0, total = 0;
      for (unsigned b = 0; b < gridDim.x; b++) {
        const int v = __ldcg(blockCounts + b * stride + i);
        base += b < blockIdx.x ? v : 0;
        total += v;
      }
      bases[i] = base;
      totals[i] = total;
    }
    __syncthreads();
  }

  /* 3. free */
  if (!failed) failed = moeWaitAll(c, a, FCCL_MOE_FLAG_FREE, lastEpoch, false, FCCL_PHASE_MOE_FREE, epoch);

  /* 4. counts */
  if (!failed && blockIdx.x == 0) {
    const uint64_t bad = __ldcg((const unsigned long long*)&header->badEntry);
    const int row = local + FCCL_MOE_COUNT_EXTRA;
    for (int i = tid; i < n * row; i += blockDim.x) {
      const int d = i / row, j = i % row;
      int value = 0;
      if (j < local)
        value = totals[d * local + j];
      else if (j == local + FCCL_MOE_COUNT_SENT)
        value = totals[numExperts + d];
      else if (j == local + FCCL_MOE_COUNT_BAD_LO)
        value = (int)(uint32_t)bad;
      else if (j == local + FCCL_MOE_COUNT_BAD_HI)
        value = (int)(uint32_t)(bad >> 32);
      moeCounts(a, d, me)[j] = value;
    }
    __syncthreads();
    if (tid == 0) header->badEntry = FCCL_MOE_NO_BAD_ENTRY; /* for the next dispatch; no block reads it again */
    moePostAll(c, a, FCCL_MOE_FLAG_COUNTS, epoch, true);
  }

  /* 5. push */
  if (!failed) {
    moePush(c, a, t0, t1, bases);
    failed = moeGridSync(c, a, epoch);
    if (!failed && blockIdx.x == 0) moePostAll(c, a, FCCL_MOE_FLAG_DATA, epoch, true);
  }

  /* 6. place */
  if (!failed) failed = moeWaitAll(c, a, FCCL_MOE_FLAG_COUNTS, epoch, true, FCCL_PHASE_MOE_COUNTS, epoch);
  if (!failed) {
    for (int i = tid; i < n * local; i += blockDim.x) offsets[i] = __ldcg(moeCounts(a, me, i / local) + i % local);
    if (tid < n) {
      const int32_t* row = moeCounts(a, me, tid);
      sent[tid] = __ldcg(row + local + FCCL_MOE_COUNT_SENT);
      badOf[tid] = (uint64_t)(uint32_t)__ldcg(row + local + FCCL_MOE_COUNT_BAD_LO) |
                   ((uint64_t)(uint32_t)__ldcg(row + local + FCCL_MOE_COUNT_BAD_HI) << 32);
    }
    __syncthreads();
    for (int e = tid; e < local; e += blockDim.x) {
      int running = 0;
      for (int source = 0; source < n; source++) {
        const int rows = offsets[source * local + e];
        offsets[source * local + e] = running;
        running += rows;
      }
      totals[e] = running;
      starts[e] = s.padded ? (int)((uint64_t)e * s.expertStride)
                           : (int)fcclMoeAlignUp((uint64_t)running, (uint64_t)s.alignment);
    }
    __syncthreads();
    if (!s.padded) {
      const int end = moeBlockExclusiveScan(starts, local);
      if (tid == 0) rowsEnd = end;
    } else if (tid == 0) {
      rowsEnd = (int64_t)((uint64_t)local * s.expertStride);
    }
    __syncthreads();
    if (blockIdx.x == 0) {
      int32_t* expertStart = moeScratch<int32_t>(a, s.expertStartOffset);
      int32_t* expertCount = moeScratch<int32_t>(a, s.expertCountOffset);
      for (int e = tid; e <= local; e += blockDim.x) {
        if (e < local) {
          ptr<int32_t>(a.recvCounts)[e] = totals[e];
          expertStart[e] = starts[e];
          expertCount[e] = totals[e];
        }
        if (a.recvOffsets != 0) ptr<int32_t>(a.recvOffsets)[e] = e < local ? starts[e] : (int32_t)rowsEnd;
      }
      if (tid == 0)
        for (int source = 0; source < n && badSource < 0; source++)
          if (badOf[source] != FCCL_MOE_NO_BAD_ENTRY) badSource = source;
    }
  }

  /* 7. expand, ours first */
  for (int i = 0; i < n && !failed; i++) {
    const int source = (me + i) % n;
    bool waited = false;
    if (tid == 0) waited = moeWaitFlag(c, a, FCCL_MOE_FLAG_DATA, source, epoch, true, FCCL_PHASE_MOE_DATA, epoch);
    failed = __syncthreads_or(waited) != 0;
    if (!failed) failed = !moeExpand(c, a, source, sent[source], starts, offsets, epoch);
  }

  /* 8. end */
  if (!failed) failed = moeGridSync(c, a, epoch);
  if (!failed && blockIdx.x == 0) {
    moePostAll(c, a, FCCL_MOE_FLAG_FREE, epoch, true);
    if (tid == 0) header->lastEpoch = epoch;
  }
  /* Invalid routing is recorded only now: a recorded error makes every later wait of this rank give up after a
   * millisecond (Spin::check), which would leave the rows of a slower peer undelivered and its FREE unposted. */
  if (blockIdx.x == 0 && tid == 0 && badSource >= 0)
    moeRecordInvalid(c.state, c.hostWords, me, badSource, epoch, badOf[badSource]);
  epochEnd(c, epoch);
}

const void* moeDispatchInstance() { return reinterpret_cast<const void*>(&moeDispatchKernel); }

}  // namespace fccl
