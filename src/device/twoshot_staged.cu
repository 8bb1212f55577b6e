/*
 * Two-shot all-reduce through staging, for buffers that are not registered, in rounds of at most n * roundUnits
 * units. Each rank owns 1/n of every round's units.
 *
 * Buffers. The inbox and the result area of a slot (2 x n x chunk bytes each) are cut into 4 buffers of n regions
 * of half a chunk, [buffer][writer]; round k of the call with epoch e uses buffer (2 (e & 1) + k) & 3. Buffers 0-1
 * are the one-shot kernel's parity-0 half and 2-3 its parity-1 half, so rounds 0 and 1 stay inside the call's own
 * parity, as every kernel's first writes must (a peer may still be in a one-shot call of the other parity).
 *
 * Iteration k of the loop:
 *   wait A(k)    every writer's part of our units of round k arrived in our inbox (acquire).
 *   reduce(k)    our units: own input + inbox [b(k)][w], in rank order; the result goes to our output and to every
 *                peer's result area [b(k)][me]; post B(k) (release).
 *   wait B(k-1)  every owner's result of round k - 1 arrived (posted an iteration ago: no stall).
 *   push(k+2)    the units of round k + 2 of every other owner into its inbox [b(k+2)][me]: safe, because the owner
 *                finished reading that buffer in round k - 2 (B(k-1) implies B(k-2)).
 *   copy(k-1)    the other owners' results of round k - 1 from our result area into our output.
 *   post A(k+2)  (release) the pushed data, and that result buffer b(k-1) = b(k+3) is free again: an owner writes
 *                it in round k + 3, after waiting for A(k+3), which comes later still.
 * Rounds 0 and 1 are pushed before the loop; round 2 and later only after A(0), when every peer has left the call
 * before (buffers of the other parity). So no flag is waited for on the critical path once the pipe is full: the
 * link always has the next round queued behind the current one. The call ends with wait B(last), copy(last);
 * every wait of B means the owners have finished reading our data in their inboxes, so the next call may write
 * there at once.
 * In place is safe: a unit is pushed (round k + 2, iteration k) or reduced (round k) by the thread that later
 * overwrites it (copy or reduce), after it has read it.
 */
#include "common.cuh"
#include "kernels.cuh"

