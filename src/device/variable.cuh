/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the kernels of the variable all-gather and reduce-scatter share (allgatherv.cu, reducescatterv_*.cu): every
 * rank's block (its bytes, and where it starts in the buffer that holds all of them back to back) as each block of
 * the kernel sees it, from the arguments or read from device memory when the kernel starts; the call's print with
 * the hash of those counts; the report of device counts that do not fit the buffers; and the LL packets and staging
 * rounds the blocks take.
 *
 * Every rank hears from every peer within every call (the rule by which the LL and staging areas are reused,
 * docs/collectives.md#all-gather-reduce-scatter-and-broadcast), also a peer whose block is empty: an empty block
 * still goes as one LL packet (a token), and a staged call of empty blocks still has one round of flags.
 */
#ifndef FCCL_DEVICE_VARIABLE_CUH_
#define FCCL_DEVICE_VARIABLE_CUH_

#include "common.cuh"
#include "device_variable.h"

namespace fccl {

/* VariableBlocks.bad when every count fits. */
constexpr int32_t kCountsFit = -2;

/* The blocks of a call, in the kernel's shared memory (variableBegin fills it). */
struct VariableBlocks {
  uint64_t bytes[FCCL_DEVICE_MAX_RANKS];  /* rank r's block */
  uint64_t offset[FCCL_DEVICE_MAX_RANKS]; /* where rank r's block starts in the buffer of every block, in bytes */
  uint64_t maxBytes;                      /* the largest block */
  uint64_t badValue;                      /* the count or sum that did not fit */
  int32_t bad; /* kCountsFit; r: counts[r] is negative or above the per-rank capacity; -1: their sum is above the
                * capacity of the buffer of every block. Then every block is empty: the call moves nothing. */
};

/*
 * Thread 0 of each block: the counts (a.counts, or read from a.deviceCounts: relaxed loads at the point of coherence,
 * so that a replay never sees an earlier replay's counts), checked against the capacities when they come from device
 * memory (perRankCap: each count; totalCap: their sum), into v. Returns the call's print: a.print, or with device
 * counts a.print carrying the hash of a.fold continued with the counts. Every rank that reads the same counts makes
 * the same blocks and the same print, and ranks that read different ones differ in their prints (with the
 * probability of the count hash), so that they stop as ranks out of step instead of moving mismatched blocks.
 */
__device__ __forceinline__ uint32_t variableLoad(const fcclDevVArgs& a, int n, uint64_t elemBytes, uint64_t perRankCap,
                                                 uint64_t totalCap, VariableBlocks& v) {
  uint64_t counts[FCCL_DEVICE_MAX_RANKS];
  uint64_t fold = a.fold;
  int32_t bad = kCountsFit;
  uint64_t badValue = 0;
#pragma unroll
  for (int r = 0; r < FCCL_DEVICE_MAX_RANKS; r++) {
    counts[r] = 0;
    if (r >= n) continue;
    if (a.deviceCounts == 0) {
      counts[r] = a.counts[r];
      continue;
    }
    const uint64_t count = ld_relaxed_sys(ptr<const uint64_t>(a.deviceCounts) + r);
    fold = fcclVariableFold(fold, count);
    if (bad == kCountsFit && ((int64_t)count < 0 || count > perRankCap)) {
      bad = r;
      badValue = count;
    }
    counts[r] = count;
  }
  if (a.deviceCounts != 0 && bad == kCountsFit) {
    /* Each count is within perRankCap, and the host bounds nranks x perRankCap x elemBytes to a size. */
    uint64_t total = 0;
#pragma unroll
    for (int r = 0; r < FCCL_DEVICE_MAX_RANKS; r++) total += counts[r];
    if (total > totalCap) {
      bad = -1;
      badValue = total;
    }
  }
  uint64_t at = 0, largest = 0;
#pragma unroll
  for (int r = 0; r < FCCL_DEVICE_MAX_RANKS; r++) {
    const uint64_t bytes = bad == kCountsFit ? counts[r] * elemBytes : 0;
    v.bytes[r] = bytes;
    v.offset[r] = at;
    at += bytes;
    largest = bytes > largest ? bytes : largest;
  }
  v.maxBytes = largest;
  v.bad = bad;
  v.badValue = badValue;
  return a.deviceCounts != 0 ? fcclVariablePrint(a.print, fold) : a.print;
}

/* Every thread of the block: the blocks into v (a __shared__ of the kernel), then the call's epoch, its tag carrying
 * the print variableLoad made (epochBegin's __syncthreads hands v to the whole block). After gridDependencyEnter. */
__device__ __forceinline__ uint64_t variableBegin(const fcclDevComm& c, const fcclDevVArgs& a, uint64_t elemBytes,
                                                  uint64_t perRankCap, uint64_t totalCap, VariableBlocks& v) {
  uint32_t print = a.print;
  if (threadIdx.x == 0) print = variableLoad(a, c.nranks, elemBytes, perRankCap, totalCap, v);
  return epochBegin(c, print); /* only thread 0's print is used */
}

/* At the kernel's end, block 0 reports counts that did not fit (the call moved nothing, on every rank that read
 * them): fcclInvalidArgument with the rank whose count it was (or -1 for the sum) and the value. */
__device__ __forceinline__ void variableEnd(const fcclDevComm& c, const VariableBlocks& v, int kernel, uint64_t epoch) {
  if (v.bad != kCountsFit && blockIdx.x == 0 && threadIdx.x == 0)
    recordError(c.state, c.hostWords, fcclInvalidArgument, c.rank, kernel, FCCL_PHASE_COUNTS, v.bad, epoch, v.badValue,
                0);
}

/* LL packets that carry a block of `bytes`: one at least (the token of an empty block). */
__device__ __forceinline__ uint64_t variablePackets(uint64_t bytes) {
  const uint64_t packets = divUp(bytes, FCCL_LL_DATA_BYTES);
  return packets > 0 ? packets : 1;
}

/* Staged rounds of a call: as many as the largest block needs, one at least. */
__device__ __forceinline__ uint64_t variableRounds(const VariableBlocks& v, uint64_t roundUnits) {
  const uint64_t rounds = divUp(divUp(v.maxBytes, FCCL_UNIT_BYTES), roundUnits);
  return rounds > 0 ? rounds : 1;
}

/* Units of round k of a block of `units` units, in rounds of cap units: 0 past the block's end. */
__device__ __forceinline__ uint64_t roundLength(uint64_t units, uint64_t k, uint64_t cap) {
  const uint64_t start = k * cap;
  if (start >= units) return 0;
  return units - start < cap ? units - start : cap;
}

}  // namespace fccl

#endif /* FCCL_DEVICE_VARIABLE_CUH_ */
