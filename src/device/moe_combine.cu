/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The mixture-of-experts combine (fcclMoeCombine; docs/moe.md#combine): every expert's output row goes back to the
 * rank its token came from, into the slot of that (token, top-k entry), and each rank sums its tokens' rows in a
 * fixed order. One kernel of G blocks per rank, on the layout of the last dispatch (moe_dispatch.cu):
 *
 *   1. free     every block waits until each rank has read its staging of the layout's previous call (the dispatch
 *               whose rows the combine returns).
 *   2. push     the grid's warps copy each received row's expert output (y, in the dispatch's places) to the
 *               source's staging, slot token x topk + entry (the dispatch's rowSource); after a grid barrier block 0
 *               posts RESULT to every rank.
 *   3. reduce   once every rank's RESULT is in, the warps sum each of this rank's tokens: its entries ordered by
 *               expert index, acc = fma(weight, y, acc) in fp32 from +0, one rounding to the output type at the end.
 *               The order depends on the routing only, so a token's bits are the same on every run, whichever rank or
 *               block finished first, and on any number of ranks. A token with no expert gets zeros.
 *   4. end      after a grid barrier block 0 posts FREE to every rank and records the call's epoch.
 */
#include "kernels.cuh"
#include "moe_common.cuh"

namespace fccl {

/* Step 2: rows of the local experts, back to their sources. starts: each expert's first row; firsts: the exclusive
 * prefix of the experts' counts (local + 1 entries), over which the grid's warps share the rows. */
__device__ void moeReturn(const fcclMoeArgs& a, const int* starts, const int* firsts) {
  const fcclMoeShape& s = a.shape;
  const int local = s.localExperts, lane = threadIdx.x & 31;
  const int32_t* rowSource = moeScratch<int32_t>(a, s.rowSourceOffset);
  const uint64_t rowBytes = s.hidden * 2, units = rowBytes / FCCL_UNIT_BYTES;
  const uint64_t rows = (uint64_t)firsts[local];
  const uint64_t warps = (uint64_t)gridDim.x * FCCL_MOE_WARPS;
  const MoeSplit split(rows, units, warps);
  for (uint64_t item = (uint64_t)blockIdx.x * FCCL_MOE_WARPS + (threadIdx.x >> 5); item < split.total(rows);
       item += warps) {
    uint64_t q, begin, end;
    split.range(item, units, q, begin, end);
    /* The expert of the q-th row: the last whose first is <= q. */
    int lo = 0, hi = local - 1;
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      if ((uint64_t)firsts[mid] <= q)
        lo = mid;
      else
        hi = mid - 1;
    }
    const uint64_t row = (uint64_t)starts[lo] + (q - (uint64_t)firsts[lo]);
    const uint32_t back = (uint32_t)rowSource[row];
    const uint64_t slot = a.workspace[back & 7u] + s.stagingOffset + (uint64_t)(back >> 3) * s.combinePitch;
    const uint64_t source = a.input + row * rowBytes;
    for (uint64_t u = begin + lane; u < end; u += 4 * 32) {
      uint64_t lo16[4], hi16[4];
#pragma unroll
      for (int r = 0; r < 4; r++)
        if (u + 32 * r < end) ld_data16(ptr<const void>(source + (u + 32 * r) * FCCL_UNIT_BYTES), lo16[r], hi16[r]);
#pragma unroll
      for (int r = 0; r < 4; r++)
        if (u + 32 * r < end) st_data16(ptr<void>(slot + (u + 32 * r) * FCCL_UNIT_BYTES), lo16[r], hi16[r]);
    }
  }
}