namespace fccl {

namespace {

/* Round k of a call: units [start, start + len) split in n owner shares of `share` units (the last ones shorter). */
struct Round {
  uint64_t start;
  uint64_t len;
  uint64_t share;
  __device__ __forceinline__ Round(uint64_t k, uint64_t roundCap, uint64_t units, int n) {
    start = k * roundCap;
    len = units - start < roundCap ? units - start : roundCap;
    share = divUp(len, (uint64_t)n);
  }
  __device__ __forceinline__ uint64_t ownerLen(int s) const {
    const uint64_t begin = (uint64_t)s * share;
    if (begin >= len) return 0;
    return len - begin < share ? len - begin : share;
  }
};

}  // namespace

template <int DT, int OP>
__global__ void __launch_bounds__(FCCL_DEVICE_THREADS, 1) allReduceTwoshotStaged(fcclDevComm c, fcclDevArgs a) {
  using TT = TypeTraits<DT>;
  using IO = UnitIO<TT, 16>;
  using Unit = typename IO::Unit;
  gridDependencyEnter();
  const uint64_t epoch = epochBegin(c);
  const int n = c.nranks;
  const int me = c.rank;
  const uint64_t units = divUp(a.bytes, FCCL_UNIT_BYTES);
  const uint64_t roundCap = a.roundUnits * (uint64_t)n;
  const uint64_t rounds = divUp(units, roundCap);
  const uint64_t region = c.layout.chunkBytes / 2; /* one writer's part of one buffer */
  const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
  const uint64_t first = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
  const uint64_t ownSlot = c.slots[me];
  /* Offset in a slot of region [buffer of round k][writer w], from the start of the inbox or the result area. */
  auto regionOffset = [&](uint64_t areaOffset, uint64_t k, int w) {
    const uint64_t buffer = (2 * (epoch & 1) + k) & 3;
    return areaOffset + (buffer * n + w) * region;
  };

  /* Stores round k's units of every other owner into its inbox (the flag is posted by the caller). */
  auto pushData = [&](uint64_t k) {
    const Round r(k, roundCap, units, n);
    const uint64_t offset = regionOffset(c.layout.inboxOffset, k, me);
    for (int s = 0; s < n; s++) {
      if (s == me) continue;
      const uint64_t len = r.ownerLen(s);
      char* inbox = slotPtr(c, s, offset);
      for (uint64_t j = first; j < len; j += stride) {
        Unit v;
        IO::load(a.sendbuf, r.start + (uint64_t)s * r.share + j, a.bytes, v);
        st_data16(inbox + j * FCCL_UNIT_BYTES, v.words[0], v.words[1]);
      }
    }
  };
  /* Copies the other owners' results of round k from our result area into our output. */
  auto copyResults = [&](uint64_t k) {
    const Round r(k, roundCap, units, n);
    for (int s = 0; s < n; s++) {
      if (s == me) continue;
      const uint64_t len = r.ownerLen(s);
      const char* result = slotPtr(c, me, regionOffset(c.layout.resultOffset, k, s));
      for (uint64_t j = first; j < len; j += stride) {
        Unit v;
        ld_data16(result + j * FCCL_UNIT_BYTES, v.words[0], v.words[1]);
        IO::store(a.recvbuf, r.start + (uint64_t)s * r.share + j, a.bytes, v);
      }
    }
  };
  auto postA = [&](uint64_t k) {
    __syncthreads();
    postPeers(c, c.layout.signalAOffset, sigValue(epoch, (uint32_t)k + 1), true);
  };
  auto waitB = [&](uint64_t k) {
    return waitPeers(c, c.layout.signalBOffset, sigValue(epoch, (uint32_t)k + 1), true, FCCL_ALGO_TWOSHOT_STAGED,
                     FCCL_PHASE_RESULT, epoch);
  };

  for (uint64_t k = 0; k < rounds && k < 2; k++) {
    pushData(k);
    postA(k);
  }
  bool failed = false;
  for (uint64_t k = 0; k < rounds && !failed; k++) {
    if (waitPeers(c, c.layout.signalAOffset, sigValue(epoch, (uint32_t)k + 1), true, FCCL_ALGO_TWOSHOT_STAGED,
                  FCCL_PHASE_INBOX, epoch)) {
      failed = true;
      break;
    }
    /* Reduce our share: rank w's units are our input (w == me) or inbox [b(k)][w]. */
    {
      const Round r(k, roundCap, units, n);
      uint64_t bases[FCCL_DEVICE_MAX_RANKS];
      const uint64_t myStart = r.start + (uint64_t)me * r.share;
      /* Inbox regions hold the share from its first unit; shift the base so unit index u addresses it. */
#pragma unroll
      for (int w = 0; w < FCCL_DEVICE_MAX_RANKS; w++)
        bases[w] = w == me ? a.sendbuf
                           : ownSlot + regionOffset(c.layout.inboxOffset, k, w) - myStart * FCCL_UNIT_BYTES;
      const uint64_t len = r.ownerLen(me);
      const uint64_t resultOffset = regionOffset(c.layout.resultOffset, k, me);
      for (uint64_t j = first; j < len; j += stride) {
        const uint64_t u = myStart + j;
        Unit out;
        reduceRanks16<TT, OpTraits<OP>>(bases, n, u, a.bytes, out);
        IO::store(a.recvbuf, u, a.bytes, out);
#pragma unroll
        for (int p = 0; p < FCCL_DEVICE_MAX_RANKS; p++)
          if (p < n && p != me)
            st_data16(slotPtr(c, p, resultOffset) + j * FCCL_UNIT_BYTES, out.words[0], out.words[1]);
      }
    }
    __syncthreads();
    postPeers(c, c.layout.signalBOffset, sigValue(epoch, (uint32_t)k + 1), true);
    if (k >= 1 && waitB(k - 1)) {
      failed = true;
      break;
    }
    if (k + 2 < rounds) pushData(k + 2);
    if (k >= 1) copyResults(k - 1);
    if (k + 2 < rounds) postA(k + 2);
  }
  if (!failed && rounds > 0 && !waitB(rounds - 1)) copyResults(rounds - 1);
  epochEnd(c, epoch);
}

#define FCCL_TABLE_KERNEL allReduceTwoshotStaged
FCCL_KERNEL_TABLE(twoshotStagedKernel)
#undef FCCL_TABLE_KERNEL

}  // namespace fccl