/* Step 3: this rank's tokens, each the weighted sum of its entries' rows in our staging, in expert order. */
template <int DT>
__device__ void moeReduce(const fcclDevComm& c, const fcclMoeArgs& a) {
  using TT = TypeTraits<DT>;
  const fcclMoeShape& s = a.shape;
  const int k = s.topk, lane = threadIdx.x & 31;
  const int32_t* entryExpert = moeScratch<int32_t>(a, s.entryExpertOffset);
  const uint64_t staging = a.workspace[c.rank] + s.stagingOffset;
  const uint64_t rowBytes = s.hidden * 2, units = rowBytes / FCCL_UNIT_BYTES;
  const uint64_t warps = (uint64_t)gridDim.x * FCCL_MOE_WARPS;
  const MoeSplit split(a.tokens, units, warps);
  for (uint64_t item = (uint64_t)blockIdx.x * FCCL_MOE_WARPS + (threadIdx.x >> 5); item < split.total(a.tokens);
       item += warps) {
    uint64_t t, begin, end;
    split.range(item, units, t, begin, end);
    const int expert = lane < k ? entryExpert[t * k + lane] : -1;
    const float weight = expert >= 0 ? (a.topkWeights != 0 ? ptr<const float>(a.topkWeights)[t * k + lane] : 1.0f)
                                     : 0.0f;
    /* The entry's place in expert order (experts of a token are distinct: the dispatch dropped repeats). */
    int rank = 0;
#pragma unroll
    for (int j = 0; j < FCCL_MOE_MAX_TOPK; j++) {
      const int other = __shfl_sync(0xffffffffu, expert, j);
      rank += j < k && other >= 0 && other < expert;
    }
    const int valid = __popc(__ballot_sync(0xffffffffu, expert >= 0));
    uint64_t row[FCCL_MOE_MAX_TOPK];
    float w[FCCL_MOE_MAX_TOPK];
#pragma unroll
    for (int r = 0; r < FCCL_MOE_MAX_TOPK; r++) {
      const uint32_t owner = __ballot_sync(0xffffffffu, expert >= 0 && rank == r);
      const int j = owner != 0 ? __ffs(owner) - 1 : 0;
      row[r] = staging + (t * k + (uint64_t)j) * s.combinePitch;
      w[r] = __shfl_sync(0xffffffffu, weight, j);
    }
    for (uint64_t u = begin + lane; u < end; u += 32) {
      uint64_t lo[FCCL_MOE_MAX_TOPK], hi[FCCL_MOE_MAX_TOPK];
#pragma unroll
      for (int r = 0; r < FCCL_MOE_MAX_TOPK; r++)
        if (r < valid) ld_data16(ptr<const void>(row[r] + u * FCCL_UNIT_BYTES), lo[r], hi[r]);
      float acc[8];
#pragma unroll
      for (int i = 0; i < 8; i++) acc[i] = 0.0f;
#pragma unroll
      for (int r = 0; r < FCCL_MOE_MAX_TOPK; r++) {
        if (r >= valid) break;
#pragma unroll
        for (int i = 0; i < 8; i++) {
          const uint64_t word = i < 4 ? lo[r] : hi[r];
          const uint16_t bits = (uint16_t)(word >> (16 * (i % 4)));
          acc[i] = __fmaf_rn(w[r], TT::toAcc(bits), acc[i]);
        }
      }
      uint64_t outLo = 0, outHi = 0;
#pragma unroll
      for (int i = 0; i < 8; i++) {
        const uint64_t bits = (uint64_t)TT::fromAcc(acc[i]);
        if (i < 4)
          outLo |= bits << (16 * i);
        else
          outHi |= bits << (16 * (i % 4));
      }
      st_data16(ptr<void>(a.output + t * rowBytes + u * FCCL_UNIT_BYTES), outLo, outHi);
    }
  }
}

template <int DT>
__global__ void __launch_bounds__(FCCL_MOE_THREADS, 1) moeCombineKernel(fcclDevComm c, fcclMoeArgs a) {
  __shared__ int starts[FCCL_MOE_MAX_EXPERTS];
  __shared__ int firsts[FCCL_MOE_MAX_EXPERTS + 1];
  gridDependencyEnter();
  const uint64_t epoch = epochBegin(c, a.print);
  announceCall(c);
  const fcclMoeShape& s = a.shape;
  const int local = s.localExperts, tid = threadIdx.x;
  fcclMoeScratchHeader* header = moeHeader(a);

  /* 1. free */
  bool failed = moeWaitAll(c, a, FCCL_MOE_FLAG_FREE, header->lastEpoch, false, FCCL_PHASE_MOE_FREE, epoch);

  /* 2. push */
  if (!failed) {
    const int32_t* expertStart = moeScratch<int32_t>(a, s.expertStartOffset);
    const int32_t* expertCount = moeScratch<int32_t>(a, s.expertCountOffset);
    for (int e = tid; e < local; e += blockDim.x) {
      starts[e] = expertStart[e];
      firsts[e] = expertCount[e];
    }
    __syncthreads();
    const int rows = moeBlockExclusiveScan(firsts, local);
    if (tid == 0) firsts[local] = rows;
    __syncthreads();
    moeReturn(a, starts, firsts);
    failed = moeGridSync(c, a, epoch);
    if (!failed && blockIdx.x == 0) moePostAll(c, a, FCCL_MOE_FLAG_RESULT, epoch, true);
  }

  /* 3. reduce */
  if (!failed) failed = moeWaitAll(c, a, FCCL_MOE_FLAG_RESULT, epoch, true, FCCL_PHASE_MOE_RESULT, epoch);
  if (!failed) moeReduce<DT>(c, a);

  /* 4. end */
  if (!failed) failed = moeGridSync(c, a, epoch);
  if (!failed && blockIdx.x == 0) {
    moePostAll(c, a, FCCL_MOE_FLAG_FREE, epoch, true);
    if (tid == 0) header->lastEpoch = epoch;
  }
  epochEnd(c, epoch);
}

const void* moeCombineInstance(fcclDataType_t type) {
  if (type == fcclBfloat16) return reinterpret_cast<const void*>(&moeCombineKernel<fcclBfloat16>);
  if (type == fcclFloat16) return reinterpret_cast<const void*>(&moeCombineKernel<fcclFloat16>);
  return nullptr;
}

}  // namespace fccl
